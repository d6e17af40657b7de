"""The collapse detector on constructed series with known answers, and `CollapseAlarm` in a real training loop."""

import logging
import math
import sys
import types

import pytest
from transformers import TrainerControl, TrainerState

from trl_ragen2.collapse.alarm import CollapseAlarm, send_alerts
from trl_ragen2.collapse.detector import CollapseDetector, first_alarm


PREFIX = "ragen2/mi/trajectory/"


def record(step, mi, entropy=1.5, retrieval=0.5, pvalue=0.001, half_width=0.2, **extra):
    """One diagnostic's log record: MI-ZScore-EMA with an interval, retrieval above chance with its p-value, H(Z|X)."""
    values = {
        "step": step,
        PREFIX + "mi_zscore_ema": mi,
        PREFIX + "mi_zscore_ema_ci_low": mi - half_width,
        PREFIX + "mi_zscore_ema_ci_high": mi + half_width,
        PREFIX + "retrieval_above_chance": retrieval,
        PREFIX + "retrieval_pvalue": pvalue,
        PREFIX + "cond_entropy": entropy,
    }
    values.update(extra)
    return values


def collapse_at(step_of_drop, steps=12, entropy_after=1.5, half_width=0.2):
    """MI-ZScore-EMA 2.0 and significant retrieval, then from `step_of_drop` on 0.4 and chance-level retrieval."""
    return [
        record(s, 2.0) if s < step_of_drop else record(s, 0.4, entropy_after, 0.02, 0.6, half_width)
        for s in range(1, steps + 1)
    ]


def test_fires_after_patience_consecutive_diagnostics_of_falling_mi_with_entropy_up():
    assert first_alarm(collapse_at(6), patience=2) == 7  # condition at 6 and 7
    assert first_alarm(collapse_at(6), patience=1) == 6
    assert first_alarm(collapse_at(6), patience=3) == 8


def test_no_alarm_on_a_healthy_run_or_when_entropy_falls_too():
    healthy = [record(s, 2.0 + 0.3 * math.sin(s)) for s in range(1, 30)]
    assert first_alarm(healthy) is None
    # MI and entropy fall together: low-entropy collapse, which entropy shows by itself
    assert first_alarm(collapse_at(6, entropy_after=0.5)) is None
    assert first_alarm(collapse_at(6, entropy_after=0.5), entropy_tolerance=0.0) == 7  # entropy ignored


def test_a_drop_inside_the_intervals_is_not_significant():
    # 2.0 -> 0.4 is an 80% drop, but with intervals +-1 the current and peak intervals overlap
    wide = [record(s, 2.0, half_width=1.0) for s in range(1, 6)]
    wide += [record(s, 0.4, retrieval=0.02, pvalue=0.6, half_width=1.0) for s in range(6, 12)]
    assert first_alarm(wide) is None
    assert first_alarm(wide, require="retrieval") == 7  # the retrieval test alone still sees it


def test_require_selects_the_signals():
    # MI-ZScore-EMA falls, retrieval stays significantly above chance
    mi_only = [record(s, 2.0) for s in range(1, 6)] + [record(s, 0.4) for s in range(6, 12)]
    assert first_alarm(mi_only) is None
    assert first_alarm(mi_only, require="either") == 7
    assert first_alarm(mi_only, require="mi_zscore_ema") == 7
    # retrieval falls but its p-value says it is still above chance: not a loss of significance
    still_significant = [record(s, 2.0) for s in range(1, 6)]
    still_significant += [record(s, 0.4, retrieval=0.1, pvalue=0.01) for s in range(6, 12)]
    assert first_alarm(still_significant, require="retrieval") is None


