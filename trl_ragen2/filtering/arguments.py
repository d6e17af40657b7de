"""`SNRFilterArguments`: the filter's settings (`reward_variance_*`), shared by the GRPO and PPO configs, with their
validation. Each is read by the filter's code in this package: the selection rules (`selection`, `ablations`), the
keep-rate control (`keep_rate`), the control arms (`controls`) and the trainer's filtering steps.

The fields carry the names of TRL's open pull request #7242 (`reward_variance_*`), so a config moves between the two
unchanged. `FILTER_RULES` is the one tuple of rule names; the modules and the trainer import their names from here or
from the module that defines the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .controls import CONTROLS
from .group_metrics import RANKING_METRICS
from .keep_rate import AUTO, AUTO_OFF_BELOW, AUTO_ON_ABOVE, AUTO_SMOOTHING, SCHEDULES, KeepRateControl
from .selection import SCORE_METRICS, SELECTION_EPS_MODES, STRATEGIES, TOP_P_MODES, check_top_k


LOSS_SCALINGS = ("none", "linear", "sqrt")
# The rule that keeps rollouts, not groups (Table 7's control): every group, its most spread rewards.
WITHIN_GROUP = "within_group"
# Every value of `reward_variance_filtering` but None: the group rules, the auto switch and the rollout rule.
FILTER_RULES = (*STRATEGIES, AUTO, WITHIN_GROUP)


class IntOrFraction:
    """Command-line type of `reward_variance_top_k`: `"4"` reads as the int 4 (a number of groups), `"0.25"` and
    `"1.0"` as floats (fractions of the groups). Values that are not text (Python, YAML) pass through unchanged."""

    def __new__(cls, value):
        if not isinstance(value, str):
            return value
        try:
            return int(value)
        except ValueError:
            return float(value)  # argparse reports a ValueError as an invalid value of the flag


@dataclass
class SNRFilterArguments:
    r"""
    RAGEN-2 SNR-aware filtering (arXiv 2604.06268, §3.3), shared by the GRPO and PPO variants.

    Before each policy update the prompt groups are ranked by their within-prompt reward variance, and only the
    top groups are trained on; the rows of the other groups are dropped from the batch, so the loss spends no
    forward or backward pass on them (TRL's scoring passes skip them too when the rewards come from rollout
    fields; see `docs/filtering.md`).

    Parameters:
        reward_variance_filtering (`str` or `None`, *optional*, defaults to `"top_p"`):
            Selection rule: `"top_p"` (keep the groups holding a `reward_variance_top_p` share of the variance
            mass, the paper's method), `"top_k"` or `"min_p"`. `"auto"` (beyond the paper) applies `"top_p"` while
            the smoothed Std/Mean of the per-group reward std is high and keeps every group while it is low (see
            `reward_variance_auto_on_above`). The paper's ablations: `"percentile_range"` (Table 6: the groups whose
            rank falls in the band `reward_variance_percentile_low` to `reward_variance_percentile_high`) and
            `"within_group"` (Table 7: every group, but only `reward_variance_within_group_ratio` of its rollouts,
            those whose rewards vary most). `None` disables filtering: the trainer then behaves exactly like its
            TRL parent (on a command line or in YAML, `None`, `none` or `null`).
        reward_variance_top_p (`float`, *optional*, defaults to `0.9`):
            Mass share rho kept by `"top_p"` (and `"auto"` while on), in (0, 1]; a schedule's start value. The
            paper uses rho = 0.9 and finds 0.8-0.98 best; 1.0 keeps every candidate (RAGEN's "no filtering" value).
        reward_variance_top_k (`int`, `float` or `None`, *optional*, defaults to `None`):
            For `"top_k"`: an int is a number of groups (RAGEN's `top_k_abs`), a float in (0, 1] a fraction of the
            groups, `int(k * P)` of them (RAGEN's `top_k`; `1.0` keeps them all). At least one candidate is kept.
            On the command line `4` is a count and `0.25` or `1.0` a fraction. Table 9 ablates 0.25 and 0.5.
        reward_variance_min_p (`float` or `None`, *optional*, defaults to `None`):
            For `"min_p"`, in [0, 1]: keep the groups scoring at least this share of the best group (with
            `reward_variance_largest=False`: at most the smallest score divided by it). Table 9 ablates 0.05 and 0.2.
        reward_variance_top_p_mode (`str`, *optional*, defaults to `"linear"`):
            `"linear"` (the paper's cumulative-mass rule) or `"softmax"` (RAGEN's release scripts: cumulative
            softmax probability of the scores).
        reward_variance_metric (`str`, *optional*, defaults to `"variance"`):
            Group score: `"variance"` (unbiased sample variance, the paper) or `"std"` (RAGEN's released code).
            The ranking is the same; the top-p mass and min-p threshold differ. RAGEN's other ranking metrics:
            `"reward"` (mean reward), `"reward_sum"`, `"entropy"` (mean of the rollouts' mean token entropy),
            `"entropy_variance"` (its std over the group) and `"length"` (mean loss-token count); the entropy
            metrics cost one forward pass over the pre-filter batch.
        reward_variance_include_zero (`bool`, *optional*, defaults to `False`):
            Keep zero-variance groups among the candidates (RAGEN's main-table runs: `True`; its README and the
            top-p sweeps: `False`).
        reward_variance_selection_eps (`float`, *optional*, defaults to `0.01`):
            Margin eps subtracted from the linear top-p threshold (RAGEN's `rollout_filter_selection_eps`), measured
            as `reward_variance_selection_eps_mode` says.
        reward_variance_selection_eps_mode (`str`, *optional*, defaults to `"relative"`):
            `"relative"`: the margin is eps times the candidates' summed score, so the threshold is
            `(rho - eps) * sum` and the rule is the same on every reward scale (eps must be below rho).
            `"absolute"` (RAGEN's, set by the paper configs): the margin is eps in score units, threshold
            `rho * sum - eps`, so a batch whose scores sum to at most `eps / rho` keeps nothing (0.011 at the
            defaults: 8 groups whose rewards have a std below 0.037 each).
        reward_variance_largest (`bool`, *optional*, defaults to `True`):
            `False` keeps the lowest-variance groups instead: the paper's "keep smallest" ablation (Table 9).
        reward_variance_loss_scaling (`str`, *optional*, defaults to `"none"`):
            Multiply the loss by `"linear"`: the kept fraction of groups, `"sqrt"`: its square root, or `"none"`
            (RAGEN's released runs; the paper's text scales by rho).
        reward_variance_percentile_low (`float`, *optional*, defaults to `0.0`):
            For `"percentile_range"`: the band's start, a share of the ranked candidate groups (rank 0 = highest
            score). Table 6's quartiles: 0, 0.25, 0.5, 0.75.
        reward_variance_percentile_high (`float`, *optional*, defaults to `1.0`):
            For `"percentile_range"`: the band's end (excluded), above `reward_variance_percentile_low`, at most 1.
        reward_variance_within_group_ratio (`float` or `None`, *optional*, defaults to `None`):
            For `"within_group"`, in (0, 1]: each group keeps `max(1, round(ratio * num_generations))` rollouts.
            Their advantages are computed over the kept rollouts of the group, as RAGEN does.
        reward_variance_empty_patience (`int`, *optional*, defaults to `5`):
            Stop training after this many consecutive generation steps in which no group was kept (RAGEN's
            `rollout_filter_empty_stop_steps`). `0` never stops.
        reward_variance_control (`str` or `None`, *optional*, defaults to `None`):
            A control arm for experiments on the filter (`docs/filtering.md`, "Control arms"): the configured rule
            still decides on each batch, then `"random_matched"` keeps as many groups as it chose but drawn
            uniformly at random (seeded by `seed`, the same on every process), and `"skip_matched"` keeps every
            group on the steps where it kept at least one and none where it kept none. `None`: the rule's choice.

        > Beyond the paper: keep-rate schedule, auto switch and guard (`docs/filtering.md`, "Keep-rate control").
        > Steps are optimizer steps, as in `max_steps` and `warmup_steps`: the batch made after n optimizer steps
        > uses the values of step n. With several optimizer steps per generation the filter runs once per
        > generation, at its first optimizer step.

        reward_variance_top_p_schedule (`str`, *optional*, defaults to `"constant"`):
            How rho moves for `"top_p"` and `"auto"`: `"constant"` (always `reward_variance_top_p`), `"linear"` or
            `"cosine"` (from `reward_variance_top_p` to `reward_variance_top_p_end` over
            `reward_variance_schedule_steps` steps after the warm-up, then constant).
        reward_variance_top_p_end (`float` or `None`, *optional*, defaults to `None`):
            Final rho of a `"linear"` or `"cosine"` schedule, in (0, 1].
        reward_variance_schedule_steps (`int`, *optional*, defaults to `0`):
            Optimizer steps the schedule takes to reach `reward_variance_top_p_end` (>= 1 for a schedule).
        reward_variance_warmup_steps (`int`, *optional*, defaults to `0`):
            The first this many optimizer steps train on every group (zero-variance ones too), like no filtering.
        reward_variance_auto_on_above (`float`, *optional*, defaults to `0.8`):
            `"auto"`: the filter turns on when the smoothed Std/Mean reaches this value (Table 8: Sokoban, 1.16-1.29,
            gained from filtering).
        reward_variance_auto_off_below (`float`, *optional*, defaults to `0.5`):
            `"auto"`: the filter turns off when the smoothed Std/Mean falls below this value (Table 8: FrozenLake,
            0.33, lost). At most `reward_variance_auto_on_above`; the gap is the hysteresis.
        reward_variance_auto_smoothing (`float`, *optional*, defaults to `0.5`):
            `"auto"`: decay of the moving average of Std/Mean, in [0, 1) (`0` uses each batch's value alone).
        reward_variance_min_kept_fraction (`float`, *optional*, defaults to `0.0`):
            Exploration guard: keep at least `ceil(f * P)` of the P groups, adding the next groups of the rule's
            ranking (highest variance first). Zero-variance groups are added only with
            `reward_variance_include_zero=True`, so a batch without reward variance can still be an empty step.
    """

    reward_variance_filtering: str | None = field(
        default="top_p",
        metadata={
            "help": "Selection rule: 'top_p' (the paper), 'top_k', 'min_p', 'auto' (top_p switched on and off from "
            "the Std/Mean of the group reward std), 'percentile_range' or 'within_group' (the paper's Table 6 and 7 "
            "ablations), or None to disable filtering."
        },
    )
    reward_variance_top_p: float = field(
        default=0.9, metadata={"help": "Variance-mass share rho kept by 'top_p', in (0, 1]. Paper: 0.9."}
    )
    reward_variance_top_k: IntOrFraction | None = field(
        default=None,
        metadata={"help": "For 'top_k': an int is a number of groups, a float in (0, 1] a fraction (1.0: all)."},
    )
    reward_variance_min_p: float | None = field(
        default=None, metadata={"help": "For 'min_p': keep groups scoring >= this share of the best, in [0, 1]."}
    )
    reward_variance_top_p_mode: str = field(
        default="linear", metadata={"help": "'linear' (the paper's cumulative mass) or 'softmax' (RAGEN scripts)."}
    )
    reward_variance_metric: str = field(
        default="variance",
        metadata={
            "help": "Group score: 'variance' (the paper), 'std' (RAGEN's code), or RAGEN's 'reward', 'reward_sum', "
            "'entropy', 'entropy_variance', 'length'."
        },
    )
    reward_variance_include_zero: bool = field(
        default=False, metadata={"help": "Keep zero-variance groups among the candidates."}
    )
    reward_variance_selection_eps: float = field(
        default=0.01, metadata={"help": "Margin subtracted from the linear top-p threshold (RAGEN: 0.01, absolute)."}
    )
    reward_variance_selection_eps_mode: str = field(
        default="relative",
        metadata={
            "help": "How the margin is measured: 'relative' (a share of the summed group scores, any reward scale) "
            "or 'absolute' (RAGEN's, in score units; the paper configs)."
        },
    )
    reward_variance_largest: bool = field(
        default=True, metadata={"help": "False keeps the lowest-variance groups (the paper's ablation)."}
    )
    reward_variance_loss_scaling: str = field(
        default="none",
        metadata={"help": "Scale the loss by the kept fraction: 'none' (RAGEN runs), 'linear' or 'sqrt'."},
    )
    reward_variance_percentile_low: float = field(
        default=0.0, metadata={"help": "'percentile_range': start of the rank band, in [0, 1) (rank 0: highest)."}
    )
    reward_variance_percentile_high: float = field(
        default=1.0, metadata={"help": "'percentile_range': end of the rank band (excluded), in (low, 1]."}
    )
    reward_variance_within_group_ratio: float | None = field(
        default=None, metadata={"help": "'within_group': share of each group's rollouts kept, in (0, 1]."}
    )
    reward_variance_empty_patience: int = field(
        default=5, metadata={"help": "Stop after this many consecutive empty filter steps (0: never)."}
    )
    reward_variance_control: str | None = field(
        default=None,
        metadata={
            "help": "Control arm: 'random_matched' (as many groups as the rule keeps, drawn at random) or "
            "'skip_matched' (every group on the steps where the rule keeps any, none elsewhere); None: the rule."
        },
    )
    reward_variance_top_p_schedule: str = field(
        default="constant",
        metadata={"help": "rho over training: 'constant', 'linear' or 'cosine' (to reward_variance_top_p_end)."},
    )
    reward_variance_top_p_end: float | None = field(
        default=None, metadata={"help": "Final rho of a 'linear' or 'cosine' schedule, in (0, 1]."}
    )
    reward_variance_schedule_steps: int = field(
        default=0, metadata={"help": "Optimizer steps from reward_variance_top_p to reward_variance_top_p_end."}
    )
    reward_variance_warmup_steps: int = field(
        default=0, metadata={"help": "Optimizer steps at the start that train on every group (filter off)."}
    )
    reward_variance_auto_on_above: float = field(
        default=AUTO_ON_ABOVE, metadata={"help": "'auto': filter on when smoothed Std/Mean >= this (Table 8)."}
    )
    reward_variance_auto_off_below: float = field(
        default=AUTO_OFF_BELOW, metadata={"help": "'auto': filter off when smoothed Std/Mean < this (Table 8)."}
    )
    reward_variance_auto_smoothing: float = field(
        default=AUTO_SMOOTHING, metadata={"help": "'auto': moving-average decay of Std/Mean, in [0, 1)."}
    )
    reward_variance_min_kept_fraction: float = field(
        default=0.0, metadata={"help": "Keep at least this share of the groups, highest variance first, in [0, 1]."}
    )

    def validate_reward_variance_fields(self) -> None:
        """Raise a `ValueError` naming the field, its value and the fix for any invalid `reward_variance_*` field."""
        strategy = self.reward_variance_filtering
        if isinstance(strategy, str) and strategy.lower() in ("none", "null"):  # "no filter" from a command line
            self.reward_variance_filtering = strategy = None
        if strategy is not None and strategy not in FILTER_RULES:
            raise ValueError(
                f"reward_variance_filtering must be one of {FILTER_RULES} or None, got "
                f"{strategy!r}; use None to disable filtering"
            )
        if not (0.0 < self.reward_variance_top_p <= 1.0):
            raise ValueError(
                f"reward_variance_top_p must be in (0, 1], got {self.reward_variance_top_p}; the paper uses 0.9, "
                "and reward_variance_filtering=None disables filtering"
            )
        if strategy == "top_k":
            top_k = self.reward_variance_top_k
            if top_k is None:
                raise ValueError(
                    "reward_variance_top_k must be set when reward_variance_filtering='top_k', got None; pass a "
                    "number of groups as an int (e.g. 4) or a fraction of the groups as a float in (0, 1] (e.g. 0.5)"
                )
            check_top_k(top_k, "reward_variance_top_k")
        if strategy == "min_p":
            min_p = self.reward_variance_min_p
            if min_p is None or not (0.0 <= min_p <= 1.0):
                raise ValueError(
                    f"reward_variance_min_p must be in [0, 1] when reward_variance_filtering='min_p', got {min_p}; "
                    "the paper's ablation uses 0.05 or 0.2"
                )
        self._validate_ablation_fields()
        self._validate_control()
        self._check_one_of("reward_variance_top_p_mode", TOP_P_MODES)
        self._check_one_of("reward_variance_metric", RANKING_METRICS)
        if self.reward_variance_selection_eps < 0:
            raise ValueError(
                f"reward_variance_selection_eps must be >= 0, got {self.reward_variance_selection_eps}; RAGEN uses 0.01"
            )
        self._validate_selection_eps_mode()
        self._check_one_of("reward_variance_loss_scaling", LOSS_SCALINGS)
        if self.reward_variance_empty_patience < 0:
            raise ValueError(
                f"reward_variance_empty_patience must be >= 0 (0 never stops), got {self.reward_variance_empty_patience}"
            )
        self._validate_keep_rate_fields()

    def _validate_ablation_fields(self) -> None:
        """The fields of the paper's Table 6 and 7 ablations (`percentile_range`, `within_group`)."""
        strategy = self.reward_variance_filtering
        low, high = self.reward_variance_percentile_low, self.reward_variance_percentile_high
        for name, value in (("reward_variance_percentile_low", low), ("reward_variance_percentile_high", high)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1] (a share of the ranked groups), got {value!r}")
        if strategy == "percentile_range" and not low < high:
            raise ValueError(
                f"reward_variance_percentile_low ({low}) must be below reward_variance_percentile_high ({high}); "
                "e.g. 0.75 and 1.0 keep the bottom quartile of the groups ranked by score"
            )
        if strategy != WITHIN_GROUP:
            return
        ratio = self.reward_variance_within_group_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0.0 < ratio <= 1.0:
            raise ValueError(
                f"reward_variance_within_group_ratio must be in (0, 1] when reward_variance_filtering="
                f"'within_group', got {ratio!r}; e.g. 0.5 keeps half of each group's rollouts (Table 7)"
            )
        if self.reward_variance_metric not in SCORE_METRICS:
            raise ValueError(
                f"reward_variance_metric={self.reward_variance_metric!r} has no effect with reward_variance_filtering="
                "'within_group', which keeps the rollouts whose rewards vary most in every group; leave it at "
                "'variance'"
            )
        if self.reward_variance_min_kept_fraction:
            raise ValueError(
                f"reward_variance_min_kept_fraction={self.reward_variance_min_kept_fraction} has no effect with "
                "reward_variance_filtering='within_group', which keeps every group; set it to 0"
            )

    def _validate_control(self) -> None:
        control = self.reward_variance_control
        if isinstance(control, str) and control.lower() in ("none", "null"):  # "no control" from a command line
            self.reward_variance_control = control = None
        if control is None:
            return
        if control not in CONTROLS:
            raise ValueError(
                f"reward_variance_control must be one of {CONTROLS} or None, got {control!r}; None trains on the "
                "groups the selection rule keeps"
            )
        if self.reward_variance_filtering in (None, WITHIN_GROUP):
            raise ValueError(
                f"reward_variance_control={control!r} matches a group selection rule, but reward_variance_filtering="
                f"{self.reward_variance_filtering!r} selects no groups; set reward_variance_filtering to the rule to "
                "match (e.g. 'top_p'), or reward_variance_control=None"
            )

    def _check_one_of(self, name: str, choices: tuple) -> None:
        value = getattr(self, name)
        if value not in choices:
            raise ValueError(f"{name} must be one of {choices}, got {value!r}")

    def _validate_selection_eps_mode(self) -> None:
        mode, eps = self.reward_variance_selection_eps_mode, self.reward_variance_selection_eps
        if mode not in SELECTION_EPS_MODES:
            raise ValueError(
                f"reward_variance_selection_eps_mode must be one of {SELECTION_EPS_MODES}, got {mode!r}; 'relative' "
                "measures the margin as a share of the summed group scores, 'absolute' in score units (RAGEN)"
            )
        if mode != "relative":
            return
        if eps >= 1.0:
            raise ValueError(
                f"reward_variance_selection_eps={eps} must be below 1 with reward_variance_selection_eps_mode="
                "'relative' (a share of the summed group scores); use a share such as 0.01, or "
                "reward_variance_selection_eps_mode='absolute' for a margin in score units"
            )
        if self.reward_variance_top_p_mode != "linear" or self.reward_variance_filtering not in ("top_p", AUTO):
            return
        rhos = [("reward_variance_top_p", self.reward_variance_top_p)]
        if self.reward_variance_top_p_schedule != "constant" and self.reward_variance_top_p_end is not None:
            rhos.append(("reward_variance_top_p_end", self.reward_variance_top_p_end))
        for name, rho in rhos:
            if rho < 1.0 and eps >= rho:
                raise ValueError(
                    f"reward_variance_selection_eps={eps} must be below {name}={rho} with "
                    "reward_variance_selection_eps_mode='relative': the margin is that share of the summed group "
                    "scores, so the linear top-p threshold (rho - eps) * sum would keep no group; use a share such "
                    "as 0.01, or reward_variance_selection_eps_mode='absolute' for a margin in score units"
                )

    def _validate_keep_rate_fields(self) -> None:
        strategy, schedule = self.reward_variance_filtering, self.reward_variance_top_p_schedule
        self._check_one_of("reward_variance_top_p_schedule", SCHEDULES)
        for name in ("reward_variance_schedule_steps", "reward_variance_warmup_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0 (optimizer steps), got {value!r}")
        end = self.reward_variance_top_p_end
        if schedule != "constant":
            if strategy in ("top_k", "min_p", "percentile_range", WITHIN_GROUP):
                raise ValueError(
                    f"reward_variance_top_p_schedule={schedule!r} anneals reward_variance_top_p, which "
                    f"reward_variance_filtering={strategy!r} does not use; use 'top_p' or 'auto', or the 'constant' "
                    "schedule"
                )
            if end is None or not (0.0 < end <= 1.0):
                raise ValueError(
                    f"reward_variance_top_p_end must be in (0, 1] with reward_variance_top_p_schedule={schedule!r}, "
                    f"got {end!r}; e.g. reward_variance_top_p=1.0, reward_variance_top_p_end=0.9 anneals from no "
                    "filtering to the paper's rho"
                )
            if self.reward_variance_schedule_steps < 1:
                raise ValueError(
                    f"reward_variance_schedule_steps must be >= 1 with reward_variance_top_p_schedule={schedule!r}, "
                    f"got {self.reward_variance_schedule_steps}; set the optimizer steps the schedule takes"
                )
        elif end is not None:
            raise ValueError(
                f"reward_variance_top_p_end={end!r} has no effect with reward_variance_top_p_schedule='constant'; "
                "set reward_variance_top_p_schedule='linear' or 'cosine' to anneal, or leave it None"
            )
        on_above, off_below = self.reward_variance_auto_on_above, self.reward_variance_auto_off_below
        for name, value in (
            ("reward_variance_auto_on_above", on_above),
            ("reward_variance_auto_off_below", off_below),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0 (a Std/Mean value), got {value!r}")
        if off_below > on_above:
            raise ValueError(
                f"reward_variance_auto_off_below ({off_below}) must be <= reward_variance_auto_on_above ({on_above}); "
                "the filter turns off below the first and on above the second"
            )
        smoothing = self.reward_variance_auto_smoothing
        if not (isinstance(smoothing, int | float) and 0.0 <= smoothing < 1.0):
            raise ValueError(
                f"reward_variance_auto_smoothing must be in [0, 1), got {smoothing!r}; 0 uses each batch's Std/Mean "
                "alone"
            )
        fraction = self.reward_variance_min_kept_fraction
        if isinstance(fraction, bool) or not (isinstance(fraction, int | float) and 0.0 <= fraction <= 1.0):
            raise ValueError(
                f"reward_variance_min_kept_fraction must be in [0, 1], got {fraction!r}; 0 turns the guard off"
            )

    def keep_rate_control(self) -> KeepRateControl:
        """The [`~trl_ragen2.filtering.keep_rate.KeepRateControl`] (schedule, warm-up, auto switch) these fields
        describe."""
        return KeepRateControl(
            top_p=self.reward_variance_top_p,
            top_p_end=self.reward_variance_top_p_end,
            schedule=self.reward_variance_top_p_schedule,
            schedule_steps=self.reward_variance_schedule_steps,
            warmup_steps=self.reward_variance_warmup_steps,
            auto=self.reward_variance_filtering == AUTO,
            auto_on_above=self.reward_variance_auto_on_above,
            auto_off_below=self.reward_variance_auto_off_below,
            auto_smoothing=self.reward_variance_auto_smoothing,
        )
