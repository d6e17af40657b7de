"""The import rule of `docs/architecture.md`: the pure modules and the environments load and run without the
layers above them.

Each check runs in a fresh interpreter whose import system refuses the named packages (a meta-path finder that
raises `ModuleNotFoundError`, as for a package that is not installed), imports the modules and calls them, so an
import hidden inside a function is caught too. A static check adds that no environment module names `trl_ragen2`.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
TRAINER_STACK = ("trl", "transformers", "accelerate", "datasets", "matplotlib", "peft", "vllm", "deepspeed")

BLOCKER = """
import sys

BLOCKED = {blocked!r}
already = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
assert not already, f"imported before the blocker: {{already}}"


class RefuseBlocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None


sys.meta_path.insert(0, RefuseBlocked())
"""


def run_without(blocked: tuple[str, ...], code: str, cwd: Path) -> subprocess.CompletedProcess:
    script = BLOCKER.format(blocked=set(blocked)) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_filtering_mi_and_the_run_log_readers_need_no_trainer_stack(tmp_path):
    records = [
        {"step": 1, "reward": 0.5, "ragen2/filter/kept_fraction": 0.75, "ragen2/mi/first_turn/mi_est": 0.2},
        {"step": 2, "reward": 0.4, "ragen2/filter/kept_fraction": 0.5, "ragen2/mi/first_turn/mi_est": 0.1},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(record) for record in records) + "\n")
    code = """
    import torch

    from trl_ragen2 import filter_stats, group_reward_scores, mi_metrics, select_groups
    from trl_ragen2.cli import main
    from trl_ragen2.collapse.detector import first_alarm
    from trl_ragen2.filtering.grad_snr import reward_variance_buckets
    from trl_ragen2.filtering.keep_rate import scheduled_top_p
    from trl_ragen2.collapse.mi import MIZScoreEMA
    from trl_ragen2.collapse.mi_uncertainty import mi_uncertainty
    from trl_ragen2.plots.panels import panel_data
    from trl_ragen2.runs.logs import load_run_logs, summarize
    from trl_ragen2.collapse.text_metrics import text_template_metrics

    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    scores = group_reward_scores(rewards, num_generations=2)
    keep = select_groups(scores, strategy="top_p", top_p=0.9)
    assert filter_stats(rewards, 2, keep)["kept_fraction"] > 0
    logp = torch.tensor([[-1.0, -3.0], [-2.5, -0.5]])
    metrics = mi_metrics(logp, torch.ones(2), torch.arange(2))
    metrics.update(MIZScoreEMA().update(metrics))
    assert metrics["retrieval_acc"] == 1.0
    extra = mi_uncertainty(logp, torch.ones(2), torch.arange(2), num_permutations=10, num_bootstrap=10)
    assert 0 < extra["retrieval_pvalue"] <= 1
    assert scheduled_top_p(5, start=1.0, end=0.9, schedule="linear", schedule_steps=10) == 0.95
    assert sorted(i for bucket in reward_variance_buckets(rewards, 2, 2) for i in bucket) == [0, 1, 2, 3]
    assert text_template_metrics([[1, 2, 3], [1, 2, 4]], [0, 1])["num_chains"] == 2
    assert first_alarm([{"step": 1, "reward": 0.5}]) is None
    logs = load_run_logs(".")
    assert summarize(logs.records) and panel_data(logs)
    assert main(["summary", "."]) == 0
    assert main(["view", "."]) == 0  # the run browser's page (trl_ragen2.browser)
    """
    result = run_without(TRAINER_STACK, code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "kept_fraction" in result.stdout  # the summary printed the run's metrics
    assert (tmp_path / "report.html").is_file()


def test_the_run_log_readers_need_no_torch(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    (tmp_path / "samples.jsonl").write_text(json.dumps({"step": 1, "version": 1, "groups": []}) + "\n")
    code = """
    import trl_ragen2
    from trl_ragen2.cli import main
    from trl_ragen2.runs.logs import load_run_logs, summarize
    from trl_ragen2.runs.samples import read_samples

    assert trl_ragen2.__version__
    assert summarize(load_run_logs(".").records)
    assert read_samples("samples.jsonl")[0][0]["step"] == 1
    assert main(["summary", ".", "--json"]) == 0
    """
    result = run_without(("torch", *TRAINER_STACK), code, tmp_path)
    assert result.returncode == 0, result.stderr


def test_environments_need_no_torch_and_no_trainer_stack(tmp_path):
    code = """
    import importlib
    import pkgutil

    import trl_ragen2_envs
    from trl_ragen2_envs import ENVIRONMENTS, make_env
    from trl_ragen2_envs.datasets import build_rows

    for module in pkgutil.walk_packages(trl_ragen2_envs.__path__, "trl_ragen2_envs."):
        if not module.name.endswith(".server"):  # the web servers need flask, an extra
            importlib.import_module(module.name)
    configs = {"webshop": {"procedural": True, "procedural_products": 100, "cache_dir": "index"}}
    for name in ENVIRONMENTS:
        env = make_env(name, **configs.get(name, {}))
        env.reset(seed=0)
        observation, reward, done, info = env.step("Up")
        assert isinstance(observation, str) and "action_is_valid" in info
        env.close()
    assert build_rows("sokoban", "train", 2)[1]["seed"] == 1
    """
    result = run_without(("torch", *TRAINER_STACK), code, tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_public_name_without_its_dependency_says_what_is_missing(tmp_path):
    code = """
    from trl_ragen2 import select_groups  # the pure names still load

    try:
        from trl_ragen2 import SNRFilteredGRPOTrainer
    except ModuleNotFoundError as error:
        assert error.name.split(".")[0] in ("trl", "transformers"), error.name
        print(error)
    else:
        raise AssertionError("the trainer imported without TRL")
    """
    result = run_without(("trl", "transformers"), code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "trl_ragen2.SNRFilteredGRPOTrainer needs" in result.stdout and "which is not installed" in result.stdout


def test_every_public_name_imports():
    import trl_ragen2

    missing = [name for name in trl_ragen2.__all__ if getattr(trl_ragen2, name, None) is None]
    assert missing == []
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
        trl_ragen2.not_a_name  # noqa: B018


def layer_table() -> dict[str, int]:
    """Folder (subpackage) or module name -> layer number, from the layer table of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("<!-- layer table", 1)[1].split("\n\n", 2)[1]
    layers = {}
    for row in table.splitlines()[2:]:
        number, modules = re.match(r"\| (\d+)\. [^|]+\| ([^|]+) \|", row).groups()
        for name in re.findall(r"`([\w.]+)`", modules):
            layers[name] = int(number)
    return layers