def test_warmup_min_drop_and_skipped_records():
    early = [record(1, 2.0), record(2, 0.4, retrieval=0.02, pvalue=0.6), record(3, 0.4, retrieval=0.02, pvalue=0.6)]
    assert first_alarm(early, warmup=3) is None
    assert first_alarm(early, warmup=1) == 3
    assert first_alarm(collapse_at(6), min_drop=0.9) is None  # 2.0 -> 0.4 is an 80% drop
    detector = CollapseDetector()
    assert detector.update({"step": 1, "loss": 0.3}) is None  # no diagnostic in this record
    assert detector.update(record(2, 1.0)) is not None
    assert detector.update(record(2, 1.0)) is None  # a replayed step
    assert detector.update({**record(3, 1.0), PREFIX + "mi_zscore_ema": None}) is None  # a NaN window


def test_update_reports_the_drops_and_the_entropy_ratio():
    detector = CollapseDetector(warmup=0, patience=1)
    detector.update(record(1, 2.0, entropy=2.0, retrieval=0.5))
    update = detector.update(record(2, 0.5, entropy=1.8, retrieval=0.1, pvalue=0.4))
    assert update.peak_step == 1 and update.fired and update.active
    assert update.metrics() == pytest.approx(
        {"active": 1.0, "fired": 1.0, "consecutive": 1.0, "mi_drop": 0.75, "retrieval_drop": 0.8, "entropy_ratio": 0.9}
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("scope", "all"),
        ("min_drop", 0.0),
        ("pvalue", 1.0),
        ("entropy_tolerance", 1.5),
        ("patience", 0),
        ("warmup", -1),
        ("require", "any"),
        ("entropy_key", "h"),
    ],
)
def test_settings_errors_name_the_field_and_value(field, value):
    with pytest.raises(ValueError, match=rf"CollapseDetector\.{field}={value!r} is invalid"):
        CollapseDetector(**{field: value})
    with pytest.raises(ValueError, match=rf"CollapseAlarm\.{field}={value!r} is invalid"):
        CollapseAlarm(**{field: value})
    with pytest.raises(ValueError, match=r"CollapseAlarm\.stop_training='yes' is invalid"):
        CollapseAlarm(stop_training="yes")


# ---------------------------------------------------------------------------------------------------------------
# Callback


class Args:
    report_to = ["wandb", "trackio"]


def test_callback_logs_alarm_keys_warns_alerts_and_sets_the_controls(monkeypatch, caplog):
    alerts = []
    fake_wandb = types.SimpleNamespace(
        run=types.SimpleNamespace(alert=lambda **kw: alerts.append(("wandb", kw))),
        AlertLevel=types.SimpleNamespace(WARN="WARN"),
    )
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb)
    import trackio
    from trackio import context_vars

    monkeypatch.setattr(trackio, "alert", lambda **kw: alerts.append(("trackio", kw)))
    token = context_vars.current_run.set(object())  # a live trackio run
    try:
        alarm = CollapseAlarm(stop_training=True, save_checkpoint=True)
        state, control = TrainerState(), TrainerControl()
        with caplog.at_level(logging.WARNING):
            for values in collapse_at(6, steps=8):
                state.global_step = values["step"]
                logs = {key: value for key, value in values.items() if key != "step"}
                state.log_history.append({**logs, "step": state.global_step})
                alarm.on_log(Args(), state, control, logs=logs)
                assert logs["ragen2/alarm/active"] == float(values["step"] >= 7)  # the keys join the same record
                assert state.log_history[-1]["ragen2/alarm/fired"] == float(values["step"] == 7)
                assert control.should_training_stop == (values["step"] >= 7)
    finally:
        context_vars.current_run.reset(token)
    assert control.should_save
    assert [name for name, _ in alerts] == ["wandb", "trackio"]
    assert alerts[0][1]["title"] == "Template collapse suspected at step 7" and alerts[0][1]["level"] == "WARN"
    assert "80% below its peak at step 1" in alerts[1][1]["text"]
    assert caplog.text.count("template collapse suspected at step 7") == 1
    assert "stopping, saving" in caplog.text
    assert alarm.model_card_line().startswith("template collapse suspected at step 7")


