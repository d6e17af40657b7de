"""CPU launches: the documented multi-process command starts two ranks joined with gloo, `cpu.yaml` alone starts
one, and a recipe replaces a launcher's default of one thread by its share of the cores but keeps a count the user
chose (`recipe_utils.cpu_thread_count`, `use_cpu_cores`; docs/scaling.md#cpu-threads-and-processes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_ragen2.recipe_utils import available_cores, cpu_thread_count

from .torchrun import free_port


ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "distributed" / "cpu_launch_worker.py"
CPU_YAML = ROOT / "recipes" / "accelerate" / "cpu.yaml"
ACCELERATE = {"ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_USE_CPU": "False"}  # what `accelerate launch` leaves
TORCHRUN = {"TORCHELASTIC_RUN_ID": "none", "LOCAL_WORLD_SIZE": "2"}


def launch(command: list[str], tmp_path: Path, omp: str | None = None) -> list[dict]:
    """Run a launch `command` of the worker; what each process wrote, by rank. `omp`: the launching shell's
    OMP_NUM_THREADS (None: unset)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": omp}
    env = {key: value for key, value in env.items() if value is not None}
    result = subprocess.run(
        [*command, str(WORKER), str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank*.json"))]


# ---------------------------------------------------------------------------------------------------------------
# Processes


@pytest.mark.distributed
def test_the_documented_multi_process_command_starts_two_ranks_joined_with_gloo(tmp_path):
    # docs/scaling.md: torchrun --nproc_per_node 2 recipes/<task>.py --config recipes/configs/agent_cpu.yaml
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port())]  # fmt: skip
    ranks = launch(command, tmp_path)
    assert sorted(rank["rank"] for rank in ranks) == [0, 1]
    assert {rank["world_size"] for rank in ranks} == {2}
    assert {rank["backend"] for rank in ranks} == {"gloo"}
    assert {rank["sum"] for rank in ranks} == {3.0}, "the all-reduce reached both ranks"


def test_cpu_yaml_starts_one_process_whatever_num_processes_says(tmp_path):
    # distributed_type "NO": accelerate's simple launcher, one process (why the docs name torchrun for several)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_YAML),
               "--num_processes", "2"]  # fmt: skip
    ranks = launch(command, tmp_path, omp="1")
    assert [(rank["rank"], rank["world_size"]) for rank in ranks] == [(0, 1)]


# ---------------------------------------------------------------------------------------------------------------
# Threads


@pytest.mark.parametrize(
    "omp, flags, expected",
    [(None, [], "cores"), ("1", [], 1), (None, ["--num_cpu_threads_per_process", "1"], 1)],
    ids=["launcher-default", "user-env", "user-flag"],
)
def test_accelerate_launch_without_a_config_uses_the_cores_unless_the_user_chose(tmp_path, omp, flags, expected):
    # no --config_file and no --cpu: accelerate gives the worker OMP_NUM_THREADS=1 unless the shell sets it
    ranks = launch([sys.executable, "-m", "accelerate.commands.launch", *flags], tmp_path, omp=omp)
    assert [rank["threads"] for rank in ranks] == [available_cores() if expected == "cores" else expected]


@pytest.mark.parametrize(
    "environ, cores, launcher_environ, launcher_argv, expected",
    [
        ({**ACCELERATE, "OMP_NUM_THREADS": "1"}, 8, {}, ["accelerate", "launch", "x.py"], 8),  # accelerate's default
        ({**ACCELERATE, "OMP_NUM_THREADS": "1"}, 1, {}, [], 1),  # one core: one thread
        ({**TORCHRUN, "OMP_NUM_THREADS": "1"}, 8, {}, ["torchrun", "--nproc_per_node", "2"], 4),  # a share each
        ({**TORCHRUN, "OMP_NUM_THREADS": "1", "LOCAL_WORLD_SIZE": "16"}, 8, {}, [], 1),  # never below 1
        ({**ACCELERATE, "OMP_NUM_THREADS": "1"}, 8, {"OMP_NUM_THREADS": "1"}, [], None),  # the user's 1
        ({**ACCELERATE, "OMP_NUM_THREADS": "1"}, 8, {"MKL_NUM_THREADS": "1"}, [], None),  # the user's MKL count
        ({**ACCELERATE, "OMP_NUM_THREADS": "1"}, 8, {}, ["--num_cpu_threads_per_process", "1"], None),  # the flag
        ({**ACCELERATE, "OMP_NUM_THREADS": "1"}, 8, {}, ["--num-cpu-threads-per-process=1"], None),
        ({**ACCELERATE, "OMP_NUM_THREADS": "1"}, 8, None, [], None),  # the launcher's environment unreadable
        ({**ACCELERATE, "OMP_NUM_THREADS": "4"}, 8, {}, [], None),  # accelerate's use_cpu count, or the user's
        ({**ACCELERATE}, 8, {}, [], None),  # unset: torch's default
        ({"OMP_NUM_THREADS": "1"}, 8, {}, [], None),  # no launcher: `python recipe.py` from a shell that set it
    ],
)
def test_cpu_thread_count(environ, cores, launcher_environ, launcher_argv, expected):
    assert cpu_thread_count(environ, cores, launcher_environ, launcher_argv) == expected
