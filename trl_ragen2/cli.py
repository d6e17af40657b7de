"""The `trl-ragen2` command line: plot and summarise a training run from its logs, diagnose template collapse in any
model, checkpoint or saved rollouts, and prepare WebShop's data.

```
trl-ragen2 plot out/webshop-grpo                  # PNGs into out/webshop-grpo/plots, paths on stdout
trl-ragen2 plot out/webshop-grpo --scope first_turn --proxy mi_zscore --mi-threshold 1.0
trl-ragen2 summary out/webshop-grpo               # last / mean / best of the key metrics
trl-ragen2 summary out/webshop-grpo --json        # the same as JSON, for CI
trl-ragen2 view out/webshop-grpo                  # out/webshop-grpo/report.html: curves, steps, MI retrieval
trl-ragen2 view out/filtered out/unfiltered --out compare.html
trl-ragen2 diagnose outputs/run --env sokoban      # template collapse of each checkpoint-*, paired
trl-ragen2 diagnose MODEL --rollouts dump.jsonl --html --out diag  # saved rollouts of any framework, scored
trl-ragen2 data webshop small                     # download WebShop's 1k set, convert it, cache it
trl-ragen2 data webshop small --from ~/WebShop    # import a copy you already have
```

A run's logs are its `trainer_state.json`, the newest `checkpoint-*/trainer_state.json`, or the `metrics.jsonl` of
`trl_ragen2.runs.tracking.MetricsJSONLCallback`, so a run can be looked at while it trains. Each subcommand is one
`_add_<name>(subparsers)` function that registers its arguments and its handler; handlers return the exit status
(0 ok, 1 nothing to show or bad input; argparse uses 2 for usage errors). Heavy imports happen inside handlers, so
`--help` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .runs.keys import MI_SCOPES, mi_key
from .runs.logs import format_summary, is_summary_key, load_run_logs, summarize


PROG = "trl-ragen2"

# Kept here (not imported from plots) so that `--help` does not import matplotlib; tests check they match.
PROXY_CHOICES = (
    "mi_est",
    "mi_seq_est",
    "mi_zscore",
    "mi_zscore_ema",
    "mi_zscore_seq",
    "mi_zscore_ema_seq",
    "retrieval_acc",
    "retrieval_above_chance",
)
ENTROPY_CHOICES = ("cond_entropy", "cond_entropy_seq")


def _error(command: str, message) -> int:
    print(f"{PROG} {command}: error: {message}", file=sys.stderr)
    return 1


# ---------------------------------------------------------------------------------------------------------------
# plot


def _add_plot(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="write PNG figures of a run (training curves, reasoning regimes) and print their paths",
        description="Write training_curves.png and regimes_<scope>.png for a run and print their paths. Figures "
        "whose metrics the run did not log are skipped with a note on stderr.",
    )
    parser.add_argument("output_dir", metavar="OUTPUT_DIR", help="the run's output_dir (or one log file)")
    parser.add_argument("--out", metavar="DIR", help="where to write the PNGs (default: OUTPUT_DIR/plots)")
    parser.add_argument(
        "--scope",
        choices=MI_SCOPES,
        help="MI scope of the regime plot (default: every scope the run logged)",
    )
    parser.add_argument(
        "--proxy",
        choices=PROXY_CHOICES,
        default="mi_est",
        help="MI proxy on the regime plot's MI axis (default: mi_est, the estimate of I(X;Z) in nats/token)",
    )
    parser.add_argument("--entropy", choices=ENTROPY_CHOICES, default="cond_entropy", help="entropy axis key")
    parser.add_argument(
        "--mi-threshold",
        type=float,
        help="MI boundary between the regimes (default 0.05 nats/token for mi_est; required for other proxies)",
    )
    parser.add_argument(
        "--entropy-threshold", type=float, help="H(Z|X) boundary (default 0.5 nats/token for cond_entropy)"
    )
    parser.add_argument("--dpi", type=int, default=120, help="resolution of the PNGs (default: 120)")
    parser.set_defaults(handler=_run_plot)


def _run_plot(args) -> int:
    from .plots.figures import plot_run_report

    report = plot_run_report(
        args.output_dir,
        args.out,
        scopes=(args.scope,) if args.scope else MI_SCOPES,
        proxy=args.proxy,
        entropy=args.entropy,
        mi_threshold=args.mi_threshold,
        entropy_threshold=args.entropy_threshold,
        dpi=args.dpi,
    )
    for line in report.notes + report.missing:
        print(f"note: {line}", file=sys.stderr)
    if not report.paths:
        return _error("plot", f"nothing to plot in {report.source}; see the notes above for the metrics looked for")
    for path in report.paths:
        print(path)
    return 0


# ---------------------------------------------------------------------------------------------------------------
# summary


def _add_summary(subparsers) -> None:
    parser = subparsers.add_parser(
        "summary",
        help="print the last / mean / best values of a run's key metrics",
        description="Print a table of the key metrics of a run (reward, success rates, kept fraction, MI, entropy, "
        "step time) and the reasoning regime of its last MI diagnostic per scope.",
    )
    parser.add_argument("output_dir", metavar="OUTPUT_DIR", help="the run's output_dir (or one log file)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(handler=_run_summary)


def _last_regimes(records: list[dict]) -> dict[str, dict]:
    """Regime of the last MI diagnostic per scope, with the default MI-Est / H(Z|X) thresholds."""
    scopes = [s for s in MI_SCOPES if any(mi_key(s, "mi_est") in r for r in records)]
    if not scopes:
        return {}
    from .plots.figures import classify_run, regime_points, regime_thresholds

    mi_threshold, entropy_threshold = regime_thresholds()
    regimes = {}
    for scope in scopes:
        classified = classify_run(records, scope)
        if classified:
            steps, mi, ent = regime_points(records, scope)
            regimes[scope] = {
                "step": steps[-1],
                "regime": classified[-1][1],
                "mi_est": mi[-1],
                "cond_entropy": ent[-1],
                "mi_threshold": mi_threshold,
                "entropy_threshold": entropy_threshold,
            }
    return regimes


def _run_summary(args) -> int:
    logs = load_run_logs(args.output_dir, keep=is_summary_key)  # streamed: only the key metrics stay in memory
    rows = summarize(logs.records)
    regimes = _last_regimes(logs.records)
    for note in logs.notes:  # which source is described and why; sources or lines skipped
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        summary = {
            "source": str(logs.source),
            "last_step": logs.last_step,
            "records": len(logs.records),
            "metrics": {
                row.key: {k: getattr(row, k) for k in ("count", "last", "last_step", "mean", "best", "best_step")}
                for row in rows
            },
            "regimes": regimes,
            "notes": logs.notes,
        }
        print(json.dumps(summary, indent=2))
        return 0
    header = f"{logs.source}: {len(logs.records)} log records, last step {logs.last_step}"
    print(format_summary(rows, header) if rows else f"{header}\n(no key metric has a value yet)")
    for scope, info in regimes.items():
        print(
            f"regime ({scope}, step {info['step']}): {info['regime']} "
            f"[MI-Est {info['mi_est']:.4g} vs {info['mi_threshold']:g}, "
            f"H(Z|X) {info['cond_entropy']:.4g} vs {info['entropy_threshold']:g}]"
        )
    return 0


# ---------------------------------------------------------------------------------------------------------------
# view


def _add_view(subparsers) -> None:
    parser = subparsers.add_parser(
        "view",
        help="write a self-contained HTML report of a run (curves, logged steps, MI retrieval), or compare two",
        description="Write one static HTML file (no server, no network) showing a run's curves, the groups of its "
        "logged steps (what the model wrote, what the filter kept) and the MI diagnostics' retrievals, from its "
        "logs and samples.jsonl. With two runs, both are shown step by step side by side.",
    )
    parser.add_argument("runs", metavar="RUN_DIR", nargs="+", help="the run's output_dir (a second one to compare)")
    parser.add_argument("--out", metavar="FILE", help="where to write the page (default: RUN_DIR/report.html)")
    parser.add_argument(
        "--max-sample-steps",
        type=int,
        default=100,
        help="logged steps the page holds at most, evenly spread (default: 100)",
    )
    parser.set_defaults(handler=_run_view)


def _run_view(args) -> int:
    from .browser.report import build_report

    if len(args.runs) > 2:
        return _error("view", f"give one run, or two to compare; got {len(args.runs)}")
    if args.max_sample_steps < 1:
        return _error("view", f"--max-sample-steps must be >= 1, got {args.max_sample_steps}")
    path = build_report(args.runs, args.out, max_sample_steps=args.max_sample_steps)
    print(path)
    return 0


# ---------------------------------------------------------------------------------------------------------------
# diagnose


def _add_diagnose(subparsers) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="check a model, checkpoints or saved rollouts for template collapse (MI proxies, regime, verdict)",
        description="Roll a model out on a task (one of the library's environments, or a JSONL file of prompts) "
        "or read saved rollouts, cross-score the reasoning with the policy, and report the Table 1 proxies of "
        "RAGEN-2 with bootstrap intervals and the permutation test, the text template metrics, the regime and one "
        "line to act on. Two models, or a run folder of checkpoint-*, are compared on the same prompts.",
    )
    parser.add_argument(
        "models", metavar="MODEL", nargs="+", help="a checkpoint folder, a PEFT adapter folder, a Hub id, or a run "
        "folder of checkpoint-* (each diagnosed in step order)"
    )  # fmt: skip
    task = parser.add_mutually_exclusive_group(required=True)
    task.add_argument("--env", metavar="NAME", help="roll out on this environment (RAGEN protocol, seeds 0..N-1)")
    task.add_argument("--prompts", metavar="FILE", help="roll out on a JSONL file of {prompt} rows")
    task.add_argument("--rollouts", metavar="FILE", help="score saved {prompt, completion[, group, reward]} rows")
    parser.add_argument("--num-prompts", type=int, default=8, help="N: prompts (default 8, the paper's)")
    parser.add_argument("--group-size", type=int, default=8, help="G: samples per prompt (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens per reply (default 128)")
    parser.add_argument("--max-turns", type=int, default=5, help="turns per episode for --env (default 5)")
    parser.add_argument("--engine", choices=("auto", "transformers", "vllm"), default="auto",
                        help="generation and scoring engine (auto: vLLM where installed, scoring per scope measured)")  # fmt: skip
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer, when the model folder has none")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                        help="dtype of the model in both engines (default float32)")  # fmt: skip
    parser.add_argument("--num-samples", type=int, help="chains per scope (default: every rollout)")
    parser.add_argument("--mi-threshold", type=float, default=0.05, help="MI-Est regime threshold (nats/token)")
    parser.add_argument("--entropy-threshold", type=float, default=0.5, help="H(Z|X) regime threshold (nats/token)")
    parser.add_argument("--num-bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--num-permutations", type=int, default=1000, help="permutation-test shuffles")
    parser.add_argument("--seed", type=int, default=0, help="seed of sampling, pairs and resampling")
    parser.add_argument("--out", metavar="DIR", help="folder for diagnosis.json (and the page, the rollouts)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--html", action="store_true", help="write OUT/diagnosis.html (needs --out)")
    parser.add_argument("--save-rollouts", action="store_true", help="write OUT/rollouts-<model>.jsonl")
    parser.set_defaults(handler=_run_diagnose)


def _run_diagnose(args) -> int:
    from .collapse.diagnose import format_report
    from .diagnose import diagnose

    result = diagnose(
        args.models, task=args.env, prompts=args.prompts, rollouts=args.rollouts, num_prompts=args.num_prompts,
        group_size=args.group_size, max_new_tokens=args.max_new_tokens, max_turns=args.max_turns,
        engine=args.engine, tokenizer=args.tokenizer, num_samples=args.num_samples, mi_threshold=args.mi_threshold,
        entropy_threshold=args.entropy_threshold, num_bootstrap=args.num_bootstrap,
        num_permutations=args.num_permutations, seed=args.seed, out=args.out, html=args.html,
        save_rollouts=args.save_rollouts, dtype=args.dtype,
    )  # fmt: skip
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_report(result.diagnoses, result.comparisons))
        if len(result.diagnoses) > 1:
            fired = result.collapse_alarm or "does not fire"
            print(f"collapse alarm (CollapseDetector on the first turn, over the series): {fired}")
    for path in result.files:
        print(f"wrote {path}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------------------------
# data


def _add_data(subparsers) -> None:
    parser = subparsers.add_parser(
        "data",
        help="download and prepare environment data (WebShop's product catalogue)",
        description="Download and prepare environment data.",
    )
    sources = parser.add_subparsers(dest="source", metavar="SOURCE", title="sources", required=True)
    webshop = sources.add_parser(
        "webshop",
        help="WebShop's original data: 'small' (1,000 products, 9.8 MB) or 'all' (1.18 M products, 5.7 GB)",
        description="Download WebShop's original files (the Google Drive files of princeton-nlp/WebShop's "
        "setup.sh), resuming an interrupted download and checking each file against its published SHA-256; "
        "convert them into the format the WebShop environment loads (with precomputed title nouns, which needs "
        'spaCy: pip install "trl-ragen2[webshop-data]"); and keep them in the cache folder, where the WebShop '
        "recipe finds them.",
    )
    webshop.add_argument("dataset", choices=("small", "all"), help="which set, as in WebShop's setup.sh -d")
    webshop.add_argument(
        "--to", metavar="DIR", help="folder to prepare (default: $TRL_RAGEN2_CACHE or ~/.cache/trl_ragen2, then "
        "webshop-data/<dataset>)"
    )  # fmt: skip
    origin = webshop.add_mutually_exclusive_group()
    origin.add_argument(
        "--from", dest="source_dir", metavar="DIR", help="import the original files from DIR (or DIR/data, as in a "
        "WebShop checkout) instead of downloading them"
    )  # fmt: skip
    origin.add_argument(
        "--mirror", metavar="URL", help="download URL/<file name> instead of Google Drive (the same files)"
    )
    webshop.add_argument("--force", action="store_true", help="prepare again even if the folder is prepared")
    webshop.set_defaults(handler=_run_data_webshop)


def _amount(done: int, total: int | None, unit: str) -> str:
    if unit == "B":
        return f"{done / 1e6:,.1f}" + (f"/{total / 1e6:,.1f}" if total else "") + " MB"
    return f"{done:,}" + (f"/{total:,}" if total else "") + f" {unit}"


def _run_data_webshop(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    from trl_ragen2_envs.webshop.catalog.download import DownloadError
    from trl_ragen2_envs.webshop.catalog.prepare import default_data_dir, prepare_webshop_data
    from trl_ragen2_envs.webshop.data import DATA_DIR_ENV_VAR

    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[amount]}"),
               TimeRemainingColumn())  # fmt: skip
    tasks: dict[str, int] = {}
    with Progress(*columns, console=Console(stderr=True)) as bar:

        def progress(name: str, done: int, total: int | None) -> None:
            unit = "products" if name == "title nouns" else "B"
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total, amount="")
            bar.update(tasks[name], completed=done, total=total, amount=_amount(done, total, unit))

        try:
            result = prepare_webshop_data(
                args.dataset, args.to, source_dir=args.source_dir, mirror=args.mirror, force=args.force,
                progress=progress,
            )  # fmt: skip
        except (DownloadError, ImportError, OSError, ValueError) as error:
            bar.stop()
            return _error("data webshop", error)
    if result.already_prepared:
        print(f"WebShop {args.dataset} set already prepared in {result.folder} (--force prepares it again)")
        return 0
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"WebShop {args.dataset} set ready in {result.folder}: {result.num_products:,} products")
    for name, entry in result.files.items():
        check = entry.get("check") or (f"made by {entry['by']}" if "by" in entry else entry["origin"])
        print(f"  {name}: {entry['bytes']:,} bytes, sha256 {entry['sha256']}, {check}")
    if args.to is None or Path(args.to).expanduser().resolve() == default_data_dir(args.dataset).resolve():
        print(f"The WebShop recipe reads it by default (--webshop_dataset {args.dataset}).")
    else:
        print(f"Use it with --webshop_data_dir {result.folder} or {DATA_DIR_ENV_VAR}={result.folder}.")
    return 0


# ---------------------------------------------------------------------------------------------------------------
# entry point


def build_parser() -> argparse.ArgumentParser:
    """The `trl-ragen2` argument parser, with its `plot`, `summary`, `view`, `diagnose` and `data` commands."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="RAGEN-2 for TRL: look at training runs (MI diagnostics, SNR filtering, rewards) and prepare "
        "environment data.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    _add_plot(subparsers)
    _add_summary(subparsers)
    _add_view(subparsers)
    _add_diagnose(subparsers)
    _add_data(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `trl-ragen2` with `argv` (default: `sys.argv[1:]`) and return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.handler(args)
    except (
        ImportError,
        OSError,
        ValueError,
    ) as error:  # no logs (RunLogsNotFoundError), bad settings, malformed logs, unwritable --out, vLLM missing
        return _error(args.command, error)


if __name__ == "__main__":
    sys.exit(main())
