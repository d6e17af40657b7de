"""Fault suite: real runs of the Sokoban recipe on the tiny model, killed, starved of disk, damaged or doubled.

Every resume must either equal the uninterrupted run (policy and critic weights, every `ragen2/filter`,
`ragen2/mi` and `ragen2/ppo` value) or be refused by an error naming the file. The kills are real SIGKILLs of a
subprocess at chosen moments (`tests/fault_driver.py`), one of them inside the library's own state write.
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trl_ragen2.runs.checkpoints import (
    COMPLETE_FILE,
    LOCK_FILE,
    CheckpointError,
    OutputDirInUseError,
    checkpoint_problems,
    latest_complete_checkpoint,
)
from trl_ragen2.runs.logs import read_log_file

from .fault_driver import recipe_module


ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "sokoban.py"
# Three optimizer steps, a checkpoint after each, MI at steps 1 and 3 (its schedule and EMA span checkpoints 1, 2).
ARGS = [
    "--config", str(ROOT / "recipes" / "configs" / "agent_cpu.yaml"),
    "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1", "--eval_strategy", "no",
    "--write_plots", "false", "--mi_every_n_steps", "3", "--entropy_coef", "0.01",
    "--max_turns", "2", "--num_generations", "2", "--per_device_train_batch_size", "4",
    "--max_tokens_per_turn", "8", "--num_train_prompts", "8",
    "--overwrite_output_dir", "false",  # the CPU preset sets it; these runs test the refusal
]  # fmt: skip
ALGORITHMS = {"grpo": [], "ppo": ["--algorithm", "ppo"]}
COMPARED = ("ragen2/filter/", "ragen2/mi/", "ragen2/ppo/", "reward", "loss", "entropy", "grad_norm")


def launch(out: Path, *extra: str, fault: str = "none", algorithm: str = "grpo", wait: bool = True):
    command = [sys.executable, "-m", "tests.fault_driver", fault, str(RECIPE), *ARGS, *ALGORITHMS[algorithm]]
    command += ["--output_dir", str(out)]
    if not wait:
        return subprocess.Popen(
            [*command, *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run([*command, *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)


def succeeded(result) -> None:
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run of each algorithm, made once for the module."""
    runs = {}

    def get(algorithm: str) -> Path:
        if algorithm not in runs:
            out = tmp_path_factory.mktemp(f"reference-{algorithm}") / "out"
            succeeded(launch(out, algorithm=algorithm))
            runs[algorithm] = out
        return runs[algorithm]

    return get


def compared_values(out: Path) -> dict[int, dict[str, float]]:
    by_step: dict[int, dict[str, float]] = {}
    for record in read_log_file(out / "metrics.jsonl"):
        values = {
            key: value
            for key, value in record.items()
            if key.startswith(COMPARED) and not key.endswith("time_s") and value is not None
        }
        by_step.setdefault(record["step"], {}).update(values)
    return by_step


def assert_same_run(reference: Path, resumed: Path, algorithm: str) -> None:
    """Equal weights (policy, and critic for PPO) and equal filter, MI and PPO values at every step."""
    for name in ["model.safetensors"] + (["critic/model.safetensors"] if algorithm == "ppo" else []):
        expected, actual = load_file(reference / name), load_file(resumed / name)
        assert expected.keys() == actual.keys()
        for key, value in expected.items():
            torch.testing.assert_close(actual[key], value, rtol=0, atol=0, msg=f"{name}: {key}")
    expected, actual = compared_values(reference), compared_values(resumed)
    assert sorted(actual) == sorted(expected) == [1, 2, 3]
    assert any(key.startswith("ragen2/mi/") for key in actual[3]), "MI ran at step 3 (its EMA spans the resume)"
    for step, values in expected.items():
        assert actual[step] == values, f"step {step}"


# ---------------------------------------------------------------------------------------------------------------
# Kills during a save


def test_grpo_killed_inside_the_mi_state_write_resumes_exactly_from_the_latest_complete_checkpoint(
    reference, tmp_path
):
    out = tmp_path / "out"
    killed = launch(out, fault="kill-torn:mi_diagnostics_state.json:2")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()  # transformers' part of checkpoint-2 is there
    torn = checkpoint_problems(out / "checkpoint-2")

    resumed = launch(out, "--resume_from_checkpoint", "latest")  # from checkpoint-1: checkpoint-2 is incomplete
    succeeded(resumed)
    assert_same_run(reference("grpo"), out, "grpo")
    assert torn and not checkpoint_problems(out / "checkpoint-2") and not checkpoint_problems(out / "checkpoint-3")


