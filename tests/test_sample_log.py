"""The sample log (`trl_ragen2.runs.samples`, `trl_ragen2.grpo.sample_log`): bounds, crash-safe lines, tolerant
readers, and what a real tiny-model run writes (the filter's own choices, the MI matrix the metrics came from)."""

import json
import math

import pytest
import torch

from trl_ragen2.collapse.mi import mi_metrics
from trl_ragen2.runs import keys
from trl_ragen2.runs.samples import (
    SampleLogSettings,
    SampleLogWriter,
    clip_text,
    index_samples,
    pick_groups,
    read_samples,
)

from .run_browser_helpers import INJECTED, STEPS, length_reward, record_filter_choices


def record(step, **extra):
    return {"step": step, "num_groups": 1, "group_size": 2, "groups": [], "mi": {}, **extra}


# ---------------------------------------------------------------------------------------------------------------
# Bounds


def test_settings_schedule_and_validation():
    settings = SampleLogSettings(groups=2, every_n_steps=5)
    assert [s for s in range(1, 16) if settings.is_due(s)] == [1, 5, 10, 15]
    assert not SampleLogSettings(groups=0).is_due(1)
    with pytest.raises(ValueError, match="every_n_steps=0 is invalid"):
        SampleLogSettings(every_n_steps=0)


def test_pick_groups_spreads_over_the_variance_ranking():
    scores = [0.5, 3.0, 0.0, 2.0, 1.0, float("nan")]
    # ranking: 1 (3.0), 3 (2.0), 4 (1.0), 0 (0.5), 2 (0.0), 5 (NaN, last): three picks at ranks 0, 2 and 5
    assert pick_groups(scores, 3) == [1, 4, 5]
    assert pick_groups(scores, 10) == list(range(6))
    assert pick_groups(scores, 1) == [1]


def test_clip_text_keeps_the_start_or_the_end_and_says_what_it_cut():
    assert clip_text("abcdef", 10) == "abcdef"
    assert clip_text("abcdef", 2) == "ab [... 4 characters cut by the sample log]"
    assert clip_text("abcdef", 2, keep="end") == "[... 4 characters cut by the sample log] ef"


def test_the_trainer_config_validates_the_fields(tmp_path):
    from trl_ragen2 import SNRFilteredGRPOConfig

    from .scripted import tiny_trainer_args

    with pytest.raises(ValueError, match=r"sample_log_groups=-1 is invalid"):
        tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, sample_log_groups=-1)


# ---------------------------------------------------------------------------------------------------------------
# Writer and readers


def test_records_round_trip_with_nan_as_null(tmp_path):
    path = tmp_path / keys.SAMPLES_FILE
    writer = SampleLogWriter(path)
    assert writer.write(record(1, groups=[{"variance": float("nan"), "prompt": "<b>é</b>"}]))
    assert writer.write(record(5))
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith('{"step":1,"version":1,')  # the step first: the index reads it without parsing
    records, notes = read_samples(path)
    assert [r["step"] for r in records] == [1, 5] and notes == []
    assert records[0]["groups"][0] == {"variance": None, "prompt": "<b>é</b>"}


def test_a_torn_last_line_is_skipped_silently_and_cut_before_the_next_write(tmp_path):
    path = tmp_path / keys.SAMPLES_FILE
    SampleLogWriter(path).write(record(1))
    with open(path, "ab") as f:
        f.write(b'{"step":2,"version":1,"groups":[{"prom')  # a crash in the middle of a write
    records, notes = read_samples(path)
    assert [r["step"] for r in records] == [1] and notes == []
    SampleLogWriter(path).write(record(2))  # a resumed run: its first write cuts the torn line off first
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["step"] in (1, 2) for line in lines)


def test_bad_and_huge_lines_are_skipped_with_a_note_and_a_resume_replaces_replayed_steps(tmp_path):
    path = tmp_path / keys.SAMPLES_FILE
    huge = record(3, groups=[{"prompt": "x" * 5000}])
    lines = [record(1), record(2), "not json", huge, record(2, filter="resumed"), record(3, filter="resumed")]
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    index = index_samples(path, max_line_bytes=1000)
    assert index.steps == [1, 2, 3]
    assert any(":3 is not a sample record" in n for n in index.notes)
    assert any(":4 is" in n and "over the 1,000-byte limit" in n for n in index.notes)
    records, _ = read_samples(path, steps=[2, 3, 7], max_line_bytes=1000)
    assert [(r["step"], r.get("filter")) for r in records] == [(2, "resumed"), (3, "resumed")]


def test_a_missing_log_is_empty(tmp_path):
    assert read_samples(tmp_path / "none.jsonl") == ([], [])


def test_a_failed_write_leaves_no_partial_line(tmp_path, monkeypatch):
    import os

    path = tmp_path / keys.SAMPLES_FILE
    writer = SampleLogWriter(path)
    writer.write(record(1))
    size = path.stat().st_size
    real_write = os.write

    def half_then_fail(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_fail)
    assert not writer.write(record(2)) and writer.failed_writes == 1
    monkeypatch.undo()
    assert path.stat().st_size == size


