"""One process of a CPU launch (launched by tests/test_cpu_launch.py with torchrun or `accelerate launch`).

It starts as a recipe does: `parse_recipe_args` with the CPU preset `agent_cpu.yaml` (which applies
`use_cpu_cores`), then the trainer config's process group (gloo when there are several processes). It writes
`<out>/rank<r>.json`: its rank and world size, the backend, the sum of an all-reduce of rank + 1, and the torch
thread count it ended with.
"""

import json
import os
import sys
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, task_config  # noqa: E402


RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def main(out_dir: str) -> None:
    args = ["--config", str(RECIPES / "configs" / "agent_cpu.yaml"), "--output_dir", out_dir]
    _, training_args, _ = parse_recipe_args(
        AgentScriptArguments, task_config(RECIPES / "frozen_lake.py", "frozen_lake"), args
    )
    rank, world_size = training_args.process_index, training_args.world_size  # sets up the process group
    backend, total = None, rank + 1
    if dist.is_initialized():
        backend = dist.get_backend()
        tensor = torch.tensor([rank + 1.0])
        dist.all_reduce(tensor)
        total = tensor.item()
    line = {
        "rank": rank,
        "world_size": world_size,
        "backend": backend,
        "sum": total,
        "threads": torch.get_num_threads(),
    }
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(line))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