def test_ppo_killed_after_transformers_state_keeps_the_last_complete_checkpoint_under_save_total_limit_1(
    reference, tmp_path
):
    out = tmp_path / "out"
    killed = launch(out, "--save_total_limit", "1", fault="kill-after:trainer_state.json:2", algorithm="ppo")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()  # transformers' part of checkpoint-2 is there
    assert (out / "checkpoint-1").is_dir(), "save_total_limit kept the last complete checkpoint"
    assert latest_complete_checkpoint(out) == out / "checkpoint-1"

    resumed = launch(out, "--save_total_limit", "1", "--resume_from_checkpoint", "true", algorithm="ppo")
    succeeded(resumed)
    assert_same_run(reference("ppo"), out, "ppo")
    assert [p.name for p in sorted(out.glob("checkpoint-*"))] == ["checkpoint-3"]


@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs (root only); the test is skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def resize(mount: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


def test_ppo_on_a_full_disk_fails_naming_the_checkpoint_and_resumes_exactly_once_there_is_space(
    reference, tmp_path, tmpfs
):
    ppo = reference("ppo")
    checkpoint_bytes = sum(p.stat().st_size for p in (ppo / "checkpoint-1").rglob("*") if p.is_file())
    out = tmpfs / "out"
    resize(tmpfs, int(checkpoint_bytes * 1.5))  # room for checkpoint-1, not for checkpoint-2
    full = launch(out, algorithm="ppo")
    assert full.returncode != 0
    assert "writing checkpoint" in full.stderr and "checkpoint-2" in full.stderr and "bytes free" in full.stderr
    assert not checkpoint_problems(out / "checkpoint-1")
    assert latest_complete_checkpoint(out) == out / "checkpoint-1"

    resize(tmpfs, 64 * 2**20)
    resumed = launch(out, "--resume_from_checkpoint", "latest", algorithm="ppo")
    succeeded(resumed)
    assert_same_run(ppo, out, "ppo")


def test_a_full_disk_reported_by_the_tokenizers_library_is_named_too(tmp_path):
    """`tokenizers` (Rust) reports a full disk while saving tokenizer.json as a plain Exception, not an OSError."""
    from trl_ragen2.runs.checkpoints import save_errors_named

    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"x" * 10)
    with pytest.raises(
        CheckpointError,
        match=r"writing checkpoint .*checkpoint-2 failed.*model.safetensors.*bytes free \(no space left\)",
    ):
        with save_errors_named(checkpoint):
            raise Exception("No space left on device (os error 28)")  # what tokenizers raises
    with pytest.raises(Exception, match="not a write") as raised:  # any other plain Exception passes unchanged
        with save_errors_named(checkpoint):
            raise Exception("not a write")
    assert type(raised.value) is Exception


# ---------------------------------------------------------------------------------------------------------------
# Resuming from a damaged checkpoint: refused, naming the file


def resume_in_process(out: Path, checkpoint: Path, *extra: str, algorithm: str = "ppo"):
    recipe = recipe_module("sokoban")
    args = [*ARGS, *ALGORITHMS[algorithm], "--output_dir", str(out), "--resume_from_checkpoint", str(checkpoint)]
    recipe.main(*recipe.parse_args([*args, *extra]))


@pytest.mark.parametrize(
    "missing",
    [
        "critic/optimizer.pt",
        "critic/scheduler.pt",
        "optimizer.pt",
        "rng_state.pth",
        "ragen2_filter_state.json",
        "mi_diagnostics_state.json",
    ],
)
def test_resume_without_a_state_file_is_refused_naming_it(reference, tmp_path, missing):
    out = tmp_path / "out"
    shutil.copytree(reference("ppo"), out)
    checkpoint = out / "checkpoint-2"
    (checkpoint / missing).unlink()
    with pytest.raises(CheckpointError, match=rf"checkpoint-2/{missing} is missing.*checkpoint-1"):
        resume_in_process(out, checkpoint)