def test_alerts_skip_trackers_without_a_run_and_survive_their_failures(monkeypatch, caplog):
    def broken(**kwargs):
        raise RuntimeError("network down")

    monkeypatch.setitem(
        sys.modules, "wandb", types.SimpleNamespace(run=types.SimpleNamespace(alert=broken), AlertLevel=Args)
    )
    with caplog.at_level(logging.WARNING):
        assert send_alerts(["wandb", "trackio", "tensorboard"], "t", "x") == []  # trackio: no current run
    assert "the wandb alert failed" in caplog.text
    assert send_alerts("none", "t", "x") == []


def test_replaying_a_resumed_history_keeps_the_alarm_fired_once():
    alarm = CollapseAlarm()
    state = TrainerState()
    state.log_history = collapse_at(6, steps=9)
    alarm.on_train_begin(Args(), state, TrainerControl())
    assert alarm.alarm is not None and alarm.alarm.step == 7 and alarm._watched == 9
    state.global_step = 10
    logs = {k: v for k, v in record(10, 0.4, retrieval=0.02, pvalue=0.6).items() if k != "step"}
    alarm.on_log(Args(), state, TrainerControl(), logs=logs)
    assert logs["ragen2/alarm/active"] == 1.0 and logs["ragen2/alarm/fired"] == 0.0  # no second firing


def test_alarm_in_a_real_training_loop_stops_saves_and_signs_the_model_card(tmp_path, tiny_tokenizer):
    """An SNR-filtered GRPO run whose MI diagnostics are scripted to collapse at step 4: the alarm fires at step 5,
    training stops there with a checkpoint, the trackers' JSONL log has the alarm keys, the card says so."""
    import json

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.models.tiny import make_tiny_model
    from trl_ragen2.runs.tracking import MetricsJSONLCallback

    from .scripted import AMPLITUDES, dataset, parity_reward_for, script_generation, tiny_trainer_args

    args = tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, max_steps=10, mi_every_n_steps=1, save_strategy="no")
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward_for(AMPLITUDES),
        args=args,
        train_dataset=dataset(list(AMPLITUDES) * 4),
        processing_class=tiny_tokenizer,
        callbacks=[MetricsJSONLCallback()],
    )
    script_generation(trainer)

    def scripted_diagnostics(trainer_, rows, batch):
        step = trainer_.state.global_step + 1
        values = {k: v for k, v in (collapse_at(4, steps=10)[step - 1]).items() if k != "step"}
        for key, value in values.items():
            trainer_._metrics["train"][key].append(value)
        return values

    trainer.mi_diagnostics.on_batch = scripted_diagnostics
    alarm = CollapseAlarm(stop_training=True, save_checkpoint=True, warmup=2)
    assert alarm.attach(trainer) is trainer and trainer.callback_handler.callbacks[0] is alarm
    trainer.train()
    assert trainer.state.global_step == 5
    assert (tmp_path / "out" / "checkpoint-5").is_dir()
    lines = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    fired = [line["step"] for line in lines if line.get("ragen2/alarm/fired") == 1.0]
    assert fired == [5]
    card = (tmp_path / "out" / "README.md").read_text()  # written with the checkpoint
    assert "Collapse alarm: template collapse suspected at step 5" in card


def test_plain_trainers_get_the_line_appended_to_their_card(tmp_path):
    class PlainTrainer:  # the parts of a trl.GRPOTrainer that attach() uses
        args = types.SimpleNamespace(output_dir=str(tmp_path))
        callback_handler = types.SimpleNamespace(callbacks=["default flow", "trackers"])

        def create_model_card(self, model_name=None):
            (tmp_path / "README.md").write_text("# card\n")

        def is_world_process_zero(self):
            return True

    trainer = PlainTrainer()
    alarm = CollapseAlarm()
    alarm.attach(trainer)
    assert trainer.callback_handler.callbacks == [alarm, "default flow", "trackers"]
    trainer.create_model_card(model_name="m")
    assert (tmp_path / "README.md").read_text().startswith("# card\n\n- Collapse alarm: did not fire over 0 MI")
