"""Tiny policies with known reasoning behaviour, as in `notebooks/template_collapse_explained.ipynb`, for the
diagnostics benchmarks (`text_vs_mi.py`, `collapse_alarm.py`).

Eight inputs differ in one detail, the target letter `a`..`h` ("Push the box to target c."). A policy is the offline
tiny model (`trl_ragen2.models.tiny`) trained by imitation to write one kind of reasoning chain: a target letter and a
plan of moves. `template_share` mixes the notebook's input-dependent diverse chains with its template (a random
target, a random plan) in any proportion, so a run can drift from healthy reasoning into template collapse.
[`measure`] samples 8 chains per input at temperature 1, cross-scores them with `TransformersCrossScorer` and
returns the MI proxies (with their uncertainty), the text template metrics and the success rate: the share of
chains that name their own input's target, the task these inputs pose.
"""

from __future__ import annotations

import os
import random


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402


TARGETS = list("abcdefgh")
MOVES = ["Up", "Down", "Left", "Right", "box", "wall", "goal", "the", "go"]
FIXED_PLAN = "Up Up Left box go Down"
SAMPLES_PER_INPUT = 8
MAX_REASONING_TOKENS = 32
BATCH_SIZE = 16


def random_plan(rng: random.Random) -> str:
    return " ".join(rng.choice(MOVES) for _ in range(6))


def input_dependent_diverse(target, rng):
    return f" {target}: {random_plan(rng)}, {target}"


def input_agnostic_diverse(target, rng):
    other = rng.choice(TARGETS)
    return f" {other}: {random_plan(rng)}, {other}"


def input_agnostic_repetitive(target, rng):
    return f" a: {FIXED_PLAN}, a"


def input_dependent_repetitive(target, rng):
    return f" {target}: {FIXED_PLAN}, {target}"


REGIMES = {  # the notebook's policies and the regime each one stands for
    "input-dependent, diverse": (input_dependent_diverse, "diverse reasoning"),
    "input-agnostic, diverse": (input_agnostic_diverse, "template collapse"),
    "input-agnostic, repetitive": (input_agnostic_repetitive, "low-entropy collapse"),
    "input-dependent, repetitive": (input_dependent_repetitive, "compressed reasoning"),
}


def template_share(share: float):
    """Chains that are the template (random target and plan) with probability `share`, else input-dependent."""

    def write(target, rng):
        return input_agnostic_diverse(target, rng) if rng.random() < share else input_dependent_diverse(target, rng)

    return write


def imitation_step(model, optimizer, pairs: list[tuple[list[int], list[int]]], pad_token_id: int) -> torch.Tensor:
    """One AdamW step of cross-entropy on (input ids, reply ids) pairs, right-padded into one batch; the loss covers
    the reply tokens only. Returns the batch's loss."""
    width = max(len(x) + len(z) for x, z in pairs)
    ids = torch.full((len(pairs), width), pad_token_id)  # (B, T), right-padded
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)  # -100: no loss on the input and the padding
    for row, (x, z) in enumerate(pairs):
        ids[row, : len(x) + len(z)] = torch.tensor(x + z)
        attention[row, : len(x) + len(z)] = 1
        labels[row, len(x) : len(x) + len(z)] = torch.tensor(z)
    loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


class Kit:
    """The tokenizer, the eight inputs and a scorer setup, shared by the policies of one benchmark."""

    def __init__(self):
        from trl_ragen2.collapse.scoring import PairBuilder
        from trl_ragen2.models.tiny import make_tiny_tokenizer

        self.tokenizer = make_tiny_tokenizer()
        self.builder = PairBuilder(self.tokenizer)
        self.prompts = [self._render(target) for target in TARGETS]
        self.target_ids = {self.tokenizer.encode(f" {t}")[0]: i for i, t in enumerate(TARGETS)}

    def _render(self, target: str) -> list[int]:
        messages = [
            {"role": "system", "content": "You're a helpful assistant."},
            {"role": "user", "content": f"Push the box to target {target}."},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.builder.context(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def fresh_policy(self, seed: int = 0, learning_rate: float = 1e-2):
        from trl_ragen2.models.tiny import make_tiny_model

        torch.manual_seed(seed)
        model = make_tiny_model(self.tokenizer, seed=seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.0)
        return model, optimizer

    def imitate(self, model, optimizer, write_chain, rng: random.Random, steps: int) -> float:
        """`steps` imitation steps on (input, chain) pairs of `write_chain`; the loss covers the chain only."""
        model.train()
        loss = torch.zeros(())
        for _ in range(steps):
            pairs = []
            for _ in range(BATCH_SIZE):
                index = rng.randrange(len(TARGETS))
                reply = self.tokenizer(write_chain(TARGETS[index], rng) + "</think>", add_special_tokens=False)
                pairs.append((self.prompts[index], reply["input_ids"] + [self.tokenizer.eos_token_id]))
            loss = imitation_step(model, optimizer, pairs, self.tokenizer.pad_token_id)
        model.eval()
        return loss.item()

    def sample(self, model, seed: int) -> tuple[list[list[int]], list[int]]:
        """SAMPLES_PER_INPUT reasoning chains per input at temperature 1: (token ids, input index)."""
        from trl_ragen2 import ModelGeneration

        torch.manual_seed(seed)
        generate = ModelGeneration(model, self.tokenizer, temperature=1.0, batch_size=64)
        contexts = [x for x in self.prompts for _ in range(SAMPLES_PER_INPUT)]
        replies, _ = generate(contexts, MAX_REASONING_TOKENS)
        chains, target = [], []
        for index, reply in enumerate(replies):
            reasoning = self.builder.reasoning(reply)
            if reasoning:
                chains.append(reasoning)
                target.append(index // SAMPLES_PER_INPUT)
        return chains, target

    def success(self, chains, target) -> float:
        """Share of chains (out of all sampled) whose first target letter is their own input's."""
        hits = 0
        for chain, own in zip(chains, target, strict=True):
            named = next((self.target_ids[t] for t in chain if t in self.target_ids), None)
            hits += named == own
        return hits / (len(TARGETS) * SAMPLES_PER_INPUT)

    def measure(self, model, seed: int, ema=None, step: int = 1) -> dict[str, float]:
        """One diagnostic of `model`: MI proxies (+ EMA and uncertainty), text metrics and success."""
        from trl_ragen2.collapse.mi import mi_metrics
        from trl_ragen2.collapse.mi_uncertainty import mi_uncertainty
        from trl_ragen2.collapse.scoring import TransformersCrossScorer
        from trl_ragen2.collapse.text_metrics import text_template_metrics

        chains, target = self.sample(model, seed)
        out = {"success": self.success(chains, target)}
        out.update({f"text/{k}": v for k, v in text_template_metrics(chains, target).items()})
        if len(chains) < 2:
            return out
        logp = TransformersCrossScorer(model).score(self.prompts, chains)
        lengths, target_t = torch.tensor([len(c) for c in chains]), torch.tensor(target)
        metrics = mi_metrics(logp, lengths, target_t)
        state = ema.state_dict() if ema is not None else {"sigma": None, "sigma_seq": None}
        if ema is not None:
            metrics.update(ema.update(metrics))
        metrics.update(
            mi_uncertainty(
                logp,
                lengths,
                target_t,
                seed=seed + 7 * step,
                ema_sigma=state["sigma"],
                ema_sigma_seq=state["sigma_seq"],
            )
        )
        out.update(metrics)
        return out
