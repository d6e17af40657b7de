"""Run logs, figures and the JSONL callback: plotted data equal the logged values; missing data is reported."""

import json
import logging
import math

import pytest

from trl_ragen2.collapse.mi import DEFAULT_ENTROPY_THRESHOLD, DEFAULT_MI_THRESHOLD, REGIMES, reasoning_regime
from trl_ragen2.plots.figures import (
    MissingMetricsError,
    classify_run,
    plot_regimes,
    plot_run,
    plot_run_report,
    plot_training_curves,
    regime_thresholds,
)
from trl_ragen2.plots.panels import PANELS, Panel, Series
from trl_ragen2.runs.logs import RunLogsNotFoundError, env_names, load_run_logs, metric_series, read_log_file
from trl_ragen2.runs.tracking import MetricsJSONLCallback

from .run_histories import MI, REGIME_POINTS, make_history, write_state


def panel(figure, title):
    matches = [ax for ax in figure.axes if ax.get_title() == title]
    assert len(matches) == 1, [ax.get_title() for ax in figure.axes]
    return matches[0]


def line(ax, key):
    (match,) = [line for line in ax.get_lines() if line.get_gid() == key]
    return list(match.get_xdata()), list(match.get_ydata())


def test_metric_series_skips_missing_none_nan_and_orders_steps():
    records = [{"step": 3, "a": 1.0}, {"step": 1, "a": None}, {"step": 2, "a": math.nan}, {"step": 4}, {"a": 5.0}]
    records += [{"step": 5, "a": math.inf}, {"step": 6, "a": True}, {"step": 0, "a": 2}, {"step": 3, "a": 7.0}]
    # step 3 logged twice: the later value wins; a record without a step, inf and bool are skipped
    assert metric_series(records, "a") == ([0, 3], [2.0, 7.0])


def test_training_curves_plot_exactly_the_logged_values():
    history = make_history()
    figure = plot_training_curves(history)
    titles = {ax.get_title() for ax in figure.axes if ax.get_title()}
    assert titles == {
        "Reward",
        "Success rate",
        "SNR filter: kept fraction",
        "Retrieval accuracy",
        "MI-Est",
        "Entropy",
        "Step time",
    }  # no Episode return / Valid actions / MI-ZScore data -> no panel

    steps, values = line(panel(figure, "SNR filter: kept fraction"), "ragen2/filter/kept_fraction")
    expected = [s for s in range(1, 21) if s not in (3, 4)]  # None at 3, NaN at 4
    assert steps == expected and values == pytest.approx([1.0 - s / 40 for s in expected])

    success = panel(figure, "Success rate")
    assert line(success, "ragen2/env/sokoban/success_rate")[0] == [s for s in range(1, 21) if s != 7]
    assert line(success, "eval_ragen2/env/sokoban/success_rate") == ([10, 20], [0.3, 0.3])
    reward = panel(figure, "Reward")
    assert line(reward, "eval_reward") == ([10, 20], [0.5, 1.0])
    assert line(reward, "reward") == (list(range(1, 21)), pytest.approx([s / 10 for s in range(1, 21)]))
    (eval_line,) = [ln for ln in reward.get_lines() if ln.get_gid() == "eval_reward"]
    assert eval_line.get_linestyle() == "--" and eval_line.get_label() == "validation"
    assert line(panel(figure, "MI-Est"), f"{MI}/mi_est") == (sorted(REGIME_POINTS), [0.30, 0.01, 0.20, 0.00])
    assert line(panel(figure, "Entropy"), f"{MI}/cond_entropy")[1] == [1.2, 1.0, 0.2, 0.1]


