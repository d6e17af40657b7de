"""Import a script of `benchmarks/` as a module, for tests of its pure parts (the scripts are not a package)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """`benchmarks/{name}.py`, executed as a fresh module named `name`."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
