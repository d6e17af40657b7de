"""`CollapseAlarm`: a `TrainerCallback` that warns when a run slides into template collapse, while it trains.

It feeds every log record to a [`~detector.CollapseDetector`] (MI-ZScore-EMA and retrieval above chance
fall significantly from their peak while the entropy stays up; see that module for the rule and its settings) and,
at each MI diagnostic, logs the detector's view under `ragen2/alarm/...`. When the alarm fires (once per run) it

- logs a warning with the numbers behind it (main process),
- sends an alert to the trackers the run reports to that have one: `wandb.Run.alert` and `trackio.alert`,
- writes a line on the model card (`Collapse alarm: ...`; also when it never fired),
- optionally stops training (`stop_training=True`) and/or saves a checkpoint at that step (`save_checkpoint=True`).

```python
from trl_ragen2 import CollapseAlarm

CollapseAlarm(scope="trajectory", min_drop=0.5, patience=2).attach(trainer)
trainer.train()
```

The detector needs the MI diagnostics (`SNRFilteredGRPOTrainer` runs them; for a plain `trl.GRPOTrainer` attach
`trl_ragen2.collapse.diagnostics.MIDiagnosticsCallback` too) and, for its significance tests, their intervals and
p-values (on by default). `attach` places the callback first, so the trackers and `metrics.jsonl` receive the
`ragen2/alarm/...` keys of the same log call; a callback passed through `callbacks=` runs after the trackers, which
then miss them (the `trainer_state.json` history still has them). On resume the detector replays the restored log
history, so it continues where it stopped; every process decides alike, alerts come from the main process only.
"""

from __future__ import annotations

import logging
import os

from transformers import TrainerCallback

from ..runs.keys import alarm_key
from .detector import AlarmUpdate, CollapseDetector


logger = logging.getLogger(__name__)

CARD_FIELD = "Collapse alarm"


def send_alerts(report_to, title: str, text: str) -> list[str]:
    """Alert the trackers in `report_to` that have a live run: wandb (`wandb.run.alert`) and trackio
    (`trackio.alert`). Returns the names of those alerted; a tracker that fails is logged, never raised."""
    report_to = [report_to] if isinstance(report_to, str) else list(report_to or [])
    wanted = {"wandb", "trackio"} if "all" in report_to else set(report_to)
    sent = []
    if "wandb" in wanted:
        try:
            import wandb

            if wandb.run is not None:
                wandb.run.alert(title=title, text=text, level=wandb.AlertLevel.WARN)
                sent.append("wandb")
        except Exception as error:  # an alert must never break training
            logger.warning("CollapseAlarm: the wandb alert failed: %r", error)
    if "trackio" in wanted:
        try:
            import trackio
            from trackio import context_vars

            if context_vars.current_run.get() is not None:
                trackio.alert(title=title, text=text, level=trackio.AlertLevel.WARN)
                sent.append("trackio")
        except Exception as error:
            logger.warning("CollapseAlarm: the trackio alert failed: %r", error)
    return sent


