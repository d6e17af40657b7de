# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""Countdown: combine the numbers with + - * / to reach the target -- RAGEN-2 agent training with SNR-aware filtering and MI diagnostics.

One turn; reward 1 for a correct expression, 0.1 for a well-formed one over the right numbers, 0 otherwise.
Problems are generated offline; `--env_config '{"data_path": "countdown.jsonl"}'` reads Countdown-Tasks-3to4.

CPU smoke run (tiny offline model):

    accelerate launch recipes/countdown.py --config recipes/configs/agent_cpu.yaml

One GPU (Qwen2.5-3B as in the paper, vLLM colocate), GRPO or PPO:

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/countdown.py \\
        --config recipes/configs/countdown.yaml [--algorithm ppo]
"""

from dataclasses import dataclass, field

from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, train_agent


@dataclass
class CountdownScriptArguments(AgentScriptArguments):
    env_name: str = field(default="countdown", metadata={"help": "Environment name."})
    env_config: str = field(default="{}", metadata={"help": "JSON environment keywords."})
    max_turns: int = field(default=1, metadata={"help": "Turns per episode."})
    max_actions_per_turn: int = field(default=1, metadata={"help": "Actions per answer."})
    max_tokens_per_turn: int = field(default=400, metadata={"help": "Generation limit per reply."})


if __name__ == "__main__":
    train_agent(*parse_recipe_args(CountdownScriptArguments))
