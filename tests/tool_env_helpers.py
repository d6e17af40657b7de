"""One plain `trl.GRPOTrainer` step on an environment's TRL adapter (`environment_factory`), with scripted turns.

A tiny random model never calls a tool, so the generation is scripted: on the first turn, rollout `i` of the group
opens with the `i`-th of the given tool calls; every other turn of every rollout answers a short text. The trainer
runs everything else for real: `reset(**row)`, the tool call and its reply, `get_reward()` and the update.
"""

from __future__ import annotations

import json
from typing import Any


NUM_GENERATIONS = 4  # one group per step


def run_scripted_grpo_step(
    environment_factory,
    row: dict[str, Any],
    tool_calls: list[tuple[str, dict[str, Any]]],
    model,
    tokenizer,
    output_dir,
    *,
    max_completion_length: int = 48,
    max_tool_calling_iterations: int = 1,
):
    """Train one GRPO step on a group of `NUM_GENERATIONS` rollouts of `row`; rollout `i < len(tool_calls)` opens
    with the call `tool_calls[i]` (tool name, arguments). Returns the trainer and the step's logged metrics."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=max_completion_length,  # room for the scripted call and its reply
        max_tool_calling_iterations=max_tool_calling_iterations,
        max_steps=1,
        bf16=False,
        use_cpu=True,
        activation_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
    )
    trainer = GRPOTrainer(
        model=model,
        args=args,
        processing_class=tokenizer,
        train_dataset=Dataset.from_list([row]),
        environment_factory=environment_factory,
    )
    eos = [tokenizer.eos_token_id]
    scripted_calls = [
        tokenizer.encode(f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>") + eos
        for name, arguments in tool_calls
    ]
    short_answer = tokenizer.encode("ok") + eos
    num_turns = [0]

    def scripted_generation(prompt_ids, *args, **kwargs):
        num_turns[0] += 1
        calls = scripted_calls if num_turns[0] == 1 else []
        return [calls[i] if i < len(calls) else short_answer for i in range(len(prompt_ids))], None

    trainer._generate_single_turn = scripted_generation
    trainer.train()
    reward_key = f"rewards/{environment_factory.__name__}/mean"
    logs = next(entry for entry in trainer.state.log_history if reward_key in entry)
    return trainer, logs
