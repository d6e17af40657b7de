"""`benchmarks/paper_settings_cpu.py --report`: the table over the seeds' stage files, checked against values worked
out by hand (Wilson bounds, the paired t interval, exact McNemar tails on the same held-out maps)."""

import json
import math
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from .benchmark_scripts import load_benchmark


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


def test_report_pools_seeds_and_pairs_by_seed_and_by_episode(benchmark, tmp_path, capsys):
    # seed 0: filtered wins maps 0-5, unfiltered maps 0-1 and 6 (filtered alone 4, unfiltered alone 1)
    write_seed(tmp_path, 0, [1] * 6 + [0] * 4, [1, 1, 0, 0, 0, 0, 1, 0, 0, 0])
    # seed 1: both win the same 3 maps
    write_seed(tmp_path, 1, [1, 1, 1] + [0] * 7, [1, 1, 1] + [0] * 7)
    rows = benchmark.report(tmp_path, tmp_path / "figures")
    out = capsys.readouterr().out
    filtered = next(row for row in rows if row["policy"] == "ppo_filtered")
    assert filtered["wins"] == [6, 3] and filtered["rate"] == pytest.approx(9 / 20)
    p, z, n = 9 / 20, 1.96, 20
    centre, half = (
        (p + z * z / (2 * n)) / (1 + z * z / n),
        z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n),
    )
    assert filtered["ci"] == pytest.approx([centre - half, centre + half])
    assert "| ppo_filtered | 2 | 6 / 3 | 9 of 20: 0.450" in out
    # differences 0.3 and 0.0: mean 0.15, half-width t(0.975, 1) * sd / sqrt(2) = 12.706 * 0.2121 / 1.4142
    half_t = 12.7062 * math.sqrt(((0.3 - 0.15) ** 2 + (0.0 - 0.15) ** 2) / 1) / math.sqrt(2)
    assert f"mean +0.150 ± {half_t:.3f} [95% t, 2 seeds]" in out
    assert f"filtered alone won 4, unfiltered alone won 1 of 10; exact McNemar p = {2 * 6 / 32:.3f}" in out
    assert (
        "ppo seed 1, paired by episode: filtered alone won 0, unfiltered alone won 0 of 10; exact McNemar p = 1.000"
        in out
    )
    # each policy against its seed's warm start (5 of 10 on both seeds): filtered +0.1 / -0.2
    half_w = 12.7062 * math.sqrt(((0.1 + 0.05) ** 2 + (-0.2 + 0.05) ** 2) / 1) / math.sqrt(2)
    assert f"ppo_filtered − warm start, paired by seed (0, 1): +0.100 / -0.200; mean -0.050 ± {half_w:.3f}" in out
    assert "pool different seeds" not in out
    assert (tmp_path / "figures" / "paper_settings_curves.png").stat().st_size > 0


def test_report_says_when_rows_pool_different_seeds(benchmark, tmp_path, capsys):
    """A seed whose unfiltered run has not finished: its filtered run joins the pooled row but not the pairing."""
    write_seed(tmp_path, 0, [1, 1, 0, 0], [1, 0, 0, 0])
    write_seed(tmp_path, 1, [1, 1, 1, 0], [0, 0, 0, 0])
    (tmp_path / "seed1" / "ppo_unfiltered.json").unlink()
    benchmark.report(tmp_path, tmp_path / "figures")
    out = capsys.readouterr().out
    assert "the rows pool different seeds (warm: [0, 1]; ppo_filtered: [0, 1]; ppo_unfiltered: [0])" in out
    assert "ppo: filtered − unfiltered, paired by seed (0): +0.250; mean +0.250 (one seed: no t interval)" in out
    assert "ppo_unfiltered − warm start, paired by seed (0): -0.250; mean -0.250 (one seed: no t interval)" in out


def test_report_of_one_seed_gives_no_t_interval(benchmark, tmp_path, capsys):
    write_seed(tmp_path, 3, [1, 1, 0, 0], [1, 0, 0, 0])
    benchmark.report(tmp_path, tmp_path / "figures")
    assert "paired by seed (3): +0.250; mean +0.250 (one seed: no t interval)" in capsys.readouterr().out


def test_report_refuses_seeds_run_with_different_settings(benchmark, tmp_path):
    write_seed(tmp_path, 0, [1, 0], [0, 1])
    write_seed(tmp_path, 1, [1, 0], [0, 1], grpo_steps=12)
    with pytest.raises(SystemExit, match="grpo_steps"):
        benchmark.report(tmp_path, tmp_path / "figures")


