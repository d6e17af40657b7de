"""The recall task: a two-turn version of the template-collapse toy in which only reasoning that restates the input
can earn the reward (`benchmarks/template_collapse.py --task recall`; `docs/template_collapse_experiment.md`).

**Turn 1** (trained) shows the input, "Push the box to target c.", as the letter task does; the agent writes its
reasoning, `" c: Up box Left go wall Down, c</think><answer>ready</answer>"`. **Turn 2** asks for the direction,
and its context is a history window that keeps only the agent's own reply: the system message, the agent's turn-1
reply, and the question. The first observation, and with it the letter, is not there. The same policy answers
turn 2 (`<answer>D</answer>`), and the episode earns 1 when D is the input letter's direction. So the answer can be
right only when the turn-1 reasoning named the right letter: a group whose rollouts differ in reward differs in
whether the reasoning restated the input, and its GRPO gradient ties the reasoning to the input. This is the half of
the paper's mechanism that the one-turn task cannot show (there the answer reads the input directly).

Only turn 1 is trained: the completion TRL sees is the turn-1 reply, and turn 2 is part of the environment (the
policy's current weights, sampled at temperature 1, its tokens not in the loss). The MI diagnostics score the
turn-1 reasoning under every input, as in the one-turn task.

The warm start imitates turn-1 replies that restate the input's letter with probability `FAITHFUL` (otherwise a
random other letter, so groups start with reward variance that depends on the reasoning) and turn-2 replies that
answer the direction of the letter the notes name.
"""

from __future__ import annotations

import random

from template_collapse import ANSWER_PATTERN, ANSWERS, MOVES, SYSTEM, TARGETS, render_prompt, task_reward


FAITHFUL = 0.75  # the warm start's turn-1 reasoning names the input's letter this often
QUESTION = "The target is not shown again. Which way?"
NOTE_PATTERN = ANSWER_PATTERN  # re-exported for readers of this module: the answer is parsed as in the letter task
TURN_TOKENS = 32  # the most tokens of a turn-2 reply


def turn1_demonstration(target: str, rng: random.Random) -> str:
    """A warm-start turn-1 reply: reasoning that names a letter (the input's with probability FAITHFUL), a plan of
    six moves, the letter again, and a fixed answer."""
    named = target if rng.random() < FAITHFUL else rng.choice([t for t in TARGETS if t != target])
    plan = " ".join(rng.choice(MOVES) for _ in range(6))
    return f" {named}: {plan}, {named}</think><answer>ready</answer>"


def named_letter(reply: str) -> str | None:
    """The letter a turn-1 reply's reasoning names first (None when it names none)."""
    head = reply.strip().split(":", 1)[0].strip()
    return head if head in TARGETS else None


def turn2_demonstration(notes: str) -> str:
    """A warm-start turn-2 reply: the letter the notes name, and that letter's direction (a random direction when
    the notes name none)."""
    letter = named_letter(notes)
    direction = ANSWERS[letter] if letter else "Up"
    return f" {letter or '?'}</think><answer>{direction}</answer>"


def render_turn2(tokenizer, turn1_reply: str) -> str:
    """The turn-2 context: the system message, the agent's own turn-1 reply (as the assistant's message, with the
    `<think>` its prompt opened) and the question. The input's letter appears only if the reply wrote it."""
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "assistant", "content": "<think>" + turn1_reply},
        {"role": "user", "content": QUESTION},
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "<think>"


def warm_pairs(tokenizer, rng: random.Random, batch: int) -> list[tuple[list[int], list[int]]]:
    """`batch` imitation pairs (prompt ids, reply ids), half turn 1 and half turn 2."""
    pairs = []
    for index in range(batch):
        target = rng.choice(TARGETS)
        notes = turn1_demonstration(target, rng)
        if index % 2 == 0:
            prompt = render_prompt(tokenizer, f"Push the box to target {target}.")
            reply = notes
        else:
            prompt = render_turn2(tokenizer, notes)
            reply = turn2_demonstration(notes)
        pairs.append((tokenizer.encode(prompt), tokenizer.encode(reply) + [tokenizer.eos_token_id]))
    return pairs


class RecallRollout:
    """TRL `rollout_func`: turn 1 from the prompt, turn 2 from the window context; returns the turn-1 completion and
    each episode's reward in the `recall_reward` field (`recall_success` reads it), plus the turn-2 text."""

    def __init__(self, max_turn1_tokens: int):
        self.max_turn1_tokens = max_turn1_tokens

    def __call__(self, prompts: list[str], trainer) -> dict:
        from trl_ragen2.agents.generation import TrainerGeneration

        tokenizer = trainer.processing_class
        generate = TrainerGeneration(trainer)
        prompt_ids = [tokenizer.encode(prompt) for prompt in prompts]
        turn1, _ = generate(prompt_ids, self.max_turn1_tokens, group_size=trainer.num_generations)
        turn1_text = [tokenizer.decode(ids, skip_special_tokens=True) for ids in turn1]
        contexts = [tokenizer.encode(render_turn2(tokenizer, text)) for text in turn1_text]
        turn2, _ = generate(contexts, TURN_TOKENS)
        turn2_text = [tokenizer.decode(ids, skip_special_tokens=True) for ids in turn2]
        targets = [prompt.split("target ", 1)[1][0] for prompt in prompts]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": turn1,
            "logprobs": None,
            "recall_reward": [task_reward(t, text) for t, text in zip(targets, turn2_text, strict=True)],
            "recall_named": [float(named_letter(text) == t) for t, text in zip(targets, turn1_text, strict=True)],
            "turn2": turn2_text,
        }


def recall_success(completions, recall_reward, **kwargs) -> list[float]:
    """The episode's reward: 1 when the turn-2 answer is the input letter's direction."""
    return [float(value) for value in recall_reward]


recall_success.rollout_field = "recall_reward"  # the filter may select from the rollout's field before scoring


def named_input(completions, recall_named, **kwargs) -> list[float | None]:
    """Logged only (weight 0): whether the turn-1 reasoning names the input's letter."""
    return [float(value) for value in recall_named]


named_input.rollout_field = "recall_named"