def test_a_series_with_a_std_key_is_shaded_one_std_around_it_in_any_panel():
    history = [{"step": 1, "reward": 0.5, "reward_std": 0.25}, {"step": 2, "reward": 1.0}, {"step": 3, "reward": 0.0,
               "reward_std": 0.5}]  # fmt: skip
    (band,) = panel(plot_training_curves(history), "Reward").collections
    assert band.get_label() == "reward ± std"
    corners = {tuple(vertex) for vertex in band.get_paths()[0].vertices.tolist()}
    assert corners == {(1.0, 0.25), (1.0, 0.75), (3.0, -0.5), (3.0, 0.5)}  # mean ± std at steps 1 and 3 (2: no std)
    custom = Panel("Return", "return", "ret", lambda keys: [Series("ret", "return", std_key="ret_std")])
    renamed = [{"step": 1, "ret": 2.0, "ret_std": 1.0}, {"step": 2, "ret": 3.0, "ret_std": 1.0}]
    (band,) = plot_training_curves(renamed, panels=(custom,)).axes[0].collections  # keyed on the series, not a title
    assert band.get_label() == "ret ± std"


def test_alarm_marks_are_drawn_on_the_panels_that_ask_for_them_whatever_their_title():
    history = [{"step": step, "ret": 1.0, "ragen2/alarm/fired": float(step == 2)} for step in (1, 2, 3)]
    marked = Panel("Return", "return", "ret", lambda keys: [Series("ret", "return")], marks_alarms=True)
    plain = Panel("MI-Est", "nats/token", "ret", lambda keys: [Series("ret", "return")])  # a marked panel's title
    marked_ax, plain_ax = plot_training_curves(history, panels=(marked, plain)).axes
    marks = [ln for ln in marked_ax.get_lines() if ln.get_gid() == "collapse-alarm"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [2, 2]
    assert [ln.get_gid() for ln in plain_ax.get_lines()] == ["ret"]
    assert {p.title for p in PANELS if p.marks_alarms} == {"Retrieval accuracy", "MI-Est", "MI-ZScore", "Entropy"}


def test_pooled_env_and_ppo_panels_appear_only_when_they_add_something():
    one_env = [{"step": 1, "ragen2/env/sokoban/success_rate": 0.2, "ragen2/env/all/success_rate": 0.2}]
    assert env_names(one_env[0], "success_rate") == ["sokoban"]  # "all" would repeat sokoban
    two_envs = [{"step": 1, **one_env[0], "eval_ragen2/env/countdown/success_rate": 0.9}]
    assert env_names(two_envs[0], "success_rate") == ["all", "countdown", "sokoban"]
    ppo = [{"step": s, "ragen2/ppo/value_loss": 1.0 / s, "ragen2/ppo/explained_variance": None} for s in (1, 2)]
    figure = plot_training_curves(ppo)
    assert [ax.get_title() for ax in figure.axes] == ["PPO critic: value loss"]  # explained variance: all None
    assert line(figure.axes[0], "ragen2/ppo/value_loss") == ([1, 2], [1.0, 0.5])


def test_training_curves_without_any_metric_name_what_they_look_for():
    with pytest.raises(MissingMetricsError, match="ragen2/filter/kept_fraction"):
        plot_training_curves([{"step": 1, "loss": 0.3}, {"step": 2, "reward": None}])


def test_regime_plot_draws_the_run_path_coloured_by_step():
    figure = plot_regimes(make_history())
    ax = figure.axes[0]
    steps = sorted(REGIME_POINTS)
    entropy = [REGIME_POINTS[s][0] for s in steps]
    mi = [REGIME_POINTS[s][1] for s in steps]
    path = ax.lines[-1]  # after the two threshold lines
    assert list(path.get_xdata()) == entropy and list(path.get_ydata()) == mi
    scatter = ax.collections[-1]
    assert scatter.get_offsets().tolist() == [[x, y] for x, y in zip(entropy, mi, strict=True)]
    assert scatter.get_array().tolist() == steps  # colour = step, shown on the colour bar
    assert any(axis.get_ylabel() == "step" for axis in figure.axes[1:])
    vertical, horizontal = ax.lines[0], ax.lines[1]
    assert list(vertical.get_xdata()) == [DEFAULT_ENTROPY_THRESHOLD] * 2
    assert list(horizontal.get_ydata()) == [DEFAULT_MI_THRESHOLD] * 2
    assert ax.get_title().endswith("step 15): low-entropy collapse")


@pytest.mark.parametrize("scope", ["trajectory", "first_turn"])
def test_quadrant_labels_sit_in_the_quadrant_reasoning_regime_gives(scope):
    history = [
        {"step": s, f"ragen2/mi/{scope}/mi_est": mi, f"ragen2/mi/{scope}/cond_entropy": h}
        for s, (h, mi, _) in REGIME_POINTS.items()
    ]
    figure = plot_regimes(history, scope=scope)
    labels = [text for text in figure.axes[0].texts if text.get_gid() == "regime-label"]
    assert sorted(text.get_text() for text in labels) == sorted(REGIMES)
    for text in labels:
        x, y = text.get_position()
        assert reasoning_regime(y, x) == text.get_text()
    # and every known point is classified into the regime of its quadrant
    assert classify_run(history, scope) == [(s, regime) for s, (_, _, regime) in REGIME_POINTS.items()]


def test_regime_plot_with_another_proxy_uses_its_threshold():
    history = [
        {"step": 1, f"{MI}/mi_zscore": 3.0, f"{MI}/cond_entropy": 1.0},
        {"step": 5, f"{MI}/mi_zscore": 0.5, f"{MI}/cond_entropy": 0.9},
    ]
    with pytest.raises(ValueError, match="mi_threshold"):
        plot_regimes(history, proxy="mi_zscore")
    figure = plot_regimes(history, proxy="mi_zscore", mi_threshold=1.0)
    assert list(figure.axes[0].lines[1].get_ydata()) == [1.0, 1.0]
    assert classify_run(history, proxy="mi_zscore", mi_threshold=1.0) == [(1, REGIMES[0]), (5, REGIMES[1])]


def test_regime_thresholds_reject_unknown_keys():
    assert regime_thresholds() == (DEFAULT_MI_THRESHOLD, DEFAULT_ENTROPY_THRESHOLD)
    with pytest.raises(ValueError, match="proxy='mi'"):
        regime_thresholds(proxy="mi")
    with pytest.raises(ValueError, match="entropy_threshold"):
        regime_thresholds(entropy="cond_entropy_seq")
    with pytest.raises(ValueError, match="scope='turn'"):
        plot_regimes(make_history(), scope="turn")


def test_regime_plot_without_mi_names_the_keys():
    with pytest.raises(MissingMetricsError, match="ragen2/mi/first_turn/mi_est"):
        plot_regimes(make_history(), scope="first_turn")


def test_plot_run_writes_every_png_it_can(tmp_path, caplog):
    run = write_state(tmp_path / "run", make_history())
    with caplog.at_level(logging.WARNING, logger="trl_ragen2.plots.figures"):
        paths = plot_run(run)
    assert [p.name for p in paths] == ["training_curves.png", "regimes_trajectory.png"]
    for path in paths:
        assert path.parent == run / "plots"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    # the first-turn scope and panels without data are listed, not fatal
    assert "ragen2/mi/first_turn/mi_est" in caplog.text and "no MI-ZScore panel" in caplog.text
    assert "Episode return" not in caplog.text  # optional panels (env rollouts, PPO) are not reported


def test_plot_run_lists_missing_metrics_when_nothing_plots(tmp_path):
    run = write_state(tmp_path / "run", [{"step": 1, "loss": 0.2}, {"step": 1, "train_runtime": 3.0}])
    report = plot_run_report(run, tmp_path / "out")
    assert report.paths == [] and not (tmp_path / "out").exists()
    assert any("kept_fraction" in line for line in report.missing)
    assert any("ragen2/mi/trajectory/mi_est" in line for line in report.missing)


def test_running_run_reads_the_newest_checkpoint(tmp_path):
    history = make_history()
    run = tmp_path / "run"
    write_state(run / "checkpoint-9", [r for r in history if r["step"] <= 9])
    write_state(run / "checkpoint-12", [r for r in history if r["step"] <= 12])  # numerically newest, not lexically
    (run / "checkpoint-15").mkdir()  # being written: no trainer_state.json yet
    logs = load_run_logs(run)
    assert logs.source == run / "checkpoint-12" / "trainer_state.json" and logs.last_step == 12
    paths = plot_run(run, tmp_path / "plots")
    assert (tmp_path / "plots" / "training_curves.png") in paths


def test_live_jsonl_log_beats_a_stale_checkpoint_and_drops_replayed_steps(tmp_path):
    history = make_history()
    run = write_state(tmp_path / "run" / "checkpoint-5", [r for r in history if r["step"] <= 5]).parent
    lines = [json.dumps(r) for r in history if r["step"] <= 8]  # first attempt, crashed after step 8
    lines += [json.dumps(r) for r in history if 6 <= r["step"] <= 14]  # resumed from checkpoint-5
    lines.append('{"step": 15, "reward": 1.')  # the line being written right now
    (run / "metrics.jsonl").write_text("\n".join(lines))
    logs = load_run_logs(run)
    assert logs.source == run / "metrics.jsonl" and logs.last_step == 14
    assert [r["step"] for r in logs.records if "loss" in r] == list(range(1, 15))  # no step twice
    (run / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        read_log_file(run / "metrics.jsonl")


def test_missing_or_empty_run_errors_name_the_path_and_the_expected_files(tmp_path):
    with pytest.raises(RunLogsNotFoundError, match=r"nope does not exist.*trainer_state.json"):
        plot_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunLogsNotFoundError, match=r"no training logs in .*empty.*metrics.jsonl"):
        load_run_logs(tmp_path / "empty")
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    with pytest.raises(RunLogsNotFoundError, match="hold no records yet"):
        load_run_logs(tmp_path / "empty")


class _State:
    def __init__(self, step, main=True):
        self.global_step, self.is_world_process_zero = step, main


def test_jsonl_callback_appends_strict_json_on_the_main_process_only(tmp_path):
    import torch

    path = tmp_path / "logs" / "metrics.jsonl"
    callback = MetricsJSONLCallback(path)
    callback.on_log(None, _State(1), None, logs={"loss": torch.tensor(0.25), "kept": math.nan, "n": 3, "tag": "x"})
    callback.on_log(None, _State(1, main=False), None, logs={"loss": 9.0})  # another process: nothing
    callback.on_log(None, _State(2), None, logs={"eval_reward": math.inf, "reward": 0.5})
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "loss": 0.25, "kept": None, "n": 3, "tag": "x"},
        {"step": 2, "eval_reward": None, "reward": 0.5},
    ]
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()


