"""How early `CollapseAlarm` warns, and how often it cries wolf: lead time before success drops, detection delay and
false-alarm rate, on synthetic runs and on real tiny-model runs drifting into template collapse.

**Synthetic runs** (`--synthetic N` runs of each kind, 40 diagnostics each, one every 5 steps). At each diagnostic
a score matrix of 8 prompts x 8 chains is drawn: per-token log-probability `base + noise` plus `signal` on the
chain's own prompt, times the chain's length (the generator of `tests/test_mi_uncertainty.py`), and the MI
diagnostics' keys are computed from it exactly as in training (MI-ZScore-EMA, the permutation p-value, the
bootstrap intervals). Kinds:

- `healthy`: the signal wanders around its level (an AR(1) walk, +-15%); any alarm is a false alarm;
- `template`: from a random onset the signal decays linearly to 0 over 5-15 diagnostics, entropy unchanged;
- `low-entropy`: the same decay, but the reasoning also becomes deterministic (entropy falls): not the alarm's
  quadrant, an alarm here is a misattribution.

Synthetic runs have no task, so their success curve is modelled: it follows the signal with a lag of 20 steps (the
paper reports that MI falls before success; the lag is an assumption, not a measurement). Their lead time is
therefore lag minus detection delay; the detection delay (alarm step minus the onset of the decay) is the measured
quantity.

**Tiny-model runs** (`--kit-runs K` of each kind): the offline tiny model is trained by imitation on the notebook's
input-dependent reasoning (`benchmarks/reasoning_policies.py`), then training continues either on the same
reasoning (healthy) or on a mixture whose template share rises from 0 to 1 (collapse). Every 20 imitation steps,
64 chains are sampled, cross-scored and measured: MI keys as above, H(Z|X), and the success rate (chains naming
their own input's target, the task of these inputs). The success drop is the first diagnostic with success below
half of its level before the drift; lead time = success drop minus alarm, both measured.

    python benchmarks/collapse_alarm.py --synthetic 30 --kit-runs 0   # the numbers in docs/diagnostics.md
    python benchmarks/collapse_alarm.py --synthetic 0 --kit-runs 3    # the tiny-model runs in docs/diagnostics.md
    python benchmarks/collapse_alarm.py --synthetic 10 --kit-runs 0   # a quick look
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

from trl_ragen2.collapse.detector import CollapseDetector  # noqa: E402
from trl_ragen2.collapse.mi import MIZScoreEMA, mi_metrics  # noqa: E402
from trl_ragen2.collapse.mi_uncertainty import mi_uncertainty  # noqa: E402


SCOPE = "first_turn"
STEPS_PER_DIAGNOSTIC = 5
SUCCESS_LAG_STEPS = 20  # synthetic runs only: the modelled delay of success behind MI
PRESETS = {  # sensitivity settings compared
    "default": {},
    "either": dict(require="either"),  # MI-ZScore-EMA or retrieval: earlier, more false alarms
    "conservative": dict(min_drop=0.6, patience=3),
}
PERMUTATIONS, BOOTSTRAP = 200, 300  # fewer than the training default (1000) to keep the sweep short


def diagnostic_record(logp, lengths, target, ema, step, seed) -> dict:
    """The log record the MI diagnostics write for this matrix (scope `SCOPE`)."""
    metrics = mi_metrics(logp, lengths, target)
    state = ema.state_dict()
    metrics.update(ema.update(metrics))
    metrics.update(
        mi_uncertainty(
            logp, lengths, target, seed=seed, num_permutations=PERMUTATIONS, num_bootstrap=BOOTSTRAP,
            ema_sigma=state["sigma"], ema_sigma_seq=state["sigma_seq"],
        )
    )  # fmt: skip
    return {"step": step, **{f"ragen2/mi/{SCOPE}/{key}": value for key, value in metrics.items()}}


def synthetic_matrix(g, signal, base_mean, prompts=8, per_prompt=8):
    num = prompts * per_prompt
    target = torch.arange(num) // per_prompt
    lengths = torch.randint(10, 31, (num,), generator=g).double()
    base = base_mean + 0.3 * torch.randn(num, 1, generator=g, dtype=torch.float64)
    per_token = base + 0.2 * torch.randn(num, prompts, generator=g, dtype=torch.float64)
    per_token[torch.arange(num), target] += signal
    return (per_token * lengths[:, None]).clamp(max=0.0), lengths, target


def synthetic_run(kind: str, seed: int, diagnostics: int = 40):
    """`(records, onset_step, success_drop_step)` of one synthetic run (onset and drop None for healthy runs)."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    level = rng.uniform(0.15, 0.3)
    onset = rng.randint(12, 24) if kind != "healthy" else None
    duration = rng.randint(5, 15)
    ema, walk, records, signals = MIZScoreEMA(), 0.0, [], []
    for t in range(diagnostics):
        step = max(1, t * STEPS_PER_DIAGNOSTIC)
        walk = 0.8 * walk + rng.gauss(0.0, 0.08)
        progress = 0.0 if onset is None else min(max((t - onset) / duration, 0.0), 1.0)
        signal = level * (1 + walk) * (1 - progress)
        base = -2.0 * (1 - 0.9 * progress) if kind == "low-entropy" else -2.0
        logp, lengths, target = synthetic_matrix(g, signal, base)
        records.append(diagnostic_record(logp, lengths, target, ema, step, seed * 1000 + t))
        signals.append((step, signal / level))
    if onset is None:
        return records, None, None
    lag = SUCCESS_LAG_STEPS
    drop = next((s + lag for s, share in signals if share < 0.5), None)  # success follows the signal, `lag` later
    return records, max(1, onset * STEPS_PER_DIAGNOSTIC), drop


