"""Dataset rows: schema, deterministic disjoint seed splits, mixed-environment interleaving, record files."""

import importlib.util
import itertools
import json
import os

import pytest

from trl_ragen2_envs import make_env
from trl_ragen2_envs.datasets import (
    SEEDS_PER_SPLIT,
    SPLIT_SEED_START,
    SPLITS,
    build_mixed_rows,
    build_rows,
    parse_env_config,
    read_records,
    split_seed,
)
from trl_ragen2_envs.problem_files import load_problem_file
from trl_ragen2_envs.prompts import initial_messages


def test_row_schema_and_content():
    rows = build_rows("countdown", "validation", 3, env_config={"plus_minus_only": True})
    assert [row["seed"] for row in rows] == [SPLIT_SEED_START["validation"] + i for i in range(3)]
    env = make_env("countdown", plus_minus_only=True)
    for row in rows:
        assert set(row) == {"prompt", "env", "seed", "env_config", "split"}
        assert (row["env"], row["split"], row["env_config"]) == (
            "countdown",
            "validation",
            '{"plus_minus_only": true}',
        )
        # the row rebuilds its episode: same env, same seed, same first observation
        rebuilt = make_env(row["env"], **json.loads(row["env_config"]))
        observation = rebuilt.reset(seed=row["seed"])
        assert row["prompt"] == initial_messages(env, observation, actions_left=1, max_tokens=100)
        assert "You have 1 actions left" in row["prompt"][1]["content"]


def test_budget_overrides_reach_the_prompt():
    (row,) = build_rows("metamathqa", "test", 1, env_config={"max_attempts": 3}, max_actions=3, max_tokens=256)
    assert "You have 3 actions left" in row["prompt"][1]["content"]
    assert "Max response length: 256 words" in row["prompt"][1]["content"]


def test_rows_are_deterministic_and_extendable():
    first = build_rows("metamathqa", "train", 6)
    assert first == build_rows("metamathqa", "train", 6)
    assert first == build_rows("metamathqa", "train", 3) + build_rows("metamathqa", "train", 3, start_index=3)
    assert build_rows("countdown", "train", 0) == []


def test_splits_are_disjoint():
    seeds = {split: {row["seed"] for row in build_rows("countdown", split, 20)} for split in SPLITS}
    assert not seeds["train"] & seeds["validation"]
    assert not seeds["train"] & seeds["test"]
    assert not seeds["validation"] & seeds["test"]
    # the ranges themselves never overlap, whatever the row index
    ranges = sorted((split_seed(s, 0), split_seed(s, SEEDS_PER_SPLIT - 1)) for s in SPLITS)
    assert all(previous[1] < following[0] for previous, following in itertools.pairwise(ranges))
    prompts = {split: {row["prompt"][1]["content"] for row in build_rows("countdown", split, 20)} for split in SPLITS}
    assert not prompts["train"] & prompts["test"]


def test_argument_errors():
    with pytest.raises(ValueError, match="split='dev'"):
        build_rows("countdown", "dev", 2)
    with pytest.raises(ValueError, match="num_rows must be >= 0"):
        build_rows("countdown", "train", -1)
    with pytest.raises(ValueError, match="outside"):
        build_rows("countdown", "train", 2, start_index=SEEDS_PER_SPLIT - 1)
    with pytest.raises(ValueError, match="not a known environment"):
        build_rows("chess", "train", 1, max_actions=1, max_tokens=10)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        build_rows("countdown", "train", 1, env_config={"data_path": object()})


def test_parse_env_config():
    assert parse_env_config(None) == parse_env_config("") == {}
    assert parse_env_config('{"max_attempts": 2}') == {"max_attempts": 2}
    assert parse_env_config({"a": 1}) == {"a": 1}
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_env_config("{oops")
    with pytest.raises(TypeError, match="JSON object"):
        parse_env_config("[1, 2]")