def test_jsonl_callback_defaults_to_the_output_dir(tmp_path):
    class Args:
        output_dir = str(tmp_path / "run")

    callback = MetricsJSONLCallback()
    callback.on_train_begin(Args(), _State(0), None)
    callback.on_log(Args(), _State(3), None, logs={"reward": 1.0})
    assert read_log_file(tmp_path / "run" / "metrics.jsonl") == [{"step": 3, "reward": 1.0}]


def test_two_step_snr_training_with_the_callback_plots_the_kept_fraction(tmp_path, tiny_tokenizer):
    from datasets import Dataset

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.models.tiny import make_tiny_model

    from .scripted import parity_reward_for, script_generation

    # group rewards [0, a, 0, a]: variances 0, 1/3, 100/3, 0, so top-p 0.9 keeps only "P2:" (1 of 4 groups)
    amplitudes = {"P0:": 0.0, "P1:": 1.0, "P2:": 10.0, "P3:": 0.0}
    args = SNRFilteredGRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=16,  # one generation batch = 4 prompts x 4 rollouts
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        bf16=False,
        use_cpu=True,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=7,
    )
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward_for(amplitudes),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": list(amplitudes)}),
        processing_class=tiny_tokenizer,
        callbacks=[MetricsJSONLCallback()],
    )
    script_generation(trainer).train()

    run = tmp_path / "out"
    logs = load_run_logs(run)
    assert logs.source == run / "metrics.jsonl" and logs.last_step == 2
    assert metric_series(logs.records, "ragen2/filter/kept_fraction") == ([1, 2], [0.25, 0.25])
    report = plot_run_report(run)
    curves = run / "plots" / "training_curves.png"
    assert curves in report.paths and curves.stat().st_size > 0
    # the trainer's MI diagnostics ran at step 1, so the regime plots exist too
    assert {run / "plots" / f"regimes_{scope}.png" for scope in ("first_turn", "trajectory")} <= set(report.paths)
    figure = plot_training_curves(logs)
    assert line(panel(figure, "SNR filter: kept fraction"), "ragen2/filter/kept_fraction") == ([1, 2], [0.25, 0.25])
    assert not any("ragen2/mi/trajectory/mi_est" in note for note in report.missing)