def kit_runs(num_runs: int, warm_steps: int = 300, drift_steps: int = 300, every: int = 20):
    """Tiny-model runs: `[(kind, records, drift_onset_step, success_drop_step)]`."""
    sys.path.insert(0, os.path.dirname(__file__))
    import copy

    from reasoning_policies import Kit, input_dependent_diverse, template_share

    kit = Kit()
    model, optimizer = kit.fresh_policy(seed=0)
    kit.imitate(model, optimizer, input_dependent_diverse, random.Random(0), warm_steps)  # a healthy start
    start = (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()))
    runs = []
    for kind in ("healthy", "template"):
        for run in range(num_runs):
            began = time.time()
            model.load_state_dict(start[0])
            optimizer.load_state_dict(start[1])
            rng, ema, records, successes = random.Random(100 + run), MIZScoreEMA(), [], []
            onset, ramp = drift_steps // 5, drift_steps * 3 // 5  # the template share rises from onset to onset+ramp
            for begin in range(0, drift_steps + 1, every):
                share = 0.0 if kind == "healthy" else min(max((begin - onset) / ramp, 0.0), 1.0)
                if begin:
                    kit.imitate(model, optimizer, template_share(share), rng, every)
                measured = kit.measure(model, seed=run * 10_000 + begin, ema=ema, step=begin)
                step = warm_steps + begin
                record = {"step": step, "success": measured.pop("success")}
                record.update({f"ragen2/mi/{SCOPE}/{k}": v for k, v in measured.items() if not k.startswith("text/")})
                records.append(record)
                successes.append((step, record["success"]))
            baseline = statistics.mean(s for step, s in successes if step <= warm_steps + onset)
            drop = next((step for step, s in successes if step > warm_steps + onset and s < baseline / 2), None)
            runs.append((kind, records, warm_steps + onset if kind != "healthy" else None, drop))
            print(f"  tiny-model {kind} run {run}: {time.time() - began:.0f}s", flush=True)
    return runs


def evaluate(runs, settings) -> dict:
    """False alarms on healthy runs, detections, delays and lead times on collapse runs, for one preset."""
    out = {"healthy": 0, "false": 0, "collapse": 0, "detected": 0, "misattributed": 0, "low": 0}
    delays, leads, early = [], [], 0
    for kind, records, onset, drop in runs:
        detector = CollapseDetector(scope=SCOPE, **settings)
        fired = None
        for record in records:
            detector.update(record)
        fired = detector.fired_step
        if kind == "healthy":
            out["healthy"] += 1
            out["false"] += fired is not None
        elif kind == "low-entropy":
            out["low"] += 1
            out["misattributed"] += fired is not None
        else:
            out["collapse"] += 1
            if fired is not None:
                out["detected"] += 1
                delays.append(fired - onset)
                if drop is not None:
                    leads.append(drop - fired)
                    early += fired <= drop
    out["delays"], out["leads"], out["early"] = delays, leads, early
    return out


def describe(values) -> str:
    if not values:
        return "-"
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"{statistics.median(values):.0f} [{quartiles[0]:.0f}, {quartiles[2]:.0f}]"


def report(title: str, runs) -> None:
    print(f"\n{title}")
    print("preset        false alarms (healthy)  detected (collapse)  delay after onset  lead before success drop  "
          "alarm before drop  alarms on low-entropy collapse")  # fmt: skip
    for name, settings in PRESETS.items():
        r = evaluate(runs, settings)
        false = f"{r['false']}/{r['healthy']}" if r["healthy"] else "-"
        detected = f"{r['detected']}/{r['collapse']}" if r["collapse"] else "-"
        early = f"{r['early']}/{len(r['leads'])}" if r["leads"] else "-"
        low = f"{r['misattributed']}/{r['low']}" if r["low"] else "-"
        print(f"{name:<13} {false:>22}  {detected:>19}  {describe(r['delays']):>17}  {describe(r['leads']):>24}  "
              f"{early:>17}  {low:>30}")  # fmt: skip
    print("(delays and leads in optimizer steps: median [first quartile, third quartile])")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synthetic", type=int, default=100, help="synthetic runs of each kind")
    parser.add_argument("--kit-runs", type=int, default=3, help="tiny-model runs of each kind (0: none)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    began = time.time()
    synthetic = []
    for kind in ("healthy", "template", "low-entropy"):
        for seed in range(args.synthetic):
            records, onset, drop = synthetic_run(
                kind, seed + {"healthy": 0, "template": 10**6, "low-entropy": 2 * 10**6}[kind]
            )
            synthetic.append((kind, records, onset, drop))
    print(f"synthetic runs: {len(synthetic)} in {time.time() - began:.0f}s "
          f"(success modelled {SUCCESS_LAG_STEPS} steps behind the MI signal)")  # fmt: skip
    report("Synthetic runs (40 diagnostics, one every 5 steps)", synthetic)
    if args.kit_runs:
        began = time.time()
        runs = kit_runs(args.kit_runs)
        print(f"tiny-model runs: {len(runs)} in {time.time() - began:.0f}s")
        report("Tiny-model runs (measured success; a diagnostic every 20 imitation steps)", runs)
        for kind, records, onset, drop in runs:
            fired = CollapseDetector(scope=SCOPE)
            for record in records:
                fired.update(record)
            print(f"  {kind:<8} drift onset {onset}, success drop {drop}, default alarm {fired.fired_step}")


if __name__ == "__main__":
    main()
