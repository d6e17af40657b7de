"""Cross-scoring benchmark: the KV-reuse scorer against naive concatenation, and the MI diagnostics' share of a
GRPO training step.

Setup (one run, CPU): a random Qwen2-architecture model with a 32k vocabulary (`make_tiny_model(vocab_size=32000)`,
4 layers, hidden 64), P=8 prompts of ~200 tokens x G=16 chains of ~100 tokens (random token ids), every chain scored
under every prompt (1,024 pairs).

1. Scorers. Each method runs in its own subprocess, so its peak RSS (`ru_maxrss`) minus the RSS before scoring is its
   own peak memory. Methods: `kv` = TransformersCrossScorer; `naive` = plain concatenation [prompt | chain] through
   the full model, 16 rows per forward (the baseline of the targets); `naive_chain_logits` = the same with the LM head
   on chain positions only (`logits_to_keep`, as TRL's log-prob pass does), printed for reference.
2. Step overhead. A real `trl.GRPOTrainer` step on the same model size (8 prompts x 16 generations of up to 100
   tokens, prompts of ~200 tokens) with MIDiagnosticsCallback attached at every step; the diagnostics' wall time
   (both scopes, 64 pairs each) is read from the logged `time_s`, the step time without diagnostics is the step wall
   time minus it, and the amortised share at the default schedule is diag / every_n_steps / step.

Targets: KV-reuse >= 3x faster than naive; amortised overhead <= 5% of step time.

    python benchmarks/cross_scoring.py            # full run (several minutes on 2 cores)
    python benchmarks/cross_scoring.py --quick    # smaller shapes, a smoke check of the script
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402


VOCAB, HIDDEN, LAYERS = 32000, 64, 4
SHAPES = {
    "full": {"prompts": 8, "chains_per_prompt": 16, "prompt_len": 200, "chain_len": 100, "steps": 2},
    "quick": {"prompts": 4, "chains_per_prompt": 4, "prompt_len": 60, "chain_len": 30, "steps": 2},
}


def build_model(tokenizer, seed=0):
    from trl_ragen2.models.tiny import make_tiny_model

    return make_tiny_model(
        tokenizer, seed=seed, vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=4 * HIDDEN,
        num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip


def build_pairs(shape):
    """Random prompts (~prompt_len +-5%) and chains (~chain_len +-10%), reproducible."""
    g = torch.Generator().manual_seed(0)

    def sample(length, spread, count):
        lengths = torch.randint(int(length * (1 - spread)), int(length * (1 + spread)) + 1, (count,), generator=g)
        return [torch.randint(10, VOCAB, (int(n),), generator=g).tolist() for n in lengths]

    prompts = sample(shape["prompt_len"], 0.05, shape["prompts"])
    chains = sample(shape["chain_len"], 0.10, shape["prompts"] * shape["chains_per_prompt"])
    return prompts, chains


# ---------------------------------------------------------------------------------------------------------------
# 1. Scorers (subprocess)


def measure(method: str, shape_name: str, out_path: str) -> None:
    """Child process: score with one method, write {time_s, peak_mb} and the score matrix."""
    import psutil

    from trl_ragen2.collapse.scoring import TransformersCrossScorer, naive_cross_scores
    from trl_ragen2.models.tiny import make_tiny_tokenizer

    model = build_model(make_tiny_tokenizer())
    prompts, chains = build_pairs(SHAPES[shape_name])
    before_mb = psutil.Process().memory_info().rss / 2**20
    began = time.perf_counter()
    if method == "kv":
        scores = TransformersCrossScorer(model).score(prompts, chains)
    else:
        scores = naive_cross_scores(
            model, prompts, chains, batch_size=16, chain_logits_only=method == "naive_chain_logits"
        )
    elapsed = time.perf_counter() - began
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    torch.save(scores, out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump({"time_s": elapsed, "peak_mb": peak_mb - before_mb}, f)


def compare_scorers(shape_name: str) -> dict:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("kv", "naive", "naive_chain_logits"):
            out = os.path.join(tmp, method + ".json")
            subprocess.run(
                [sys.executable, __file__, "--measure", method, "--shape", shape_name, "--out", out], check=True
            )
            with open(out) as f:
                results[method] = json.load(f)
            results[method]["scores"] = torch.load(out + ".pt")
    kv, naive = results["kv"], results["naive"]
    return {
        "results": results,
        "max_abs_diff": (kv["scores"] - naive["scores"]).abs().max().item(),
        "speedup": naive["time_s"] / kv["time_s"],
        "memory_ratio": naive["peak_mb"] / max(kv["peak_mb"], 1e-9),
    }


# ---------------------------------------------------------------------------------------------------------------
# 2. GRPO step overhead


def step_overhead(shape: dict) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_ragen2.collapse.diagnostics import MIDiagnosticsCallback, MIDiagnosticsConfig
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    g = torch.Generator().manual_seed(1)
    # plain-text prompts of ~prompt_len tokens; the model may only emit ids the tokenizer can decode
    texts = [tokenizer.decode(torch.randint(10, 600, (shape["prompt_len"],), generator=g).tolist()) for _ in range(64)]
    dataset = Dataset.from_dict({"prompt": texts})
    group = shape["chains_per_prompt"]
    generation_batch = shape["prompts"] * group

    def length_reward(completions, **kwargs):
        return [float(len(c)) for c in completions]

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=generation_batch // 4,
        gradient_accumulation_steps=4,  # one generation of P x G rollouts per optimizer step
        num_generations=group,
        max_completion_length=shape["chain_len"],
        max_steps=shape["steps"] + 1,
        learning_rate=1e-4,
        **CPU_TRAINING_KWARGS,
        logging_steps=1,
        save_strategy="no",
        generation_kwargs={"suppress_tokens": list(range(len(tokenizer), VOCAB))},
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=build_model(tokenizer), reward_funcs=length_reward, args=args, train_dataset=dataset,
        processing_class=tokenizer,
    )  # fmt: skip
    config = MIDiagnosticsConfig()  # defaults: 64 pairs per scope, both scopes, every 5 steps
    measured = MIDiagnosticsConfig(every_n_steps=1)  # run at every step to time it
    MIDiagnosticsCallback(measured).attach(trainer)

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_begin(self, *args, **kwargs):
            self.began = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            self.times.append(time.perf_counter() - self.began)

    timer = StepTimer()
    trainer.add_callback(timer)
    for quiet in (PrinterCallback, ProgressCallback):  # keep the benchmark output to the figures
        trainer.remove_callback(quiet)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "ragen2/mi/first_turn/time_s" in h]
    diag = [h["ragen2/mi/first_turn/time_s"] + h["ragen2/mi/trajectory/time_s"] for h in logs]
    pairs = [h["ragen2/mi/first_turn/num_pairs"] + h["ragen2/mi/trajectory/num_pairs"] for h in logs]
    # the first step is a warm-up; later steps are timed
    steps = [total - d for total, d in zip(timer.times[1:], diag[1:], strict=True)]
    step_s, diag_s = statistics.median(steps), statistics.median(diag[1:])
    return {
        "step_s": step_s,
        "diag_s": diag_s,
        "pairs": statistics.median(pairs),
        "every_n_steps": config.every_n_steps,
        "share": diag_s / config.every_n_steps / step_s,
    }


# ---------------------------------------------------------------------------------------------------------------
# Report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (smoke check)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--shape", default="full", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.shape, args.out)
        return
    shape_name = "quick" if args.quick else "full"
    shape = SHAPES[shape_name]
    print(
        f"model: Qwen2 {LAYERS} layers, hidden {HIDDEN}, vocab {VOCAB}, fp32, {torch.get_num_threads()} threads | "
        f"P={shape['prompts']} prompts x G={shape['chains_per_prompt']} chains, "
        f"prompts ~{shape['prompt_len']} tokens, chains ~{shape['chain_len']} tokens"
    )
    scoring = compare_scorers(shape_name)
    print("\n1. cross-scoring all chains under all prompts")
    print(f"{'method':<22}{'time (s)':>10}{'peak RSS (MiB)':>16}")
    for method, r in scoring["results"].items():
        print(f"{method:<22}{r['time_s']:>10.2f}{r['peak_mb']:>16.0f}")
    chain_only = scoring["results"]["naive_chain_logits"]["time_s"] / scoring["results"]["kv"]["time_s"]
    print(f"speed-up vs naive: {scoring['speedup']:.2f}x (vs naive with chain-only logits: {chain_only:.2f}x)")
    print(f"peak memory ratio naive / kv: {scoring['memory_ratio']:.2f}x")
    print(f"max |kv - naive|: {scoring['max_abs_diff']:.2e} (sequence log-probs)")

    overhead = step_overhead(shape)
    print("\n2. MI diagnostics during GRPO training (default config: 64 pairs per scope, both scopes)")
    print(f"GRPO step without diagnostics: {overhead['step_s']:.2f} s (median over {shape['steps']} steps)")
    print(f"diagnostics per run: {overhead['diag_s']:.2f} s for {overhead['pairs']:.0f} pairs")
    print(
        f"amortised at every {overhead['every_n_steps']} steps: {overhead['diag_s'] / overhead['every_n_steps']:.2f} s "
        f"per step = {100 * overhead['share']:.1f}% of step time"
    )

    needed = overhead["diag_s"] / (0.05 * overhead["step_s"])
    print(f"schedule that would keep the diagnostics at 5% of step time: every {needed:.1f} steps")

    speed_ok, share_ok = scoring["speedup"] >= 3.0, overhead["share"] <= 0.05
    print("\ntargets")
    print(f"  KV-reuse >= 3x faster than naive: {'PASS' if speed_ok else 'FAIL'} ({scoring['speedup']:.2f}x)")
    print(f"  amortised overhead <= 5% of step: {'PASS' if share_ok else 'FAIL'} ({100 * overhead['share']:.1f}%)")


if __name__ == "__main__":
    main()