class CollapseAlarm(TrainerCallback):
    """Warn (and optionally stop or save) when MI falls significantly while entropy stays up.

    Args:
        scope, min_drop, pvalue, entropy_tolerance, patience, warmup, require, entropy_key:
            the detector's settings, see [`~detector.CollapseDetector`] (lower `min_drop` and `patience`,
            `require="either"` or a higher `pvalue` make it more sensitive; the reverse, fewer false alarms).
        stop_training (`bool`, defaults to `False`): stop training at the step the alarm fires.
        save_checkpoint (`bool`, defaults to `False`): save a checkpoint at that step.
        send_alerts (`bool`, defaults to `True`): alert the wandb / trackio run (when the run reports to them).
    """

    def __init__(
        self,
        *,
        stop_training: bool = False,
        save_checkpoint: bool = False,
        send_alerts: bool = True,
        **detector_settings,
    ):
        for name, value in (
            ("stop_training", stop_training),
            ("save_checkpoint", save_checkpoint),
            ("send_alerts", send_alerts),
        ):
            if not isinstance(value, bool):
                raise ValueError(f"CollapseAlarm.{name}={value!r} is invalid; pass True or False")
        try:
            self.detector = CollapseDetector(**detector_settings)
        except TypeError as error:
            raise ValueError(
                f"CollapseAlarm got an unknown setting ({error}); see CollapseDetector's arguments"
            ) from None
        except ValueError as error:
            raise ValueError(str(error).replace("CollapseDetector.", "CollapseAlarm.")) from None
        self.stop_training, self.save_checkpoint, self.send_alerts = stop_training, save_checkpoint, send_alerts
        self.alarm: AlarmUpdate | None = None  # the update at which the alarm fired
        self.alerted: list[str] = []
        self._watched = 0

    # -----------------------------------------------------------------------------------------------------------
    # Wiring

    def attach(self, trainer):
        """Register the callback first in `trainer`'s callbacks and add its line to the model card; returns it."""
        handler = trainer.callback_handler
        if self in handler.callbacks:
            handler.callbacks.remove(self)
        handler.callbacks.insert(0, self)  # before the trackers: they log the ragen2/alarm keys of the same call
        if isinstance(getattr(trainer, "model_card_details", None), dict):
            self._details = trainer.model_card_details  # SNRFiltered trainers print these on their card
        else:
            self._wrap_model_card(trainer)
        return trainer

    def _wrap_model_card(self, trainer) -> None:
        create_model_card = trainer.create_model_card
        alarm = self

        def create_model_card_with_alarm(*args, **kwargs):
            result = create_model_card(*args, **kwargs)
            path = os.path.join(trainer.args.output_dir, "README.md")
            if trainer.is_world_process_zero() and os.path.exists(path):
                with open(path, "a") as f:
                    f.write(f"\n- {CARD_FIELD}: {alarm.model_card_line()}\n")
            return result

        trainer.create_model_card = create_model_card_with_alarm

    def model_card_line(self) -> str:
        """What the model card says about the alarm."""
        settings = ", ".join(f"{key}={value}" for key, value in self.detector.settings.items())
        if self.alarm is None:
            return f"did not fire over {self._watched} MI diagnostics ({settings})"
        return f"{self.message(self.alarm)} ({settings})"

    def _update_card(self) -> None:
        details = getattr(self, "_details", None)
        if details is not None:
            details[CARD_FIELD] = self.model_card_line()

    # -----------------------------------------------------------------------------------------------------------
    # Events

    def on_train_begin(self, args, state, control, **kwargs):
        # A resumed run's history is restored before this event: replay it, silently, to rebuild the state.
        self.detector.reset()
        self.alarm, self._watched = None, 0
        for record in state.log_history:
            update = self.detector.update(record)
            if update is not None:
                self._watched += 1
                if update.fired:
                    self.alarm = update
        self._update_card()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        update = self.detector.update({**logs, "step": state.global_step})
        if update is None:
            return
        self._watched += 1
        values = {alarm_key(key): value for key, value in update.metrics().items()}
        logs.update(values)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(values)  # Trainer.log appended its copy before calling the callbacks
        if update.fired:
            self._fire(update, args, state, control)
        self._update_card()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._update_card()

    def message(self, update: AlarmUpdate) -> str:
        """One sentence with the numbers behind an alarm."""
        scope = self.detector.scope
        parts = [f"template collapse suspected at step {update.step} ({scope} scope): MI-ZScore-EMA"]
        parts.append(f"is {update.mi_drop:.0%} below its peak at step {update.peak_step}")
        if update.retrieval_drop == update.retrieval_drop:  # not NaN
            parts.append(f"and retrieval above chance {update.retrieval_drop:.0%} below its best")
        if update.entropy_ratio == update.entropy_ratio:
            parts.append(f"while the entropy stays at {update.entropy_ratio:.0%} of its value at the peak")
        return " ".join(parts)

    def _fire(self, update: AlarmUpdate, args, state, control) -> None:
        self.alarm = update
        text = self.message(update)
        if state.is_world_process_zero:
            actions = [name for name, on in (("stopping", self.stop_training), ("saving", self.save_checkpoint)) if on]
            logger.warning("CollapseAlarm: %s%s", text, f" ({', '.join(actions)})" if actions else "")
            if self.send_alerts:
                title = f"Template collapse suspected at step {update.step}"
                self.alerted = send_alerts(getattr(args, "report_to", None), title, text)
        if self.save_checkpoint:
            control.should_save = True
        if self.stop_training:
            control.should_training_stop = True
