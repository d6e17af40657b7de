"""The pre-registered analysis of the template-collapse experiment (`benchmarks/collapse_analysis.py`), checked against
tabulated quantiles and hand-computed values."""

import math
from pathlib import Path

import pytest

from .benchmark_scripts import load_benchmark


analysis = load_benchmark("collapse_analysis")


@pytest.mark.parametrize(
    "q, dof, tabulated",  # Student's t table (Abramowitz & Stegun 26.10), six decimals
    [(0.975, 29, 2.045230), (0.95, 9, 1.833113), (0.975, 4, 2.776445), (0.995, 1, 63.656741), (0.9, 60, 1.295821)],
)
def test_t_quantile_matches_the_table(q, dof, tabulated):
    assert analysis.t_quantile(q, dof) == pytest.approx(tabulated, abs=2e-6)
    assert analysis.t_cdf(tabulated, dof) == pytest.approx(q, abs=1e-6)


def test_t_cdf_is_symmetric_and_exact_for_one_dof():
    for t in (-3.0, -0.5, 0.0, 1.2, 7.0):
        assert analysis.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
        assert analysis.t_cdf(t, 7) + analysis.t_cdf(-t, 7) == pytest.approx(1.0, abs=1e-12)


def test_paired_by_hand():
    # differences 0.1, 0.3, 0.2 (seed 4 only in one arm, seed 5's NaN dropped): mean 0.2, sd 0.1, se 0.1/sqrt(3)
    a = {1: 1.1, 2: 1.3, 3: 1.2, 4: 9.0, 5: math.nan}
    b = {1: 1.0, 2: 1.0, 3: 1.0, 5: 1.0}
    c = analysis.paired(a, b)
    assert c.seeds == (1, 2, 3)
    assert c.mean == pytest.approx(0.2) and c.sd == pytest.approx(0.1)
    se = 0.1 / math.sqrt(3)
    assert c.t == pytest.approx(0.2 / se)
    assert c.ci95[0] == pytest.approx(0.2 - 4.302653 * se, abs=1e-6)  # t_{0.975, 2} = 4.302653
    assert c.ci90[1] == pytest.approx(0.2 + 2.919986 * se, abs=1e-6)  # t_{0.95, 2} = 2.919986
    # p = 2 (1 - F(3.4641, 2)); for 2 dof F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    t = 0.2 / se
    assert c.p == pytest.approx(2 * (0.5 - t / (2 * math.sqrt(2 + t * t))), rel=1e-9)


def test_holm_by_hand():
    adjusted = analysis.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})  # 3 * 0.01, max(2 * 0.03, 0.03), 0.04 -> 0.06
    assert analysis.holm({"a": 0.5, "b": 0.9}) == {"a": 1.0, "b": 1.0}


def _contrast(mean, half90, p, half95=None):
    half95 = half95 if half95 is not None else half90 * 1.2
    return analysis.Paired((), (), mean, 0.1, 0.0, p, (mean - half95, mean + half95), (mean - half90, mean + half90))


def _verdict(f_u, f_r, s_u, f_s, success):
    contrasts = {
        "filtered - unfiltered": f_u,
        "filtered - random_matched": f_r,
        "skip_matched - unfiltered": s_u,
        "filtered - skip_matched": f_s,
    }
    return analysis.verdict(contrasts, success)[0]


def test_verdict_rules_in_order():
    ok_success = _contrast(0.0, 0.02, 1.0)
    # refutes: F - U's 90% interval inside +-0.1, whatever else holds
    assert _verdict(_contrast(0.02, 0.05, 0.001), _contrast(0.3, 0.1, 0.001), _contrast(0.3, 0.1, 0.001),
                    _contrast(0.0, 0.1, 1.0), ok_success) == "refutes"  # fmt: skip
    # partial: skipping alone is significant and filtered - skip_matched contains 0
    assert _verdict(_contrast(0.3, 0.1, 0.001), _contrast(0.3, 0.1, 0.001), _contrast(0.25, 0.1, 0.001),
                    _contrast(0.05, 0.1, 0.4), ok_success) == "partial"  # fmt: skip
    # confirms: beats unfiltered and random, success non-inferior, and skipping does not explain it
    assert _verdict(_contrast(0.3, 0.1, 0.001), _contrast(0.2, 0.1, 0.001), _contrast(0.05, 0.1, 0.4),
                    _contrast(0.25, 0.1, 0.001), ok_success) == "confirms"  # fmt: skip
    # the same, with success 0.1 lower (90% interval below -0.05): not confirmed
    assert _verdict(_contrast(0.3, 0.1, 0.001), _contrast(0.2, 0.1, 0.001), _contrast(0.05, 0.1, 0.4),
                    _contrast(0.25, 0.1, 0.001), _contrast(-0.1, 0.02, 0.001)) == "inconclusive"  # fmt: skip
    # Holm: p = 0.03 alone would pass 0.05, but as the second smallest it becomes 2 * 0.03 = 0.06
    assert _verdict(_contrast(0.3, 0.25, 0.03), _contrast(0.2, 0.1, 0.001), _contrast(0.05, 0.1, 0.4),
                    _contrast(0.25, 0.1, 0.001), ok_success) == "inconclusive"  # fmt: skip


