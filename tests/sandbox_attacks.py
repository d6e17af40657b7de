"""Attacks on the DeepCoder sandbox and judge, each bounded, aimed at 127.0.0.1 only, and cleaned up after.

Every attack is a function `attack(make_env) -> (contained, detail)`: `make_env(**sandbox_overrides)` builds a
`DeepCoderEnv` (or its sandbox) in the isolation mode under test, the attack submits a hostile program the way a
model would, and checks on the host whether it got out. The programs run with the in-process guard off, since
it is no boundary: what is tested is the operating system's isolation and the judge.

`tests/test_sandbox_attacks.py` runs them in this process (for the modes root can use) and through
`python -m tests.sandbox_attacks MODE` as an unprivileged user (for the non-root modes); that entry point prints
one JSON line per attack as it finishes, so an attack that kills its parent is seen as the missing line.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from trl_ragen2_envs.deepcoder import DeepCoderEnv
from trl_ragen2_envs.deepcoder.sandbox import SandboxConfig


ROOT = Path(__file__).resolve().parent.parent
PROJECT_FILE = ROOT / "pyproject.toml"
# a HumanEval-format problem whose asserts compare return values, like the bundled ones
HUMANEVAL_RECORD = {
    "task_id": "Attack/0",
    "prompt": 'def pairs_sum(xs: list, target: int) -> bool:\n    """Whether two items of xs add up to target."""\n',
    "entry_point": "pairs_sum",
    "canonical_solution": "    return any(a + b == target for i, a in enumerate(xs) for b in xs[i + 1:])\n",
    "test": "def check(candidate):\n    assert candidate([1, 2, 3], 5) == True\n    assert candidate([1, 2], 7) == False\n"
    "    assert candidate([], 0) == False\n    assert candidate([4, 4], 8) is True\n",
}
MODES = ("bubblewrap", "unshare", "uid", "none")
MODE_SETTINGS = {
    "bubblewrap": {"use_bubblewrap": True, "use_unshare": False},
    "unshare": {"use_bubblewrap": False, "use_unshare": True},
    "uid": {"use_bubblewrap": False, "use_unshare": False, "allow_weak_isolation": True},
    "none": {"use_bubblewrap": False, "use_unshare": False, "allow_weak_isolation": True},
}


def _marker() -> str:
    return f"trl-ragen2-attack-{secrets.token_hex(6)}"


def _sleeper(marker: str, seconds: int = 30) -> str:
    """Code that turns the current process into a sleeper recognisable on the host by `marker` in its cmdline."""
    return f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep({seconds})', {marker!r}])"


def live_processes_with(marker: str) -> list[int]:
    """Pids (not zombies) whose command line contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rpartition(b")")[2].split()[0] == b"Z":
                    continue
            found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


