"""Problem families that need a search or a dynamic program: grid components, shortest paths, coin change,
interval union. Same contract as `families.py` (statement parts, generated cases, reference program)."""

from __future__ import annotations

from collections import deque

import numpy as np

from .families import FamilyInstance, _ints, _lines, _program


def grid_components(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Number of 4- or 8-connected regions of marked cells in a grid of at most 6 x 6."""
    cell = str(rng.choice(["#", "*", "@"]))
    diagonal = bool(rng.random() < 0.5)
    steps = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr or dc) and (diagonal or not (dr and dc))]
    cases = []
    for _ in range(num_cases):
        rows, cols = int(rng.integers(1, 7)), int(rng.integers(1, 7))
        grid = ["".join(cell if rng.random() < 0.45 else "." for _ in range(cols)) for _ in range(rows)]
        seen, components = set(), 0
        for r in range(rows):
            for c in range(cols):
                if grid[r][c] != cell or (r, c) in seen:
                    continue
                components += 1
                queue = deque([(r, c)])
                seen.add((r, c))
                while queue:
                    y, x = queue.popleft()
                    for dy, dx in steps:
                        ny, nx = y + dy, x + dx
                        if 0 <= ny < rows and 0 <= nx < cols and grid[ny][nx] == cell and (ny, nx) not in seen:
                            seen.add((ny, nx))
                            queue.append((ny, nx))
        cases.append((_lines((rows, cols), *grid), str(components)))
    reference = _program(
        """
import sys
sys.setrecursionlimit(10000)
data = sys.stdin.read().split()
rows, cols = int(data[0]), int(data[1])
grid = [list(row) for row in data[2 : 2 + rows]]
def fill(r, c):
    if not (0 <= r < rows and 0 <= c < cols) or grid[r][c] != $cell:
        return
    grid[r][c] = "."
    for dr, dc in $steps:
        fill(r + dr, c + dc)
count = 0
for r in range(rows):
    for c in range(cols):
        if grid[r][c] == $cell:
            count += 1
            fill(r, c)
print(count)
""",
        cell=repr(cell),
        steps=repr(steps),
    )
    touching = "sideways or diagonally" if diagonal else "sideways (up, down, left or right; not diagonally)"
    return FamilyInstance(
        f"Count the {cell} regions",
        f"A grid holds '.' and '{cell}' cells. Two '{cell}' cells belong to the same region when they touch "
        f"{touching}, directly or through other '{cell}' cells. Print the number of regions.",
        f"The first line holds r and c (1 <= r, c <= 6); then r lines of c characters, each '.' or '{cell}'.",
        "One integer: the number of regions.",
        tuple(cases),
        reference,
    )


def shortest_path(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Fewest roads from town 1 to town n (n <= 8) in a random undirected graph, or a no-path marker."""
    unreachable = str(rng.choice(["-1", "IMPOSSIBLE"]))
    cases = []
    for _ in range(num_cases):
        n = int(rng.integers(2, 9))
        edges = sorted({tuple(sorted(_ints(rng, 2, 1, n))) for _ in range(int(rng.integers(0, 2 * n)))})
        edges = [(u, v) for u, v in edges if u != v]
        neighbours = {node: [] for node in range(1, n + 1)}
        for u, v in edges:
            neighbours[u].append(v)
            neighbours[v].append(u)
        distance, queue = {1: 0}, deque([1])
        while queue:
            node = queue.popleft()
            for nxt in neighbours[node]:
                if nxt not in distance:
                    distance[nxt] = distance[node] + 1
                    queue.append(nxt)
        cases.append((_lines((n, len(edges)), *edges), str(distance.get(n, unreachable))))
    reference = _program(
        """
import sys
from collections import deque
data = list(map(int, sys.stdin.read().split()))
n, m = data[0], data[1]
adjacent = [[] for _ in range(n + 1)]
for i in range(m):
    u, v = data[2 + 2 * i], data[3 + 2 * i]
    adjacent[u].append(v)
    adjacent[v].append(u)
dist = [-1] * (n + 1)
dist[1] = 0
todo = deque([1])
while todo:
    u = todo.popleft()
    for v in adjacent[u]:
        if dist[v] < 0:
            dist[v] = dist[u] + 1
            todo.append(v)
print(dist[n] if dist[n] >= 0 else $unreachable)
""",
        unreachable=repr(unreachable),
    )
    return FamilyInstance(
        "Fewest roads",
        f"Towns 1..n are joined by two-way roads. Print the fewest roads needed to travel from town 1 to town n, "
        f"or {unreachable} if town n cannot be reached.",
        "The first line holds n and m (2 <= n <= 8, 0 <= m <= 16); each of the next m lines holds a road u v.",
        f"One line: the number of roads, or {unreachable}.",
        tuple(cases),
        reference,
    )


def coin_change(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Fewest coins paying each amount (0 to 60) exactly with three coin values, or -1 when none does."""
    coins = sorted(int(c) for c in rng.choice(np.arange(2, 16), size=3, replace=False))
    if rng.random() < 0.5:
        coins = [1, *coins[1:]]  # with a 1-coin every amount can be paid
    cases = []
    for i in range(num_cases):
        amounts = [0] if i == 1 else _ints(rng, int(rng.integers(1, 5)), 0, 60)
        best = [0] + [None] * max(amounts)
        for total in range(1, max(amounts) + 1):
            options = [best[total - c] for c in coins if c <= total and best[total - c] is not None]
            best[total] = min(options) + 1 if options else None
        answers = [str(best[a]) if best[a] is not None else "-1" for a in amounts]
        cases.append((_lines(len(amounts), *amounts), "\n".join(answers)))
    reference = _program(
        """
import sys
q, *amounts = map(int, sys.stdin.read().split())
coins = $coins
top = max(amounts[:q])
INF = float("inf")
fewest = [0] + [INF] * top
for total in range(1, top + 1):
    for c in coins:
        if c <= total and fewest[total - c] + 1 < fewest[total]:
            fewest[total] = fewest[total - c] + 1
for a in amounts[:q]:
    print(fewest[a] if fewest[a] < INF else -1)
""",
        coins=repr(coins),
    )
    listed = ", ".join(map(str, coins))
    return FamilyInstance(
        "Fewest coins",
        f"Coins come in the values {listed} (as many of each as needed). For each amount, print the fewest coins "
        "that add up to it exactly, or -1 if no combination does.",
        "The first line holds q (1 <= q <= 4); each of the next q lines holds an amount between 0 and 60.",
        "q lines, each the fewest coins for the corresponding amount, or -1.",
        tuple(cases),
        reference,
    )


def interval_union(rng: np.random.Generator, num_cases: int) -> FamilyInstance:
    """Integer points covered by, or total length of, the union of up to 6 integer intervals."""
    count_points = bool(rng.random() < 0.5)
    cases = []
    for _ in range(num_cases):
        intervals = []
        for _ in range(int(rng.integers(1, 7))):
            start = int(rng.integers(0, 50))
            intervals.append((start, start + int(rng.integers(0, 15))))
        covered = set()
        for start, end in intervals:
            # points: the integers start..end; length: the unit segments [x, x + 1] inside [start, end]
            covered.update(range(start, end + 1) if count_points else range(start, end))
        cases.append((_lines(len(intervals), *intervals), str(len(covered))))
    reference = _program(
        """
import sys
n, *numbers = map(int, sys.stdin.read().split())
spans = sorted(zip(numbers[0 : 2 * n : 2], numbers[1 : 2 * n : 2]))
total, cur_start, cur_end = 0, None, None
for start, end in spans:
    if cur_end is not None and start <= cur_end + $gap:
        cur_end = max(cur_end, end)
        continue
    if cur_end is not None:
        total += cur_end - cur_start + $extra
    cur_start, cur_end = start, end
total += cur_end - cur_start + $extra
print(total)
""",
        gap=1 if count_points else 0,
        extra=1 if count_points else 0,
    )
    what = "how many integers lie in at least one interval" if count_points else "the total length they cover"
    return FamilyInstance(
        "Covered by intervals" if count_points else "Union length",
        f"Given closed intervals [l, r] of integers, print {what}.",
        "The first line holds n (1 <= n <= 6); each of the next n lines holds l and r (0 <= l <= r <= 64).",
        "One integer.",
        tuple(cases),
        reference,
    )
