# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""DeepCoder: write a program that passes the tests, run in a sandbox -- RAGEN-2 agent training with SNR-aware filtering and MI diagnostics.

Reward = fraction of tests passed, each run in an isolated, resource-limited process. Problems are
generated offline; `--env_config '{"dataset": "humaneval"}'` uses HumanEval (`pip install "trl-ragen2[code]"`).
The sandbox's isolation is probed at start, logged, and written on the model card and in `run_summary.json`;
a machine that offers only weak isolation stops the run unless `--env_config '{"allow_weak_isolation": true}'`
(see docs/environments/deepcoder.md).

CPU smoke run (tiny offline model):

    accelerate launch recipes/deepcoder.py --config recipes/configs/agent_cpu.yaml

One GPU (Qwen2.5-3B as in the paper, vLLM colocate), GRPO or PPO:

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/deepcoder.py \\
        --config recipes/configs/deepcoder.yaml [--algorithm ppo]
"""

from dataclasses import dataclass, field

from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, train_agent


@dataclass
class DeepcoderScriptArguments(AgentScriptArguments):
    env_name: str = field(default="deepcoder", metadata={"help": "Environment name."})
    env_config: str = field(default="{}", metadata={"help": "JSON environment keywords."})
    max_turns: int = field(default=1, metadata={"help": "Turns per episode."})
    max_actions_per_turn: int = field(default=1, metadata={"help": "Actions per answer."})
    max_tokens_per_turn: int = field(default=2048, metadata={"help": "Generation limit per reply."})


def main() -> None:
    from trl_ragen2_envs.deepcoder import sandbox_isolation

    script_args, training_args, model_args = parse_recipe_args(DeepcoderScriptArguments)
    isolation = sandbox_isolation(**script_args.env_kwargs)  # refuses weak isolation unless it is allowed
    train_agent(script_args, training_args, model_args, details={"Sandbox isolation": isolation})


if __name__ == "__main__":
    main()