def test_turns_keep_the_environment_the_reasoning_and_the_answer_apart(tmp_path, tiny_tokenizer):
    from trl_ragen2.grpo.sample_log import SampleRecorder

    parts = [
        "<think>go left</think><answer>Left</answer>",
        "\nTurn 2:\n#_O\n#P#\n",
        "<think>then up</think><answer>Up",
    ]
    ids = [tiny_tokenizer.encode(part, add_special_tokens=False) for part in parts]
    first, second = len(ids[0]), len(ids[0]) + len(ids[1])
    spans = [(0, first), (second, second + len(ids[2]))]  # the model's two turns; the grid is the environment's
    turns = SampleRecorder(SampleLogSettings(), tmp_path)._turns(tiny_tokenizer, sum(ids, []), spans, limit=4000)
    assert turns == [
        {"observation": "", "reasoning": "go left", "answer": "<answer>Left</answer>"},
        {"observation": parts[1], "reasoning": "then up", "answer": "<answer>Up"},
    ]


# ---------------------------------------------------------------------------------------------------------------
# A real tiny-model run


@pytest.fixture
def run(tiny_browser_run):
    return tiny_browser_run


def test_the_log_holds_the_groups_the_filter_kept_and_dropped(run):
    trainer, kept, out = run
    records, notes = read_samples(out / keys.SAMPLES_FILE)
    assert notes == [] and [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert any(not flag for flags in kept.values() for flag in flags), "the run must drop a group to test the marks"
    for rec in records:
        assert rec["num_groups"] == 4 and rec["group_size"] == 4 and len(rec["groups"]) == 3
        for group in rec["groups"]:
            assert group["kept"] == kept[rec["step"]][group["index"]]
            rewards = group["rewards"]
            assert group["variance"] == pytest.approx(torch.tensor(rewards).var().item(), abs=1e-6)
            assert [r["reward"] for r in group["rollouts"]] == rewards
            turn = group["rollouts"][0]["turns"][0]
            assert set(turn) == set(keys.SAMPLE_TURN_FIELDS) and INJECTED in turn["reasoning"]
            assert INJECTED in group["prompt"]


def test_the_logged_matrix_gives_the_logged_mi_metrics(run):
    trainer, _, out = run
    records, _ = read_samples(out / keys.SAMPLES_FILE)
    history = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    for rec in records:
        assert set(rec["mi"]) == set(keys.MI_SCOPES)
        for scope, matrix in rec["mi"].items():
            logp = torch.tensor([[-math.inf if v is None else v for v in row] for row in matrix["logp"]])
            same = torch.zeros(logp.shape, dtype=torch.bool)
            for n, columns in enumerate(matrix["same"]):
                same[n, columns] = True
            metrics = mi_metrics(logp, torch.tensor(matrix["lengths"]), torch.tensor(matrix["target"]), same)
            logged = history[rec["step"]]
            assert metrics["retrieval_acc"] == pytest.approx(logged[keys.mi_key(scope, "retrieval_acc")], abs=1e-6)
            assert metrics["mi_est"] == pytest.approx(logged[keys.mi_key(scope, "mi_est")], rel=1e-4, abs=1e-6)
            assert len(matrix["chains"]) == logp.shape[0] == len(matrix["groups"])
            assert len(matrix["column_context"]) == logp.shape[1]


def test_within_group_marks_each_rollout_as_the_filter_kept_it(tmp_path, tiny_tokenizer):
    """`within_group` keeps some rollouts of every group: the log marks each rollout, the groups all kept."""
    from datasets import Dataset

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.models.tiny import make_tiny_model

    from .scripted import tiny_trainer_args

    args = tiny_trainer_args(
        tmp_path, SNRFilteredGRPOConfig, max_steps=1, reward_variance_filtering="within_group",
        reward_variance_within_group_ratio=0.5, mi_diagnostics=False, sample_log_groups=4,
        sample_log_every_n_steps=1,
    )  # fmt: skip
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0), reward_funcs=length_reward, args=args,
        train_dataset=Dataset.from_dict({"prompt": ["a", "b", "c", "d"]}), processing_class=tiny_tokenizer,
    )  # fmt: skip
    kept_rows = record_filter_choices(trainer, "keep_rows")
    trainer.train()
    (rec,), notes = read_samples(tmp_path / "out" / keys.SAMPLES_FILE)
    size = rec["group_size"]
    assert notes == [] and len(rec["groups"]) == 4
    for group in rec["groups"]:
        marks = [rollout["kept"] for rollout in group["rollouts"]]
        assert group["kept"] and sum(marks) == round(0.5 * size)  # every group, half its rollouts
        assert marks == kept_rows[1][group["index"] * size : (group["index"] + 1) * size]
