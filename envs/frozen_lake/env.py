"""FrozenLake as a text environment: walk across a lake of ice and holes to the goal, possibly slipping.

One episode: the player moves one cell per `step` (Left, Down, Right, Up). Reaching the goal pays +1 and ends the
episode (success); stepping into a hole ends it with 0 (not a success); a move off the edge leaves the player in
place. The episode also ends after `max_steps` moves. Text the env cannot read as a move is a no-op with
`action_is_valid=False` and no reward.

Slip: a move goes the intended way with probability `success_rate`, and to each of the two perpendicular sides
with probability `(1 - success_rate) / 2` (gymnasium's slippery dynamics, with the same action order). The default
`success_rate=1.0` (no slip) is the config of the paper's main table (RAGEN's `CoordFrozenLake`); the paper's text
describes 98% intended moves (`success_rate=0.98`), RAGEN's own default is 0.8, and the slip sweep uses
{1, 0.5, 0.2, 0.1, 0.05, 0.02, 0}.

The seed controls the map and the slips: each cell is frozen with probability `p`, the start and the goal are two
different random cells, and maps without a path from start to goal are redrawn. The same seed gives the same map
and, with the same moves, the same trajectory.

```python
from trl_ragen2_envs import make_env

env = make_env("frozen_lake")  # size=4, p=0.9, success_rate=1.0, max_steps=100, render_mode="grid_coord"
observation = env.reset(seed=0)
observation, reward, done, info = env.step("Right")
```

`FrozenLakeToolEnv` wraps the env for `trl.GRPOTrainer(environment_factory=FrozenLakeToolEnv)`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..base import StepResult, action_index, require_int
from ..grid import GridEnv, board_size_line, check_seed, ragen_layout
from ..tool_adapter import ToolEnvAdapter


# ---------------------------------------------------------------------------------------------------------------
# Prompts

TASK = (
    "You are walking on a frozen lake. Reach the goal without falling into a hole.\n"
    "Each action moves you one cell{slip}. Moving off the edge leaves you where you are."
)
RULES = (
    f"{TASK}\n"
    "Actions: Left, Down, Right, Up. Give them in your answer, separated by || when there are several, "
    "e.g. <answer>Left || Down</answer>.\n"
    "Symbols: P you, _ frozen ice, O hole, G goal, X you in a hole, √ you on the goal.\n"
    "Rewards: +1 for reaching the goal, 0 otherwise."
)
SLIP_NOTE = (
    "; the ice is slippery, so a move goes the intended way with probability {success_rate:g} and otherwise slides "
    "to one of the two perpendicular sides"
)
ANSWER_EXAMPLE = "\nAnswer with your actions in order, e.g. <answer>Left || Down</answer>."
# RAGEN's symbol order, in this library's words.
SYMBOL_LEGEND = {
    "P": "you",
    "_": "frozen ice",
    "O": "hole",
    "G": "goal",
    "X": "you in a hole",
    "√": "you on the goal",
}
TOOL_INSTRUCTIONS = (
    "FrozenLake: walk from P to the goal G without falling into a hole (O). Call `move` with Left, Down, Right "
    "or Up, one cell per call{slip}. Symbols: _ frozen ice, X you in a hole, √ you on the goal."
)


def slip_note(success_rate: float) -> str:
    """The instructions' clause on slipping; empty when moves never slip (`success_rate == 1`)."""
    return "" if success_rate == 1.0 else SLIP_NOTE.format(success_rate=success_rate)


# ---------------------------------------------------------------------------------------------------------------
# Game logic

PLAYER, FROZEN, HOLE, GOAL, PLAYER_IN_HOLE, PLAYER_ON_GOAL = "P", "_", "O", "G", "X", "√"
ACTION_NAMES = ("Left", "Down", "Right", "Up")
ACTION_OFFSETS = ((0, -1), (1, 0), (0, 1), (-1, 0))  # (row, col) step of each entry of ACTION_NAMES
GOAL_REWARD = 1.0
ACTION_LOOKUP = {name.lower(): index for index, name in enumerate(ACTION_NAMES)}
# Slip draws are taken from the env's generator in blocks of this many.
UNIFORM_BLOCK = 256

Cell = tuple[int, int]


