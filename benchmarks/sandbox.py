"""DeepCoder sandbox and SearchQA retrieval speed.

```bash
python benchmarks/sandbox.py                  # defaults: 40 executions per sandbox setting, 500 queries
python benchmarks/sandbox.py --runs 100 --queries 2000 --workers 4
```

Sandbox: sandboxed test executions per second (one process per test: the harness, its limits and guard, and
the isolation), against a bare `subprocess.run([sys.executable, "-c", "pass"])` measured in the same run, the
least a fresh interpreter costs. Settings: the default isolation with a stdio, a function and an assertion test
(the last two call the program over the judge's pipes and compare here), each isolation mode this machine has
(bubblewrap, unshare, and the weak uid-only mode), a mode without its per-execution memory cgroup (the cgroup's
own cost), and `run_tests` with several workers.

SearchQA: latency of one BM25 search over the default procedural world (about 2,400 passages), of one
`search[...]` step (search plus formatting), and of one search over the loopback HTTP server, each as p50/p99,
against a naive baseline in the same run: a Python substring scan of every passage for the query's first word.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np

from trl_ragen2_envs.deepcoder import CodeTest, run_tests
from trl_ragen2_envs.deepcoder.sandbox import Sandbox
from trl_ragen2_envs.searchqa import BM25Retriever, HTTPRetriever, RetrievalServer, SearchQAEnv, build_world
from trl_ragen2_envs.searchqa.questions import sample_question


# ---------------------------------------------------------------------------------------------------------------
# Sandbox


def executions_per_second(run_once, runs: int) -> float:
    run_once()  # warm-up (isolation probing, page cache)
    started = time.perf_counter()
    for _ in range(runs):
        run_once()
    return runs / (time.perf_counter() - started)


def _sandbox(label: str, **settings):
    """A sandbox in one isolation mode, or None (with a line saying why) where this machine has no such mode."""
    try:
        return Sandbox(timeout_s=5.0, **settings)
    except RuntimeError as error:  # IsolationUnavailable too
        print(f"{label:<84} unavailable here: {str(error)[:80]}")
        return None


def bench_sandbox(runs: int, workers: int) -> None:
    bare = executions_per_second(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), runs)
    print(f"{'bare subprocess.run(python -c pass)':<84} {bare:8.1f} runs/s   1.00x (baseline)")
    stdio = CodeTest("stdio", input="21\n", output="42")
    function = CodeTest("function", fn_name="double", args=(21,), expected=42)
    assertion = CodeTest("assertion", fn_name="double", code="def check(candidate):\n    assert candidate(21) == 42\n"
                         "    assert candidate(-1) == -2\n\ncheck(double)")  # fmt: skip
    programs = {"stdio": "print(int(input()) * 2)", "function": "def double(x):\n    return 2 * x"}
    modes = {
        "default (auto)": {},
        "bubblewrap": {"use_bubblewrap": True, "use_unshare": False},
        "unshare": {"use_bubblewrap": False, "use_unshare": True},
        "uid only (weak)": {"use_bubblewrap": False, "use_unshare": False, "allow_weak_isolation": True},
    }
    for label, settings in modes.items():
        sandbox = _sandbox(label, **settings)
        if sandbox is None:
            continue
        kinds = [("stdio", stdio), ("function", function), ("assertion", assertion)] if label.startswith("default") \
            else [("stdio", stdio)]  # fmt: skip
        for kind, test in kinds:
            program = programs["stdio" if kind == "stdio" else "function"]
            rate = executions_per_second(lambda s=sandbox, p=program, t=test: run_tests(s, p, [t]), runs)
            name = f"{label}: {kind} test ({sandbox.isolation.describe()})"
            print(f"{name:<84} {rate:8.1f} tests/s  {rate / bare:4.2f}x")
        if sandbox.isolation.cgroups is not None:  # the same mode without the per-execution memory cgroup
            sandbox.isolation = replace(sandbox.isolation, cgroups=None)
            rate = executions_per_second(lambda s=sandbox: run_tests(s, programs["stdio"], [stdio]), runs)
            print(f"{label + ': stdio test, no memory cgroup':<84} {rate:8.1f} tests/s  {rate / bare:4.2f}x")
    sandbox = Sandbox(timeout_s=5.0)
    batch = [stdio] * workers * 4
    rate = executions_per_second(
        lambda: run_tests(sandbox, programs["stdio"], batch, max_workers=workers), max(runs // 8, 2)
    )
    rate *= len(batch)
    print(f"{f'default, run_tests with {workers} workers':<84} {rate:8.1f} tests/s  {rate / bare:4.2f}x")


# ---------------------------------------------------------------------------------------------------------------
# SearchQA


def latencies_ms(call, queries: list[str]) -> tuple[float, float]:
    call(queries[0])
    times = []
    for query in queries:
        started = time.perf_counter()
        call(query)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), float(np.percentile(times, 99))


def bench_search(num_queries: int) -> None:
    world = build_world(0)
    started = time.perf_counter()
    retriever = BM25Retriever(world.passages)
    index_s = time.perf_counter() - started
    print(f"BM25 index of {len(world.passages)} passages built in {index_s * 1000:.0f} ms")
    rng = np.random.default_rng(0)
    queries = []
    for i in range(num_queries):
        question = sample_question(world, rng)
        queries.append(question.question if i % 2 else question.hops[i % 4 // 2])  # questions and entity names

    def naive(query: str):
        word = query.split()[0].lower()
        return [p for p in world.passages if word in p.text.lower()][:3]

    base_p50, base_p99 = latencies_ms(naive, queries)
    print(f"{'naive substring scan (baseline)':<48} p50 {base_p50:7.3f} ms  p99 {base_p99:7.3f} ms  1.00x")
    env = SearchQAEnv()
    env.reset(0)

    def env_step(query: str):
        env.done = False  # stay in the episode: only search cost is measured
        env.steps = 0
        env.step(f"search[{query}]")

    measured = {"BM25 search (top 3)": lambda q: retriever.search(q, 3), "env.step(search[...]) (top 3)": env_step}
    with RetrievalServer(retriever) as server:
        remote = HTTPRetriever(server.url)
        measured["HTTP search over loopback (top 3)"] = lambda q: remote.search(q, 3)
        for label, call in measured.items():
            p50, p99 = latencies_ms(call, queries)
            print(f"{label:<48} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  {p50 / base_p50:4.2f}x (p50)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="executions per sandbox setting")
    parser.add_argument("--workers", type=int, default=2, help="workers of the parallel run_tests setting")
    parser.add_argument("--queries", type=int, default=500, help="SearchQA queries per setting")
    args = parser.parse_args()
    print("== DeepCoder sandbox ==")
    bench_sandbox(args.runs, args.workers)
    print("\n== SearchQA retrieval ==")
    bench_search(args.queries)


if __name__ == "__main__":
    main()
