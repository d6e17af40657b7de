"""Building blocks shared by the scripts in `recipes/`: script arguments, datasets, model, trainer, end of run.

A recipe reads three argument groups with `TrlParser` -- [`AgentScriptArguments`], the trainer config and TRL's
`ModelConfig` -- and calls these functions in order. They take plain arguments, so they also serve notebooks.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .rollout import RolloutConfig


logger = logging.getLogger(__name__)

ALGORITHMS = ("grpo", "ppo")


@dataclass
class AgentScriptArguments:
    """
    Arguments of the agent-training recipes (besides the trainer config and `ModelConfig`).

    Parameters:
        env_name (`str`, defaults to `"webshop"`): Environment name (see `trl_ragen2_envs.ENVIRONMENTS`).
        env_config (`str`, defaults to `"{}"`): JSON object of environment constructor keywords.
        algorithm (`str`, defaults to `"grpo"`): `"grpo"` (SNRFilteredGRPOTrainer) or `"ppo"` (critic + GAE).
        num_train_prompts (`int`, defaults to `4096`): Training episodes (rows); each is played `num_generations`
            times per visit.
        num_eval_prompts (`int`, defaults to `512`): Validation episodes, one rollout each (RAGEN: 512).
        max_turns (`int`, defaults to `5`): Turns per episode.
        max_actions_per_turn (`int`, defaults to `2`): Actions executed per answer.
        max_actions_per_episode (`int`, *optional*): Action budget of an episode, shown in the prompt; defaults to
            RAGEN's per environment (e.g. 10 for Sokoban, 1 for MetaMathQA: raise it with `max_turns` for retries).
        max_tokens_per_turn (`int`, defaults to `400`): Generation limit of one reply (RAGEN: 400).
        eval_temperature (`float`, defaults to `0.5`): Sampling temperature of validation rollouts (RAGEN: 0.5).
        write_plots (`bool`, defaults to `True`): Write the training-curve and regime PNGs at the end of the run.
    """

    env_name: str = field(default="webshop", metadata={"help": "Environment name (trl_ragen2_envs.ENVIRONMENTS)."})
    env_config: str = field(default="{}", metadata={"help": "JSON object of environment constructor keywords."})
    algorithm: str = field(default="grpo", metadata={"help": "'grpo' or 'ppo' (critic + GAE)."})
    num_train_prompts: int = field(default=4096, metadata={"help": "Training episodes (dataset rows)."})
    num_eval_prompts: int = field(default=512, metadata={"help": "Validation episodes (RAGEN: 512)."})
    max_turns: int = field(default=5, metadata={"help": "Turns per episode."})
    max_actions_per_turn: int = field(default=2, metadata={"help": "Actions executed per answer."})
    max_actions_per_episode: int | None = field(
        default=None, metadata={"help": "Action budget of an episode (default: RAGEN's per environment)."}
    )
    max_tokens_per_turn: int = field(default=400, metadata={"help": "Generation limit per reply (RAGEN: 400)."})
    eval_temperature: float = field(default=0.5, metadata={"help": "Validation sampling temperature (RAGEN: 0.5)."})
    write_plots: bool = field(default=True, metadata={"help": "Write PNG plots at the end of the run."})

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        try:
            config = json.loads(self.env_config) if isinstance(self.env_config, str) else self.env_config
        except json.JSONDecodeError as error:
            raise ValueError(f"env_config must be a JSON object, got {self.env_config!r} ({error})") from None
        if not isinstance(config, dict):
            raise ValueError(f"env_config must be a JSON object of constructor keywords, got {self.env_config!r}")
        self.env_config = json.dumps(config, sort_keys=True)
        for name in ("num_train_prompts", "max_turns", "max_actions_per_turn", "max_tokens_per_turn"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_eval_prompts < 0:
            raise ValueError(f"num_eval_prompts must be >= 0, got {self.num_eval_prompts}")

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """The environment constructor keywords of `env_config`."""
        return json.loads(self.env_config)

    def rollout_config(self) -> RolloutConfig:
        """The turn-loop settings these arguments describe."""
        return RolloutConfig(
            max_turns=self.max_turns,
            max_actions_per_turn=self.max_actions_per_turn,
            max_actions_per_episode=self.max_actions_per_episode,
            max_tokens_per_turn=self.max_tokens_per_turn,
            eval_temperature=self.eval_temperature,
        )


def build_datasets(env: str, env_config: dict[str, Any], num_train: int, num_eval: int, *, eval_split="validation"):
    """Train and validation `datasets.Dataset`s of episode rows with disjoint seeds (`trl_ragen2_envs.datasets`).

    Environments that choose their instances by split themselves (WebShop's goals) get `split` in their config.
    """
    from datasets import Dataset

    from trl_ragen2_envs import get_env_class
    from trl_ragen2_envs.datasets import build_rows

    takes_split = "split" in get_env_class(env).__init__.__code__.co_varnames
    train_config = {**env_config, "split": "train"} if takes_split else env_config
    eval_config = {**env_config, "split": eval_split} if takes_split else env_config
    train = Dataset.from_list(build_rows(env, "train", num_train, env_config=train_config))
    evaluation = Dataset.from_list(build_rows(env, eval_split, num_eval, env_config=eval_config)) if num_eval else None
    return train, evaluation


def resolve_model_name(model_name_or_path: str) -> str:
    """`"tiny"` becomes the folder of the offline tiny model (saved once); anything else is returned unchanged."""
    from .tiny import is_tiny_model_name, tiny_model_path

    return tiny_model_path() if is_tiny_model_name(model_name_or_path) else model_name_or_path


def model_init_kwargs(model_args, training_args) -> dict[str, Any]:
    """The `from_pretrained` keywords TRL's own scripts pass (dtype, attention implementation, revision)."""
    kwargs = dict(
        revision=model_args.model_revision,
        trust_remote_code=getattr(training_args, "trust_remote_code", None),
        attn_implementation=model_args.attn_implementation,
        dtype=model_args.dtype,
    )
    kwargs.update(training_args.model_init_kwargs or {})
    return {key: value for key, value in kwargs.items() if value is not None}


def final_metrics(trainer) -> dict[str, float]:
    """The last logged value of every metric (train and eval), for the model card and the run summary."""
    last: dict[str, float] = {}
    for entry in trainer.state.log_history:
        for key, value in entry.items():
            if isinstance(value, int | float) and key not in ("epoch", "step"):
                last[key] = value
    return last


def finish_run(trainer, script_args: AgentScriptArguments, training_args, details: dict[str, str]) -> dict[str, float]:
    """Save the model, write plots and the model card (with `details` and the final metrics), push if asked."""
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json: the logs that plots and `trl-ragen2 summary` read
    metrics = final_metrics(trainer)
    keys = [k for k in sorted(metrics) if k.startswith(("eval_ragen2/env", "ragen2/env", "ragen2/filter/kept"))]
    trainer.model_card_details.update(details)
    trainer.model_card_details.update({f"final `{k}`": f"{metrics[k]:.4g}" for k in keys})
    if trainer.is_world_process_zero():
        trainer.create_model_card(model_name=Path(training_args.output_dir).name)
        if script_args.write_plots:
            try:
                from .plots import plot_run

                for path in plot_run(training_args.output_dir):
                    logger.info("wrote %s", path)
            except (ImportError, ValueError) as error:  # plots are a convenience: never fail a finished run
                logger.warning("could not write plots: %s", error)
        with open(os.path.join(training_args.output_dir, "run_summary.json"), "w") as f:
            json.dump({"details": details, "final_metrics": metrics}, f, indent=2)
    if training_args.push_to_hub:
        trainer.push_to_hub()
    return metrics


def trainer_classes(algorithm: str):
    """`(trainer class, config class)` for `"grpo"` or `"ppo"`."""
    if algorithm == "grpo":
        from .grpo_config import SNRFilteredGRPOConfig
        from .grpo_trainer import SNRFilteredGRPOTrainer

        return SNRFilteredGRPOTrainer, SNRFilteredGRPOConfig
    if algorithm == "ppo":
        from .ppo_config import SNRFilteredPPOConfig
        from .ppo_trainer import SNRFilteredPPOTrainer

        return SNRFilteredPPOTrainer, SNRFilteredPPOConfig
    raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")


def algorithm_from_args(argv: list[str]) -> str:
    """The `--algorithm` of a command line, else the `algorithm` of its `--config` YAML, else `"grpo"`.

    Recipes need it before parsing, to choose which trainer config the parser reads.
    """
    for index, arg in enumerate(argv):
        if arg.startswith("--algorithm="):
            return arg.split("=", 1)[1]
        if arg == "--algorithm" and index + 1 < len(argv):
            return argv[index + 1]
    for index, arg in enumerate(argv):
        path = arg.split("=", 1)[1] if arg.startswith("--config=") else None
        if arg == "--config" and index + 1 < len(argv):
            path = argv[index + 1]
        if path:
            import yaml

            with open(path) as f:
                return (yaml.safe_load(f) or {}).get("algorithm", "grpo")
    return "grpo"


def parse_recipe_args(script_args_cls, argv: list[str] | None = None):
    """Parse `(script args, trainer config, ModelConfig)` with `TrlParser`, choosing the config class by algorithm."""
    import sys

    from trl import ModelConfig, TrlParser

    argv = sys.argv[1:] if argv is None else argv
    config_cls = trainer_classes(algorithm_from_args(argv))[1]
    parser = TrlParser((script_args_cls, config_cls, ModelConfig))
    return parser.parse_args_and_config(args=argv)


def train_agent(script_args, training_args, model_args, *, env_config: dict[str, Any] | None = None,
                details: dict[str, str] | None = None):  # fmt: skip
    """Build the datasets, the trainer and the RAGEN rollout, train, and finish the run (see [`finish_run`]).

    Returns `(trainer, final metrics)`.
    """
    from trl import get_peft_config

    from .agent_rollout import RagenRollout, env_return
    from .tracking import MetricsJSONLCallback

    env_config = script_args.env_kwargs if env_config is None else env_config
    train_dataset, eval_dataset = build_datasets(
        script_args.env_name, env_config, script_args.num_train_prompts, script_args.num_eval_prompts
    )
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args)
    trainer_cls = trainer_classes(script_args.algorithm)[0]
    trainer = trainer_cls(
        model=resolve_model_name(model_args.model_name_or_path),
        reward_funcs=env_return,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset if training_args.eval_strategy != "no" else None,
        peft_config=get_peft_config(model_args),
        rollout_func=RagenRollout(script_args.rollout_config()),
        callbacks=[MetricsJSONLCallback()],  # output_dir/metrics.jsonl: plots of a run still in progress
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    steps = training_args.eval_steps or training_args.logging_steps
    if eval_dataset is not None and training_args.eval_strategy != "no" and trainer.state.global_step % steps:
        trainer.evaluate()  # validation of the final policy, for the model card and the summary
    details = {"Environment": script_args.env_name, "Algorithm": script_args.algorithm, **(details or {})}
    metrics = finish_run(trainer, script_args, training_args, details)
    if trainer.is_world_process_zero():
        print_summary(trainer, metrics, script_args.env_name)
    return trainer, metrics


def print_summary(trainer, metrics: dict[str, float], env_name: str) -> None:
    """Print the run's headline numbers: steps, kept fraction, reward, success rates, MI."""
    keys = [
        "ragen2/filter/kept_fraction",
        "reward",
        f"ragen2/env/{env_name}/success_rate",
        f"eval_ragen2/env/{env_name}/success_rate",
        "ragen2/mi/first_turn/retrieval_acc",
        "ragen2/mi/trajectory/mi_zscore_ema",
    ]
    print(f"steps: {trainer.state.global_step}")  # noqa: T201
    for key in keys:
        if key in metrics:
            print(f"{key}: {metrics[key]:.4f}")  # noqa: T201