def test_seeds_needed_and_power_by_hand():
    # z_{1 - 0.05/6} = 2.39398, z_{0.8} = 0.84162: ((3.23560 * 0.18 / 0.1)^2 + 2.39398^2 / 2) = 33.92 + 2.87 -> 37
    assert analysis.seeds_needed(0.18, 0.1, 0.05 / 3) == 37
    assert analysis.seeds_needed(0.1, 0.1, 0.05) == 10  # (2.80170)^2 + 1.96^2 / 2 = 7.85 + 1.92 -> 10
    # power with the t critical value: 1 - Phi(t_{0.975, 29} - 0.1 sqrt(30) / 0.18) = 1 - Phi(2.04523 - 3.04290)
    assert analysis.power_at(30, 0.18, 0.1, 0.05) == pytest.approx(0.84087, abs=1e-4)


def test_run_endpoints_average_steps_25_to_50():
    mi = [[1, 2.0], [5, 1.9], [20, 9.0], [25, 1.0], [30, 1.2], [50, 1.4]]
    series = {
        "mi_est": mi,
        "retrieval_acc": [[1, 0.9], [25, 0.7], [50, 0.7]],
        "cond_entropy": [[1, 1.0], [25, 1.5], [50, 1.7]],
        "success": [[s, float(s > 40)] for s in range(1, 51)],
    }
    out = analysis.run_endpoints({"series": series})
    assert out["mi_est"] == pytest.approx(1.2)
    assert out["success"] == 1.0 and out["mi_est_step1"] == 2.0
    assert out["collapsed"] == 1.0  # Retrieval-Acc fell by 0.2, H(Z|X) rose
    series["cond_entropy"] = [[1, 2.0], [25, 1.5], [50, 1.7]]
    assert analysis.run_endpoints({"series": series})["collapsed"] == 0.0


ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "template_collapse_experiment.md"


def stored_report(folder: Path) -> tuple[str, str]:
    """A folder's stored report.txt: its command line and the output the command printed."""
    command, _, output = (folder / "report.txt").read_text().partition("\n")
    return command, output


@pytest.mark.parametrize(
    "name, arms, seeds, heading",
    [
        ("template_collapse_controlled", 6, 66, "## Results: the controlled experiment (seeds 5–70): "),
        ("template_collapse_recall", 4, 10, "## Results: the recall task (seeds 5–14): "),
    ],
)
def test_the_pre_registered_reports_of_the_stored_runs_are_the_stored_and_quoted_ones(
    capsys, name, arms, seeds, heading
):
    """The plan's report on the stored run files prints exactly the stored report.txt; the page quotes its summary
    lines (per-arm table, primary contrasts, power, verdict) and states its verdict in the heading."""
    template_collapse = load_benchmark("template_collapse")
    folder = RESULTS / name
    command, stored = stored_report(folder)
    assert command == f"$ python benchmarks/template_collapse.py --report benchmarks/results/{name}"
    numbers = template_collapse.report(str(folder))
    printed = capsys.readouterr().out
    assert printed.splitlines()[1:] == stored.splitlines()[1:]  # the first line names the folder as given
    counts = [len(arm["seeds"]) for arm in numbers["arms"].values()]  # the controlled one adds its reference cell
    assert counts.count(seeds) == arms
    page = PAGE.read_text()
    primary = (
        "  filtered - unfiltered  ",
        "  filtered - random",
        "  skip_matched - unfiltered  ",
        "power:",
        "verdict:",
    )
    quoted = [line for line in stored.splitlines() if line.startswith(primary)]
    assert len(quoted) == 5 and [line for line in quoted if line not in page] == []
    assert f"{heading}{numbers['verdict']}" in page


def test_the_pilot_sweep_tables_of_the_stored_runs_are_the_stored_ones(capsys, tmp_path):
    """`--pool` on the stored pilot runs prints the stored report.txt (every table the page's pilot section cites)."""
    template_collapse = load_benchmark("template_collapse")
    command, stored = stored_report(RESULTS / "template_collapse_pilot")
    assert command == "$ python benchmarks/template_collapse.py --pool benchmarks/results/template_collapse_pilot"
    template_collapse.main(["--pool", str(RESULTS / "template_collapse_pilot"), "--figures", str(tmp_path)])
    printed = capsys.readouterr().out
    assert printed.splitlines()[:-1] == stored.splitlines()[:-1]  # the last line names the figures' folder
    assert len(template_collapse.load_runs([str(RESULTS / "template_collapse_pilot")])) == 80
    # the figures the page's pilot section quotes (MI-Est and H(Z|X) at coefficients 0 and 0.1, the paired differences)
    quoted = ["0.882 ± 0.225", "0.951 ± 0.668", "1.206 ± 0.244", "1.191 ± 0.131", "2.296 ± 1.700", "2.535 ± 2.788",
              "1.219 ± 0.080", "1.230 ± 0.023", "0.303 ± 0.384", "0.163 ± 0.521"]  # fmt: skip
    page = PAGE.read_text()
    assert [q for q in quoted if q not in stored or q not in page] == []