def test_mixed_rows_interleave_deterministically():
    specs = [
        {"env": "countdown", "num_rows": 4},
        {"env": "metamathqa", "num_rows": 2, "env_config": {"max_attempts": 2}, "max_actions": 2},
        {"env": "countdown", "num_rows": 2, "env_config": {"plus_minus_only": True}},
    ]
    rows = build_mixed_rows(specs, "train")
    assert rows == build_mixed_rows(specs, "train")
    # positions (j + 1/2) / n: countdown 1/8 3/8 5/8 7/8, metamathqa 1/4 3/4, countdown (+/-) 1/4 3/4
    order = [(row["env"], row["env_config"]) for row in rows]
    a, b, c = ("countdown", "{}"), ("metamathqa", '{"max_attempts": 2}'), ("countdown", '{"plus_minus_only": true}')
    assert order == [a, b, c, a, a, b, c, a]
    # the two countdown specs use consecutive seeds, so no countdown seed repeats
    countdown_seeds = [row["seed"] for row in rows if row["env"] == "countdown"]
    assert sorted(countdown_seeds) == list(range(6))
    assert "You have 2 actions left" in rows[1]["prompt"][1]["content"]


def test_mixed_rows_keep_one_arrow_schema():
    from datasets import Dataset

    rows = build_mixed_rows(
        [{"env": "countdown", "num_rows": 3}, {"env": "metamathqa", "num_rows": 3, "env_config": {"max_attempts": 2}}],
        "test",
    )
    dataset = Dataset.from_list(rows)
    assert dataset.column_names == ["prompt", "env", "seed", "env_config", "split"]
    assert dataset[1]["env_config"] == '{"max_attempts": 2}' and dataset[0]["env_config"] == "{}"


def test_mixed_rows_spec_errors():
    with pytest.raises(ValueError, match=r"specs\[0\] must be a dict"):
        build_mixed_rows([{"env": "countdown"}], "train")
    with pytest.raises(ValueError, match="unknown keys"):
        build_mixed_rows([{"env": "countdown", "num_rows": 1, "seed": 3}], "train")
    with pytest.raises(TypeError, match="unexpected keywords"):
        build_mixed_rows([], "train", num_rows=3)


@pytest.mark.parametrize("name", ["sokoban", "frozen_lake"])
def test_rows_for_grid_envs(name):
    if importlib.util.find_spec(f"trl_ragen2_envs.{name}") is None:
        pytest.skip(f"the {name} module is not present")
    rows = build_rows(name, "train", 2)
    env = make_env(name)
    assert rows[0]["prompt"] == initial_messages(env, env.reset(seed=rows[0]["seed"]), actions_left=10, max_tokens=120)
    assert rows[0]["prompt"] != rows[1]["prompt"]


def test_read_records_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_records(tmp_path / "missing.json")
    listless = tmp_path / "data.json"
    listless.write_text('{"target": 3}')
    with pytest.raises(ValueError, match="must hold a list of objects"):
        read_records(listless)
    scalars = tmp_path / "scalars.jsonl"
    scalars.write_text("1\n2\n")
    with pytest.raises(TypeError, match="record 0 must be an object"):
        read_records(scalars)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no"):
        read_records(empty)


def _squared(record, *, where):
    if not isinstance(record.get("x"), int):
        raise ValueError(f"{where}: field 'x' must be an integer")
    return record["x"] ** 2


def _even(value):
    return value % 2 == 0


def test_load_problem_file_parses_limits_filters_and_caches_per_file_version(tmp_path):
    path = tmp_path / "numbers.jsonl"
    path.write_text("\n".join(json.dumps({"x": x}) for x in (1, 2, 3, 4)))
    load = {"what": "numbers", "expected": "a numbers file"}
    problems = load_problem_file(path, _squared, **load)
    assert problems == (1, 4, 9, 16)
    assert load_problem_file(str(path), _squared, **load) is problems  # one parsed copy per file version
    assert load_problem_file(path, _squared, max_records=3, keep=_even, **load) == (4,)  # limit, then filter
    path.write_text(json.dumps({"x": 5}))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a new version, even on a coarse clock
    assert load_problem_file(path, _squared, **load) == (25,)


def test_load_problem_file_errors_name_the_file_and_record(tmp_path):
    load = {"what": "numbers", "expected": "a numbers file"}
    with pytest.raises(FileNotFoundError, match=r"data_path='missing.jsonl' does not exist; pass a numbers file"):
        load_problem_file("missing.jsonl", _squared, **load)
    path = tmp_path / "numbers.jsonl"
    path.write_text('{"x": 1}\n{"x": "two"}\n')
    with pytest.raises(ValueError, match=rf"{path}: record 1: field 'x' must be an integer"):
        load_problem_file(path, _squared, **load)
    path.write_text('{"x": 1}\n{"x": 3}\n')
    with pytest.raises(ValueError, match=r"none of its 2 numbers is left after the filter _even"):
        load_problem_file(path, _squared, keep=_even, **load)
