"""Training and evaluation prompts for any registered environment, as plain lists of dict rows.

Each row opens one episode in RAGEN's prompt format:

    {"prompt": [system message, turn-1 user message], "env": "countdown", "seed": 7,
     "env_config": '{"plus_minus_only": true}', "split": "train"}

`env_config` is the JSON text of the environment's constructor keywords, so datasets mixing environments keep one
Arrow schema; `make_env(row["env"], **json.loads(row["env_config"]))` followed by `reset(row["seed"])` rebuilds
the episode. Wrap rows with `datasets.Dataset.from_list(rows)`; this module imports neither `datasets` nor torch.

Seeds: split `s` uses seeds `SPLIT_SEED_START[s] + i` for row index `i` in `[0, SEEDS_PER_SPLIT)`, so the
train, validation and test seeds never overlap and the same arguments always give the same rows. For the
procedural generators, disjoint seeds mean independent draws (a repeated instance is as unlikely as the generator
makes it); an environment that reads its problems from a file maps the seed onto the file (`seed % len(file)`),
so give each split its own file through `env_config`.

`read_records`, which reads the local record files of the file-backed environments, lives in `problem_files`.
"""

from __future__ import annotations

import json
from typing import Any

from . import make_env
from .base import require_int
from .problem_files import read_records  # noqa: F401 -- public here as before
from .prompts import check_protocol, initial_messages, prompt_budget


SPLITS = ("train", "validation", "test")
SEEDS_PER_SPLIT = 100_000_000
SPLIT_SEED_START = {split: index * SEEDS_PER_SPLIT for index, split in enumerate(SPLITS)}


# ---------------------------------------------------------------------------------------------------------------
# Seeds and rows


def split_seed(split: str, index: int) -> int:
    """The environment seed of row `index` of `split`."""
    if split not in SPLIT_SEED_START:
        raise ValueError(f"split={split!r} is not a known split; choose one of {list(SPLITS)}")
    if not 0 <= index < SEEDS_PER_SPLIT:
        raise ValueError(f"row index {index} is outside [0, {SEEDS_PER_SPLIT}) of split {split!r}")
    return SPLIT_SEED_START[split] + index


def env_config_json(env_config: dict[str, Any] | None) -> str:
    """Constructor keywords as canonical JSON text (sorted keys); `{}` when there are none."""
    if env_config is None:
        return "{}"
    if not isinstance(env_config, dict):
        raise TypeError(f"env_config must be a dict of constructor keywords, got {type(env_config).__name__}")
    try:
        return json.dumps(env_config, sort_keys=True)
    except TypeError as error:
        raise TypeError(
            f"env_config must be JSON-serialisable (str, int, float, bool, lists, dicts): {error}"
        ) from None


def row_seed(value: Any, *, allow_none: bool = False) -> int | None:
    """A row's `seed` as an int: a non-negative integer (None too with `allow_none`: a random instance), else a
    `ValueError` naming the column, the value and its type."""
    if value is None and allow_none:
        return None
    return require_int(
        "seed",
        value,
        0,
        "the dataset's seed column must hold non-negative integers (build rows with trl_ragen2_envs.datasets."
        "build_rows, or cast the column, e.g. dataset.cast_column('seed', datasets.Value('int64')))",
    )


def parse_env_config(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """The constructor keywords of a row's `env_config` (JSON text, a dict, or empty)."""
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return dict(value)
    if not isinstance(value, str):
        raise TypeError(f"env_config must be JSON text or a dict, got {type(value).__name__}")
    try:
        config = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"env_config is not valid JSON ({error}): {value[:200]!r}") from None
    if not isinstance(config, dict):
        raise TypeError(f"env_config must be a JSON object of constructor keywords, got {value[:200]!r}")
    return config


