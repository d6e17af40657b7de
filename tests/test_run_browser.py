"""The run browser's report (`trl_ragen2.browser`, `trl-ragen2 view`): its data equals the run's, model text stays
text, and bad or old run folders still give a page. The page in a real browser: `tests/test_run_browser_ui.py`."""

import base64
import hashlib
import json
import math
import re

import pytest
import torch

from trl_ragen2.browser.data import load_run, retrieval_view, spread, thin
from trl_ragen2.browser.page import SCRIPT
from trl_ragen2.browser.report import build_report, notebook_view, report_html
from trl_ragen2.cli import main
from trl_ragen2.collapse.mi import mi_metrics
from trl_ragen2.runs import keys
from trl_ragen2.runs.samples import SampleLogWriter

from .run_browser_helpers import INJECTED


DATA_BLOCK = re.compile(r'<script type="application/json" id="report-data">(.*?)</script>', re.DOTALL)


def embedded(page: str) -> dict:
    (block,) = DATA_BLOCK.findall(page)
    return json.loads(block)


def write_run(folder, steps=3, text="hello", metrics=True, samples=True):
    folder.mkdir(parents=True, exist_ok=True)
    if metrics:
        lines = [
            {"step": s, "reward": 0.1 * s, keys.mi_key("first_turn", "retrieval_acc"): 0.5}
            for s in range(1, steps + 1)
        ]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if samples:
        writer = SampleLogWriter(folder / keys.SAMPLES_FILE)
        turn = {"observation": text, "reasoning": text, "answer": text}
        for step in range(1, steps + 1):
            group = {"index": 0, "prompt": text, "rewards": [0.0, 1.0], "variance": 0.5, "kept": True,
                     "rollouts": [{"reward": 0.0, "turns": [turn]}, {"reward": 1.0, "turns": [turn]}]}  # fmt: skip
            matrix = {"logp": [[-1.0, -2.0], [None, -0.5]], "lengths": [2, 2], "target": [0, 1], "same": [[], []],
                      "chains": [text, text], "groups": [0, 0], "contexts": [text, text], "column_context": [0, 1]}  # fmt: skip
            writer.write(
                {"step": step, "num_groups": 1, "group_size": 2, "groups": [group], "mi": {"first_turn": matrix}}
            )
    return folder


# ---------------------------------------------------------------------------------------------------------------
# Model text is text


def test_model_text_cannot_leave_the_data_block_or_run(tmp_path):
    page = report_html(write_run(tmp_path / "run", text=INJECTED + "\u2028&amp;"))
    assert INJECTED not in page and "<img" not in page
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the data block and the page's own script
    data = embedded(page)  # the escapes decode back to the exact text
    assert data["runs"][0]["samples"][0]["groups"][0]["prompt"] == INJECTED + "\u2028&amp;"
    assert "innerHTML" not in SCRIPT and "insertAdjacentHTML" not in SCRIPT and "eval(" not in SCRIPT


def test_the_content_security_policy_allows_only_the_pages_own_script(tmp_path):
    page = report_html(write_run(tmp_path / "run"))
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert "default-src 'none'" in policy and f"script-src 'sha256-{digest}'" in policy
    assert f"<script>{SCRIPT}</script>" in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing from the network


# ---------------------------------------------------------------------------------------------------------------
# The MI view is the metric


@pytest.mark.parametrize("seed", range(6))
def test_retrieval_view_equals_mi_metrics_with_ties_identical_contexts_and_minus_inf(seed):
    generator = torch.Generator().manual_seed(seed)
    chains, columns = 12, 5
    logp = torch.randint(-4, 0, (chains, columns), generator=generator).double()  # few values: many ties
    logp[0, 3] = -math.inf
    target = torch.randint(0, columns, (chains,), generator=generator)
    logp[torch.arange(chains), target] = logp[torch.arange(chains), target].clamp(min=-3)
    same = torch.zeros(chains, columns, dtype=torch.bool)
    same[1, (target[1] + 1) % columns] = True  # a column holding chain 1's own context again
    rows = [[None if v == -math.inf else v for v in row] for row in logp.tolist()]
    view = retrieval_view(rows, target.tolist(), [row.nonzero().flatten().tolist() for row in same])
    expected = mi_metrics(logp, torch.ones(chains), target, same)["retrieval_acc"]
    assert sum(v["hit"] for v in view) / chains == pytest.approx(expected, abs=1e-12)
    for v, row, own in zip(view, logp, target.tolist(), strict=True):
        assert v["own"] == own and row[v["best"]] == row.max()


