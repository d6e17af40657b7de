"""Helpers of the scripts in `recipes/`: their common arguments, the two-stage parse with the task's settings,
episode datasets, model keywords, the final validation and the run report (model card, plots, summary).

Each recipe parses `(AgentScriptArguments or its subclass, the trainer config, ModelConfig)` with
`parse_recipe_args`, then builds the trainer and trains in the file itself; these functions are the steps that
would otherwise be repeated in every recipe. They take plain arguments, so notebooks use them too.

A task's settings (`TASK_FIELDS`: turns, actions per turn, tokens per turn) live in one place, the top of its
paper config `recipes/configs/<task>.yaml`. `parse_recipe_args` reads them from there as the defaults of every run
of that recipe, so the shared CPU preset (`agent_cpu.yaml`) and any other `--config` play the task's episode
unless they set a field themselves. A recipe finds its task's YAML beside itself (`task_config`): in `configs/`
(the repository's layout) or next to the script (a recipe copied with its YAML). Without it, `--config` or the
command line must set every task field.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl_ragen2_envs.prompts import check_protocol

from .agents.rollout import RolloutConfig
from .grpo.algorithms import ALGORITHMS, CRITIC_ALGORITHMS, PAPER_ALGORITHMS
from .runs import keys


logger = logging.getLogger(__name__)

TASK_FIELDS = ("max_turns", "max_actions_per_turn", "max_tokens_per_turn")  # each task's YAML sets them


@dataclass
class AgentScriptArguments:
    """
    Arguments of the agent-training recipes (besides the trainer config and `ModelConfig`); each recipe subclasses
    it with its task's defaults.

    Parameters:
        env_config (`str`, defaults to `"{}"`): JSON object of environment constructor keywords.
        algorithm (`str`, defaults to `"grpo"`): the paper's Table 4 algorithm: `"grpo"` or `"drgrpo"`
            (SNRFilteredGRPOTrainer), `"ppo"` or `"dapo"` (SNRFilteredPPOTrainer: critic + GAE). It decides which
            trainer config the rest of the command line fills in, and sets RAGEN's loss aggregation and advantage
            for it (`trl_ragen2.grpo.algorithms.PAPER_ALGORITHMS`) unless the YAML or the command line sets them.
        num_train_prompts (`int`, defaults to `4096`): Training episodes (rows); each is played `num_generations`
            times per visit.
        num_eval_prompts (`int`, defaults to `512`): Validation episodes, one rollout each (RAGEN: 512).
        max_turns (`int`, defaults to `5`): Turns per episode.
        max_actions_per_turn (`int`, defaults to `2`): Actions executed per answer.
        max_actions_per_episode (`int`, *optional*): Action budget of an episode, shown in the prompt; defaults to
            RAGEN's per environment (e.g. 10 for Sokoban, 1 for MetaMathQA: raise it with `max_turns` for retries).
        max_tokens_per_turn (`int`, defaults to `400`): Generation limit of one reply (RAGEN: 400).
        eval_temperature (`float`, defaults to `0.5`): Sampling temperature of validation rollouts (RAGEN: 0.5).
        protocol (`str`, defaults to `"trl_ragen2"`): Prompt and penalty rules of the rollout, `"ragen"` or
            `"trl_ragen2"` (see `RolloutConfig.protocol`); the paper configs in `recipes/configs/` use `"ragen"`.
        write_plots (`bool`, defaults to `True`): Write the training-curve and regime PNGs at the end of the run.
    """

    env_config: str = field(default="{}", metadata={"help": "JSON object of environment constructor keywords."})
    algorithm: str = field(
        default="grpo", metadata={"help": "'grpo', 'drgrpo', 'ppo' or 'dapo' (the last two: critic + GAE)."}
    )
    num_train_prompts: int = field(default=4096, metadata={"help": "Training episodes (dataset rows)."})
    num_eval_prompts: int = field(default=512, metadata={"help": "Validation episodes (RAGEN: 512)."})
    max_turns: int = field(default=5, metadata={"help": "Turns per episode."})
    max_actions_per_turn: int = field(default=2, metadata={"help": "Actions executed per answer."})
    max_actions_per_episode: int | None = field(
        default=None, metadata={"help": "Action budget of an episode (default: RAGEN's per environment)."}
    )
    max_tokens_per_turn: int = field(default=400, metadata={"help": "Generation limit per reply (RAGEN: 400)."})
    eval_temperature: float = field(default=0.5, metadata={"help": "Validation sampling temperature (RAGEN: 0.5)."})
    protocol: str = field(
        default="trl_ragen2",
        metadata={"help": "Rollout protocol: 'ragen' (RAGEN's prompts and penalties) or 'trl_ragen2'."},
    )
    write_plots: bool = field(default=True, metadata={"help": "Write PNG plots at the end of the run."})

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}; pass --algorithm grpo or --algorithm ppo"
                " (or drgrpo, dapo)"
            )
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
        check_protocol(self.protocol)

    @property
    def uses_critic(self) -> bool:
        """Whether the algorithm trains a critic (`SNRFilteredPPOTrainer`): PPO and DAPO."""
        return self.algorithm in CRITIC_ALGORITHMS

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
            protocol=self.protocol,
        )


def task_config(recipe_file: str, env: str) -> Path | None:
    """The task's YAML of the recipe at `recipe_file`: `configs/<env>.yaml` beside it (the repository's layout), else
    `<env>.yaml` beside it (a recipe copied with its YAML); None when neither exists."""
    folder = Path(recipe_file).absolute().parent
    for path in (folder / "configs" / f"{env}.yaml", folder / f"{env}.yaml"):
        if path.is_file():
            return path
    return None


def task_defaults(path: Path) -> dict[str, Any]:
    """The `TASK_FIELDS` of a task's YAML; each must be there, so no task setting falls back to a generic default."""
    import yaml

    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    missing = [name for name in TASK_FIELDS if name not in config]
    if missing:
        raise ValueError(f"{path} must set the task's {', '.join(missing)} (every task YAML sets {TASK_FIELDS})")
    return {name: config[name] for name in TASK_FIELDS}


