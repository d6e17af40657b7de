"""WebShop speed: search latency (1k and 100k products), environment steps without search, and reward time.

```bash
python benchmarks/webshop.py                                   # 1k: $WEBSHOP_DATA_DIR, else trl-ragen2 data webshop small
python benchmarks/webshop.py --data-dir /path/to/webshop/data --large-products 100000 --steps 20000
```

Sections:
- **baseline**: one dict lookup per loop iteration (the cheapest "find a product" there is), measured in this run;
  every latency is also printed as a multiple of it.
- **search 1k**: BM25 top-50 latency over the 1k catalogue (RAGEN's catalogue when configured, else the
  procedural one), for queries made from goal instructions and product queries; p50 and p99.
- **search 100k**: the same over a 100k-product procedural catalogue (generation and index build times are
  printed too; the index is built in a temporary cache folder, so the build is measured, not a cache hit), and
  its p50 as a multiple of the 1k p50.
- **env steps**: `WebShopEnv.step` throughput on clicks and page navigation only (one search first, then
  product, option, sub-page, back and paging clicks), observation and action-list rendering included.
- **reward**: `compute_reward` time per purchase.

Targets: search p50 <= 2 ms (1k) and <= 25 ms (100k); >= 2,000 env steps/s without search. The script exits with
status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
import time

import numpy as np

from trl_ragen2_envs.webshop import WebShopEnv
from trl_ragen2_envs.webshop.catalog.prepare import prepared_data_dir
from trl_ragen2_envs.webshop.data import DATA_DIR_ENV_VAR, ShopConfig, build_shop


SEARCH_P50_TARGET_MS = {"1k": 2.0, "100k": 25.0}
STEPS_PER_SECOND_TARGET = 2_000.0
_PRICE_CLAUSE = re.compile(r",? and price lower than .*$")


# ---------------------------------------------------------------------------------------------------------------
# Helpers


def dict_lookup_baseline_ns(num: int = 1_000_000) -> float:
    """Nanoseconds per iteration of a loop doing one dict lookup (best of 3)."""
    table = {f"B{i:09d}": i for i in range(1000)}
    keys = [f"B{i % 1000:09d}" for i in range(num)]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter_ns()
        for key in keys:
            table[key]
        best = min(best, (time.perf_counter_ns() - start) / num)
    return best


def search_queries(shop, count: int, seed: int = 0) -> list[str]:
    """Queries like an agent's: goal instructions without "Find me" and the price clause, and product queries."""
    rng = random.Random(seed)
    queries = []
    for _ in range(count):
        if rng.random() < 0.7:
            goal = shop.goals[rng.randrange(len(shop.goals))]
            queries.append(_PRICE_CLAUSE.sub("", goal.instruction_text).removeprefix("Find me ").split(" with ")[0])
        else:
            queries.append(shop.products[rng.randrange(len(shop.products))].query)
    return queries


def latencies_ms(shop, queries: list[str]) -> np.ndarray:
    shop.search(queries[0])  # warm up
    times = []
    for query in queries:
        start = time.perf_counter_ns()
        shop.search(query)
        times.append((time.perf_counter_ns() - start) / 1e6)
    return np.asarray(times)


def report(name: str, value: float, unit: str, baseline: str = "", target: str = "", passed: bool | None = None):
    verdict = "" if passed is None else ("PASS" if passed else "FAIL")
    print(f"  {name:<34} {value:>12,.3f} {unit:<8} {baseline:<24} {target:<14} {verdict}")
    return passed


# ---------------------------------------------------------------------------------------------------------------
# Sections


def bench_search(label: str, shop, queries: list[str], baseline_ns: float) -> tuple[float, list[bool | None]]:
    times = latencies_ms(shop, queries)
    p50, p99 = float(np.percentile(times, 50)), float(np.percentile(times, 99))
    target = SEARCH_P50_TARGET_MS[label]
    print(f"search {label}: {shop.name}, {len(shop.products):,} products, {len(queries)} queries")
    verdicts = [
        report("p50", p50, "ms", f"{p50 * 1e6 / baseline_ns:,.0f}x dict lookup", f"<= {target:g} ms", p50 <= target),
        report("p99", p99, "ms", f"{p99 * 1e6 / baseline_ns:,.0f}x dict lookup"),
        report("mean", float(times.mean()), "ms"),
    ]
    return p50, verdicts


