"""The run folder's lifecycle, shared by the SNR trainers: one run per `output_dir`, resumes that are exact or refused,
and checkpoints that are complete before an older one is rotated away.

[`RunFolderMixin`] goes before a transformers `Trainer` in the bases (`class T(RunFolderMixin, GRPOTrainer)`) and
overrides `train`, `_save_checkpoint` and the three `_load_*` methods, each calling `super()`. A trainer names its own
state through three hooks, which the mixin calls at the right moments:

- `ragen2_state_files()`: the checkpoint files (relative paths) its resume needs beyond transformers';
- `save_ragen2_state(checkpoint_dir)`: write them (after transformers' checkpoint, before the completeness marker);
- `load_ragen2_state(checkpoint_dir)`: read them back (after the optimizer and scheduler), using
  [`RunFolderMixin.resume_file_present`] for each so a missing file is an error naming it.

The pure helpers (the lock, the marker, atomic writes, the resume checks) are in `trl_ragen2.runs.checkpoints`; the
mixin holds no state of its own beyond the lock it takes for the length of `train`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from transformers.trainer import OPTIMIZER_NAME, SCALER_NAME, SCHEDULER_NAME, TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from .checkpoints import (
    CheckpointError,
    OutputDirInUseError,
    RunLock,
    check_resume_checkpoint,
    load_errors_named,
    mark_complete,
    previous_run_files,
    remove_previous_run,
    resolve_resume,
    save_errors_named,
    start_checkpoint,
)
from .samples import SampleLogSettings


logger = logging.getLogger(__name__)


@dataclass
class RunFolderArguments:
    r"""
    One run per output_dir, and resumes that are exact or refused (`trl_ragen2.runs.checkpoints`); the sample log
    written into it (`trl_ragen2.runs.samples`).

    Parameters:
        overwrite_output_dir (`bool`, *optional*, defaults to `False`):
            A run that does not resume refuses an output_dir holding an earlier run's checkpoints or logs
            (`checkpoint-*`, `trainer_state.json`, `metrics.jsonl`); with `True` it removes them and starts over.
        resume_allow_missing_state (`bool`, *optional*, defaults to `False`):
            A resume from a checkpoint that is incomplete, or lacks state this run uses (optimizer, scheduler, RNG,
            filter, MI or critic state), is an error naming the file; with `True` it resumes with a warning, and
            what is missing starts from scratch (the run is then not the uninterrupted one).
        sample_log_groups (`int`, *optional*, defaults to `4`):
            The sample log (`<output_dir>/samples.jsonl`, read by `trl-ragen2 view`): at most this many prompt groups
            per logged step, with their prompt, every rollout's turns, rewards, variance and whether the filter kept
            them, plus the cross-scoring matrix of each MI-diagnosed step. `0` turns it off (the MI matrices too).
        sample_log_every_n_steps (`int`, *optional*, defaults to `5`):
            Log the groups at step 1 and every this many optimizer steps (the MI diagnostics' own schedule by
            default, so their steps have both).
        sample_log_text_limit (`int`, *optional*, defaults to `4000`):
            Each logged text is cut to this many characters (prompts and contexts keep their end).
    """

    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Remove an earlier run's checkpoints and logs from output_dir and start over."},
    )
    resume_allow_missing_state: bool = field(
        default=False,
        metadata={"help": "Resume from a checkpoint lacking some state (it starts from scratch) instead of failing."},
    )
    sample_log_groups: int = field(
        default=SampleLogSettings.groups,
        metadata={"help": "Prompt groups per logged step in samples.jsonl (0: no sample log)."},
    )
    sample_log_every_n_steps: int = field(
        default=SampleLogSettings.every_n_steps,
        metadata={"help": "Log sample groups at step 1 and every N optimizer steps."},
    )
    sample_log_text_limit: int = field(
        default=SampleLogSettings.text_limit,
        metadata={"help": "Characters kept of each text in the sample log."},
    )

    def sample_log_settings(self) -> SampleLogSettings:
        """The sample log's bounds (`trl_ragen2.runs.samples.SampleLogSettings`); raises naming a bad field."""
        try:
            return SampleLogSettings(self.sample_log_groups, self.sample_log_every_n_steps, self.sample_log_text_limit)
        except ValueError as error:
            raise ValueError(str(error).replace("sample log ", "sample_log_")) from None


