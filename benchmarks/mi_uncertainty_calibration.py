"""Calibration of `trl_ragen2.collapse.mi_uncertainty`: the permutation test's rejection rate when reasoning ignores
the input, and the coverage of the bootstrap intervals (widened and plain) on a generator with a known population
value.

The generator is the one of `tests/test_mi_uncertainty.py` (`noisy_matrix`): per-token log-probabilities `base +
noise`, plus a signal on the chain's own prompt, times the chain's length; the population value of each proxy is
that of 200,000 chains. 300 batches of 64 chains per setting.

    python benchmarks/mi_uncertainty_calibration.py
"""

from __future__ import annotations

import os
import sys


sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests.test_mi_uncertainty import noisy_matrix  # noqa: E402
from trl_ragen2.collapse.mi import mi_metrics  # noqa: E402
from trl_ragen2.collapse.mi_uncertainty import (  # noqa: E402
    bootstrap_intervals,
    chain_terms,
    mi_uncertainty,
    retrieval_permutation_test,
)


KEYS = ("retrieval_acc", "recall@2", "mi_est", "mi_zscore", "mi_seq_est", "cond_entropy")
BATCHES = 300


def main():
    rejections = sum(
        retrieval_permutation_test(*noisy_matrix(seed, chains_per_prompt=4, depends_on_input=False)[::2],
                                   num_permutations=99, seed=seed)[0] <= 0.1
        for seed in range(BATCHES)
    )  # fmt: skip
    print(f"permutation test, input-blind reasoning, level 0.1: rejects {rejections / BATCHES:.3f} of {BATCHES}")
    print("coverage of the 95% intervals (population value inside):")
    for prompts in (8, 32):
        per_prompt = 64 // prompts
        big = noisy_matrix(10_000 + prompts, chains_per_prompt=200_000 // prompts, prompts=prompts)
        truth = mi_metrics(*big)
        widened, plain = dict.fromkeys(KEYS, 0), dict.fromkeys(KEYS, 0)
        for seed in range(BATCHES):
            logp, lengths, target = noisy_matrix(seed, chains_per_prompt=per_prompt, prompts=prompts)
            out = mi_uncertainty(logp, lengths, target, seed=seed, num_permutations=1, num_bootstrap=500)
            narrow = bootstrap_intervals(
                chain_terms(logp, lengths, target), target, num_resamples=500, seed=seed + 1, widen=False
            )
            for key in KEYS:
                widened[key] += out[f"{key}_ci_low"] <= truth[key] <= out[f"{key}_ci_high"]
                plain[key] += narrow[key][0] <= truth[key] <= narrow[key][1]
        for name, counts in (("plain percentile", plain), ("widened (logged)", widened)):
            rates = ", ".join(f"{key} {count / BATCHES:.3f}" for key, count in counts.items())
            print(f"  {prompts} prompts x {per_prompt} chains, {name}: {rates}")


if __name__ == "__main__":
    main()
