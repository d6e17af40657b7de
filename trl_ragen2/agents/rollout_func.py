"""The RAGEN rollout as a TRL `rollout_func`, its reward function, per-environment metrics and evaluation.

```python
from trl_ragen2 import RagenRollout, SNRFilteredGRPOTrainer, env_return

rollout = RagenRollout(RolloutConfig(max_turns=5, max_actions_per_turn=2, protocol="ragen"))
trainer = SNRFilteredGRPOTrainer(model, reward_funcs=env_return, args=args, train_dataset=rows_dataset,
                                 rollout_func=rollout)
```

Dataset rows carry `env`, `seed` and `env_config` (`trl_ragen2_envs.datasets.build_rows`); the G rollouts of a
group share their row's seed, so they play the same instance. `SNRFilteredGRPOTrainer` hands the rollout its rows
directly. A plain `trl.GRPOTrainer` passes only the prompts, so there the rollout finds each row by its prompt:
give it the datasets (`RagenRollout(config, datasets=[train, eval])`); rows whose prompts are identical must then
be the same instance (true for `build_rows`, whose prompts show the initial state).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ..runs.keys import ENV, POOLED_ENV
from .generation import TrainerGeneration
from .rollout import (
    ROLLOUT_STAT_KEYS,
    Episode,
    EpisodeSpec,
    RolloutConfig,
    RolloutEngine,
    check_episode_metrics,
)


def env_return(completions, ragen2_return, **kwargs) -> list[float]:
    """Reward function: the trajectory return the RAGEN rollout computed (environment rewards + format penalties)."""
    return [float(value) for value in ragen2_return]


# The SNR trainers read this reward straight from the rollout's output, so they know the selection before TRL's
# old-log-prob, reference and importance-sampling passes and skip those passes on the rows the filter drops.
env_return.rollout_field = "ragen2_return"


def aggregate_env_metrics(stats: Iterable[tuple[str, dict[str, float]]]) -> dict[str, float]:
    """Per-environment metrics from `(env name, Episode.stats())` pairs, keyed `<env>/<metric>`.

    `success_rate`, `mean_return`, `turns` and `context_limit_rate` average over episodes; `valid_action_rate` is
    valid actions over attempted actions, `format_error_rate` format errors over turns and `env_error_rate` actions
    the environment failed to serve (`info["env_error"]`, e.g. a search server down) over attempted actions, all
    pooled. Any other key is an environment's own episode metric (`TextEnv.episode_metrics`): it averages over the
    episodes of that environment that report it, and a name the rollout's metrics use raises a `ValueError`.
    """
    grouped: dict[str, list[dict[str, float]]] = defaultdict(list)
    for env, values in stats:
        grouped[env].append(values)
    metrics = {}
    for env in sorted(grouped):
        rows = grouped[env]
        total = {key: sum(row[key] for row in rows) for key in rows[0] if key in ROLLOUT_STAT_KEYS}
        count = len(rows)
        metrics[f"{env}/success_rate"] = total["success"] / count
        metrics[f"{env}/mean_return"] = total["return"] / count
        metrics[f"{env}/turns"] = total["turns"] / count
        metrics[f"{env}/context_limit_rate"] = total["context_limited"] / count
        metrics[f"{env}/valid_action_rate"] = total["valid_actions"] / total["actions"] if total["actions"] else 0.0
        metrics[f"{env}/format_error_rate"] = total["format_errors"] / total["turns"] if total["turns"] else 0.0
        env_errors = total.get("env_errors", 0.0)
        metrics[f"{env}/env_error_rate"] = env_errors / total["actions"] if total["actions"] else 0.0
        own = [{key: value for key, value in row.items() if key not in ROLLOUT_STAT_KEYS} for row in rows]
        for row in own:
            check_episode_metrics(row, f"the episode statistics of {env!r}")
        for key in sorted({key for row in own for key in row}):
            values = [row[key] for row in own if key in row]
            metrics[f"{env}/{key}"] = sum(values) / len(values)
    return metrics


def _prompt_key(prompt: Any) -> str:
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


class RagenRollout:
    """A `rollout_func` that plays each dataset row's environment in the RAGEN protocol.

    Args:
        config (`RolloutConfig`, *optional*): Turn-loop settings. `max_completion_tokens` defaults to the trainer's
            `max_completion_length`.
        datasets (iterable of datasets or row lists, *optional*): Needed only with a plain `trl.GRPOTrainer`, to
            find each prompt's row.

    Returns, besides TRL's `prompt_ids`, `completion_ids`, `logprobs` and `env_mask`, per-row fields that TRL hands to
    reward functions: `ragen2_return`, `ragen2_success`, `turn_spans`, `turn_rewards`.
    """

    def __init__(self, config: RolloutConfig | None = None, *, datasets: Iterable[Iterable[dict]] = ()):
        self.config = config or RolloutConfig()
        self._rows_by_prompt: dict[str, dict[str, Any]] = {}
        for dataset in datasets:
            self.register_rows(dataset)
        self.last_episodes: list[Episode] = []

    def register_rows(self, rows: Iterable[dict[str, Any]]) -> None:
        """Index rows by prompt, for trainers that pass only prompts (plain `trl.GRPOTrainer`)."""
        for row in rows:
            self._rows_by_prompt[_prompt_key(row["prompt"])] = {k: row.get(k) for k in ("env", "seed", "env_config")}

    def _rows_for(self, prompts: Sequence[Any], trainer) -> list[dict[str, Any]]:
        rows = getattr(trainer, "generation_rows", None)  # SNRFilteredGRPOTrainer's rows of the batch
        if rows is not None and len(rows) == len(prompts):
            return rows
        found = []
        for prompt in prompts:
            row = self._rows_by_prompt.get(_prompt_key(prompt))
            if row is None:
                raise ValueError(
                    "RagenRollout cannot tell which environment and seed this prompt belongs to: with a plain "
                    "trl.GRPOTrainer, pass the datasets to the rollout (RagenRollout(config, datasets=[train_dataset, "
                    "eval_dataset])), or train with SNRFilteredGRPOTrainer, which hands the rollout its rows"
                )
            found.append(row)
        return found

    def engine_for(self, trainer) -> RolloutEngine:
        """A rollout engine bound to the trainer's tokenizer, token budget and processes."""
        config = self.config
        if config.max_completion_tokens is None:
            config = RolloutConfig(**{**vars(config), "max_completion_tokens": trainer.args.max_completion_length})
        accelerator = trainer.accelerator

        def max_active(count: int) -> int:
            if accelerator.num_processes == 1:
                return count
            return int(accelerator.gather(torch.tensor([count], device=accelerator.device)).max().item())

        return RolloutEngine(
            trainer.processing_class,
            config,
            chat_template_kwargs=getattr(trainer, "chat_template_kwargs", None),
            max_active_across_processes=max_active,
            show_progress=accelerator.is_main_process and not trainer.args.disable_tqdm,
        )

    def __call__(self, prompts: list[Any], trainer) -> dict[str, Any]:
        mode = "train" if trainer.model.training else "eval"
        group_size = trainer.num_generations if mode == "train" else trainer.num_generations_eval
        specs = [EpisodeSpec.from_row(row) for row in self._rows_for(prompts, trainer)]
        temperature = self.config.eval_temperature if mode == "eval" else None
        generation = TrainerGeneration(trainer, temperature=temperature)
        episodes = self.engine_for(trainer).run(specs, generation, group_size=group_size)
        self.last_episodes = episodes
        log_env_metrics(trainer, episodes, mode)
        logprobs = [e.logprobs for e in episodes]
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": None if any(lp is None for lp in logprobs) else logprobs,
            "env_mask": [e.env_mask for e in episodes],
            "ragen2_return": [e.total_return for e in episodes],
            "ragen2_success": [e.success for e in episodes],
            "turn_spans": [e.turn_spans for e in episodes],
            "turn_rewards": [e.turn_rewards for e in episodes],
        }


