"""The pre-registered analysis of the template-collapse experiment (`benchmarks/collapse_analysis.py`), checked against
tabulated quantiles and hand-computed values."""

import math

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


def test_the_recall_report_on_the_stored_runs_is_what_the_page_quotes(capsys):
    """The report of the stored recall-task runs, line for line, is the one docs/template_collapse_experiment.md
    quotes, and its verdict is the one the page states."""
    from pathlib import Path

    template_collapse = load_benchmark("template_collapse")
    root = Path(__file__).resolve().parent.parent
    folder = root / "benchmarks" / "results" / "template_collapse_recall"
    numbers = template_collapse.report(str(folder))
    printed = capsys.readouterr().out
    page = (root / "docs" / "template_collapse_experiment.md").read_text()
    lines = [line for line in printed.splitlines()[1:] if line.strip()]  # the first line names the folder
    assert len(lines) > 20
    missing = [line for line in lines if line not in page]
    assert missing == [], missing
    assert len(numbers["arms"]) == 4 and all(len(arm["seeds"]) == 10 for arm in numbers["arms"].values())
    assert f"## Results: the recall task (seeds 5–14): {numbers['verdict']}" in page


def test_the_controlled_experiments_report_on_the_stored_runs_is_what_the_page_quotes(capsys):
    """The pre-registered analysis of the stored controlled-experiment runs, line for line, is the one the page
    quotes, with its verdict."""
    from pathlib import Path

    template_collapse = load_benchmark("template_collapse")
    root = Path(__file__).resolve().parent.parent
    numbers = template_collapse.report(str(root / "benchmarks" / "results" / "template_collapse_controlled"))
    printed = capsys.readouterr().out
    page = (root / "docs" / "template_collapse_experiment.md").read_text()
    lines = [line for line in printed.splitlines()[1:] if line.strip()]
    assert len(lines) > 80
    missing = [line for line in lines if line not in page]
    assert missing == [], missing
    assert all(len(numbers["arms"][arm]["seeds"]) == 66 for arm in template_collapse.ARMS)
    assert f"## Results: the controlled experiment (seeds 5–70): {numbers['verdict']}" in page
