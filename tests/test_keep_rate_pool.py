"""`benchmarks/keep_rate_real.py --pool`: merging the `--out` files of separate invocations into one table.

Seeds may come from different files, and so may the modes of one seed; the paired differences are checked
against values worked out by hand."""

import json
from pathlib import Path

import pytest

from .benchmark_scripts import load_benchmark


SETTINGS = {
    "quick": False, "seeds": [0], "threads": 2, "max_turns": 3, "max_tokens_per_turn": 48, "eval_episodes": 48,
    "sft_episodes": 96, "sft_epochs": 1, "sft_lr": 5e-5, "grpo_steps": 8, "grpo_prompts": 4, "grpo_generations": 4,
    "grpo_lr": 2e-5, "modes": None, "out": None, "pool": None,
}  # fmt: skip


@pytest.fixture(scope="module")
def benchmark():
    return load_benchmark("keep_rate_real")


def outcome(wins: int, kept: float | None = None) -> dict:
    return {"success": wins / 48, "episodes": 48, "kept_fraction": kept, "std_over_mean": None, "auto_on": None}


def write(folder: Path, name: str, runs: dict, **settings) -> str:
    path = folder / name
    path.write_text(json.dumps({"settings": {**SETTINGS, **settings}, "seeds": runs}))
    return str(path)


def test_pool_merges_seeds_and_the_modes_of_one_seed_across_files(benchmark, tmp_path, capsys):
    first = write(tmp_path, "a.json", {
        "0": {"warm_start": outcome(8), "modes": {"none": outcome(3), "fixed 0.9": outcome(2, kept=0.25)}},
    })  # fmt: skip
    second = write(tmp_path, "b.json", {
        "1": {"warm_start": outcome(5), "modes": {"none": outcome(8), "fixed 0.9": outcome(7, kept=0.5)}},
    })  # fmt: skip
    third = write(tmp_path, "c.json", {  # seed 1 again, another mode: the same warm start
        "1": {"warm_start": outcome(5), "modes": {"linear 1.0->0.9": outcome(6, kept=0.5)}},
    })  # fmt: skip
    merged, names = benchmark.pool([first, second, third])
    assert names == ["none", "fixed 0.9"]  # the anneal ran on seed 1 only
    assert set(merged["seeds"]["1"]["modes"]) == {"none", "fixed 0.9", "linear 1.0->0.9"}

    benchmark.report(merged, names, benchmark.reference_mode(names))
    table = capsys.readouterr().out
    # none - warm start, per seed: (3 - 8)/48, (8 - 5)/48; mean -1/48; sd of the two = (8/48)/sqrt(2), so the
    # standard error is 4/48 and the 95% t half-width at 1 dof is 12.706 x 4/48 = 1.059
    assert "| none | 0.115 [0.065, 0.194] | -0.021 ± 1.059 | +0.021 ± 0.000 | 1.00 |" in table
    # fixed: 9 of 96 pooled; kept fraction the mean over seeds
    assert "| fixed 0.9 | 0.094 [0.050, 0.169] |" in table and "| 0.38 |" in table


def test_pool_refuses_mixed_pipelines_differing_warm_starts_and_repeated_runs(benchmark, tmp_path):
    seed_0 = {"0": {"warm_start": outcome(8), "modes": {"none": outcome(3)}}}
    base = write(tmp_path, "base.json", seed_0)
    other_lr = write(tmp_path, "lr.json", {"1": seed_0["0"]}, grpo_lr=1e-5)
    with pytest.raises(SystemExit, match=r"different pipeline \(\['grpo_lr'\]\)"):
        benchmark.pool([base, other_lr])
    other_warm = write(tmp_path, "warm.json", {"0": {"warm_start": outcome(7), "modes": {"fixed 0.9": outcome(2)}}})
    with pytest.raises(SystemExit, match="seed 0's warm start"):
        benchmark.pool([base, other_warm])
    again = write(tmp_path, "again.json", seed_0)
    with pytest.raises(SystemExit, match=r"seed 0 ran \['none'\] in more than one file"):
        benchmark.pool([base, again])
    launch_only = write(tmp_path, "launch.json", {"1": seed_0["0"]}, threads=1, seeds=[1], out="x.json")
    merged, names = benchmark.pool([base, launch_only])  # how a run was launched does not matter
    assert sorted(merged["seeds"]) == ["0", "1"] and names == ["none"]