def test_docs_quote_the_report_of_the_kept_stage_files(benchmark, tmp_path, capsys):
    """docs/real_model.md gives the paper-settings figures exactly as the report prints them from the stage files
    kept in benchmarks/results/paper_settings (table rows, paired differences, McNemar lines)."""
    root = Path(__file__).resolve().parent.parent
    benchmark.report(root / "benchmarks" / "results" / "paper_settings", tmp_path)
    printed = [
        line.strip()
        for line in capsys.readouterr().out.splitlines()
        if (line.startswith("| ") and not line.startswith("| policy")) or ("filtered" in line and ": " in line)
    ]
    assert any(line.startswith("| warm |") for line in printed)
    docs = (root / "docs" / "real_model.md").read_text()
    missing = [line for line in printed if line not in docs]
    assert not missing, f"docs/real_model.md does not quote these report lines: {missing}"


def test_method_page_and_readme_give_the_reports_pooled_figures(benchmark, tmp_path, capsys):
    """docs/method.md and the README's evidence paragraph quote each policy's pooled success with its Wilson interval,
    and method.md the paired difference, exactly as the report prints them from the kept stage files."""
    root = Path(__file__).resolve().parent.parent
    benchmark.report(root / "benchmarks" / "results" / "paper_settings", tmp_path)
    out = capsys.readouterr().out.splitlines()
    pooled = [
        line.split(" | ")[3] for line in out if line.startswith("| ") and not line.startswith(("| policy", "|---"))
    ]
    paired = [line.split("paired by seed ", 1)[1] for line in out if "filtered − unfiltered, paired by seed " in line]
    assert pooled and paired
    method = (root / "docs" / "method.md").read_text(encoding="utf-8")
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    assert [cell for cell in pooled if cell not in method] == []
    assert [line for line in paired if line not in method] == []
    assert [cell for cell in pooled if cell.split(": ", 1)[1] not in readme] == []
    # each arm against its warm start (mean ± half-width over the seeds), and each seed's McNemar p
    against_warm = [
        line.split("mean ", 1)[1].split(" [", 1)[0] for line in out if "− warm start, paired by seed" in line
    ]
    mcnemar = [line.rsplit("exact McNemar ", 1)[1] for line in out if "exact McNemar p = " in line]
    assert against_warm and mcnemar
    assert [figure for figure in against_warm + mcnemar if figure not in method] == []


def successes(evaluation: dict) -> int:
    """The episodes an evaluation won."""
    return round(evaluation["success"] * evaluation["episodes"])


def logged(run: dict, key: str) -> list[float]:
    """The values a stage file's per-step logs hold for `key` (steps that did not log it left out)."""
    return [float(row[key]) for row in run["logs"] if row.get(key) is not None]


