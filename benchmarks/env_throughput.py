"""Environment throughput: steps per second of every registered environment, and Sokoban room generation time.

```bash
python benchmarks/env_throughput.py                      # every environment whose module imports
python benchmarks/env_throughput.py --envs sokoban frozen_lake --seconds 3 --rooms 500
```

Every figure is printed in absolute terms and against a baseline measured in the same run: a loop that makes one
trivial Python call per action, the least any `step` can cost. Discrete environments step with random actions
from `action_vocabulary()`; free-form ones with a fixed plausible answer. Episodes that end are reset, and the
reset time is left out of the step figures (room generation is measured in its own section).

The last section times the rollout's own work per turn (parsing, env steps, feedback rendering through the chat
template, span bookkeeping) with generation replaced by a fixed reply.

Targets: >= 20,000 steps/s on one core for Sokoban and FrozenLake, and a median 6x6 one-box Sokoban room
generation of <= 5 ms. The script exits with status 1 when a target is missed.

Each section is a function `(args, baseline) -> list[Row]` listed in `SECTIONS`; add a measurement by writing
one more such function.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from trl_ragen2_envs import ENVIRONMENTS, get_env_class


# ---------------------------------------------------------------------------------------------------------------
# Targets and inputs

STEPS_PER_SECOND_TARGET = {"sokoban": 20_000.0, "frozen_lake": 20_000.0}
ROOM_GENERATION_MEDIAN_TARGET_MS = 5.0
# A fixed answer for environments without an action vocabulary (what a model might plausibly send).
FREE_FORM_ANSWERS = {
    "countdown": "(3 + 5) * 2 - 1",
    "metamathqa": "42",
    "webshop": "search[red running shoes]",
    "searchqa": "search[capital of France]",
    "deepcoder": "```python\nprint(sum(map(int, input().split())))\n```",
}
DEFAULT_FREE_FORM_ANSWER = "42"


@dataclass
class Row:
    """One printed result line."""

    section: str
    name: str
    value: float | None  # None when skipped
    unit: str
    vs_baseline: float | None = None  # value expressed in baseline call costs (ns / baseline ns)
    target: str = ""
    passed: bool | None = None  # None when there is no target
    note: str = ""


# ---------------------------------------------------------------------------------------------------------------
# Baseline


def _no_op(action):
    return action


def measure_call_baseline_ns(num_calls: int = 1_000_000) -> float:
    """Nanoseconds per iteration of a loop making one trivial Python call: the floor of any `step` loop."""
    actions = ["Up"] * num_calls
    best = float("inf")
    for _ in range(3):  # best of 3: the machine may be shared
        start = time.perf_counter_ns()
        for action in actions:
            _no_op(action)
        best = min(best, (time.perf_counter_ns() - start) / num_calls)
    return best


# ---------------------------------------------------------------------------------------------------------------
# Section: env step throughput


def time_steps(env, actions: list[str], min_seconds: float, seed: int) -> tuple[int, float]:
    """Run `step` over `actions` (cycling) until `min_seconds` of step time; returns (steps, step seconds)."""
    env.reset(seed=seed)
    steps, step_ns, episode = 0, 0, 0
    budget_ns = int(min_seconds * 1e9)
    num_actions = len(actions)
    while step_ns < budget_ns:
        done = False
        start = time.perf_counter_ns()
        for i in range(256):
            done = env.step(actions[(steps + i) % num_actions])[2]
            if done:
                steps += i + 1
                break
        else:
            steps += 256
        step_ns += time.perf_counter_ns() - start
        if done:
            episode += 1
            env.reset(seed=seed + episode)
    return steps, step_ns / 1e9


def bench_env_steps(args, baseline_ns: float) -> list[Row]:
    rows = []
    names = args.envs or list(ENVIRONMENTS)
    rng = np.random.default_rng(0)
    for name in names:
        section = "step throughput"
        try:
            env_class = get_env_class(name)
            env = env_class()
            env.reset(seed=0)
        except (ImportError, OSError, ValueError, RuntimeError, TypeError) as error:  # e.g. missing module or data
            rows.append(Row(section, name, None, "steps/s", note=f"skipped: {type(error).__name__}: {error}"))
            continue
        vocabulary = env.action_vocabulary()
        if vocabulary:
            actions = [vocabulary[i] for i in rng.integers(0, len(vocabulary), 4096)]
            note = f"random actions from {vocabulary}"
        else:
            actions = [FREE_FORM_ANSWERS.get(name, DEFAULT_FREE_FORM_ANSWER)]
            note = f"fixed answer {actions[0]!r}"
        steps, seconds = time_steps(env, actions, args.seconds, seed=1)
        steps_per_second = steps / seconds
        ns_per_step = 1e9 / steps_per_second
        target = STEPS_PER_SECOND_TARGET.get(name)
        rows.append(
            Row(
                section,
                name,
                steps_per_second,
                "steps/s",
                vs_baseline=ns_per_step / baseline_ns,
                target=f">= {target:,.0f}" if target else "",
                passed=None if target is None else steps_per_second >= target,
                note=f"{ns_per_step / 1e3:.1f} us/step; {note}",
            )
        )
        env.close()
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Section: Sokoban room generation


def bench_sokoban_generation(args, baseline_ns: float) -> list[Row]:
    from trl_ragen2_envs.sokoban import SokobanEnv
    from trl_ragen2_envs.sokoban.generation import generate_room

    section = "sokoban 6x6, 1 box"
    rng = np.random.default_rng(0)
    generation_ms = []
    for _ in range(args.rooms):
        start = time.perf_counter_ns()
        generate_room((6, 6), 1, rng)
        generation_ms.append((time.perf_counter_ns() - start) / 1e6)
    env = SokobanEnv()
    reset_ms = []
    for seed in range(args.rooms):
        start = time.perf_counter_ns()
        env.reset(seed=seed)
        reset_ms.append((time.perf_counter_ns() - start) / 1e6)
    median = statistics.median(generation_ms)
    p90 = float(np.percentile(generation_ms, 90))
    target = ROOM_GENERATION_MEDIAN_TARGET_MS
    return [
        Row(
            section,
            "generation median",
            median,
            "ms",
            vs_baseline=median * 1e6 / baseline_ns,
            target=f"<= {target:g} ms",
            passed=median <= target,
            note=f"{args.rooms} rooms",
        ),
        Row(section, "generation p90", p90, "ms", vs_baseline=p90 * 1e6 / baseline_ns),
        Row(section, "generation max", max(generation_ms), "ms", vs_baseline=max(generation_ms) * 1e6 / baseline_ns),
        Row(
            section,
            "reset() median",
            statistics.median(reset_ms),
            "ms",
            vs_baseline=statistics.median(reset_ms) * 1e6 / baseline_ns,
            note="reseed + generation + first render",
        ),
    ]


# ---------------------------------------------------------------------------------------------------------------
# Section: rollout overhead per turn, generation excluded


def bench_rollout_overhead(args, baseline_ns: float) -> list[Row]:
    """Cost of one RAGEN turn around the model: decode, parse, env steps, feedback rendering, span bookkeeping.

    The backend returns a fixed, pre-tokenised reply (two Sokoban moves), so generation costs nothing here.
    """
    from trl_ragen2.agents.rollout import EpisodeSpec, RolloutConfig, RolloutEngine
    from trl_ragen2.models.tiny import make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    reply = tokenizer.encode("Push the box. </think><answer>Up || Left</answer>") + [tokenizer.eos_token_id]

    def fixed_reply(prompt_ids, max_new_tokens, **kwargs):
        return [reply] * len(prompt_ids), None

    engine = RolloutEngine(tokenizer, RolloutConfig(max_turns=5, max_actions_per_turn=2))
    specs = [EpisodeSpec("sokoban", seed) for seed in range(args.rollout_episodes)]
    engine.run(specs[:4], fixed_reply)  # warm-up (imports, template compilation)
    start = time.perf_counter_ns()
    episodes = engine.run(specs, fixed_reply)
    elapsed = time.perf_counter_ns() - start
    turns = sum(episode.turns for episode in episodes)
    per_turn_us = elapsed / turns / 1e3
    env = get_env_class("sokoban")()
    env.reset(seed=0)
    steps, seconds = time_steps(env, ["Up", "Left", "Down", "Right"], 0.5, seed=0)
    step_us = seconds / steps * 1e6
    return [
        Row(
            "rollout (sokoban)",
            "overhead per turn",
            per_turn_us,
            "us",
            vs_baseline=per_turn_us * 1e3 / baseline_ns,
            note=f"{turns} turns of {len(specs)} episodes incl. resets; {per_turn_us / step_us:,.0f}x one env step",
        ),
    ]


SECTIONS = [bench_env_steps, bench_sokoban_generation, bench_rollout_overhead]


# ---------------------------------------------------------------------------------------------------------------
# Report


def print_rows(rows: list[Row]) -> None:
    print(
        f"{'section':<20} {'name':<18} {'value':>14} {'unit':<8} {'x baseline':>11} {'target':<12} {'result':<6} note"
    )
    for row in rows:
        value = "-" if row.value is None else f"{row.value:,.2f}" if row.value < 100 else f"{row.value:,.0f}"
        ratio = "-" if row.vs_baseline is None else f"{row.vs_baseline:,.1f}"
        result = {True: "PASS", False: "FAIL", None: ""}[row.passed]
        print(
            f"{row.section:<20} {row.name:<18} {value:>14} {row.unit:<8} {ratio:>11} {row.target:<12} {result:<6} "
            f"{row.note}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="*", help="environments to step (default: every registered one)")
    parser.add_argument("--seconds", type=float, default=2.0, help="step time measured per environment")
    parser.add_argument("--rooms", type=int, default=300, help="Sokoban rooms generated for the timing")
    parser.add_argument("--rollout-episodes", type=int, default=64, help="episodes for the rollout overhead")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)

    baseline_ns = measure_call_baseline_ns()
    print(f"baseline: one trivial Python call per loop iteration = {baseline_ns:.1f} ns ({1e9 / baseline_ns:,.0f}/s)")
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}\n")
    rows = []
    for section in SECTIONS:
        section_rows = section(args, baseline_ns)
        print_rows(section_rows)
        print()
        rows += section_rows
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"baseline_ns": baseline_ns, "rows": [asdict(row) for row in rows]}, file, indent=2)
    return 1 if any(row.passed is False for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