def _given_names(args: list[str]) -> set[str]:
    """The field names `args` sets: its `--flags` and the keys of its `--config` YAML."""
    import yaml

    names = {arg[2:].split("=", 1)[0].replace("-", "_") for arg in args if arg.startswith("--")}
    if "--config" in args and args.index("--config") + 1 < len(args):
        with open(args[args.index("--config") + 1], encoding="utf-8") as file:
            names |= set(yaml.safe_load(file) or {})
    return names


def parse_recipe_args(script_class: type = AgentScriptArguments, task_yaml: Path | None = None, args=None):
    """`(script args, trainer config, ModelConfig)` of a recipe from `args` (default: the command line).

    Precedence: the command line, then the `--config` YAML, then the task's settings from `task_yaml` (see the
    module docstring), then the dataclass defaults. `--algorithm` (command line or YAML) decides which trainer
    config the other flags fill in, so the parse has two stages, both with TRL's own parser:

    1. the script arguments alone (`parse_known_args` leaves the trainer and model flags aside; no abbreviation can
       take one of them for a script flag, and `--help` waits for the second stage);
    2. everything, with `SNRFilteredPPOConfig` for `--algorithm ppo` or `dapo`, else `SNRFilteredGRPOConfig`, the
       algorithm's `PAPER_ALGORITHMS` settings as defaults below the YAML and the command line: an unknown flag, or
       a PPO-only flag in a GRPO run, is an error.

    On CPU it then replaces a launcher's default of one thread by the process's share of the cores
    (`use_cpu_cores`), keeping a thread count the user set.
    """
    from trl import ModelConfig, TrlParser

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredPPOConfig

    args = list(sys.argv[1:] if args is None else args)
    defaults = task_defaults(task_yaml) if task_yaml is not None else {}
    if task_yaml is None and "--help" not in args and "-h" not in args:
        missing = [name for name in TASK_FIELDS if name not in _given_names(args)]
        if missing:
            raise ValueError(
                f"no task YAML beside the recipe, and neither --config nor the command line sets {', '.join(missing)}; "
                "copy the task's recipes/configs/<task>.yaml next to the script (or into configs/ beside it), or set them"
            )
    first = TrlParser(script_class, add_help=False, allow_abbrev=False)
    first.set_defaults_with_config(**defaults)
    script_args, _ = first.parse_args_and_config(args, return_remaining_strings=True)
    config_class = SNRFilteredPPOConfig if script_args.uses_critic else SNRFilteredGRPOConfig
    parser = TrlParser((script_class, config_class, ModelConfig))
    parser.set_defaults_with_config(**defaults, **PAPER_ALGORITHMS[script_args.algorithm])
    parsed = parser.parse_args_and_config(args)
    use_cpu_cores(parsed[1])  # undo a launcher's OMP_NUM_THREADS=1 default on CPU (see `cpu_thread_count`)
    return parsed


