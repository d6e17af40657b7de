"""The figure of the gradient SNR report, drawn like RAGEN-2's Figure 3: gradient norm per reward-variance bucket.

Three panels (task, KL, entropy gradient), x = the reward-variance buckets from lowest to highest RV (labelled with
their mean RV), y = the L2 norm of that term's gradient over the bucket's rows, one line per report step (coloured
by step). In a run where the paper's mechanism holds, the task panel rises with RV (zero for groups whose rollouts
all earned the same reward) while the KL and entropy panels stay flat. Reads `ragen2/grad/bucket_<i>/...` (see
`trl_ragen2.filtering.grad_report`).
"""

from __future__ import annotations

import re

from ..runs.keys import GRAD
from ..runs.logs import as_records
from .canvas import new_figure


GRAD_KEY = re.compile(rf"^{re.escape(GRAD)}bucket_(\d+)/(task|kl|entropy|reward_variance)$")  # keys.grad_bucket_key
TERMS = {"task": "task gradient", "kl": "KL gradient (x beta in the update)", "entropy": "entropy gradient (x coef)"}
GRADIENT_FILE = "gradient_snr.png"


def gradient_reports(history) -> dict[int, dict[int, dict[str, float]]]:
    """`{step: {bucket: {term: value}}}` for every logged report (finite values only)."""
    reports: dict[int, dict[int, dict[str, float]]] = {}
    for record in as_records(history):
        step = record.get("step")
        if not isinstance(step, int):
            continue
        for key, value in record.items():
            match = GRAD_KEY.match(key)
            if match and isinstance(value, int | float) and value == value:
                reports.setdefault(step, {}).setdefault(int(match[1]), {})[match[2]] = float(value)
    return reports


def plot_gradient_report(history, steps=None, title: str | None = None):
    """The report's figure; `steps` limits it to some report steps (default: all). None when nothing was logged.

    Each panel's lines have gid `"<term>@<step>"` and x = bucket numbers (1 = lowest reward variance).
    """
    reports = gradient_reports(history)
    if steps is not None:
        reports = {step: value for step, value in reports.items() if step in set(steps)}
    if not reports:
        return None
    from matplotlib import colormaps

    figure = new_figure(figsize=(15, 4.2))
    axes = figure.subplots(1, len(TERMS))
    ordered = sorted(reports)
    cmap = colormaps["viridis"]
    for ax, (term, label) in zip(axes, TERMS.items(), strict=True):
        for number, step in enumerate(ordered):
            buckets = sorted(b for b, values in reports[step].items() if term in values)
            if not buckets:
                continue
            color = cmap(number / max(len(ordered) - 1, 1))
            values = [reports[step][b][term] for b in buckets]
            (line,) = ax.plot(buckets, values, marker="o", color=color, label=f"step {step}")
            line.set_gid(f"{term}@{step}")
        last = reports[ordered[-1]]
        ticks = sorted(last)
        ax.set_xticks(ticks, [f"{b}\nRV {last[b].get('reward_variance', float('nan')):.2g}" for b in ticks])
        ax.set_xlabel(f"reward-variance bucket (RV at step {ordered[-1]})")
        ax.set_ylabel("gradient L2 norm")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize=7)
    figure.suptitle(title or "Gradient norms per reward-variance bucket (RAGEN-2 Figure 3)")
    return figure