@dataclass(frozen=True)
class FrozenLakeMap:
    """A square lake: its size, hole cells, start and goal, as (row, col) cells.

    `from_rows` / `to_rows` convert from and to gymnasium's map letters (`S` start, `F` frozen, `H` hole, `G` goal).
    """

    size: int
    holes: frozenset[Cell]
    start: Cell
    goal: Cell

    def __post_init__(self) -> None:
        if self.size < 2:
            raise ValueError(f"size must be at least 2, got {self.size}")
        cells = [*self.holes, self.start, self.goal]
        if any(not (0 <= r < self.size and 0 <= c < self.size) for r, c in cells):
            raise ValueError(f"every cell must lie in the {self.size}x{self.size} lake, got {sorted(cells)}")
        if self.start == self.goal or self.start in self.holes or self.goal in self.holes:
            raise ValueError(f"start={self.start} and goal={self.goal} must be different frozen cells")

    @classmethod
    def from_rows(cls, rows: list[str]) -> FrozenLakeMap:
        """Parse gymnasium-style map rows, e.g. `["SFFF", "FHFH", "FFFH", "HFFG"]`."""
        if any(len(row) != len(rows) for row in rows):
            raise ValueError(f"a lake is square: {len(rows)} rows of {len(rows)} letters, got {rows}")
        found: dict[str, list[Cell]] = {"S": [], "F": [], "H": [], "G": []}
        for r, row in enumerate(rows):
            for c, letter in enumerate(row):
                if letter not in found:
                    raise ValueError(f"unknown map letter {letter!r} at {(r, c)}; use S, F, H or G")
                found[letter].append((r, c))
        if len(found["S"]) != 1 or len(found["G"]) != 1:
            raise ValueError(f"a lake needs exactly one S and one G, got rows {rows}")
        return cls(len(rows), frozenset(found["H"]), found["S"][0], found["G"][0])

    def to_rows(self) -> list[str]:
        """The map as gymnasium-style letter rows (the inverse of `from_rows`)."""
        letters = {self.start: "S", self.goal: "G", **dict.fromkeys(self.holes, "H")}
        return ["".join(letters.get((r, c), "F") for c in range(self.size)) for r in range(self.size)]


@lru_cache(maxsize=64)
def neighbor_table(size: int) -> tuple[tuple[int, ...], ...]:
    """`table[cell][action]`: the flat cell a move reaches; a move off the edge stays on `cell`."""
    table = []
    for cell in range(size * size):
        row, col = divmod(cell, size)
        moves = []
        for d_row, d_col in ACTION_OFFSETS:
            r, c = row + d_row, col + d_col
            moves.append(r * size + c if 0 <= r < size and 0 <= c < size else cell)
        table.append(tuple(moves))
    return tuple(table)


def slip_directions(action: int, success_rate: float) -> tuple[tuple[int, float], ...]:
    """`(direction, probability)` of an action: intended, then the two perpendicular sides."""
    side = (1.0 - success_rate) / 2.0
    return (action, success_rate), ((action - 1) % 4, side), ((action + 1) % 4, side)


def transition_probabilities(lake: FrozenLakeMap, cell: Cell, action: int, success_rate: float) -> dict[Cell, float]:
    """Where an action from `cell` can lead, with its probability (zero-probability outcomes left out)."""
    neighbors = neighbor_table(lake.size)
    outcomes: dict[Cell, float] = {}
    for direction, probability in slip_directions(action, success_rate):
        if probability > 0.0:
            reached = divmod(neighbors[cell[0] * lake.size + cell[1]][direction], lake.size)
            outcomes[reached] = outcomes.get(reached, 0.0) + probability
    return outcomes


def has_path(size: int, holes: list[bool], start: int, goal: int) -> bool:
    """Whether the goal can be reached from the start over frozen cells (breadth-first search)."""
    neighbors = neighbor_table(size)
    seen, queue = {start}, deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            return True
        for reached in neighbors[cell]:
            if not holes[reached] and reached not in seen:
                seen.add(reached)
                queue.append(reached)
    return False


def generate_lake(size: int, p: float, rng: np.random.Generator, max_attempts: int = 10_000) -> FrozenLakeMap:
    """A random lake: cells frozen with probability `p`, random distinct start and goal, a path between them."""
    for _ in range(max_attempts):
        holes = (rng.random(size * size) >= p).tolist()
        start, goal = rng.choice(size * size, size=2, replace=False).tolist()
        holes[start] = holes[goal] = False
        if has_path(size, holes, start, goal):
            return FrozenLakeMap(
                size=size,
                holes=frozenset(divmod(cell, size) for cell, is_hole in enumerate(holes) if is_hole),
                start=divmod(start, size),
                goal=divmod(goal, size),
            )
    raise RuntimeError(
        f"no {size}x{size} lake with a path from start to goal in {max_attempts} draws at p={p}; raise p"
    )


