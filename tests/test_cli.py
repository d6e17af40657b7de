"""The `trl-ragen2` command line: `plot` and `summary` on synthetic runs, in-process and as a subprocess; errors."""

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from trl_ragen2 import cli
from trl_ragen2.plots import figures

from .run_histories import REGIME_POINTS, make_history, write_state


@pytest.fixture
def run(tmp_path):
    return write_state(tmp_path / "run", make_history())


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "trl_ragen2.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_plot_subprocess_writes_pngs_and_prints_their_paths(run, tmp_path):
    result = run_cli("plot", run, "--out", tmp_path / "figs", "--scope", "trajectory", "--dpi", "50")
    assert result.returncode == 0, result.stderr
    paths = result.stdout.split()
    assert paths == [str(tmp_path / "figs" / "training_curves.png"), str(tmp_path / "figs" / "regimes_trajectory.png")]
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "note: training curves: no MI-ZScore panel" in result.stderr


def test_help_lists_the_subcommands():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "plot" in result.stdout and "summary" in result.stdout
    assert "--mi-threshold" in run_cli("plot", "--help").stdout


def test_console_script_is_declared():
    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "trl-ragen2"]
    assert script.value == "trl_ragen2.cli:main"


def test_plot_in_process_with_a_proxy_and_threshold(run, tmp_path, capsys):
    out = tmp_path / "figs"
    status = cli.main(
        ["plot", str(run), "--out", str(out), "--proxy", "mi_est", "--mi-threshold", "0.25", "--dpi", "50"]
    )
    assert status == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / "training_curves.png"), str(out / "regimes_trajectory.png")]


def test_plot_default_out_is_inside_the_run(run, capsys):
    assert cli.main(["plot", str(run), "--dpi", "50"]) == 0
    assert capsys.readouterr().out.split()[0] == str(run / "plots" / "training_curves.png")


def test_proxy_choices_match_the_plotting_module():
    assert cli.PROXY_CHOICES == tuple(figures.PROXIES)
    assert cli.ENTROPY_CHOICES == tuple(figures.ENTROPIES)


def test_summary_table_shows_last_and_best_values(run, capsys):
    assert cli.main(["summary", str(run)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:] if not line.startswith("regime")}
    # reward = step / 10 at steps 1..20: n=20, last 2 @20, mean 1.05, best 2 @20
    assert rows["reward"] == ["20", "2", "20", "1.05", "2", "20"]
    # kept fraction: None at 3, NaN at 4 -> 18 values, no "best" direction
    assert rows["ragen2/filter/kept_fraction"][:3] == ["18", "0.5", "20"] and rows["ragen2/filter/kept_fraction"][
        -2:
    ] == ["-", "-"]
    # step time: best is the minimum, 3.0 at step 1
    assert rows["step_time"][-2:] == ["3", "1"]
    assert rows["ragen2/mi/trajectory/mi_est"][-2:] == ["0.3", "1"]
    assert "regime (trajectory, step 15): low-entropy collapse" in out
    assert "last step 20" in out.splitlines()[0]


def test_summary_json(run, capsys):
    assert cli.main(["summary", str(run), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["last_step"] == 20 and summary["source"] == str(run / "trainer_state.json")
    success = summary["metrics"]["eval_ragen2/env/sokoban/success_rate"]
    assert success == {"count": 2, "last": 0.3, "last_step": 20, "mean": 0.3, "best": 0.3, "best_step": 10}
    assert summary["regimes"]["trajectory"]["regime"] == REGIME_POINTS[15][2]
    assert "first_turn" not in summary["regimes"]


def test_missing_directory_is_an_error_naming_the_path(tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    assert cli.main(["plot", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trl-ragen2 plot: error:") and str(missing) in err and "trainer_state.json" in err
    assert cli.main(["summary", str(missing)]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_directory_without_logs_is_an_error_listing_the_expected_files(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_cli("summary", tmp_path / "empty")
    assert result.returncode == 1
    assert (
        "no training logs in" in result.stderr and "metrics.jsonl" in result.stderr and "checkpoint-" in result.stderr
    )


def test_plot_with_nothing_to_draw_fails_with_the_notes(tmp_path, capsys):
    run = write_state(tmp_path / "run", [{"step": 1, "loss": 0.4}])
    assert cli.main(["plot", str(run)]) == 1
    err = capsys.readouterr().err
    assert "note: training curves: the logs hold none of the plotted metrics" in err
    assert "nothing to plot in" in err and not (run / "plots").exists()


def test_bad_options_fail_clearly(run, capsys):
    assert cli.main(["plot", str(run), "--proxy", "mi_zscore"]) == 1
    assert "pass mi_threshold (--mi-threshold)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["plot", str(run), "--scope", "turn"])
    assert exit_info.value.code == 2
    assert cli.main([]) == 2