def test_page_of_the_real_run_has_the_trainers_kept_marks_and_logged_retrieval(tiny_browser_run):
    trainer, kept, out = tiny_browser_run
    run = embedded(report_html(out))["runs"][0]
    assert [rec["step"] for rec in run["samples"]] == sorted(kept)
    for rec in run["samples"]:
        assert {g["index"]: g["kept"] for g in rec["groups"]} == {
            g["index"]: kept[rec["step"]][g["index"]] for g in rec["groups"]
        }
        for scope, matrix in rec["mi"].items():
            logged = run["logged"][scope][str(rec["step"])]
            assert matrix["retrieval_acc"] == pytest.approx(logged, abs=1e-6)
    titles = [panel["title"] for panel in run["curves"]]
    assert "Reward" in titles and "Retrieval accuracy" in titles and run["regimes"]


# ---------------------------------------------------------------------------------------------------------------
# Old, live and damaged run folders


def test_an_old_run_without_a_sample_log_gives_curves_and_says_why_no_steps(tmp_path):
    folder = write_run(tmp_path / "old", samples=False)
    run = load_run(folder)
    assert run["samples"] == [] and run["curves"]
    assert any("no samples.jsonl" in note for note in run["notes"])


def test_a_run_in_progress_with_torn_last_lines_gives_a_page(tmp_path):
    folder = write_run(tmp_path / "live", steps=4)
    for name in ("metrics.jsonl", keys.SAMPLES_FILE):
        with open(folder / name, "ab") as f:
            f.write(b'{"step": 5, "reward": 0.')  # the lines being written right now
    run = load_run(folder)
    assert [rec["step"] for rec in run["samples"]] == [1, 2, 3, 4] and run["last_step"] == 4


def test_a_sample_log_alone_and_malformed_records_give_a_page(tmp_path):
    folder = write_run(tmp_path / "samples_only", metrics=False)
    with open(folder / keys.SAMPLES_FILE, "a") as f:
        f.write(json.dumps({"step": 9, "groups": "not a list", "mi": {"first_turn": {"logp": 3}}}) + "\n")
    run = load_run(folder)
    assert run["source"] is None and run["samples"][-1]["groups"] == [] and run["samples"][-1]["mi"] == {}
    assert main(["view", str(folder)]) == 0 and (folder / "report.html").is_file()


def test_an_empty_folder_is_an_error_naming_the_files(tmp_path, capsys):
    assert main(["view", str(tmp_path)]) == 1
    assert "samples.jsonl" in capsys.readouterr().err


def test_two_runs_are_compared_and_three_refused(tmp_path, capsys):
    a, b = write_run(tmp_path / "a" / "run"), write_run(tmp_path / "b" / "run", steps=2)
    out = tmp_path / "compare.html"
    assert main(["view", str(a), str(b), "--out", str(out)]) == 0
    runs = embedded(out.read_text())["runs"]
    assert len(runs) == 2 and runs[0]["name"] != runs[1]["name"]  # same folder name: the paths tell them apart
    assert main(["view", str(a), str(b), str(a)]) == 1


def test_long_runs_are_thinned_and_bounded(tmp_path):
    steps = list(range(10_000))
    values = [math.sin(s / 100) for s in steps]
    values[5_000] = 50.0  # a spike survives the thinning
    points = thin(steps, values, 1500)
    assert len(points) <= 1600 and [5_000, 50.0] in points and points[-1] == [9_999, values[-1]]
    assert spread(list(range(1, 1001)), 100)[0] == 1 and spread(list(range(1, 1001)), 100)[-1] == 1000
    folder = write_run(tmp_path / "long", steps=30)
    assert len(load_run(folder, max_sample_steps=7)["samples"]) == 7


def test_the_report_is_written_atomically_and_embeds_in_a_notebook(tmp_path):
    folder = write_run(tmp_path / "run")
    path = build_report(folder)
    assert path == folder / "report.html" and not list(folder.glob("*.tmp-*"))
    frame = notebook_view(folder).data
    assert frame.startswith('<div><iframe sandbox="allow-scripts"') and "<script" not in frame  # all of it escaped


def test_curves_carry_the_intervals_the_alarm_and_the_regime_plane(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    records = []
    for step in range(1, 6):
        record = {"step": step, keys.alarm_key("fired"): float(step == 4)}
        for name, value in (("mi_est", 0.2 / step), ("mi_est_ci_low", 0.1 / step), ("mi_est_ci_high", 0.3 / step),
                            ("cond_entropy", 1.0)):  # fmt: skip
            record[keys.mi_key("first_turn", name)] = value
        records.append(record)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = load_run(folder)
    assert run["alarms"] == [4]
    (panel,) = [p for p in run["curves"] if p["title"] == "MI-Est"]
    (line,) = panel["series"]
    assert panel["alarms"] and line["band"][0] == [1, 0.1, 0.3]
    (plane,) = run["regimes"]
    assert plane["scope"] == "first_turn" and plane["points"][0][:3] == [1, 1.0, 0.2]
    assert plane["points"][-1][3] == "template collapse"  # MI-Est 0.04 < 0.05 while H(Z|X) = 1 > 0.5
