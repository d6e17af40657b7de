"""Policies with a known answer for the `diagnose` tests: the tiny model taught by imitation, as in
`notebooks/template_collapse_explained.ipynb`.

Eight prompts differ in one detail, the target letter ("Push the box to target c."). The input-dependent policy
writes `<target>: <random plan>, <target></think>`, the template policy the same text with a random letter, so its
reasoning varies as much but ignores the prompt. Both imitate on the exact contexts `diagnose` renders for a
prompts file (the chat template plus `<think>`), and are saved as ordinary checkpoint folders.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch


TARGETS = list("abcdefgh")
MOVES = ["Up", "Down", "Left", "Right", "box", "go"]
STEPS = 150  # imitation steps: the input-dependent policy names its own target in nearly every chain by then
BATCH_SIZE = 16


def prompt_of(target: str) -> str:
    return f"Push the box to target {target}."


def write_prompts(path: Path) -> Path:
    """The eight prompts as a `diagnose --prompts` file."""
    path.write_text("".join(json.dumps({"prompt": prompt_of(t)}) + "\n" for t in TARGETS))
    return path


def chain(target: str, template: bool, rng: random.Random) -> str:
    letter = rng.choice(TARGETS) if template else target
    return f" {letter}: {' '.join(rng.choice(MOVES) for _ in range(3))}, {letter}"


def train_policy(folder: Path, *, template: bool, seed: int = 0, steps: int = STEPS) -> Path:
    """Teach the tiny model one kind of reasoning and save it (model and tokenizer) to `folder`."""
    from trl_ragen2.models.tiny import make_tiny_model, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    contexts = []
    for target in TARGETS:
        messages = [{"role": "user", "content": prompt_of(target)}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "<think>"
        contexts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    torch.manual_seed(seed)
    model = make_tiny_model(tokenizer, seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.0)
    rng = random.Random(seed)
    for _ in range(steps):
        pairs = []
        for _ in range(BATCH_SIZE):
            index = rng.randrange(len(TARGETS))
            reply = tokenizer(chain(TARGETS[index], template, rng) + "</think>", add_special_tokens=False)
            pairs.append((contexts[index], reply["input_ids"] + [tokenizer.eos_token_id]))
        width = max(len(x) + len(z) for x, z in pairs)
        ids = torch.full((len(pairs), width), tokenizer.pad_token_id)  # (B, T) right-padded
        attention = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)  # the loss covers the reply only
        for row, (x, z) in enumerate(pairs):
            ids[row, : len(x) + len(z)] = torch.tensor(x + z)
            attention[row, : len(x) + len(z)] = 1
            labels[row, len(x) : len(x) + len(z)] = torch.tensor(z)
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