def test_a_checkpoint_without_the_marker_is_refused_when_a_file_is_missing_and_allowed_by_the_opt_out(
    reference, tmp_path, caplog
):
    out = tmp_path / "out"
    shutil.copytree(reference("ppo"), out)
    checkpoint = out / "checkpoint-3"
    (checkpoint / COMPLETE_FILE).unlink()  # as an older version, or plain transformers, leaves it
    (checkpoint / "critic" / "optimizer.pt").unlink()
    with pytest.raises(CheckpointError, match="checkpoint-3/critic/optimizer.pt is missing"):
        resume_in_process(out, checkpoint)
    resume_in_process(out, checkpoint, "--resume_allow_missing_state", "true")  # at step 3: nothing left to train
    assert "critic/optimizer.pt is missing" in caplog.text


@pytest.mark.parametrize(
    "damaged, damage",
    [("model.safetensors", "truncate"), ("optimizer.pt", "garble"), ("trainer_state.json", "garble")],
)
def test_a_damaged_file_is_named_with_the_previous_checkpoint(reference, tmp_path, damaged, damage):
    out = tmp_path / "out"
    shutil.copytree(reference("grpo"), out)
    path = out / "checkpoint-3" / damaged
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:  # the same size, other bytes: only reading it shows the damage
        path.write_bytes(data[:10] + bytes(len(data) - 20) + data[-10:])
    with pytest.raises(CheckpointError, match=rf"checkpoint-3/{damaged}.*previous complete checkpoint.*checkpoint-2"):
        resume_in_process(out, out / "checkpoint-3", algorithm="grpo")


def test_a_filter_state_of_another_version_is_named(reference, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(reference("grpo"), out)
    checkpoint = out / "checkpoint-3"
    (checkpoint / COMPLETE_FILE).unlink()  # a checkpoint of another version: no marker to compare sizes with
    (checkpoint / "ragen2_filter_state.json").write_text('{"empty_steps": 0, "kept_history": []}')
    with pytest.raises(CheckpointError, match=r"ragen2_filter_state.json is not a filter state.*kept_history"):
        resume_in_process(out, checkpoint, algorithm="grpo")


# ---------------------------------------------------------------------------------------------------------------
# One run per output_dir


def test_a_second_run_on_a_folder_in_use_is_refused_and_a_new_run_on_a_finished_one_needs_overwrite(tmp_path):
    out = tmp_path / "out"
    first = launch(out, fault="pause-open:ragen2_filter_state.json:1", wait=False)  # held inside its first save
    deadline = time.time() + 300
    while not (out / "checkpoint-1").exists():  # the first run is training
        assert first.poll() is None and time.time() < deadline, first.communicate()[1][-3000:]
        time.sleep(0.2)
    second = launch(out, "--seed", "1")
    (tmp_path / "release").touch()
    assert second.returncode != 0 and "another run is training in" in second.stderr, second.stderr[-3000:]
    assert str(first.pid) in second.stderr  # the message names the process holding the folder
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 3, "one run's log, not two interleaved"
    assert (out / LOCK_FILE).exists()  # the lock file stays, unlocked: a new run can take it

    with pytest.raises(OutputDirInUseError, match="holds an earlier run.*resume_from_checkpoint"):
        recipe = recipe_module("sokoban")
        recipe.main(*recipe.parse_args([*ARGS, "--output_dir", str(out), "--max_steps", "1"]))
    recipe.main(*recipe.parse_args([*ARGS, "--output_dir", str(out), "--max_steps", "1", "--save_strategy", "no",
                                    "--overwrite_output_dir", "true"]))  # fmt: skip
    assert not list(out.glob("checkpoint-*"))
    assert [record["step"] for record in read_log_file(out / "metrics.jsonl") if "loss" in record] == [1]


# ---------------------------------------------------------------------------------------------------------------
# Logs that cannot stop training, readers that use every intact source


class _State:
    def __init__(self, step):
        self.global_step, self.is_world_process_zero = step, True


def test_a_metrics_file_on_a_full_disk_is_a_warning_not_a_crash(caplog):
    from trl_ragen2.runs.tracking import MetricsJSONLCallback

    callback = MetricsJSONLCallback("/dev/full")  # every write fails with ENOSPC, from the kernel
    callback.on_train_begin(None, _State(0), None)
    for step in (1, 2):
        callback.on_log(None, _State(step), None, logs={"loss": 0.5})
    assert caplog.text.count("could not write /dev/full") == 1 and "No space left" in caplog.text


def test_an_unfinished_last_line_is_cut_when_training_starts(tmp_path):
    from trl_ragen2.runs.tracking import MetricsJSONLCallback

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 2.0}\n{"step": 3, "lo')  # killed mid-write
    callback = MetricsJSONLCallback(path)
    callback.on_train_begin(None, _State(2), None)  # resumed from checkpoint-2
    callback.on_log(None, _State(3), None, logs={"loss": 3.0})
    assert [r["loss"] for r in read_log_file(path)] == [1.0, 2.0, 3.0]
    assert path.read_text().count("\n") == 3


def write_state(path: Path, steps, mtime: float | None = None) -> Path:
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"log_history": [{"step": s, "reward": float(s), "loss": 1.0} for s in steps]}))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_readers_use_every_intact_source_and_name_the_damaged_ones(tmp_path):
    from trl_ragen2.runs.logs import load_run_logs

    run = tmp_path / "run"
    write_state(run / "trainer_state.json", [1, 2, 3])
    lines = ['{"step": 1, "reward": 1.0}', '{"step": 2, "rew{"step": 2, "reward": 2.0}', "garbage", '{"step": 3}']
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    logs = load_run_logs(run)
    assert logs.source == run / "trainer_state.json" and logs.last_step == 3
    notes = "\n".join(logs.notes)
    assert "metrics.jsonl:2 began with an unfinished record" in notes and "metrics.jsonl:3 is not a JSON" in notes
    assert [r["step"] for r in read_log_file(run / "metrics.jsonl", [])] == [1, 2, 3]

    (run / "trainer_state.json").write_text('{"log_history": [{"step": 1')  # cut short
    logs = load_run_logs(run)
    assert logs.source == run / "metrics.jsonl"
    assert any(note.startswith(f"skipped {run / 'trainer_state.json'}") for note in logs.notes)


