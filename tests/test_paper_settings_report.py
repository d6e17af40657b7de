"""`benchmarks/paper_settings_cpu.py --report`: the statistics over seeds checked against values worked out by hand
(chi-square tails, the homogeneity test, the seeds a paired t test needs, the paired t interval, exact McNemar tails),
and the report of the stored stage files checked against its stored output (`report.txt`) and what docs/real_model.md and
docs/method.md quote."""

import json
import math
from pathlib import Path

import pytest

from .benchmark_scripts import load_benchmark


ROOT = Path(__file__).resolve().parent.parent
T_975 = {1: 12.7062, 2: 4.3027, 4: 2.7764}  # Student's t 0.975 quantiles, from the table
Z_975, Z_80 = 1.959964, 0.841621  # normal quantiles, from the table


@pytest.fixture(scope="module")
def benchmark():
    return load_benchmark("paper_settings_cpu")


def evaluation(outcomes: list[int]) -> dict:
    return {"success": sum(outcomes) / len(outcomes), "episodes": len(outcomes), "outcomes": outcomes}


def write_seed(run_dir: Path, seed: int, filtered: list[int], unfiltered: list[int], **settings) -> None:
    seed_dir = run_dir / f"seed{seed}"
    seed_dir.mkdir(parents=True)
    (seed_dir / "settings.json").write_text(json.dumps({"seed": seed, "grpo_steps": 24, "arms": ["ppo"], **settings}))
    (seed_dir / "warm.json").write_text(json.dumps({"eval": evaluation([1, 0] * 5), "time_s": {"train": 10}}))
    logs = [
        {"loss": 0.1, "entropy": 1.0, "ragen2/filter/kept_fraction": 0.5, "ragen2/env/frozen_lake/success_rate": 0.5}
    ]
    for variant, outcomes in (("filtered", filtered), ("unfiltered", unfiltered)):
        stage = {"eval": evaluation(outcomes), "logs": logs, "time_s": {"train": 100 + seed}}
        (seed_dir / f"ppo_{variant}.json").write_text(json.dumps(stage))