def bench_env_steps(env: WebShopEnv, num_steps: int, baseline_ns: float) -> list[bool | None]:
    """Clicks and navigation only: one search, then a fixed tour of a product with options and the result pages."""
    env.reset(seed=0)
    query = env.shop.products[0].query
    env.step(f"search[{query}]")
    results = env.session.state.results
    with_options = next((a for a in results[:10] if env.shop.by_asin[a].options), results[0])
    option_values = [v[0] for v in env.shop.by_asin[with_options].options.values()]
    tour = [f"click[{with_options.lower()}]", *(f"click[{v}]" for v in option_values)]
    tour += ["click[description]", "click[< prev]", "click[features]", "click[< prev]", "click[reviews]"]
    tour += ["click[< prev]", "click[< prev]", "click[next >]", "click[< prev]"]  # back to results, page 2 and back
    state = env.session.state
    steps, invalid = 0, 0
    start = time.perf_counter_ns()
    while steps < num_steps:
        for action in tour:
            invalid += not env.step(action)[3]["action_is_valid"]
        steps += len(tour)
        assert env.session.state == state, "the tour must return to the results page it started from"
    seconds = (time.perf_counter_ns() - start) / 1e9
    per_second = steps / seconds
    ns_per_step = 1e9 / per_second
    print(f"env steps (no search): {len(tour)}-action tour, {steps:,} steps, {invalid} invalid")
    return [
        report(
            "steps/s",
            per_second,
            "steps/s",
            f"{ns_per_step / baseline_ns:,.0f}x dict lookup",
            f">= {STEPS_PER_SECOND_TARGET:,.0f}",
            per_second >= STEPS_PER_SECOND_TARGET,
        ),
        report("time per step", ns_per_step / 1e3, "us"),
    ]


def bench_reward(shop, count: int, baseline_ns: float) -> None:
    rng = random.Random(0)
    cases = []
    for _ in range(count):
        goal = shop.goals[rng.randrange(len(shop.goals))]
        asin = goal.asin if rng.random() < 0.5 else shop.products[rng.randrange(len(shop.products))].asin
        options = {name: values[0] for name, values in shop.by_asin[asin].options.items()}
        cases.append((goal, asin, options))
    start = time.perf_counter_ns()
    for goal, asin, options in cases:
        shop.score_purchase(goal, asin, options)
    per_call_us = (time.perf_counter_ns() - start) / count / 1e3
    print(f"reward: {count:,} purchases (half of them the goal product)")
    report("time per reward", per_call_us, "us", f"{per_call_us * 1e3 / baseline_ns:,.0f}x dict lookup")


# ---------------------------------------------------------------------------------------------------------------
# Main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-dir", default=None, help=f"1k data folder (default: ${DATA_DIR_ENV_VAR}, else the prepared small set)"
    )
    parser.add_argument("--large-products", type=int, default=100_000, help="size of the large procedural catalogue")
    parser.add_argument("--queries", type=int, default=500, help="search queries per catalogue")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps to time")
    parser.add_argument("--rewards", type=int, default=5_000, help="purchases to score")
    args = parser.parse_args(argv)

    data_dir = args.data_dir or os.environ.get(DATA_DIR_ENV_VAR) or prepared_data_dir("small")
    data_dir = None if data_dir is None else str(data_dir)
    baseline_ns = dict_lookup_baseline_ns()
    print(f"baseline: one dict lookup per loop iteration = {baseline_ns:.1f} ns\n")
    verdicts: list[bool | None] = []
    with tempfile.TemporaryDirectory() as cache:
        config = ShopConfig(data_dir=data_dir, procedural=data_dir is None, cache_dir=cache)
        start = time.perf_counter()
        small = build_shop(config)
        print(f"load 1k catalogue + build index: {time.perf_counter() - start:.2f} s")
        p50_small, found = bench_search("1k", small, search_queries(small, args.queries), baseline_ns)
        verdicts += found
        print()

        start = time.perf_counter()
        large_config = ShopConfig(procedural=True, procedural_products=args.large_products, cache_dir=cache)
        large = build_shop(large_config)
        build_seconds = time.perf_counter() - start
        print(f"generate {args.large_products:,} products + goals + build index: {build_seconds:.1f} s")
        p50_large, found = bench_search("100k", large, search_queries(large, args.queries), baseline_ns)
        verdicts += found
        report("p50 vs 1k p50", p50_large / p50_small, "x")
        print()

        env = WebShopEnv(data_dir=data_dir, procedural=data_dir is None, cache_dir=cache, split="test")
        verdicts += bench_env_steps(env, args.steps, baseline_ns)
        print()
        bench_reward(small, args.rewards, baseline_ns)
    failed = [v for v in verdicts if v is False]
    print(f"\n{'all targets met' if not failed else f'{len(failed)} target(s) missed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