class RunFolderMixin:
    """One run per output_dir, exact-or-refused resumes and complete checkpoints, for a transformers `Trainer`."""

    def ragen2_state_files(self) -> list[str]:
        """The trainer's own checkpoint files (relative paths) a resume needs; none by default."""
        return []

    def save_ragen2_state(self, checkpoint_dir: str) -> None:
        """Write the trainer's own state into a checkpoint folder; nothing by default."""

    def load_ragen2_state(self, checkpoint_dir: str) -> None:
        """Restore what `save_ragen2_state` wrote; nothing by default."""

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """transformers' `train`, with one run per output_dir and resumes that are exact or refused.

        While it trains, the run holds the output_dir's lock (`trl_ragen2.runs.checkpoints.RunLock`); a second run
        there is refused. A run that does not resume refuses a folder holding an earlier run's checkpoints or logs
        unless `overwrite_output_dir=True`. `resume_from_checkpoint=True`, `"true"` or `"latest"` is the latest
        complete checkpoint; any checkpoint resumed from must hold every state file this run uses
        ([`resume_state_files`]), unless `resume_allow_missing_state=True`.
        """
        lock = self._claim_output_dir(resume_from_checkpoint)
        try:
            resume = resolve_resume(resume_from_checkpoint, self.args.output_dir)
            if resume not in (None, False):
                check_resume_checkpoint(resume, self.resume_state_files(), self.args.resume_allow_missing_state)
            return super().train(
                resume_from_checkpoint=resume, trial=trial, ignore_keys_for_eval=ignore_keys_for_eval, **kwargs
            )
        finally:
            lock.release()

    def _claim_output_dir(self, resume_from_checkpoint) -> RunLock:
        """Take the output_dir's lock on the main process, and refuse (or clear, with `overwrite_output_dir`) an
        earlier run's files when not resuming; the outcome is shared, so every process stops together."""
        lock = RunLock(self.args.output_dir)
        error = None
        if self.args.should_save:
            try:
                lock.acquire()
                previous = previous_run_files(self.args.output_dir)
                if previous and resume_from_checkpoint in (None, False):
                    if self.args.overwrite_output_dir:
                        remove_previous_run(self.args.output_dir)
                    else:
                        raise OutputDirInUseError(
                            f"{self.args.output_dir} holds an earlier run ({', '.join(previous)}); pass "
                            "resume_from_checkpoint=True (--resume_from_checkpoint latest) to continue it, set "
                            "overwrite_output_dir=True to remove its checkpoints and logs and start over, or use "
                            "another output_dir"
                        )
            except OutputDirInUseError as raised:
                error = str(raised)
                lock.release()
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            error = broadcast_object_list([error])[0]
        if error is not None:
            raise OutputDirInUseError(error)
        return lock

    def resume_state_files(self) -> list[str]:
        """The files (relative to a checkpoint) a resume of this run needs: transformers' trainer state, optimizer,
        scheduler, scaler and RNG state, and the trainer's own (`ragen2_state_files`)."""
        files = [TRAINER_STATE_NAME, *self.ragen2_state_files()]
        if not self.args.save_only_model:
            if not (self.is_deepspeed_enabled or self.is_fsdp_enabled):  # those keep their own optimizer folders
                files += [OPTIMIZER_NAME, SCHEDULER_NAME]
            if getattr(self.accelerator, "scaler", None) is not None:
                files.append(SCALER_NAME)
            args = self.args
            files.append("rng_state.pth" if args.world_size <= 1 else f"rng_state_{args.process_index}.pth")
        return files

    def _save_checkpoint(self, model, trial):
        """TRL's checkpoint, then the RAGEN-2 state, then the completeness marker; only then the rotation.

        transformers deletes old checkpoints (`save_total_limit`) at the end of its own save, before the RAGEN-2
        state is written; the rotation is held back until this checkpoint is complete, so the last complete one is
        never deleted first.
        """
        checkpoint_dir = os.path.join(
            self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        )
        if self.args.should_save:
            start_checkpoint(checkpoint_dir)
        self.accelerator.wait_for_everyone()
        limit = self.args.save_total_limit
        self.args.save_total_limit = None
        try:
            with save_errors_named(checkpoint_dir):
                super()._save_checkpoint(model, trial)
                if self.args.should_save:
                    self.save_ragen2_state(checkpoint_dir)
        finally:
            self.args.save_total_limit = limit
        self.accelerator.wait_for_everyone()  # every process's files are written
        if self.args.should_save:
            with save_errors_named(checkpoint_dir):
                mark_complete(checkpoint_dir, self.state.global_step)
            rotate_checkpoints(
                self._get_output_dir(trial=trial),
                save_total_limit=limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        with load_errors_named(resume_from_checkpoint, "the model weights"):
            super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_rng_state(self, checkpoint):
        with load_errors_named(checkpoint, "the RNG state"):
            super()._load_rng_state(checkpoint)

    def _load_optimizer_and_scheduler(self, checkpoint):
        with load_errors_named(checkpoint, "the optimizer and scheduler"):
            super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.load_ragen2_state(checkpoint)

    def resume_file_present(self, path: str) -> bool:
        """Whether a state file to resume from exists; a missing one raises `CheckpointError` naming it, or with
        `resume_allow_missing_state=True` warns (that state then starts from scratch)."""
        if os.path.exists(path):
            return True
        if not self.args.resume_allow_missing_state:
            raise CheckpointError(
                f"cannot resume exactly: {path} is missing; resume from another checkpoint, or set "
                "resume_allow_missing_state=True to start that state from scratch"
            )
        logger.warning("resume_allow_missing_state=True: %s is missing; that state starts from scratch", path)
        return False
