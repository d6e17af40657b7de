# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""Sokoban (6x6, one box): push the box onto the target -- RAGEN-2 agent training with SNR-aware filtering and MI diagnostics.

Paper main setting (CoordSokoban): 5 turns, up to 2 `||`-separated actions per turn, 10 actions per episode;
-0.1 per move, +1 box on target, -1 box off target, +10 solved; -0.1 format penalty.

CPU smoke run (tiny offline model):

    accelerate launch recipes/sokoban.py --config recipes/configs/agent_cpu.yaml

One GPU (Qwen2.5-3B as in the paper, vLLM colocate), GRPO or PPO:

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/sokoban.py \\
        --config recipes/configs/sokoban.yaml [--algorithm ppo]
"""

from dataclasses import dataclass, field

from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, train_agent


@dataclass
class SokobanScriptArguments(AgentScriptArguments):
    env_name: str = field(default="sokoban", metadata={"help": "Environment name."})
    env_config: str = field(
        default='{"dim_room": [6, 6], "num_boxes": 1}', metadata={"help": "JSON environment keywords."}
    )
    max_turns: int = field(default=5, metadata={"help": "Turns per episode."})
    max_actions_per_turn: int = field(default=2, metadata={"help": "Actions per answer."})
    max_tokens_per_turn: int = field(default=400, metadata={"help": "Generation limit per reply."})


if __name__ == "__main__":
    train_agent(*parse_recipe_args(SokobanScriptArguments))
