"""Helpers for the exact-update tests: capture optimizer-step gradients, record the kept rows each step trained on,
and compute plain `GRPOTrainer`'s gradient on a batch holding only those rows.

The reference is TRL itself: a plain `GRPOTrainer` with one micro-batch per optimizer step (GA = S = 1) and the same
loss settings, whose `_compute_loss` is run on the recorded rows and back-propagated.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from transformers import TrainerCallback


# Per-row tensors a micro-batch carries; the reference batch is built from these.
ROW_KEYS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "advantages",
    "tool_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
)


class GradientRecorder(TrainerCallback):
    """Keeps a copy of every parameter's gradient right before each optimizer step (zeros where there is none)."""

    def __init__(self, model):
        self.model = model
        self.steps: list[dict[str, torch.Tensor]] = []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.steps.append(
            {
                name: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
                for name, p in self.model.named_parameters()
                if p.requires_grad
            }
        )


def record_gradients(trainer) -> GradientRecorder:
    recorder = GradientRecorder(trainer.model)
    trainer.add_callback(recorder)
    return recorder


def record_kept_rows(trainer) -> dict[int, list[dict[str, torch.Tensor]]]:
    """Wrap `_compute_loss`: per optimizer step, the kept rows of each micro-batch (placeholders come last)."""
    rows_by_step: dict[int, list[dict[str, torch.Tensor]]] = defaultdict(list)
    original = trainer._compute_loss

    def compute_loss(model, inputs):
        step = trainer.micro_step
        if step is not None and step.real_rows:
            kept = slice(0, step.real_rows)
            rows_by_step[trainer.state.global_step].append(
                {key: inputs[key][kept].detach().clone() for key in ROW_KEYS if key in inputs}
            )
        return original(model, inputs)

    trainer._compute_loss = compute_loss
    return rows_by_step


def concat_micro_batches(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """One batch from micro-batches, padded to common widths: prompts on the left, the rest on the right.

    Parts from different processes may differ in width; the padding is masked, and the tiny model's rotary
    positions make left padding change log-probabilities only by float rounding.
    """
    batch = {}
    for key in parts[0]:
        tensors = [part[key] for part in parts]
        if tensors[0].dim() >= 2:
            width = max(t.size(1) for t in tensors)
            left = key.startswith("prompt_")
            padded = []
            for t in tensors:
                pad = t.new_zeros((t.size(0), width - t.size(1), *t.shape[2:]))
                padded.append(torch.cat([pad, t] if left else [t, pad], dim=1))
            tensors = padded
        batch[key] = torch.cat(tensors, dim=0)
    return batch


def reference_gradient(plain_trainer, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Gradient of plain GRPOTrainer's loss on `batch` as its only micro-batch (one process, GA = S = 1)."""
    model = plain_trainer.model
    model.train()
    model.zero_grad(set_to_none=True)
    mask = batch["completion_mask"] * batch.get("tool_mask", 1)
    inputs = {**batch, "num_items_in_batch": mask.sum()}
    plain_trainer.current_gradient_accumulation_steps = 1
    loss = plain_trainer._compute_loss(model, inputs)
    loss.backward()
    grads = {
        name: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
        for name, p in model.named_parameters()
        if p.requires_grad
    }
    model.zero_grad(set_to_none=True)
    return grads


def gradient_ratio(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """<g, g_ref> / |g_ref|^2: 1.0 when the gradient equals the reference (0 when it is orthogonal or zero)."""
    dot = sum(float((grads[n].double() * reference[n].double()).sum()) for n in reference)
    norm = sum(float((reference[n].double() ** 2).sum()) for n in reference)
    return dot / norm


def assert_same_gradient(grads, reference, rtol=1e-5, atol=1e-7):
    """Every parameter's gradient equals the reference's, and the reference is not trivially zero."""
    norm = sum(float((reference[n].double() ** 2).sum()) for n in reference) ** 0.5
    assert norm > 1e-6, "the reference gradient is zero: the test would prove nothing"
    for name in reference:
        torch.testing.assert_close(grads[name], reference[name], rtol=rtol, atol=atol * max(1.0, norm), msg=name)