def test_mi_panels_shade_intervals_chance_reach_and_mark_the_alarm():
    history = []
    for step in (1, 5, 10):
        history.append(
            {
                "step": step,
                f"{MI}/retrieval_acc": 0.6,
                f"{MI}/retrieval_acc_ci_low": 0.4,
                f"{MI}/retrieval_acc_ci_high": 0.8 if step != 5 else None,  # no band at step 5
                f"{MI}/retrieval_chance": 0.125,
                f"{MI}/retrieval_null_high": 0.25,
                f"{MI}/mi_est": 0.2,
                f"{MI}/mi_est_ci_low": 0.1,
                f"{MI}/mi_est_ci_high": 0.3,
                "ragen2/alarm/fired": float(step == 10),
                "ragen2/text/self_bleu_across": 0.1 * step,
            }
        )
    figure = plot_training_curves(history)
    retrieval = panel(figure, "Retrieval accuracy")
    bands = {c.get_gid(): c for c in retrieval.collections}
    interval = bands[f"{MI}/retrieval_acc:band"].get_paths()[0].vertices
    assert sorted({x for x, _ in interval}) == [1, 10]  # the steps with both edges
    assert {round(y, 6) for _, y in interval} == {0.4, 0.8}
    chance = bands[f"{MI}/retrieval_chance:band"].get_paths()[0].vertices
    assert {round(y, 6) for _, y in chance} == {0.125, 0.25}
    assert f"{MI}/mi_est:band" in {c.get_gid() for c in panel(figure, "MI-Est").collections}
    marks = [ln for ln in retrieval.get_lines() if ln.get_gid() == "collapse-alarm"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [10, 10]
    assert line(panel(figure, "Reasoning text"), "ragen2/text/self_bleu_across") == ([1, 5, 10], [0.1, 0.5, 1.0])


def test_gradient_report_figure_draws_norms_per_bucket_and_step(tmp_path):
    from trl_ragen2.plots.gradients import gradient_reports, plot_gradient_report

    history = [{"step": 1, "loss": 0.1}]
    for step in (1, 51):
        history.append(
            {
                "step": step,
                **{
                    f"ragen2/grad/bucket_{b}/{term}": b * step * scale
                    for b in (1, 2, 3)
                    for term, scale in (("task", 1.0), ("entropy", 0.1), ("reward_variance", 0.5))
                },
                "ragen2/grad/bucket_1/kl": None,
            }  # fmt: skip
        )
    reports = gradient_reports(history)
    assert sorted(reports) == [1, 51] and "kl" not in reports[1][1]
    figure = plot_gradient_report(history)
    task = panel(figure, "task gradient")
    assert line(task, "task@51") == ([1, 2, 3], [51.0, 102.0, 153.0])
    assert [t.get_text() for t in task.get_xticklabels()] == ["1\nRV 26", "2\nRV 51", "3\nRV 76"]
    assert panel(figure, "KL gradient (x beta in the update)").get_lines() == []
    assert plot_gradient_report([{"step": 1, "loss": 0.1}]) is None
    run = write_state(tmp_path / "run", make_history() + history[1:])
    assert "gradient_snr.png" in [p.name for p in plot_run(run)]