def spoken(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`: a list as the docs write it."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def two_places(value: float) -> str:
    """`value` to two decimals, halves rounded up (2.625 -> 2.63), as the docs round."""
    return str(Decimal(repr(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def kept_runs(arms: tuple[str, ...]) -> dict[tuple[int, str], dict]:
    """{(seed, arm): stage file} from benchmarks/results/paper_settings, for every seed that finished all `arms`."""
    results = Path(__file__).resolve().parent.parent / "benchmarks/results/paper_settings"
    seeds = sorted(
        int(d.name.removeprefix("seed"))
        for d in results.glob("seed*")
        if all((d / f"{arm}.json").exists() for arm in arms)
    )
    return {
        (seed, arm): json.loads((results / f"seed{seed}" / f"{arm}.json").read_text())
        for seed in seeds
        for arm in arms
    }


def step_mean(run: dict, key: str) -> float:
    """The mean over the steps that logged `key`."""
    return sum(logged(run, key)) / len(logged(run, key))


def test_real_model_page_quotes_the_stage_files_per_step_figures():
    """docs/real_model.md's prose figures about the PPO runs (log-prob gap, token entropy, Retrieval-Acc, train
    time), recomputed here from the kept stage files' logs of every seed with both PPO runs."""
    root = Path(__file__).resolve().parent.parent
    runs = kept_runs(("ppo_filtered", "ppo_unfiltered"))
    seeds = sorted({seed for seed, _ in runs})
    assert len(seeds) >= 2

    gap_means = [v for run in runs.values() for v in logged(run, "sampling/sampling_logp_difference/mean")]
    gap_max = max(v for run in runs.values() for v in logged(run, "sampling/sampling_logp_difference/max"))
    entropy = {key: step_mean(run, "entropy") for key, run in runs.items()}
    first_turn = min(v for run in runs.values() for v in logged(run, "ragen2/mi/first_turn/retrieval_acc"))
    trajectory = min(v for run in runs.values() for v in logged(run, "ragen2/mi/trajectory/retrieval_acc"))
    page = " ".join((root / "docs" / "real_model.md").read_text(encoding="utf-8").split())
    assert f"at most {math.ceil(max(gap_means) * 1000) / 1000:.3f} nats" in page
    assert f"largest single token's {gap_max:.2f}" in page
    pairs = [f"{entropy[s, 'ppo_filtered']:.3f} against {entropy[s, 'ppo_unfiltered']:.3f} on seed {s}" for s in seeds]
    assert spoken(pairs) in page
    assert f"stayed at {first_turn:g} or above" in page
    assert f"Retrieval-Acc at {trajectory:g} or above" in page
    times = {
        arm: spoken([f"{runs[s, arm]['time_s']['train']:.0f} s" for s in seeds])
        for arm in ("ppo_filtered", "ppo_unfiltered")
    }
    assert (
        f"filtered runs trained in {times['ppo_filtered']}, the unfiltered ones in {times['ppo_unfiltered']}" in page
    )

    def mean(seed, key):
        return two_places(step_mean(runs[seed, "ppo_filtered"], key))

    def no_update_steps(seed):
        return int(sum(logged(runs[seed, "ppo_filtered"], "ragen2/filter/skipped_updates")))

    kept, zero = "ragen2/filter/kept_fraction", "ragen2/filter/zero_variance_groups"
    assert f"Seed 0's filtered run kept {mean(0, kept)} of the rollouts on average ({mean(0, zero)} of 4" in page
    assert f"seed 1's {mean(1, kept)} ({mean(1, zero)} of 4; at {no_update_steps(1)} of 24 steps every group" in page
    assert f"seed 2's {mean(2, kept)} ({mean(2, zero)} of 4; {no_update_steps(2)} steps without an update)" in page


def test_real_model_page_quotes_the_grpo_pairs_per_step_figures():
    """docs/real_model.md's prose about the GRPO pair (kept fraction, zero-variance groups, steps without an update,
    token entropy, Retrieval-Acc, log-prob gap, train time), recomputed from the kept stage files of every seed with
    both GRPO runs."""
    root = Path(__file__).resolve().parent.parent
    runs = kept_runs(("grpo_filtered", "grpo_unfiltered"))
    seeds = sorted({seed for seed, _ in runs})
    assert seeds
    page, readme, method = (
        " ".join((root / name).read_text(encoding="utf-8").split()).lower()
        for name in ("docs/real_model.md", "README.md", "docs/method.md")
    )
    for seed in seeds:
        filtered, unfiltered = runs[seed, "grpo_filtered"], runs[seed, "grpo_unfiltered"]
        warm_file = root / "benchmarks/results/paper_settings" / f"seed{seed}" / "warm.json"
        warm = json.loads(warm_file.read_text())["eval"]
        assert f"from seed {seed}'s warm start of {successes(warm)} of 96" in page
        assert f"on seed {seed} from a warm start at {warm['success']:.3f}" in readme
        assert f"warm start {successes(warm)} of 96; grpo filtered" in method
        margin = successes(filtered["eval"]) - successes(unfiltered["eval"])
        assert f"it was {'ahead' if margin > 0 else 'behind'} by {abs(margin)} episodes of 96" in method
        kept = two_places(step_mean(filtered, "ragen2/filter/kept_fraction"))
        zero = two_places(step_mean(filtered, "ragen2/filter/zero_variance_groups"))
        no_update = int(sum(logged(filtered, "ragen2/filter/skipped_updates")))
        assert f"seed {seed}'s filtered grpo run kept {kept} of the rollouts on average ({zero} of 4" in page
        assert f"{no_update} of 24 steps made no update" in page
        entropies = [f"{step_mean(run, 'entropy'):.3f}" for run in (filtered, unfiltered)]
        assert f"token entropy {entropies[0]} against {entropies[1]}" in page
        pair = (filtered, unfiltered)
        first = min(v for run in pair for v in logged(run, "ragen2/mi/first_turn/retrieval_acc"))
        whole = min(v for run in pair for v in logged(run, "ragen2/mi/trajectory/retrieval_acc"))
        assert (
            f"lowest first-turn retrieval-acc over both runs was {first:g} and the lowest whole-trajectory {whole:g}"
            in page
        )
        gap_mean = max(v for run in pair for v in logged(run, "sampling/sampling_logp_difference/mean"))
        gap_max = max(v for run in pair for v in logged(run, "sampling/sampling_logp_difference/max"))
        assert f"at most {math.ceil(gap_mean * 1000) / 1000:.3f} nats per step, {gap_max:.2f} for one token" in page
        train = [f"{run['time_s']['train']:.0f} s" for run in pair]
        assert f"trained in {train[0]} filtered and {train[1]} unfiltered" in page