# The environment variables a launcher leaves in its workers: `accelerate launch` (both its simple launcher and its
# torchrun one) and torchrun. A process without any of them was not started by one of the two.
LAUNCHER_MARKERS = ("ACCELERATE_DYNAMO_BACKEND", "TORCHELASTIC_RUN_ID")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
THREAD_FLAGS = ("--num_cpu_threads_per_process", "--num-cpu-threads-per-process")
LOCAL_SIZE_VARIABLES = (
    "LOCAL_WORLD_SIZE",
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_SIZE",
)


def cpu_thread_count(
    environ: Mapping[str, str], cores: int, launcher_environ: Mapping[str, str] | None, launcher_argv=()
) -> int | None:
    """The torch thread count of a CPU process whose `OMP_NUM_THREADS=1` is a launcher's default, else None (keep).

    `accelerate launch` without `use_cpu` (no `--config_file`, or one with `use_cpu: false`, and no `--cpu`) gives
    its worker `OMP_NUM_THREADS=1` unless its own environment sets it (accelerate/commands/launch.py,
    `_validate_launch_command`: `get_int_from_env(["OMP_NUM_THREADS"], 1)`), and torchrun does the same with more
    than one process per node (torch/distributed/run.py). The worker's environment alone cannot tell that default
    from a user's `OMP_NUM_THREADS=1`; the launcher's does: `launcher_environ` is the environment the launcher
    (the worker's parent) was started with, `launcher_argv` its command line. The value is the user's, and kept,
    when the launcher was started with `OMP_NUM_THREADS` or `MKL_NUM_THREADS` or given
    `--num_cpu_threads_per_process`; also when `environ` has no launcher's marker (`LAUNCHER_MARKERS`), when the
    launcher's environment is unknown (None), or when the value is anything but 1.

    Otherwise the process gets its share of the `cores` it may run on: `cores // local processes` (torchrun's
    `LOCAL_WORLD_SIZE`, or MPI's local size; 1 if none), at least 1.
    """
    if environ.get("OMP_NUM_THREADS", "").strip() != "1" or not any(name in environ for name in LAUNCHER_MARKERS):
        return None
    if launcher_environ is None or any(name in launcher_environ for name in THREAD_VARIABLES):
        return None
    if any(arg.split("=", 1)[0] in THREAD_FLAGS for arg in launcher_argv):
        return None
    local_size = next((int(environ[name]) for name in LOCAL_SIZE_VARIABLES if environ.get(name, "").isdigit()), 1)
    return max(1, cores // max(1, local_size))


def _launcher() -> tuple[dict[str, str] | None, list[str]]:
    """The environment the parent process was started with (None if unreadable) and its command line."""
    try:
        import psutil  # a dependency of accelerate

        parent = psutil.Process(os.getppid())
        return parent.environ(), parent.cmdline()
    except Exception:  # no psutil, no permission, or a platform without it: the value stays
        return None, []


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a container's or `taskset`'s), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def use_cpu_cores(training_args) -> int | None:
    """On CPU (`use_cpu`, or no accelerator), replace a launcher's default of one thread by the process's share of
    the cores (`cpu_thread_count`); a thread count the user set is kept. Returns the count it set, else None."""
    import torch

    on_cpu = getattr(training_args, "use_cpu", False) or not (
        torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()
    )
    if not on_cpu:
        return None
    count = cpu_thread_count(os.environ, available_cores(), *_launcher())
    if count is None or count == torch.get_num_threads():
        return None
    torch.set_num_threads(count)
    os.environ["OMP_NUM_THREADS"] = str(count)  # for the processes this one starts
    logger.warning(
        "OMP_NUM_THREADS=1 is the launcher's default, not yours: using %d CPU threads per process (set "
        "OMP_NUM_THREADS or --num_cpu_threads_per_process to choose)",
        count,
    )
    return count


