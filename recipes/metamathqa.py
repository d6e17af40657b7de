# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""MetaMathQA: answer grade-school word problems -- RAGEN-2 agent training with SNR-aware filtering and MI diagnostics.

One attempt as in RAGEN's code (reward 1/2^attempt with `--env_config '{"max_attempts": 3}'` and
`--max_turns 3`). Problems are generated offline; `data_path` reads MetaMathQA or GSM8K files.

CPU smoke run (tiny offline model):

    accelerate launch recipes/metamathqa.py --config recipes/configs/agent_cpu.yaml

One GPU (Qwen2.5-3B as in the paper, vLLM colocate), GRPO or PPO:

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/metamathqa.py \\
        --config recipes/configs/metamathqa.yaml [--algorithm ppo]
"""

from dataclasses import dataclass, field

from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, train_agent


@dataclass
class MetamathqaScriptArguments(AgentScriptArguments):
    env_name: str = field(default="metamathqa", metadata={"help": "Environment name."})
    env_config: str = field(default="{}", metadata={"help": "JSON environment keywords."})
    max_turns: int = field(default=1, metadata={"help": "Turns per episode."})
    max_actions_per_turn: int = field(default=1, metadata={"help": "Actions per answer."})
    max_tokens_per_turn: int = field(default=400, metadata={"help": "Generation limit per reply."})


if __name__ == "__main__":
    train_agent(*parse_recipe_args(MetamathqaScriptArguments))
