"""Launching the multi-process workers of `tests/distributed/` with torchrun (two CPU processes, gloo)."""

import os
import socket
import subprocess
import sys
from pathlib import Path


WORKERS = Path(__file__).parent / "distributed"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the rendezvous port of one launch)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(script: str, *args: str, timeout: float = 300, nproc: int = 2, env: dict | None = None) -> None:
    """Run `tests/distributed/<script>` in `nproc` processes; fail the test with both output tails unless every
    process exits 0 within `timeout` seconds. `env` adds to (and overrides) this process's environment."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1", **(env or {})}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
               "127.0.0.1", "--master_port", str(free_port()), str(WORKERS / script), *args]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"torchrun failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