def test_mcnemar_exact_matches_hand_worked_binomial_tails(benchmark):
    mcnemar = benchmark.mcnemar_exact
    assert mcnemar(0, 0) == 1.0
    assert mcnemar(5, 0) == mcnemar(0, 5) == pytest.approx(2 / 32)
    assert mcnemar(1, 4) == pytest.approx(2 * (1 + 5) / 32)
    assert mcnemar(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert mcnemar(3, 3) == 1.0  # the doubled tail passes 1


def test_chi2_tail_matches_the_tables_critical_values_and_closed_forms(benchmark):
    sf = benchmark.chi2_sf
    # the 5% critical values of the chi-square table, 1 to 5 degrees of freedom
    for dof, critical in ((1, 3.841459), (2, 5.991465), (3, 7.814728), (4, 9.487729), (5, 11.070498)):
        assert sf(critical, dof) == pytest.approx(0.05, abs=1e-6)
    assert sf(6.634897, 1) == pytest.approx(0.01, abs=1e-7)
    assert sf(40.7, 2) == pytest.approx(math.exp(-20.35), rel=1e-12)  # 2 d.f.: e^(-x/2)
    assert sf(3.0, 4) == pytest.approx(math.exp(-1.5) * 2.5, rel=1e-12)  # 4 d.f.: e^(-x/2) (1 + x/2)
    assert sf(0.0, 3) == 1.0
    with pytest.raises(ValueError):
        sf(1.0, 0)


def test_homogeneity_chi2_over_seeds_by_hand(benchmark):
    # 6 of 10 and 3 of 10: pooled 9/20, expected 4.5 successes and 5.5 failures per seed, deviations 1.5
    chi2, dof, p = benchmark.homogeneity_chi2([6, 3], [10, 10])
    assert chi2 == pytest.approx(2 * (1.5**2 / 4.5 + 1.5**2 / 5.5)) and dof == 1
    assert p == pytest.approx(math.erfc(math.sqrt(chi2 / 2)))
    # the stored filtered PPO arm, 69 / 76 / 36 of 96: pooled 181/288, expected 60.333 successes per seed
    expected = 96 * 181 / 288
    by_hand = sum((w - expected) ** 2 for w in (69, 76, 36)) * (1 / expected + 1 / (96 - expected))
    chi2, dof, p = benchmark.homogeneity_chi2([69, 76, 36], [96, 96, 96])
    assert chi2 == pytest.approx(by_hand) and round(chi2, 1) == 40.7 and dof == 2
    assert p == pytest.approx(math.exp(-by_hand / 2))
    assert benchmark.homogeneity_chi2([10, 10], [10, 10]) == (0.0, 1, 1.0)  # every episode won: nothing to test
    with pytest.raises(ValueError):
        benchmark.homogeneity_chi2([3], [10])


def test_seeds_for_power_and_the_half_width_by_hand(benchmark):
    # SD equal to the effect: (1.959964 + 0.841621)^2 + 1.959964^2 / 2 = 7.8489 + 1.9207 = 9.7696 -> 10 seeds
    value, seeds = benchmark.seeds_for_power(0.2, 0.2)
    assert value == pytest.approx((Z_975 + Z_80) ** 2 + Z_975**2 / 2, rel=1e-6) and seeds == 10
    # the stored PPO pairs' differences -11/96, +12/96, -15/96: SD 0.1518 against the paper's 0.109
    sd = math.sqrt(((-11 + 14 / 3) ** 2 + (12 + 14 / 3) ** 2 + (-15 + 14 / 3) ** 2) / 2) / 96
    value, seeds = benchmark.seeds_for_power(sd, 0.109)
    assert value == pytest.approx(((Z_975 + Z_80) * sd / 0.109) ** 2 + Z_975**2 / 2, rel=1e-6)
    assert round(sd, 3) == 0.152 and round(value, 2) == 17.14 and seeds == 18
    assert benchmark.paired_half_width(sd, 5) == pytest.approx(T_975[4] * sd / math.sqrt(5), rel=3e-3)
    assert benchmark.paired_half_width(0.2, 3) == pytest.approx(T_975[2] * 0.2 / math.sqrt(3), rel=1e-4)


def test_report_gives_per_seed_results_intervals_over_seeds_and_pairs(benchmark, tmp_path, capsys):
    # seed 0: filtered wins maps 0-5, unfiltered maps 0-1 and 6 (filtered alone 4, unfiltered alone 1)
    write_seed(tmp_path, 0, [1] * 6 + [0] * 4, [1, 1, 0, 0, 0, 0, 1, 0, 0, 0])
    # seed 1: both win the same 3 maps
    write_seed(tmp_path, 1, [1, 1, 1] + [0] * 7, [1, 1, 1] + [0] * 7)
    rows = benchmark.report(tmp_path, tmp_path / "figures")
    out = capsys.readouterr().out
    filtered = next(row for row in rows if row["policy"] == "ppo_filtered")
    assert filtered["wins"] == [6, 3] and filtered["rates"] == [0.6, 0.3] and filtered["mean"] == pytest.approx(0.45)
    half = T_975[1] * math.sqrt(2 * 0.15**2) / math.sqrt(2)  # rates 0.6 and 0.3: SD 0.2121
    assert filtered["half"] == pytest.approx(half, rel=1e-4)
    assert (
        f"| ppo_filtered | 0, 1 | 6 / 3 of 10 | 0.600 / 0.300 | 0.450 ± {half:.3f} | χ² = 1.8, 1 d.f., p = 0.178 |"
        in out
    )
    assert "Wilson" not in out and " of 20" not in out  # no interval that treats the seeds' episodes as one sample
    # filtered - unfiltered, differences 0.3 and 0.0: mean 0.15, half-width t(0.975, 1) * 0.2121 / sqrt(2)
    assert f"paired by seed (0, 1): +0.300 / +0.000; mean +0.150 ± {half:.3f} [95% t, 2 seeds]" in out
    seeds = math.ceil(((Z_975 + Z_80) * math.sqrt(2 * 0.15**2) / 0.109) ** 2 + Z_975**2 / 2)
    assert f"ppo seeds needed: the paired SD of filtered − unfiltered over 2 seeds is 0.212; a paired two-sided t test at α = 0.05 needs {seeds} seeds" in out  # fmt: skip
    assert f"filtered alone won 4, unfiltered alone won 1 of 10; exact McNemar p = {2 * 6 / 32:.3f}" in out
    assert "ppo seed 1, paired by episode: filtered alone won 0, unfiltered alone won 0 of 10; exact McNemar p = 1.000" in out  # fmt: skip
    # each policy against its seed's warm start (5 of 10 on both seeds): filtered +0.1 / -0.2
    half_w = T_975[1] * math.sqrt(2 * 0.15**2) / math.sqrt(2)
    assert f"ppo_filtered − warm start, paired by seed (0, 1): +0.100 / -0.200; mean -0.050 ± {half_w:.3f}" in out
    assert "cover different seeds" not in out
    assert (tmp_path / "figures" / "paper_settings_curves.png").stat().st_size > 0


def test_report_says_when_rows_cover_different_seeds(benchmark, tmp_path, capsys):
    """A seed whose unfiltered run has not finished: its filtered run joins the row but not the pairing."""
    write_seed(tmp_path, 0, [1, 1, 0, 0], [1, 0, 0, 0])
    write_seed(tmp_path, 1, [1, 1, 1, 0], [0, 0, 0, 0])
    (tmp_path / "seed1" / "ppo_unfiltered.json").unlink()
    benchmark.report(tmp_path, tmp_path / "figures")
    out = capsys.readouterr().out
    assert "the rows cover different seeds (warm: [0, 1]; ppo_filtered: [0, 1]; ppo_unfiltered: [0])" in out
    assert "| ppo_unfiltered | 0 | 1 of 4 | 0.250 | 0.250 (one seed: no t interval) | – (one seed) |" in out
    assert "ppo: filtered − unfiltered, paired by seed (0): +0.250; mean +0.250 (one seed: no t interval)" in out
    assert "ppo_unfiltered − warm start, paired by seed (0): -0.250; mean -0.250 (one seed: no t interval)" in out
    assert "seeds needed" not in out  # one paired seed has no SD


def test_report_refuses_seeds_run_with_different_settings(benchmark, tmp_path):
    write_seed(tmp_path, 0, [1, 0], [0, 1])
    write_seed(tmp_path, 1, [1, 0], [0, 1], grpo_steps=12)
    with pytest.raises(SystemExit, match="grpo_steps"):
        benchmark.report(tmp_path, tmp_path / "figures")


def test_the_pages_quote_the_report_of_the_stored_stage_files(benchmark, tmp_path, capsys):
    """The report of benchmarks/results/paper_settings is, line for line, its stored output `report.txt` (which
    docs/real_model.md cites); docs/method.md quotes its per-seed successes, means over seeds, homogeneity statistics,
    paired differences, McNemar p-values and the seeds needed line. Neither page gives a Wilson interval for this
    experiment."""
    folder = ROOT / "benchmarks" / "results" / "paper_settings"
    rows = benchmark.report(folder, tmp_path)
    out = capsys.readouterr().out
    printed = [line.strip() for line in out.splitlines() if line.strip() and not line.startswith("wrote ")]
    stored = (folder / "report.txt").read_text(encoding="utf-8").splitlines()
    assert printed == [line.strip() for line in stored if line.strip() and not line.startswith("# ")]
    real_model = (ROOT / "docs" / "real_model.md").read_text(encoding="utf-8")
    method = (ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    assert "benchmarks/results/paper_settings/report.txt" in real_model
    section = real_model.split("## The paper's settings", 1)[1].split("\n## ", 1)[0]
    method_rows = [line for line in method.splitlines() if line.startswith("| [The paper's settings")]
    assert "Wilson" not in section and method_rows and not any("Wilson" in line for line in method_rows)

    ppo = [row for row in rows if row["policy"] in ("warm", "ppo_filtered", "ppo_unfiltered")]
    assert [row["wins"] for row in ppo] == [[49, 66, 65], [69, 76, 36], [80, 64, 51]]
    figures = [f"{' / '.join(map(str, row['wins']))} of 96" for row in rows]
    figures += [f"{row['mean']:.3f} ± {row['half']:.3f}" for row in ppo]
    figures += [f"χ² = {row['chi2']:.1f}" for row in ppo[1:]]
    figures += [line.split("paired by seed ", 1)[1] for line in printed if "filtered − unfiltered, paired by" in line]
    figures += [line.split("mean ", 1)[1].split(" [", 1)[0] for line in printed if "− warm start, paired" in line]
    figures += [line.rsplit("exact McNemar ", 1)[1] for line in printed if "exact McNemar p = " in line]
    (needed,) = [line for line in printed if line.startswith("ppo seeds needed: ")]
    assert "is 0.152;" in needed and "needs 18 seeds" in needed and "± 0.188" in needed
    assert [figure for figure in [*figures, needed] if figure not in method] == []
