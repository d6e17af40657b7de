"""Bad input to `trl-ragen2 diagnose`: each file problem is an error naming the file, the line, the value and the fix,
read as the file streams by; a model argument that names no model says what was found."""

import json

import pytest

from trl_ragen2.collapse.diagnose import rollouts_batch
from trl_ragen2.collapse.rollout_file import RolloutFileError, read_rollouts
from trl_ragen2.diagnose import ModelPathError, resolve_models


def write(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


GOOD = [{"prompt": f"p{i}", "completion": f"<think>r{i}</think>", "group": i} for i in range(2)]


@pytest.mark.parametrize(
    ("rows", "line", "words"),
    [
        ([GOOD[0], {"prompt": "x"}], 2, ["missing field 'completion'", "'prompt' and 'completion'"]),
        ([GOOD[0], {"completion": "y", "group": 1}], 2, ["missing field 'prompt'"]),
        ([GOOD[0], {"prompt": "p1", "completion": "y"}], 2, ["has no 'group'", "give every row a group id"]),
        ([{"prompt": "p0", "completion": "a"}, {"prompt": "p1", "completion": "b", "group": 3}], 2, ["has 'group'"]),
        ([GOOD[0], {"prompt": "p1", "completion": "  ", "group": 1}], 2, ["completion is empty", "drop the row"]),
        ([GOOD[0], {"prompt": "other", "completion": "y", "group": 0}], 2, ["group '0' has two different prompts"]),
        ([GOOD[0], "{not json"], 2, ["not JSON", "one JSON object per line"]),
        ([GOOD[0], {"prompt": "p1", "completion": "y", "group": 1, "reward": "high"}], 2, ["'reward' must be"]),
        ([GOOD[0], {"prompt": "p1", "completion": [{"text": "y"}], "group": 1}], 2, ["not of chat messages"]),
    ],
)
def test_a_bad_row_is_named_with_its_line_and_fix(tmp_path, rows, line, words):
    path = write(tmp_path / "rollouts.jsonl", rows)
    with pytest.raises(RolloutFileError) as error:
        list(read_rollouts(path))
    message = str(error.value)
    assert f"{path} line {line}" in message
    for word in words:
        assert word in message, message


def test_fewer_than_two_prompts(tmp_path):
    path = write(tmp_path / "one.jsonl", [{"prompt": "p", "completion": "a"}, {"prompt": "p", "completion": "b"}])
    with pytest.raises(RolloutFileError, match=r"1 distinct prompt\(s\).*at least 2"):
        list(read_rollouts(path))


def test_the_file_streams_an_error_comes_before_the_rest_is_read(tmp_path):
    """Line 2 is bad; after it come 2 MB of rows and then bytes that are not UTF-8. A reader that loaded the whole
    file first would fail on those bytes; the streaming reader reports line 2."""
    path = tmp_path / "big.jsonl"
    filler = json.dumps({"prompt": "p", "completion": "x" * 200}) + "\n"
    with open(path, "wb") as handle:
        handle.write((json.dumps(GOOD[0]) + "\n" + json.dumps({"prompt": "q"}) + "\n").encode())
        handle.write(filler.encode() * 10_000)
        handle.write(b"\xff\xfe not utf-8\n")
    with pytest.raises(RolloutFileError, match="line 2: missing field 'completion'"):
        list(read_rollouts(path))
    rows = list(read_rollouts(write(tmp_path / "ok.jsonl", GOOD * 50), max_rows=3))
    assert len(rows) == 3


def test_a_completion_longer_than_the_context_is_named(tmp_path, tiny_tokenizer):
    rows = [*GOOD, {"prompt": "p2", "completion": "word " * 200, "group": 2}]
    rows = list(read_rollouts(write(tmp_path / "long.jsonl", rows)))
    with pytest.raises(RolloutFileError) as error:
        rollouts_batch(rows, tiny_tokenizer, max_length=64, source="long.jsonl")
    message = str(error.value)
    assert "long.jsonl line 3" in message and "(64)" in message and "drop or truncate" in message
    batch, turns = rollouts_batch(rows[:2], tiny_tokenizer, max_length=64)
    assert batch["prompt_ids"].shape[0] == 2 and turns[0]["turn_spans"] == [(0, batch["completion_mask"][0].sum())]


def test_multi_turn_completions_become_turns(tmp_path, tiny_tokenizer):
    turns = [{"role": "assistant", "content": "<think>a</think>"}, {"role": "user", "content": "Reward: 1"}]
    turns.append({"role": "assistant", "content": "<think>b</think>"})
    path = write(
        tmp_path / "multi.jsonl", [{"prompt": "p0", "completion": turns}, {"prompt": "p1", "completion": "c"}]
    )
    rows = list(read_rollouts(path))
    assert [role for role, _ in rows[0].completion] == ["assistant", "user", "assistant"]
    _, spans = rollouts_batch(rows, tiny_tokenizer, max_length=None)
    assert len(spans[0]["turn_spans"]) == 2 and len(spans[1]["turn_spans"]) == 1


def test_model_arguments_that_name_no_model(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelPathError, match="not a model: it has no config.json"):
        resolve_models([str(tmp_path / "empty")])
    (tmp_path / "file.bin").write_text("x")
    with pytest.raises(ModelPathError, match="a file, not a model folder"):
        resolve_models([str(tmp_path / "file.bin")])
    with pytest.raises(ModelPathError, match="no such folder"):
        resolve_models([str(tmp_path / "missing" / "deeper")])
    assert resolve_models(["owner/model-name"]) == [("owner/model-name", "owner/model-name", "hub")]
    for step in (100, 20):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "run" / f"checkpoint-{step}" / "config.json").write_text("{}")
    assert [name for name, _, _ in resolve_models([str(tmp_path / "run")])] == ["checkpoint-20", "checkpoint-100"]
