"""Where the kept rows of a filtered generation batch go, and how each micro-step's loss is renormalised.

After the SNR filter a process holds `K` kept rows of its generation batch, fewer than the `per_device_train_batch_size
* steps_per_generation` rows TRL would split over its micro-steps. Two decisions make the update exact:

**Layout (RAGEN's choice: full mini-batches, fewer updates).** Kept rows fill the optimizer steps of a generation in
order: each optimizer step takes up to its unfiltered share (`per_device_train_batch_size` rows per micro-step) and
spreads them evenly over its micro-steps; the optimizer steps left without a kept row become no-op steps. Every
process pads a micro-step to the largest row count any process has there (TRL gathers per-row statistics inside the
loss, which needs equal row counts), with zero-loss placeholder rows.

**Normalisation.** TRL normalises each micro-batch's loss by that micro-batch (its rows for `grpo`, its tokens for
`bnpo`, ...) and divides by the gradient-accumulation steps, which equals the whole-step normalisation only when
micro-batches are balanced. A *unit* is the run of micro-steps of one generation inside one optimizer step (the
whole step when `steps_per_generation` is a multiple of `gradient_accumulation_steps`). Each micro-batch's loss is
multiplied by a factor so that, after the sum over micro-steps and the mean over processes, each unit contributes
`m_u / gradient_accumulation_steps` times the loss plain `GRPOTrainer` computes on the unit's kept rows as one
micro-batch on one process (`m_u`: the unit's micro-steps). Pure Python; no torch, no trainer imports.
"""

from __future__ import annotations

from dataclasses import dataclass


# Loss types whose TRL normaliser counts the micro-batch's rows, its tokens, or the generation's tokens.
ROW_NORMALISED = ("grpo", "sapo", "luspo", "dr_grpo")
TOKEN_NORMALISED = ("bnpo",)
GENERATION_TOKEN_NORMALISED = ("dapo", "cispo", "vespo")
LOSS_TYPES = ROW_NORMALISED + TOKEN_NORMALISED + GENERATION_TOKEN_NORMALISED


@dataclass(frozen=True)
class MicroStep:
    """What one process needs to know about one micro-step of a filtered generation."""

    rows: int  # rows of this process's micro-batch, placeholders included (the same on every process)
    real_rows: int  # kept rows of this process in it
    global_real_rows: int  # kept rows of all processes in this micro-step
    processes_with_rows: int  # processes holding at least one kept row in this micro-step
    unit_rows: int  # kept rows of all processes in this micro-step's unit
    unit_tokens: int  # loss tokens (completion_mask * tool_mask) of those rows
    unit_weight: float  # m_u / gradient_accumulation_steps: the unit's share of its optimizer step
    window: int  # optimizer step holding this micro-step, counted from the start of training (or of the resume)


