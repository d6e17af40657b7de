# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""SearchQA: answer multi-hop questions with a BM25 search engine -- RAGEN-2 agent training with SNR-aware filtering and MI diagnostics.

Actions `search[query]` and `finish[answer]`, up to 10 steps; reward 1 on exact match, else F1 if >= 0.3.
The default corpus is a generated multi-hop world; `hotpotqa_path` reads HotpotQA, `retriever_url` a server.

CPU smoke run (tiny offline model):

    accelerate launch recipes/searchqa.py --config recipes/configs/agent_cpu.yaml

One GPU (Qwen2.5-3B as in the paper, vLLM colocate), GRPO or PPO:

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/searchqa.py \\
        --config recipes/configs/searchqa.yaml [--algorithm ppo]
"""

from dataclasses import dataclass, field

from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, train_agent


@dataclass
class SearchqaScriptArguments(AgentScriptArguments):
    env_name: str = field(default="searchqa", metadata={"help": "Environment name."})
    env_config: str = field(default="{}", metadata={"help": "JSON environment keywords."})
    max_turns: int = field(default=10, metadata={"help": "Turns per episode."})
    max_actions_per_turn: int = field(default=1, metadata={"help": "Actions per answer."})
    max_tokens_per_turn: int = field(default=300, metadata={"help": "Generation limit per reply."})


if __name__ == "__main__":
    train_agent(*parse_recipe_args(SearchqaScriptArguments))
