"""The SNR trainers' model card: the paper TRL's card cites (`RAGEN2_PAPER`), and the "RAGEN-2 training details"
section appended to it, a pure function of the config, the filter's counters and a recipe's extra lines."""

from __future__ import annotations

import textwrap

from ..filtering.empty_steps import FilterState
from ..filtering.keep_rate import AUTO
from .grpo_config import WITHIN_GROUP


RAGEN2_PAPER = {
    "title": "RAGEN-2: Reasoning Collapse in Agentic RL",
    "id": "2604.06268",
    # docstyle-ignore
    "citation": textwrap.dedent("""\
        @article{wang2026ragen2,
            title        = {{RAGEN-2: Reasoning Collapse in Agentic RL}},
            author       = {Zihan Wang and Chi Gui and Xing Jin and Qineng Wang and Licheng Liu and others},
            year         = 2026,
            eprint       = {arXiv:2604.06268},
        }"""),
}


def training_details(args, filter_state: FilterState, details: dict[str, str]) -> str:
    """The section's markdown: the filter's settings and counts (or "off"), then `details` as `- key: value` lines.

    Args:
        args: the trainer's `SNRFilteredGRPOConfig` (or PPO config).
        filter_state (`FilterState`): the filter's counters at the end of training.
        details (`dict[str, str]`): extra lines, e.g. `{"Catalogue": "webshop-small-1k"}`.
    """
    lines = ["", "## RAGEN-2 training details", ""]
    if args.reward_variance_filtering is None:
        lines.append("- SNR-aware filtering: off")
    else:
        lines.append(
            f"- SNR-aware filtering: `{args.reward_variance_filtering}` on the within-prompt reward "
            f"`{args.reward_variance_metric}` (top_p={args.reward_variance_top_p}, "
            f"mode={args.reward_variance_top_p_mode}, include_zero={args.reward_variance_include_zero}, "
            f"selection_eps={args.reward_variance_selection_eps} {args.reward_variance_selection_eps_mode})"
        )
        if args.reward_variance_top_p_schedule != "constant" or args.reward_variance_warmup_steps:
            lines.append(
                f"- Keep rate: {args.reward_variance_top_p_schedule} from {args.reward_variance_top_p} to "
                f"{args.reward_variance_top_p_end} over {args.reward_variance_schedule_steps} steps, after "
                f"{args.reward_variance_warmup_steps} warm-up steps without filtering"
            )
        if args.reward_variance_filtering == AUTO:
            lines.append(
                f"- Auto switch on the Std/Mean of the group reward std: on at {args.reward_variance_auto_on_above}"
                f", off below {args.reward_variance_auto_off_below} (smoothing "
                f"{args.reward_variance_auto_smoothing}); on at the end: {filter_state.auto_on}"
            )
        if args.reward_variance_filtering == "percentile_range":
            lines.append(
                f"- Rank band: [{args.reward_variance_percentile_low}, {args.reward_variance_percentile_high}) "
                "of the ranked groups (Table 6)"
            )
        if args.reward_variance_filtering == WITHIN_GROUP:
            lines.append(
                f"- Within-group: {args.reward_variance_within_group_ratio} of each group's rollouts, those whose "
                "rewards vary most (Table 7)"
            )
        if args.reward_variance_min_kept_fraction:
            lines.append(f"- Exploration guard: at least {args.reward_variance_min_kept_fraction} of the groups")
        lines.append(f"- Filter steps: {filter_state.filtered_steps}, empty: {filter_state.empty_steps}")
    lines += [f"- {key}: {value}" for key, value in details.items()]
    if getattr(args, "reward_variance_control", None) is not None:
        lines.append(f"- Control arm: `{args.reward_variance_control}` (docs/filtering.md, control arms)")
    return "\n".join(lines) + "\n"