def build_datasets(
    env: str, env_config: dict[str, Any], num_train: int, num_eval: int, *, eval_split="validation",
    protocol: str = "trl_ragen2", max_actions: int | None = None,
):  # fmt: skip
    """Train and validation `datasets.Dataset`s of episode rows with disjoint seeds (`trl_ragen2_envs.datasets`).

    `protocol` and `max_actions` make the rows' prompts those the rollout renders (`build_rows`).

    Environments that choose their instances by split themselves (WebShop's goals) get `split` in their config.
    """
    from datasets import Dataset

    from trl_ragen2_envs import get_env_class
    from trl_ragen2_envs.datasets import build_rows

    takes_split = get_env_class(env).takes_split
    train_config = {**env_config, "split": "train"} if takes_split else env_config
    eval_config = {**env_config, "split": eval_split} if takes_split else env_config
    options = dict(protocol=protocol, max_actions=max_actions)
    train = Dataset.from_list(build_rows(env, "train", num_train, env_config=train_config, **options))
    evaluation = (
        Dataset.from_list(build_rows(env, eval_split, num_eval, env_config=eval_config, **options))
        if num_eval
        else None
    )
    return train, evaluation


def resolve_model_name(model_name_or_path: str) -> str:
    """The offline names (`"tiny"`, `"smollm2-135m"`) become their cached folders; anything else is unchanged."""
    from .models.loader import resolve_local_model

    return resolve_local_model(model_name_or_path)


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


def evaluate_final_policy(trainer) -> None:
    """Validate the final policy when the last training step was not an evaluation step (for the card and summary)."""
    args = trainer.args
    if trainer.eval_dataset is None or args.eval_strategy == "no":
        return
    steps = args.eval_steps or args.logging_steps
    if trainer.state.global_step % steps:
        trainer.evaluate()


def write_run_report(trainer, env_name: str, details: dict[str, str], *, write_plots: bool = True) -> dict[str, float]:
    """After `save_model` and `save_state`: the model card (with `details` and the final metrics), the plots,
    `run_summary.json`, and the printed summary. Returns the final metrics."""
    output_dir = trainer.args.output_dir
    metrics = final_metrics(trainer)
    shown = (keys.evaluation(keys.ENV), keys.ENV, keys.filter_key("kept"))  # episode statistics, the kept share
    final = [k for k in sorted(metrics) if k.startswith(shown)]
    trainer.model_card_details.update(details)
    trainer.model_card_details.update({f"final `{k}`": f"{metrics[k]:.4g}" for k in final})
    if trainer.is_world_process_zero():
        trainer.create_model_card(model_name=Path(output_dir).name)
        if write_plots:
            try:
                from .plots.figures import plot_run

                for path in plot_run(output_dir):
                    logger.info("wrote %s", path)
            except (ImportError, ValueError) as error:  # plots are a convenience: never fail a finished run
                logger.warning("could not write plots: %s", error)
        with open(os.path.join(output_dir, "run_summary.json"), "w") as f:
            json.dump({"details": details, "final_metrics": metrics}, f, indent=2)
        print_summary(trainer, metrics, env_name)
    return metrics


def print_summary(trainer, metrics: dict[str, float], env_name: str) -> None:
    """Print the run's headline numbers: steps, kept fraction, reward, success rates, MI."""
    headline = [
        keys.FILTER_KEPT_FRACTION,
        "reward",
        keys.env_key(env_name, "success_rate"),
        keys.evaluation(keys.env_key(env_name, "success_rate")),
        keys.mi_key("first_turn", "retrieval_acc"),
        keys.mi_key("trajectory", "mi_zscore_ema"),
    ]
    print(f"steps: {trainer.state.global_step}")  # noqa: T201
    for key in headline:
        if key in metrics:
            print(f"{key}: {metrics[key]:.4f}")  # noqa: T201
