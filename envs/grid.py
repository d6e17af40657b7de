"""What the grid puzzles (Sokoban, FrozenLake) share: render modes, coordinate texts, the seed check, the episode
bookkeeping, and the answer to an action the puzzle cannot use.

`GridEnv` holds one episode at a time. A puzzle opens it with `_start_episode` (from `reset` or from a given
position), counts each move with `_end_move`, which decides whether the move ended the episode (solved, a terminal
cell, or `max_steps` moves made), and answers every action it cannot use with `_unusable_step`: any action before
the first episode, any action after the end, and text that is not a move.

In `"grid_coord"` mode the observation is the grid, then coordinate lines (`board_size_line` first); the rollout's
`protocol="ragen"` shows RAGEN's layout instead, coordinates first (`ragen_layout`). The instructions carry the
note that matches the layout (`COORDINATE_NOTE`, `coordinates_first_note`).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from .base import StepResult, TextEnv, finished_step, invalid_step, not_started_step, require_int


RENDER_MODES = ("grid", "grid_coord")

_POSITIONS = "positions are listed as (row, col) counted from (0, 0) at the top-left cell"
_DIRECTIONS = "Up lowers the row, Left lowers the column."
# The note of the default layout: the grid, then the coordinate lines.
COORDINATE_NOTE = f"\nBelow the grid, {_POSITIONS}; {_DIRECTIONS}"


def coordinates_first_note(also_listed: str = "") -> str:
    """The note of RAGEN's layout, which lists the coordinates first, then the grid; `also_listed` is a clause such
    as `", the start included"` for cells that only RAGEN's block lists."""
    return f"\nAbove the grid, {_POSITIONS}{also_listed}; {_DIRECTIONS}"


def board_size_line(height: int, width: int) -> str:
    """The first coordinate line of the `"grid_coord"` observation."""
    return f"Board size: {height} rows x {width} columns"


def ragen_layout(height: int, width: int, coordinate_lines: list[str], grid: str) -> str:
    """RAGEN's `"grid_coord"` observation: "Coordinates: ", its board-size line and `coordinate_lines`, then
    "Grid Map: " and the grid."""
    lines = [f"Board size: {height} rows x {width} cols (zero-indexed).", *coordinate_lines]
    return "Coordinates: \n" + "\n".join(lines) + "\nGrid Map: \n" + grid


def check_seed(seed: Any, instance: str) -> int | None:
    """`seed` as a non-negative int, or None; a `ValueError` for anything else (`instance` names what a seed
    draws, e.g. "room")."""
    if seed is None:
        return None
    return require_int("seed", seed, 0, f"pass a non-negative integer, or None for a fresh random {instance}")


class GridEnv(TextEnv):
    """Base of the grid puzzles; see the module docstring.

    A subclass sets `action_names` (the moves, in action-index order), `symbols` (what each grid symbol means, in
    RAGEN's order), `answer_example` (ends the task of `task_instructions`) and `coordinates_also_listed` (the
    clause of `coordinates_first_note`), and implements `_rules` and `_task` (the instructions without the answer
    example and the coordinate note), `reset`, `step` and `render`.

    Args:
        max_steps (`int`):
            Moves after which the episode ends without success.
        render_mode (`str`):
            `"grid"` (the grid only) or `"grid_coord"` (the grid, then coordinate lines).
    """

    action_names: tuple[str, ...]
    symbols: dict[str, str]
    answer_example = ""
    coordinates_also_listed = ""

    def __init__(self, *, max_steps: int, render_mode: str) -> None:
        super().__init__()
        self.max_steps = require_int("max_steps", max_steps, 1, "the default is max_steps=100")
        if render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be one of {RENDER_MODES}, got {render_mode!r}")
        self.render_mode = render_mode
        self._started = False  # no episode until the first reset / load
        self._num_steps = 0
        self._done = True
        self._success = False

    @abstractmethod
    def _rules(self) -> str:
        """The full instructions (task, actions, symbols, rewards) without the coordinate note."""

    @abstractmethod
    def _task(self) -> str:
        """The task alone, for RAGEN's layout, which lists the symbols and the actions separately."""

    @property
    def instructions(self) -> str:
        return self._rules() + (COORDINATE_NOTE if self.render_mode == "grid_coord" else "")

    @property
    def task_instructions(self) -> str:
        note = coordinates_first_note(self.coordinates_also_listed) if self.render_mode == "grid_coord" else ""
        return self._task() + self.answer_example + note

    def action_vocabulary(self) -> list[str]:
        return list(self.action_names)

    def symbol_legend(self) -> dict[str, str]:
        return dict(self.symbols)

    # -----------------------------------------------------------------------------------------------------------
    # Episode bookkeeping

    def _start_episode(self, solved: bool = False) -> None:
        """Open an episode with no move made; one that starts solved is already over."""
        self._started = True
        self._num_steps = 0
        self._success = self._done = solved

    def _end_move(self, success: bool, terminal: bool = False) -> bool:
        """Count one move that reached a solved (`success`) or `terminal` state or neither; returns whether the
        episode is now over (solved, terminal, or `max_steps` moves made)."""
        self._num_steps += 1
        self._success = success
        self._done = success or terminal or self._num_steps >= self.max_steps
        return self._done

    def _unusable_step(self) -> StepResult:
        """The answer to an action that cannot be used now: no episode yet, the episode over, or not a move."""
        if not self._started:
            return not_started_step(action_is_effective=False)
        if self._done:  # an action after the end changes nothing; the episode stays over
            return finished_step(self.render(), self._success, action_is_effective=False)
        reason = f"not a move; use one of {', '.join(self.action_names)}"
        return invalid_step(self.render(), reason, action_is_effective=False)

    @property
    def num_steps(self) -> int:
        """Valid moves made in this episode."""
        return self._num_steps

    @property
    def is_done(self) -> bool:
        """Whether the episode is over (solved, a terminal cell, or `max_steps` moves); True before the first
        reset."""
        return self._done


__all__ = [
    "COORDINATE_NOTE",
    "RENDER_MODES",
    "GridEnv",
    "board_size_line",
    "check_seed",
    "coordinates_first_note",
    "ragen_layout",
]