def imported_modules(path: Path, module: str) -> list[tuple[str, int]]:
    """The `trl_ragen2` and `trl_ragen2_envs` modules a file imports (anywhere in it), with the line numbers."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            # `from trl_ragen2 import X` loads the module that defines X (the package exports lazily)
            targets = [f"{base}.{alias.name}" for alias in node.names] if base == "trl_ragen2" else [base]
        else:
            continue
        found += [
            (target, node.lineno) for target in targets if target.split(".")[0] in ("trl_ragen2", "trl_ragen2_envs")
        ]
    return found


def layer_of(name: str, layers: dict[str, int]) -> int | None:
    while name:
        if name in layers:
            return layers[name]
        name = name.rpartition(".")[0]
    return None


def test_imports_point_down_the_layer_table():
    import trl_ragen2

    layers = layer_table()
    exports = {f"trl_ragen2.{name}": module for name, module in trl_ragen2._LAZY.items()}
    unlisted, upward = [], []
    for path in sorted((ROOT / "trl_ragen2").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module == "trl_ragen2":
            continue  # the lazy export table
        layer = layer_of(module, layers)  # a module's row is its folder's, or its own at the top of the package
        if layer is None:
            unlisted.append(module)
            continue
        for target, line in imported_modules(path, module):
            target = exports.get(target, target)
            if target == "trl_ragen2.__version__":
                continue
            target_layer = layer_of(target, layers)
            if target_layer is None or target_layer > layer:
                upward.append(f"{module} (layer {layer}) line {line} imports {target} (layer {target_layer})")
    assert unlisted == [], "add these modules to the layer table of docs/architecture.md"
    assert upward == []


def test_environment_modules_never_name_trl_ragen2():
    offenders = []
    for path in sorted((ROOT / "envs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            offenders += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] == "trl_ragen2"]
    assert offenders == []
