"""Pure pieces of the gradient SNR report (RAGEN-2's Figure 3): reward-variance buckets and the loss components.

The paper's mechanism: a prompt's task gradient grows with its reward variance (RV), `||g_task(x)|| <= sqrt(RV(x)) *
sqrt(E||s||^2)`, while the KL and entropy gradients do not shrink with RV, so low-RV prompts carry mostly
regularisation noise. The report measures it: prompt groups are split into RV quantile buckets
([`reward_variance_buckets`]) and, for each bucket's rows, the gradient norms of the three loss terms are taken
separately ([`component_losses`]).

- **task**: TRL's clipped policy-gradient term, `-min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)` per token with
  `r = exp(logp - logp_old)`, aggregated as the trainer's `loss_type` aggregates it (per-sequence means for
  `"grpo"`, a token mean for `"bnpo"` and `"dapo"`, the token sum over `rows * max_completion_length` for
  `"dr_grpo"`, per-sequence sums for `"luspo"`);
- **kl**: TRL's per-token estimator `exp(ref - logp) - (ref - logp) - 1`, aggregated like the task term (TRL adds
  `beta` times it to the per-token loss), without `beta`;
- **entropy**: the token mean of the policy's entropy (TRL's entropy bonus), without its coefficient.

Norms are of the unweighted terms: the update applies `beta * kl` and `entropy_coef * entropy`. Every term is
normalised by the bucket's *global* row and token counts, so the per-process (and per-chunk) terms sum to the
bucket's loss and their gradients to its gradient.
"""

from __future__ import annotations

import math

import torch

from .selection import group_reward_scores


# Loss types whose per-token surrogate is the clipped ratio (the others reweight it differently).
REPORTED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
COMPONENTS = ("task", "kl", "entropy")


def reward_variance_buckets(rewards: torch.Tensor, num_generations: int, num_buckets: int) -> list[list[int]]:
    """Prompt groups split into `num_buckets` equal-size reward-variance quantile buckets, lowest RV first.

    Groups are ranked by their unbiased reward variance (ties by group index); each bucket takes
    `P // num_buckets` groups and the last one the remainder; with fewer groups than buckets, one group per bucket
    (RAGEN's `quantile` rule). Returns the group indices of each bucket.
    """
    if num_buckets < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
    variances = group_reward_scores(rewards, num_generations, metric="variance")
    order = sorted(range(variances.numel()), key=lambda g: (variances[g].item(), g))
    count = min(num_buckets, len(order))
    size = len(order) // count
    return [order[i * size : (i + 1) * size if i < count - 1 else len(order)] for i in range(count)]


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, *, total_rows: int, total_tokens: int,
              max_completion_length: int) -> torch.Tensor:  # fmt: skip
    """Sum of this chunk's share of the bucket's `loss_type` aggregate of `per_token` (B, T) over `mask` (B, T)."""
    masked = per_token * mask
    if loss_type == "grpo":  # mean over rows of per-sequence token means
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / total_rows
    if loss_type in ("bnpo", "dapo"):  # token mean over the bucket
        return masked.sum() / max(total_tokens, 1)
    if loss_type == "dr_grpo":
        return masked.sum() / (total_rows * max_completion_length)
    if loss_type == "luspo":  # mean over rows of per-sequence sums
        return masked.sum(-1).sum() / total_rows
    raise ValueError(f"the gradient report supports loss_type in {REPORTED_LOSS_TYPES}, got {loss_type!r}")


def component_losses(
    logps: torch.Tensor,
    entropies: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    *,
    old_logps: torch.Tensor | None,
    ref_logps: torch.Tensor | None,
    loss_type: str,
    epsilon_low: float,
    epsilon_high: float,
    max_completion_length: int,
    total_rows: int,
    total_tokens: int,
) -> dict[str, torch.Tensor | None]:
    """The task, KL and entropy terms of one chunk of a bucket (scalars with graphs; `kl` None without reference).

    Args:
        logps, entropies: (B, T) per-token log-probabilities and entropies of the current policy (with graph).
        mask: (B, T) loss tokens (completion mask times tool mask).
        advantages: (B,) or (B, T).
        old_logps: (B, T) log-probabilities at generation time, or None (on-policy: `logps` detached).
        ref_logps: (B, T) reference log-probabilities, or None (no reference model: `kl` is None).
        total_rows, total_tokens: the bucket's rows and loss tokens over all chunks and processes.
    """
    mask = mask.to(logps.dtype)
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    old = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    task = -torch.min(ratio * advantages, clipped * advantages)
    shape = dict(total_rows=total_rows, total_tokens=total_tokens, max_completion_length=max_completion_length)
    out = {"task": aggregate(task, mask, loss_type, **shape), "kl": None}
    if ref_logps is not None:
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        out["kl"] = aggregate(kl, mask, loss_type, **shape)
    out["entropy"] = (entropies * mask).sum() / max(total_tokens, 1)
    return out


def global_norm(tensors: list[torch.Tensor]) -> float:
    """L2 norm of a list of gradient tensors taken together."""
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in tensors))