def build_rows(
    env: str,
    split: str,
    num_rows: int,
    *,
    env_config: dict[str, Any] | None = None,
    max_actions: int | None = None,
    max_tokens: int | None = None,
    start_index: int = 0,
    protocol: str = "trl_ragen2",
) -> list[dict[str, Any]]:
    """`num_rows` episode-opening rows of environment `env` for `split`.

    Args:
        env: A name in `trl_ragen2_envs.ENVIRONMENTS`.
        split: "train", "validation" or "test"; picks the seed range.
        num_rows: Number of rows (one episode each).
        env_config: Constructor keywords of the environment.
        max_actions: Actions per episode shown as "You have {k} actions left"; defaults to RAGEN's for `env`.
        max_tokens: The "Max response length" shown in the prompt; defaults to RAGEN's for `env`.
        start_index: First row index within the split, to extend a dataset without repeating seeds.
        protocol: The prompt protocol of the rollout that plays the rows (`trl_ragen2_envs.prompts.PROTOCOLS`), so
            a row's prompt is the one the rollout renders.
    """
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    if start_index < 0:
        raise ValueError(f"start_index must be >= 0, got {start_index}")
    max_actions, max_tokens = prompt_budget(env, max_actions, max_tokens)
    check_protocol(protocol)
    config_text = env_config_json(env_config)
    split_seed(split, start_index)  # validates the split name
    if num_rows == 0:
        return []
    split_seed(split, start_index + num_rows - 1)  # the whole range stays inside the split
    environment = make_env(env, **(env_config or {}))
    rows = []
    try:
        for index in range(start_index, start_index + num_rows):
            seed = split_seed(split, index)
            observation = environment.reset(seed=seed)
            prompt = initial_messages(
                environment, observation, actions_left=max_actions, max_tokens=max_tokens, protocol=protocol
            )
            rows.append({"prompt": prompt, "env": env, "seed": seed, "env_config": config_text, "split": split})
    finally:
        environment.close()
    return rows


def build_mixed_rows(
    specs: list[dict[str, Any]],
    split: str,
    *,
    start_index: int = 0,
    protocol: str = "trl_ragen2",
    **budget: int | None,
) -> list[dict[str, Any]]:
    """Rows of several environments, interleaved evenly and deterministically.

    Each spec is a dict with `env`, `num_rows` and optionally `env_config`, `max_actions`, `max_tokens`
    (`budget` keywords give defaults for the last two); `protocol` is that of `build_rows`. Rows are spread so that every stretch of the result holds
    the environments in proportion to their `num_rows`. Two specs with the same `env` get consecutive seed ranges,
    so they never share a seed.
    """
    unknown = set(budget) - {"max_actions", "max_tokens"}
    if unknown:
        raise TypeError(f"build_mixed_rows got unexpected keywords {sorted(unknown)}")
    next_index: dict[str, int] = {}
    keyed_rows = []
    for spec_position, spec in enumerate(specs):
        if not isinstance(spec, dict) or "env" not in spec or "num_rows" not in spec:
            raise ValueError(f"specs[{spec_position}] must be a dict with 'env' and 'num_rows', got {spec!r}")
        extra = set(spec) - {"env", "num_rows", "env_config", "max_actions", "max_tokens"}
        if extra:
            raise ValueError(f"specs[{spec_position}] has unknown keys {sorted(extra)}")
        name, count = spec["env"], spec["num_rows"]
        first = next_index.get(name, start_index)
        rows = build_rows(
            name,
            split,
            count,
            env_config=spec.get("env_config"),
            max_actions=spec.get("max_actions", budget.get("max_actions")),
            max_tokens=spec.get("max_tokens", budget.get("max_tokens")),
            start_index=first,
            protocol=protocol,
        )
        next_index[name] = first + count
        # Row j of a spec with n rows sits at (j + 1/2) / n of the way through the mix.
        keyed_rows.extend((((2 * j + 1) / (2 * count)), spec_position, row) for j, row in enumerate(rows))
    keyed_rows.sort(key=lambda item: (item[0], item[1]))
    return [row for _, _, row in keyed_rows]