def test_summary_describes_the_run_of_the_top_level_state_and_says_so(tmp_path, capsys):
    from trl_ragen2.cli import main

    run = tmp_path / "run"
    now = time.time()
    write_state(run / "checkpoint-6" / "trainer_state.json", range(1, 7), mtime=now - 3600)  # an older, longer run
    write_state(run / "checkpoint-2" / "trainer_state.json", [1, 2], mtime=now - 10)
    write_state(run / "trainer_state.json", [1, 2], mtime=now)  # the new run, finished
    assert main(["summary", str(run), "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["source"] == str(run / "trainer_state.json") and summary["last_step"] == 2
    assert summary["notes"][0].startswith(f"described: {run / 'trainer_state.json'} (the run's final state)")
    assert any("ignored" in note and "checkpoint-6" in note for note in summary["notes"])
    assert "checkpoint-6" in captured.err


def test_summary_streams_a_large_metrics_file(tmp_path, capsys):
    import tracemalloc

    from trl_ragen2.cli import main

    run = tmp_path / "run"
    run.mkdir()
    filler = ", ".join(f'"completions/key_{i}": 0.{i:04d}' for i in range(200))  # keys the summary does not show
    with open(run / "metrics.jsonl", "w") as f:
        for step in range(1, 4001):
            f.write(f'{{"step": {step}, "reward": {step / 4000}, {filler}}}\n')
    size = (run / "metrics.jsonl").stat().st_size
    assert size > 15e6
    tracemalloc.start()
    try:
        assert main(["summary", str(run)]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "reward" in capsys.readouterr().out
    assert peak < size / 5, f"summary held {peak:,} bytes for a {size:,}-byte file"


# ---------------------------------------------------------------------------------------------------------------
# Config types after YAML parsing


@pytest.mark.parametrize(
    "line, message",
    [
        ("mi_every_n_steps: 1.5", "mi_every_n_steps must be an integer, got 1.5"),
        ("reward_variance_top_p: [0.9]", r"reward_variance_top_p must be a number, got \[0.9\]"),
        ("reward_variance_empty_patience: 2.5", "reward_variance_empty_patience must be an integer, got 2.5"),
        ("mi_scopes: first_turn", "mi_scopes must be a list of strings, got 'first_turn'"),
    ],
)
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_yaml_values_of_the_wrong_type_name_the_field(tmp_path, line, message, algorithm):
    config = tmp_path / "config.yaml"
    config.write_text(f"model_name_or_path: tiny\nuse_cpu: true\nbf16: false\nalgorithm: {algorithm}\n{line}\n")
    with pytest.raises(ValueError, match=message):
        recipe_module("sokoban").parse_args(["--config", str(config), "--output_dir", str(tmp_path / "out")])
