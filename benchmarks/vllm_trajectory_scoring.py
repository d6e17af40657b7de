"""The MI trajectory scope through vLLM's CPU build against the transformers scorer, on a real run's pairs.

The pairs are those a real SmolLM2-135M FrozenLake step drew for its trajectory scope: the distinct histories
(prompt, earlier replies and feedback, a few hundred tokens) as contexts and the turns' reasoning as chains, stored by
`python benchmarks/mi_cost.py --chain_subsampling` in `chain_subsampling.json`. The first `--chains` chains are
scored under every context by

- `TransformersCrossScorer` (float32): each context prefilled once, the chains packed into lanes over its KV cache;
- `VLLMCrossScorer` on a float32 vLLM engine per `--block_sizes`: one prefill request per (context, chain) pair,
  reading the context's KV from vLLM's prefix cache in whole blocks (128 tokens is the CPU build's default, the
  engine TRL's colocate mode starts); smaller blocks leave fewer context tokens to prefill per pair.

Each arm runs in a fresh process, after a warm-up call on one chain. Printed: seconds, the ratio to transformers in
the same run, and the largest difference from transformers' scores. Written to `--out` with the command.

    python benchmarks/vllm_trajectory_scoring.py --pairs benchmarks/results/mi_cost/chain_subsampling.json \\
        --out benchmarks/results/mi_cost/vllm_trajectory_scoring.json

Run it with the vLLM environment's interpreter (`.venv-vllm/bin/python`, docs/vllm_cpu.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts

from mi_cost import SUBSAMPLING_FILE  # noqa: E402
from vllm_cpu import in_fresh_process  # noqa: E402


def transformers_arm(path, contexts, chains, threads):
    """Seconds and scores of the transformers scorer (float32) on every (context, chain) pair."""
    import torch
    from transformers import AutoModelForCausalLM

    from trl_ragen2.collapse.scoring import TransformersCrossScorer

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    scorer = TransformersCrossScorer(model)
    scorer.score(contexts, chains[:1])  # warm-up
    began = time.perf_counter()
    scores = scorer.score(contexts, chains)
    return {"seconds": time.perf_counter() - began, "scores": scores.tolist()}


def vllm_arm(path, contexts, chains, block_size):
    """Seconds and scores of the vLLM scorer on an engine whose KV-cache blocks hold `block_size` tokens."""
    from vllm import LLM

    from trl_ragen2.collapse.scoring import VLLMCrossScorer

    longest = max(len(c) for c in contexts) + max(len(c) for c in chains) + 8
    llm = LLM(path, dtype="float32", max_model_len=max(1024, longest), block_size=block_size, seed=0)
    scorer = VLLMCrossScorer(llm=llm)
    scorer.score(contexts, chains[:1])  # warm-up (its contexts are then cached: reset below)
    llm.reset_prefix_cache()
    began = time.perf_counter()
    scores = scorer.score(contexts, chains)
    return {"seconds": time.perf_counter() - began, "scores": scores.tolist()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default="benchmarks/results/mi_cost/chain_subsampling.json")
    parser.add_argument("--chains", type=int, default=8, help="score the first N chains under every context")
    parser.add_argument("--block_sizes", type=int, nargs="+", default=[128, 64, 32])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch

    from trl_ragen2.models.smollm2 import smollm2_path

    with open(args.pairs) as f:
        matrix = json.load(f)["matrix"]
    contexts, chains = matrix["contexts"], matrix["chains"][: args.chains]
    path = smollm2_path()
    context_tokens = sum(len(c) for c in contexts)
    print(f"{len(chains)} chains (mean {sum(map(len, chains)) / len(chains):.1f} tokens) x {len(contexts)} contexts "
          f"(mean {context_tokens / len(contexts):.0f} tokens)")  # fmt: skip
    arms = {"transformers": in_fresh_process(transformers_arm, path, contexts, chains, args.threads)}
    for block_size in args.block_sizes:
        arms[f"vllm, blocks of {block_size}"] = in_fresh_process(vllm_arm, path, contexts, chains, block_size)
    reference = torch.tensor(arms["transformers"]["scores"], dtype=torch.float64)
    rows = []
    for name, arm in arms.items():
        difference = (torch.tensor(arm["scores"], dtype=torch.float64) - reference).abs().max().item()
        ratio = arm["seconds"] / arms["transformers"]["seconds"]
        rows.append({"arm": name, "seconds": arm["seconds"], "time_over_transformers": ratio,
                     "max_abs_difference_nats": difference})  # fmt: skip
    print("| scorer | seconds | time / transformers | largest difference from transformers (nats) |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['arm']} | {row['seconds']:.1f} | {row['time_over_transformers']:.2f} | "
              f"{row['max_abs_difference_nats']:.1e} |")  # fmt: skip
    if args.out:
        stored = {
            "command": "python benchmarks/vllm_trajectory_scoring.py --pairs benchmarks/results/mi_cost/"
            f"{SUBSAMPLING_FILE} --chains {args.chains} --block_sizes {' '.join(map(str, args.block_sizes))} "
            f"--threads {args.threads} --out benchmarks/results/mi_cost/vllm_trajectory_scoring.json",
            "pairs": {"chains": len(chains), "contexts": len(contexts), "context_tokens": context_tokens},
            "arms": rows,
        }
        with open(args.out, "w") as f:
            json.dump(stored, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
