# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""FrozenLake (4x4): reach the goal without falling into a hole -- RAGEN-2 agent training with SNR-aware filtering and MI diagnostics.

Paper main table (CoordFrozenLake): deterministic moves (`success_rate=1`); the slip sweep uses
`--env_config '{"success_rate": 0.8}'`. 5 turns, up to 2 actions per turn; +1 at the goal.

CPU smoke run (tiny offline model):

    accelerate launch recipes/frozen_lake.py --config recipes/configs/agent_cpu.yaml

One GPU (Qwen2.5-3B as in the paper, vLLM colocate), GRPO or PPO:

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/frozen_lake.py \\
        --config recipes/configs/frozen_lake.yaml [--algorithm ppo]
"""

from dataclasses import dataclass, field

from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, train_agent


@dataclass
class FrozenLakeScriptArguments(AgentScriptArguments):
    env_name: str = field(default="frozen_lake", metadata={"help": "Environment name."})
    env_config: str = field(
        default='{"size": 4, "p": 0.9, "success_rate": 1.0}', metadata={"help": "JSON environment keywords."}
    )
    max_turns: int = field(default=5, metadata={"help": "Turns per episode."})
    max_actions_per_turn: int = field(default=2, metadata={"help": "Actions per answer."})
    max_tokens_per_turn: int = field(default=400, metadata={"help": "Generation limit per reply."})


if __name__ == "__main__":
    train_agent(*parse_recipe_args(FrozenLakeScriptArguments))