def survivors(marker: str, grace_s: float = 3.0) -> list[int]:
    """Processes with `marker` still alive after `grace_s` (killed afterwards, so none outlives the test)."""
    deadline = time.monotonic() + grace_s
    while (found := live_processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return found


def humaneval_env(make_env, tmp_dir: str, **overrides) -> DeepCoderEnv:
    path = Path(tmp_dir) / "attack_humaneval.jsonl"
    path.write_text(json.dumps(HUMANEVAL_RECORD))
    return make_env(dataset="humaneval", data_path=str(path), max_workers=2, **overrides)


def submit(env: DeepCoderEnv, program: str, seed: int = 0):
    env.reset(seed)
    started = time.monotonic()
    _, reward, _, info = env.step(f"```python\n{program}\n```")
    return reward, info, time.monotonic() - started


# ---------------------------------------------------------------------------------------------------------------
# Judging: programs that try to hang, crash or fool the judge


def fifo_result(make_env, tmp_dir):
    """A program that makes `result.json` a FIFO and exits without answering: the judge must not hang."""
    env = humaneval_env(make_env, tmp_dir)
    program = (
        "import os, tempfile\nos.mkfifo('result.json')\n"
        "os.mkfifo(os.path.join(tempfile.gettempdir(), 'result.json'))\nos._exit(0)"
    )
    reward, info, took = submit(env, program)
    return reward == 0 and took < 10, f"reward {reward} in {took:.1f} s, statuses {info['statuses']}"


def deep_json(make_env, tmp_dir):
    """200,000 `[` written where the replies go: `env.step` must return, with reward 0."""
    env = humaneval_env(make_env, tmp_dir)
    program = (
        "import os, sys\ndef pairs_sum(xs, target):\n    for fd in range(3, 64):\n        try:\n"
        "            os.write(fd, b'[' * 200000 + b'\\n')\n        except OSError:\n            pass\n"
        "    open('result.json', 'w').write('[' * 200000)\n    return None"
    )
    try:
        reward, info, _ = submit(env, program)
    except RecursionError as error:
        return False, f"RecursionError escaped env.step: {error}"
    return reward == 0, f"reward {reward}, statuses {info['statuses']}"


FAKES = {
    "patched_exec": "import builtins\nbuiltins.exec = lambda *args, **kwargs: None\n"
    "def pairs_sum(xs, target):\n    return 'no idea'",
    "always_equal": "class Anything:\n    def __eq__(self, other):\n        return True\n"
    "    def __ne__(self, other):\n        return False\n    __hash__ = object.__hash__\n"
    "    def __bool__(self):\n        return True\n"
    "def pairs_sum(xs, target):\n    return Anything()",
    "forged_from_frames": "import json, os, sys\ndef pairs_sum(xs, target):\n    found = {}\n"
    "    frame = sys._getframe()\n    while frame is not None:\n        found.update(frame.f_locals)\n"
    "        frame = frame.f_back\n    token = str(found.get('token', ''))\n"
    "    forged = json.dumps({'token': token, 'status': 'ok', 'passed': True}).encode() + b'\\n'\n"
    "    open('result.json', 'w').write(forged.decode())\n    for fd in range(3, 64):\n        try:\n"
    "            os.write(fd, forged)\n        except OSError:\n            pass\n    return 'forged'",
    "patched_json_dumps": "import json\n"
    'json.dumps = lambda *args, **kwargs: \'{"status": "ok", "token": "", "passed": true}\'\n'
    "def pairs_sum(xs, target):\n    return 'wrong'",
}


def canonical_solution(make_env, tmp_dir):
    """The control for the fakes: the canonical solution earns the full reward in this mode."""
    env = humaneval_env(make_env, tmp_dir)
    reward, info, _ = submit(env, HUMANEVAL_RECORD["prompt"] + HUMANEVAL_RECORD["canonical_solution"])
    return reward == 1, f"the canonical solution earned {reward}, statuses {info['statuses']}"


def _fake(name):
    def attack(make_env, tmp_dir):
        env = humaneval_env(make_env, tmp_dir)
        reward, info, _ = submit(env, FAKES[name])
        return reward == 0, f"the fake earned {reward}, statuses {info['statuses']}"

    attack.__doc__ = f"The HumanEval fake {name!r} must earn nothing."
    return attack


def backticks(make_env, tmp_dir):
    """120,000 backticks (and 50,000 empty fences): extraction must be fast and the step must not fail."""
    env = make_env()
    env.reset(0)
    started = time.monotonic()
    for answer in ("`" * 120_000, "```\n" * 50_000, "```py" * 40_000):
        env.step(answer)
        env.reset(0)
    took = time.monotonic() - started
    return took < 2.0, f"three answers in {took:.2f} s"


# ---------------------------------------------------------------------------------------------------------------
# Isolation: programs that try to get out


def run_program(make_env, program: str, **overrides):
    return make_env(**overrides).sandbox.run(program)


def network(make_env, tmp_dir):
    """Connect to a listener on 127.0.0.1 and send data: nothing may arrive."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    port, received, stop = server.getsockname()[1], [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            connection.settimeout(1.0)
            try:
                received.append(connection.recv(100))
            except OSError:
                pass
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    program = (
        f"import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "    s.sendall(b'LEAK')\n    print('sent')\nexcept OSError as error:\n    print('blocked', error)"
    )
    try:
        run = run_program(make_env, program)
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join(2)
        server.close()
    return not received, f"listener received {received}; program said {run.stdout.strip()[:80]!r}"


def read_host_files(make_env, tmp_dir):
    """Read /etc/passwd and a file of this project: neither may be readable."""
    program = (
        f"for path in ('/etc/passwd', {str(PROJECT_FILE)!r}):\n    try:\n        print(path, open(path).read(200))\n"
        "    except OSError as error:\n        print(path, 'unreadable', type(error).__name__)"
    )
    out = run_program(make_env, program).stdout
    leaked = [name for name, sign in (("/etc/passwd", "root:"), ("pyproject.toml", "[build-system]")) if sign in out]
    return not leaked, f"leaked {leaked}" if leaked else "both unreadable"


def persistent_files(make_env, tmp_dir):
    """Write files in /tmp, /var/tmp and /dev/shm: none may outlive the episode."""
    marker = _marker()
    paths = [f"{root}/{marker}" for root in ("/tmp", "/var/tmp", "/dev/shm")]
    program = (
        f"written = []\nfor path in {paths!r}:\n    try:\n        open(path, 'w').write('x')\n"
        "        written.append(path)\n    except OSError:\n        pass\nprint(written)"
    )
    try:
        run = run_program(make_env, program)
        left = [path for path in paths if os.path.lexists(path)]
    finally:
        for path in paths:
            if os.path.lexists(path):
                os.unlink(path)
    return not left, f"left behind: {left}; wrote inside the sandbox: {run.stdout.strip()}"


def kill_parent(make_env, tmp_dir):
    """Kill the parent, the trainer (its pid given) and every process it can signal: the trainer must live."""
    program = (
        f"import os, signal\nfor pid in (os.getppid(), {os.getpid()}, -1):\n    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\nprint('tried')"
    )
    run = run_program(make_env, program)
    return True, f"the trainer is alive (exit status of the program {run.returncode})"


def setsid_survivor(make_env, tmp_dir):
    """Start a child in its own session that sleeps on: it must not survive the episode."""
    marker = _marker()
    program = (
        "import os, sys\nexeced, done = os.pipe()  # close-on-exec: EOF once the child has become the sleeper\n"
        f"if os.fork() == 0:\n    os.setsid()\n    {_sleeper(marker)}\nos.close(done)\nos.read(execed, 1)\n"
        "print('forked')"
    )
    run = run_program(make_env, program)
    left = survivors(marker)
    return not left, f"{len(left)} survivors; program said {run.stdout.strip()!r}"


def fork_bomb(make_env, tmp_dir):
    """Fork until it fails: the count stays within the allowance, and no child survives."""
    marker, allowance = _marker(), 8
    program = (
        "import os, sys\ncount = 0\ntry:\n    while count < 500:\n        execed, done = os.pipe()\n"
        f"        if os.fork() == 0:\n            {_sleeper(marker)}\n        os.close(done)\n"
        "        os.read(execed, 1)\n        os.close(execed)\n        count += 1\nexcept OSError:\n    pass\n"
        "print(count)"
    )
    run = run_program(make_env, program, max_processes=allowance, timeout_s=4.0)
    left = survivors(marker)
    count = int(run.stdout.split()[0]) if run.stdout.split() else -1
    return 0 <= count <= allowance + 2 and not left, f"forked {count} (allowance {allowance}), {len(left)} survivors"


def memory_across_processes(make_env, tmp_dir):
    """Eight processes of 40 MiB each at memory_mb=100: what the program holds at once stays within its bound."""
    program = (
        "import os, time\nread_end, write_end = os.pipe()\nchildren = []\nfor _ in range(8):\n    try:\n"
        "        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n"
        "        block = bytearray(40 << 20)\n        for i in range(0, len(block), 4096):\n            block[i] = 1\n"
        "        os.write(write_end, b'%d\\n' % os.getpid())\n        time.sleep(30)\n        os._exit(0)\n"
        "    children.append(pid)\ntime.sleep(1.0)\nos.set_blocking(read_end, False)\n"
        "try:\n    holders = {int(x) for x in os.read(read_end, 4096).split()}\nexcept BlockingIOError:\n"
        "    holders = set()\nalive = [pid for pid in children if os.waitpid(pid, os.WNOHANG) == (0, 0)]\n"
        "print(len(holders & set(alive)))"
    )
    env = make_env(memory_mb=100, max_processes=4, timeout_s=4.0)
    run = env.sandbox.run(program)
    held = int(run.stdout.split()[0]) if run.stdout.split() else 0
    with_cgroup = env.sandbox.isolation.cgroups is not None
    bound_mb = 100 if with_cgroup else 4 * 100  # the cgroup, else the documented processes x memory
    how = "memory cgroup" if with_cgroup else "processes x memory"
    return held * 40 <= bound_mb, f"{held} x 40 MiB held at once (bound {bound_mb} MiB, {how})"


def tmp_fill(make_env, tmp_dir):
    """Write up to 96 MiB of files in the temp folder with max_tmp_mb=16: what may be stored is capped."""
    marker = _marker()
    program = (
        f"import os, tempfile\nfolder = os.path.join(tempfile.gettempdir(), '{marker}')\n"
        "os.makedirs(folder, exist_ok=True)\ntotal = 0\nchunk = b'x' * (1 << 20)\n"
        "for index in range(96):\n    try:\n        with open(os.path.join(folder, str(index)), 'wb') as f:\n"
        "            f.write(chunk)\n        total += 1\n    except OSError:\n        break\nprint(total)"
    )
    try:
        run = run_program(make_env, program, max_tmp_mb=16, timeout_s=4.0)
    finally:
        shutil.rmtree(os.path.join(tempfile.gettempdir(), marker), ignore_errors=True)
    stored = int(run.stdout.split()[0]) if run.stdout.split() else -1
    return 0 <= stored <= 16, f"stored {stored} MiB (cap 16 MiB)"


ATTACKS = {
    "fifo_result": fifo_result,
    "deep_json": deep_json,
    "humaneval_canonical": canonical_solution,
    **{f"humaneval_{name}": _fake(name) for name in FAKES},
    "backticks": backticks,
    "network": network,
    "read_host_files": read_host_files,
    "persistent_files": persistent_files,
    "setsid_survivor": setsid_survivor,
    "fork_bomb": fork_bomb,
    "memory_across_processes": memory_across_processes,
    "tmp_fill": tmp_fill,
    "kill_parent": kill_parent,  # last: where it is not contained, it ends the run
}


def env_factory(mode: str):
    """`make_env(**overrides)`: a DeepCoderEnv whose sandbox uses `mode`, the guard off, short timeouts."""

    def make_env(dataset="procedural", data_path=None, max_workers=1, **overrides):
        settings = {"timeout_s": 2.0, "guard": False, **MODE_SETTINGS[mode], **overrides}
        env = DeepCoderEnv(dataset=dataset, data_path=data_path, num_tests=2, max_workers=max_workers,
                           sandbox=SandboxConfig(**settings))  # fmt: skip
        if env.sandbox.isolation.mode != mode:
            raise RuntimeError(f"asked for isolation {mode!r}, got {env.sandbox.isolation.mode!r}")
        return env

    return make_env


def main() -> None:
    """`python -m tests.sandbox_attacks MODE TMP_DIR`: one JSON line per attack, in order."""
    mode, tmp_dir = sys.argv[1], sys.argv[2]
    make_env = env_factory(mode)
    for name, attack in ATTACKS.items():
        try:
            contained, detail = attack(make_env, tmp_dir)
        except Exception as error:  # report, so the test names the attack that broke
            contained, detail = False, f"{type(error).__name__}: {error}"
        sys.stdout.write(json.dumps({"attack": name, "contained": contained, "detail": detail}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