def log_env_metrics(trainer, episodes: Sequence[Episode], mode: str) -> dict[str, float]:
    """Gather every process's episode statistics and append `ragen2/env/<env>/<metric>` to the trainer's metrics.

    A batch that mixes environments also gets `ragen2/env/all/<metric>` over all its episodes (the rollout's own
    metrics only: an environment's own episode metrics are logged under its name alone).
    """
    from accelerate.utils import gather_object

    local = [(episode.spec.env, episode.stats()) for episode in episodes]
    gathered = gather_object(local) if trainer.accelerator.num_processes > 1 else local
    metrics = aggregate_env_metrics(gathered)
    if len({env for env, _ in gathered}) > 1:  # a mixed-environment batch: also every episode pooled, as "all"
        shared = [{key: value for key, value in stats.items() if key in ROLLOUT_STAT_KEYS} for _, stats in gathered]
        metrics.update(aggregate_env_metrics((POOLED_ENV, stats) for stats in shared))
    for key, value in metrics.items():  # key: <env>/<metric>
        trainer._metrics[mode][ENV + key].append(value)
    return metrics


def evaluate_episodes(engine: RolloutEngine, generate, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Play one episode per row with `generate` and report the per-environment metrics and the episodes.

    Works with any backend of `trl_ragen2.agents.generation` (a trainer, a plain model, a scripted policy).
    """
    episodes = engine.run([EpisodeSpec.from_row(row) for row in rows], generate)
    metrics = aggregate_env_metrics((episode.spec.env, episode.stats()) for episode in episodes)
    returns = [episode.total_return for episode in episodes]
    metrics["all/success_rate"] = sum(episode.success for episode in episodes) / max(len(episodes), 1)
    metrics["all/mean_return"] = sum(returns) / len(returns) if returns else math.nan
    return {"metrics": metrics, "episodes": episodes}
