"""Build the run browser's report: `trl-ragen2 view RUN_DIR [RUN_B] --out report.html`, or a notebook cell.

```python
from trl_ragen2.browser.report import build_report, notebook_view

build_report(["out/filtered", "out/unfiltered"], "compare.html")  # one file, no server, no network
notebook_view("out/filtered")                                     # the same page in a Jupyter cell
```

Stateless: each call reads the run folders (`trl_ragen2.browser.data`) and writes one file (through a temporary
name and a rename, so a reader never sees half a page).
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path

from ..runs.checkpoints import atomic_write_bytes
from .data import MAX_POINTS, MAX_SAMPLE_STEPS, load_run
from .page import render


REPORT_FILE = "report.html"  # default: inside the (first) run folder


def report_html(
    run_dirs: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    max_sample_steps: int = MAX_SAMPLE_STEPS,
    max_points: int = MAX_POINTS,
) -> str:
    """The page for one run, or two compared step by step."""
    if isinstance(run_dirs, str | os.PathLike):
        run_dirs = [run_dirs]
    if not 1 <= len(run_dirs) <= 2:
        raise ValueError(f"the run browser shows one run or compares two, got {len(run_dirs)}")
    runs = [load_run(path, max_sample_steps=max_sample_steps, max_points=max_points) for path in run_dirs]
    if len(runs) == 2 and runs[0]["name"] == runs[1]["name"]:
        runs[0]["name"], runs[1]["name"] = (str(Path(path)) for path in run_dirs)
    return render(runs)


def build_report(
    run_dirs: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike | None = None, **kwargs
) -> Path:
    """Write the page (default `<first run>/report.html`) and return its path; `kwargs` go to [`report_html`]."""
    first = Path(run_dirs if isinstance(run_dirs, str | os.PathLike) else run_dirs[0])
    out = Path(out) if out is not None else (first if first.is_dir() else first.parent) / REPORT_FILE
    page = report_html(run_dirs, **kwargs).encode("utf-8")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, page)
    return out


def notebook_view(run_dirs, height: int = 800, **kwargs):
    """The page in a notebook cell: an `IPython.display.HTML` holding a sandboxed iframe (`srcdoc`) of it."""
    from IPython.display import HTML

    page = report_html(run_dirs, **kwargs)
    frame = (
        f'<div><iframe sandbox="allow-scripts" style="width:100%;height:{int(height)}px;border:1px solid #ccc" '
        f'srcdoc="{html.escape(page, quote=True)}"></iframe></div>'
    )
    return HTML(frame)
