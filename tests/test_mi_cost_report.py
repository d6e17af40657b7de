"""The MI-cost benchmark's chain-subsampling analysis: its pure part on a known matrix, and its stored result."""

import json
from pathlib import Path

import pytest
import torch

from trl_ragen2.collapse.mi import mi_metrics

from .benchmark_scripts import BENCHMARKS, load_benchmark


STORED = BENCHMARKS / "results" / "mi_cost" / "chain_subsampling.json"


@pytest.fixture(scope="module")
def mi_cost():
    return load_benchmark("mi_cost")


def informative_matrix(num_chains: int, seed: int = 0) -> dict:
    """Chains that score higher under their own context, by a margin that varies from chain to chain."""
    generator = torch.Generator().manual_seed(seed)
    logp = -20 - 10 * torch.rand(num_chains, num_chains, generator=generator, dtype=torch.float64)
    logp[range(num_chains), range(num_chains)] += 12 * torch.rand(num_chains, generator=generator, dtype=torch.float64)
    return {
        "logp": logp.tolist(),
        "lengths": (5 + torch.arange(num_chains) % 7).double().tolist(),
        "target": list(range(num_chains)),
        "same": torch.zeros(num_chains, num_chains, dtype=torch.bool).tolist(),
    }


def test_subsets_are_centred_on_the_full_matrix_and_their_intervals_wider(mi_cost):
    matrix = informative_matrix(24)
    full_row, subset_row = sorted(
        mi_cost.subsampling_widening(matrix, [24, 6], num_subsets=200), key=lambda row: -row["chains"]
    )
    for key in mi_cost.SUBSAMPLING_KEYS:
        full, subset = full_row[key], subset_row[key]
        assert full["mean"] == pytest.approx(full["full"], abs=1e-12) and full["sd"] == 0
        # unbiased: the mean of 200 subsets is within 4 standard errors of the full matrix's value
        assert abs(subset["mean"] - subset["full"]) < 4 * subset["sd"] / 200**0.5, key
        assert subset["sd"] > 0 and subset["mean_ci_width"] > full["mean_ci_width"], key
        assert subset["coverage"] >= 0.9, key


@pytest.mark.skipif(not STORED.exists(), reason="no stored chain-subsampling result")
def test_the_stored_table_is_that_of_its_stored_matrix(mi_cost):
    stored = json.loads(Path(STORED).read_text())
    matrix = stored["matrix"]
    full = mi_metrics(*(torch.tensor(matrix[name]) for name in ("logp", "lengths", "target", "same")))
    largest = max(stored["table"], key=lambda row: row["chains"])
    assert largest["chains"] == len(matrix["logp"])
    for row in stored["table"]:
        for key in mi_cost.SUBSAMPLING_KEYS:
            assert row[key]["full"] == pytest.approx(full[key], abs=1e-9)
    # the full matrix's row is recomputed exactly (one subset: every chain)
    (recomputed,) = mi_cost.subsampling_widening(matrix, [largest["chains"]])
    for key in mi_cost.SUBSAMPLING_KEYS:
        assert recomputed[key] == pytest.approx(largest[key]), key