def chunk_windows(first_micro_step: int, steps_per_generation: int, accumulation_steps: int) -> list[int]:
    """Optimizer step (counted from training start) of each of a generation's chunks, on their first pass."""
    return [(first_micro_step + i) // accumulation_steps for i in range(steps_per_generation)]


def fill_chunks(num_rows: int, windows: list[int], capacity: int) -> list[int]:
    """Rows per chunk when `num_rows` kept rows fill optimizer steps in order.

    Chunks sharing a window form one optimizer step, which takes up to `capacity` rows per chunk (its unfiltered
    mini-batch) and spreads them evenly over its chunks, leading chunks larger by at most one row. Later windows get
    what is left.

    >>> fill_chunks(16, [0] * 8 + [1] * 8, capacity=4)  # 16 kept rows, two optimizer steps of 8 micro-steps
    [2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0]
    """
    if num_rows > capacity * len(windows):
        raise ValueError(f"{num_rows} rows do not fit in {len(windows)} chunks of {capacity}")
    sizes, remaining, start = [], num_rows, 0
    while start < len(windows):
        end = start
        while end < len(windows) and windows[end] == windows[start]:
            end += 1
        block = end - start
        take = min(remaining, capacity * block)
        sizes += [take // block + (1 if i < take % block else 0) for i in range(block)]
        remaining -= take
        start = end
    return sizes


def plan_micro_steps(
    real_rows: list[list[int]],
    tokens: list[list[int]],
    first_micro_step: int,
    accumulation_steps: int,
    num_iterations: int = 1,
) -> list[list[MicroStep]]:
    """The micro-steps of one generation cycle, for every process.

    Args:
        real_rows: `real_rows[p][i]` kept rows process `p` put in chunk `i` (S chunks per process).
        tokens: `tokens[p][i]` loss tokens of those rows.
        first_micro_step: TRL's micro-step counter (`_step`) when the generation was made.
        accumulation_steps: `gradient_accumulation_steps`.
        num_iterations: TRL's `num_iterations`: the S chunks are trained on this many times in a row.

    Returns `plan[p][k]` for the `S * num_iterations` micro-steps `k` of the cycle (micro-step `k` trains chunk
    `k % S`).
    """
    num_processes, num_chunks = len(real_rows), len(real_rows[0])
    aligned = [max(1, *(real_rows[p][i] for p in range(num_processes))) for i in range(num_chunks)]
    cycle = num_chunks * num_iterations
    windows = [(first_micro_step + k) // accumulation_steps for k in range(cycle)]
    chunk_rows = [sum(real_rows[p][i] for p in range(num_processes)) for i in range(num_chunks)]
    chunk_tokens = [sum(tokens[p][i] for p in range(num_processes)) for i in range(num_chunks)]

    # A unit: the consecutive micro-steps of this cycle that share an optimizer step.
    unit_of, units, start = [0] * cycle, [], 0
    while start < cycle:
        end = start
        while end < cycle and windows[end] == windows[start]:
            end += 1
        members = range(start, end)
        units.append(
            (
                sum(chunk_rows[k % num_chunks] for k in members),
                sum(chunk_tokens[k % num_chunks] for k in members),
                (end - start) / accumulation_steps,
            )
        )
        for k in members:
            unit_of[k] = len(units) - 1
        start = end

    plan = []
    for p in range(num_processes):
        steps = []
        for k in range(cycle):
            i = k % num_chunks
            unit_rows, unit_tokens, weight = units[unit_of[k]]
            steps.append(
                MicroStep(
                    rows=aligned[i],
                    real_rows=real_rows[p][i],
                    global_real_rows=chunk_rows[i],
                    processes_with_rows=sum(real_rows[q][i] > 0 for q in range(num_processes)),
                    unit_rows=unit_rows,
                    unit_tokens=unit_tokens,
                    unit_weight=weight,
                    window=windows[k],
                )
            )
        plan.append(steps)
    return plan


def loss_factors(
    loss_type: str,
    step: MicroStep,
    rows: int,
    tokens: int,
    num_processes: int,
    accumulation_steps: int,
    steps_per_generation: int,
    num_items_in_batch: float,
) -> tuple[float, float]:
    """Factors `(policy, entropy)` by which TRL's micro-batch loss terms are multiplied to make the step exact.

    `rows` and `tokens` are the micro-batch's rows (placeholders included) and loss tokens on this process, the
    counts TRL normalises by; `accumulation_steps` is the divisor TRL used (`current_gradient_accumulation_steps`);
    `num_items_in_batch` is the batch's value TRL's `dapo`/`cispo`/`vespo` normaliser read. The policy factor also
    covers the KL term, which TRL adds per token before normalising. The entropy bonus is a token mean in TRL for
    every loss type, so it gets its own factor. A unit without kept rows (or without loss tokens, for the token
    normalisers) gets 0: its loss is zero anyway.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; TRL 1.16 offers {LOSS_TYPES}")
    weight, processes, accumulation = step.unit_weight, num_processes, accumulation_steps
    entropy = weight * processes * accumulation * max(tokens, 1) / step.unit_tokens if step.unit_tokens else 0.0
    if step.unit_rows == 0:
        return 0.0, 0.0
    if loss_type in ROW_NORMALISED:  # TRL: (1 / rows) * sum over rows / accumulation
        return weight * processes * accumulation * rows / step.unit_rows, entropy
    if loss_type in TOKEN_NORMALISED:  # TRL: sum over tokens / max(tokens, 1) / accumulation
        return entropy, entropy
    # TRL: sum over tokens / (num_items_in_batch / processes * accumulation / steps_per_generation)
    if not step.unit_tokens:
        return 0.0, entropy
    return weight * max(num_items_in_batch, 1.0) * accumulation / (steps_per_generation * step.unit_tokens), entropy


# TRL metrics computed from the micro-batch's rows or tokens. Placeholder rows carry no loss token, so the
# token-weighted ones are already right whenever the micro-step holds a kept row.
PER_ROW_METRICS = (
    "entropy",
    "kl",
    "aux_loss",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "clip_ratio/low_min",
    "clip_ratio/high_max",
    "cispo_clip_ratio",
    "vespo/phi_seq_mean",
)
# TRL logs these on every step (a mixture-of-experts model's router loss), and its callers read them as numbers: a
# step without a kept row logs 0.0, the router loss that entered its (absent) update, as its loss is 0.
ALWAYS_LOGGED = ("aux_loss",)
# With importance_sampling_level="sequence" these are means over rows, placeholders included; each placeholder
# adds 0 (its sequence ratio is exp(0) = 1: never clipped).
SEQUENCE_ROW_MEANS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "cispo_clip_ratio")


def correct_trl_metrics(
    appended: dict[str, list[float]], step: MicroStep, num_processes: int, sequence_level: bool
) -> dict[str, list[float]]:
    """The values TRL's `_compute_loss` appended for one micro-step, restricted to its kept rows.

    A micro-step without a kept row on any process logs nothing for the per-row metrics (they would read 0), except
    the keys TRL logs on every step (`ALWAYS_LOGGED`: the router loss), which read 0.0 when the whole optimizer step
    has no kept row.
    Otherwise placeholder rows are taken out of the means TRL takes over rows: the sequence-level clip ratios
    (placeholders add 0) and `vespo/phi_seq_mean` (always a mean over rows; a placeholder's weight is exactly 1,
    since its sequence log-ratio is 0). A sequence-level `clip_ratio/low_min` is a minimum of 0/1 values, so over
    the kept rows it is 1 exactly when their mean is 1. Other keys pass unchanged.
    """
    corrected = {}
    total_rows = step.rows * num_processes
    kept = step.global_real_rows
    for key, values in appended.items():
        if key not in PER_ROW_METRICS:
            corrected[key] = values
        elif kept == 0 and key in ALWAYS_LOGGED and step.unit_rows == 0:
            corrected[key] = [0.0] * len(values)  # an optimizer step without a kept row: no router loss in the update
        elif kept == 0:
            continue
        elif kept == total_rows:
            corrected[key] = values
        elif key == "vespo/phi_seq_mean":
            corrected[key] = [(v * total_rows - (total_rows - kept)) / kept for v in values]
        elif sequence_level and key in SEQUENCE_ROW_MEANS:
            corrected[key] = [v * total_rows / kept for v in values]
        else:
            corrected[key] = values
    if sequence_level and kept and kept < total_rows and "clip_ratio/low_min" in corrected:
        means = corrected.get("clip_ratio/low_mean", [])
        corrected["clip_ratio/low_min"] = [1.0 if m >= 1.0 - 1e-6 else 0.0 for m in means]
    return corrected