def _require_probability(field: str, value: Any, low_open: bool, fix: str) -> float:
    ok = isinstance(value, (int, float, np.floating)) and not isinstance(value, bool)
    if not ok or not ((0.0 < value) if low_open else (0.0 <= value)) or not value <= 1.0:
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise ValueError(f"{field} must be a number in {interval}, got {value!r}; {fix}")
    return float(value)


# ---------------------------------------------------------------------------------------------------------------
# Env class


class FrozenLakeEnv(GridEnv):
    """FrozenLake with slip; see the module docstring.

    Args:
        size (`int`, defaults to `4`):
            Side of the square lake (paper: 4).
        p (`float`, defaults to `0.9`):
            Probability that a cell is frozen rather than a hole (paper: 0.9).
        success_rate (`float`, defaults to `1.0`):
            Probability that a move goes the intended way; each perpendicular side gets `(1 - success_rate) / 2`.
            1.0 is the paper's main-table config; its text describes 0.98.
        max_steps (`int`, defaults to `100`):
            Moves after which the episode ends without success.
        render_mode (`str`, defaults to `"grid_coord"`):
            `"grid"` (the grid only) or `"grid_coord"` (the grid, then board size and player, goal and hole
            coordinates as (row, col)).
    """

    name = "frozen_lake"
    action_names = ACTION_NAMES
    symbols = SYMBOL_LEGEND
    answer_example = ANSWER_EXAMPLE
    coordinates_also_listed = ", the start included"  # RAGEN's block also lists the start cell

    def __init__(
        self,
        *,
        size: int = 4,
        p: float = 0.9,
        success_rate: float = 1.0,
        max_steps: int = 100,
        render_mode: str = "grid_coord",
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        self.size = require_int("size", size, 2, "the paper uses size=4")
        self.p = _require_probability("p", p, True, "the paper uses p=0.9 (a cell is frozen with probability p)")
        self.success_rate = _require_probability(
            "success_rate", success_rate, False, "use 1.0 for no slip (paper's main table) or e.g. 0.98"
        )
        self._side_probability = (1.0 - self.success_rate) / 2.0
        self._lake: FrozenLakeMap | None = None
        self._neighbors: tuple[tuple[int, ...], ...] = ()
        self._holes: tuple[bool, ...] = ()
        self._base_cells: tuple[str, ...] = ()
        self._coord_labels: tuple[str, ...] = ()
        self._static_coordinates = ""
        self._goal = -1
        self._player = -1
        self._uniforms: list[float] = []
        self._uniform_index = 0

    def _rules(self) -> str:
        return RULES.format(slip=slip_note(self.success_rate))

    def _task(self) -> str:
        return TASK.format(slip=slip_note(self.success_rate))

    def reset(self, seed: int | None = None) -> str:
        """Start an episode on a fresh map; the same seed gives the same map and slips (`None`: the env's RNG)."""
        seed = check_seed(seed, "map")
        if seed is not None:
            self.seed_rng(seed)
        return self.load_map(generate_lake(self.size, self.p, self.rng))

    def load_map(self, lake: FrozenLakeMap) -> str:
        """Start an episode on a given map (slips still come from the env's generator)."""
        if not isinstance(lake, FrozenLakeMap):
            raise TypeError(f"lake must be a FrozenLakeMap, got {type(lake).__name__}; see FrozenLakeMap.from_rows")
        size = lake.size
        self._lake = lake
        self._neighbors = neighbor_table(size)
        self._holes = tuple(divmod(cell, size) in lake.holes for cell in range(size * size))
        self._goal = lake.goal[0] * size + lake.goal[1]
        self._player = lake.start[0] * size + lake.start[1]
        self._base_cells = tuple(
            GOAL if cell == self._goal else HOLE if self._holes[cell] else FROZEN for cell in range(size * size)
        )
        self._coord_labels = tuple(f"({cell // size}, {cell % size})" for cell in range(size * size))
        holes_text = ", ".join(f"({r}, {c})" for r, c in sorted(lake.holes)) or "none"
        self._static_coordinates = f"Goal: {self._coord_labels[self._goal]}\nHoles: {holes_text}"
        self._start_episode()
        self._uniforms, self._uniform_index = [], 0
        return self.render()

    def step(self, action: str) -> StepResult:
        intended = action_index(action, ACTION_LOOKUP)
        if intended < 0 or self._done:
            return self._unusable_step()
        direction = intended
        if self.success_rate < 1.0:
            u = self._next_uniform()
            if u >= self.success_rate:
                direction = (
                    (intended - 1) % 4 if u < self.success_rate + self._side_probability else (intended + 1) % 4
                )
        player = self._player
        reached = self._neighbors[player][direction]
        self._player = reached
        success = reached == self._goal
        done = self._end_move(success, terminal=self._holes[reached])
        info = {
            "success": success,
            "action_is_valid": True,
            "action_is_effective": reached != player,
            "slipped": direction != intended,
        }
        return self.render(), GOAL_REWARD if success else 0.0, done, info

    def _next_uniform(self) -> float:
        if self._uniform_index == len(self._uniforms):
            self._uniforms, self._uniform_index = self.rng.random(UNIFORM_BLOCK).tolist(), 0
        self._uniform_index += 1
        return self._uniforms[self._uniform_index - 1]

    def _grid(self) -> str:
        cells = list(self._base_cells)
        player = self._player
        cells[player] = PLAYER_ON_GOAL if player == self._goal else PLAYER_IN_HOLE if self._holes[player] else PLAYER
        size = self._lake.size
        return "\n".join(["".join(cells[start : start + size]) for start in range(0, len(cells), size)])

    def render(self) -> str:
        if self._lake is None:
            raise RuntimeError("FrozenLakeEnv has no map yet; call reset() or load_map() first")
        player, size = self._player, self._lake.size
        grid = self._grid()
        if self.render_mode == "grid":
            return grid
        return (
            f"{grid}\n{board_size_line(size, size)}\nPlayer: {self._coord_labels[player]}\n{self._static_coordinates}"
        )

    def protocol_reward(self, reward: float, protocol: str) -> float:
        """For `protocol="ragen"`, the int of gymnasium's reward schedule (`1` or `0`), which RAGEN's feedback
        prints as such (`Reward:\n0`)."""
        return int(reward) if protocol == "ragen" else reward

    def protocol_observation(self, observation: str, protocol: str) -> str:
        """RAGEN's layout for `protocol="ragen"` in `"grid_coord"` mode (`grid.ragen_layout`): the start, the goal,
        the player (on the goal or in a hole) and the holes if any, then the grid. Otherwise `observation`."""
        lake = self._lake
        if protocol != "ragen" or self.render_mode != "grid_coord" or lake is None:
            return observation
        labels, player = self._coord_labels, self._player
        size = lake.size
        player_label = (
            "Player on goal" if player == self._goal else "Player in hole" if self._holes[player] else "Player"
        )
        lines = [
            f"Start: {labels[lake.start[0] * size + lake.start[1]]}",
            f"Goal: {labels[self._goal]}",
            f"{player_label}: {labels[player]}",
        ]
        if lake.holes:
            lines.append("Holes: " + ", ".join(f"({r}, {c})" for r, c in sorted(lake.holes)))
        return ragen_layout(size, size, lines, self._grid())

    @property
    def lake(self) -> FrozenLakeMap:
        """The current map."""
        if self._lake is None:
            raise RuntimeError("FrozenLakeEnv has no map yet; call reset() or load_map() first")
        return self._lake

    @property
    def player(self) -> tuple[int, int]:
        """The player's (row, col)."""
        return divmod(self._player, self.lake.size)


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


class FrozenLakeToolEnv(ToolEnvAdapter):
    """FrozenLake for `trl.GRPOTrainer(environment_factory=FrozenLakeToolEnv)`: one `move` tool, reward = return.

    Each dataset row gives the map (and slips) through `seed`, so the rollouts of a group share it, and optionally
    `env_config`, a JSON string of [`FrozenLakeEnv`] keywords such as `'{"size": 6, "success_rate": 0.8}'`. Other
    columns are ignored.
    """

    env_class = FrozenLakeEnv
    episode_over_reply = "The episode is over; no further moves count."
    invalid_reply = "Error: {reason} (got {got})."

    def move(self, direction: str) -> str:
        """Move one cell in a direction; on slippery ice the move may go to a side instead.

        Args:
            direction: The direction to move (case-insensitive). (choices: ["Left", "Down", "Right", "Up"])

        Returns:
            The lake after the move, the move's reward, and whether the episode is over.
        """
        return self._act(direction)

    def _tool_instructions(self) -> str:
        return TOOL_INSTRUCTIONS.format(slip=slip_note(self.env.success_rate))

    def _reply(self, observation: str, reward: float, done: bool, info: dict[str, Any]) -> str:
        text = f"{observation}\nReward: {reward:g}"
        if info["success"]:
            return text + "\nYou reached the goal. The episode is over."
        if done:
            if self.env.player in self.env.lake.holes:
                return text + "\nYou fell into a hole. The episode is over."
            return text + "\nNo moves left. The episode is over."
        return text


__all__ = ["FrozenLakeEnv", "FrozenLakeMap", "FrozenLakeToolEnv", "generate_lake", "transition_probabilities"]
