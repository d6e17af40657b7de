"""Sokoban as a text environment: RAGEN-2's main grid puzzle.

One episode: the player pushes boxes onto targets in a walled room, one move per `step`, until every box is on a
target (done, success) or `max_steps` moves have been made (done). Rewards are those of gym-sokoban's push actions,
which RAGEN uses: -0.1 per move, +1 for a box pushed onto a target, -1 for a box pushed off one, +10 when every box
is on a target. A move into a wall, or a push against a wall or another box, changes nothing but still costs its
-0.1. Text the env cannot read as a move is a no-op with `action_is_valid=False` and no reward.

The seed controls the room: the same seed gives the same room, and every room is solvable (see
`generation.py` for the reverse-play generator and the solver). Defaults are the paper's main setting: a 6x6
room with one box, shown as a grid plus coordinates (RAGEN's `CoordSokoban`).

```python
from trl_ragen2_envs import make_env

env = make_env("sokoban")  # dim_room=(6, 6), num_boxes=1, max_steps=100, render_mode="grid_coord"
observation = env.reset(seed=0)
observation, reward, done, info = env.step("Up")
```

`SokobanToolEnv` wraps the env for `trl.GRPOTrainer(environment_factory=SokobanToolEnv)`.
"""

from __future__ import annotations

from typing import Any

from ..base import StepResult, action_index, require_int
from ..grid import GridEnv, board_size_line, check_seed, ragen_layout
from ..tool_adapter import ToolEnvAdapter
from .generation import (
    ACTION_NAMES,
    WALL,
    SokobanRoom,
    flat,
    generate_room,
    layout_of,
    push_move,
    render_grid,
    solve,
    unflat,
)


# ---------------------------------------------------------------------------------------------------------------
# Prompts

TASK = (
    "You are playing Sokoban. You are the player in a room enclosed by walls; push every box onto a target.\n"
    "Each action moves you one cell. Walking into a box pushes it one cell the same way if the cell behind it is "
    "free; a box cannot be pulled, and a push against a wall or another box does nothing."
)
RULES = (
    f"{TASK}\n"
    "Actions: Up, Down, Left, Right. Give them in your answer, separated by || when there are several, "
    "e.g. <answer>Up || Left</answer>.\n"
    "Symbols: # wall, _ floor, O target, X box, √ box on a target, P you, S you on a target.\n"
    "Rewards: -0.1 per action, +1 for a box pushed onto a target, -1 for a box pushed off one, "
    "+10 when every box is on a target."
)
ANSWER_EXAMPLE = "\nAnswer with your actions in order, e.g. <answer>Up || Left</answer>."
# RAGEN's symbol order, in this library's words.
SYMBOL_LEGEND = {
    "#": "wall",
    "_": "floor",
    "O": "target",
    "√": "box on a target",
    "X": "box",
    "P": "you",
    "S": "you on a target",
}
TOOL_INSTRUCTIONS = (
    "Sokoban: push every box (X) onto a target (O). Call `move` with Up, Down, Left or Right, one cell per call; "
    "walking into a box pushes it unless a wall or another box is behind it. "
    "Symbols: # wall, _ floor, √ box on target, P you, S you on a target."
)


# ---------------------------------------------------------------------------------------------------------------
# Game logic

STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVED_BONUS = 10.0

ACTION_LOOKUP = {name.lower(): index for index, name in enumerate(ACTION_NAMES)}


def render_coordinates(layout, boxes, player: int) -> str:
    """The coordinate lines of the grid_coord observation."""
    labels = layout.coord_labels
    return (
        f"{board_size_line(layout.height, layout.width)}\n"
        f"Targets: {', '.join(labels[cell] for cell in sorted(layout.targets))}\n"
        f"Boxes: {', '.join(labels[cell] for cell in sorted(boxes))}\n"
        f"Player: {labels[player]}"
    )


def ragen_coordinate_lines(layout, boxes, player: int) -> list[str]:
    """The coordinate lines of RAGEN's grid_coord layout (after its board-size line).

    One line per non-empty kind in RAGEN's order: every target, the boxes off a target, the boxes on one, and the
    player (on or off a target); cells in reading order.
    """
    labels = layout.coord_labels
    targets = layout.targets
    player_label = "Player on target" if player in targets else "Player"
    kinds = (
        ("Targets", sorted(targets)),
        ("Boxes", sorted(box for box in boxes if box not in targets)),
        ("Boxes on target", sorted(box for box in boxes if box in targets)),
        (player_label, [player]),
    )
    return [f"{label}: {', '.join(labels[cell] for cell in cells)}" for label, cells in kinds if cells]


# ---------------------------------------------------------------------------------------------------------------
# Env class


class SokobanEnv(GridEnv):
    """Sokoban with RAGEN's rewards; see the module docstring.

    Args:
        dim_room (`tuple[int, int]`, defaults to `(6, 6)`):
            Room (height, width), wall ring included (paper: 6x6).
        num_boxes (`int`, defaults to `1`):
            Boxes (and targets) per room (paper: 1).
        max_steps (`int`, defaults to `100`):
            Moves after which the episode ends unsolved.
        search_depth (`int`, defaults to `100`):
            Depth, in reverse moves, of the generator's reverse-play search.
        max_search_states (`int`, defaults to `100000`):
            Positions the reverse-play search may visit per attempt (bounds generation time of large rooms).
        render_mode (`str`, defaults to `"grid_coord"`):
            `"grid"` (the grid only) or `"grid_coord"` (the grid, then board size and target, box and player
            coordinates as (row, col)).
    """

    name = "sokoban"
    action_names = ACTION_NAMES
    symbols = SYMBOL_LEGEND
    answer_example = ANSWER_EXAMPLE

    def __init__(
        self,
        *,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int = 1,
        max_steps: int = 100,
        search_depth: int = 100,
        max_search_states: int = 100_000,
        render_mode: str = "grid_coord",
    ) -> None:
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        if not isinstance(dim_room, (tuple, list)) or len(dim_room) != 2:
            raise ValueError(f"dim_room must be a (height, width) pair, got {dim_room!r}; e.g. dim_room=(6, 6)")
        height = require_int("dim_room[0]", dim_room[0], 3, "rooms need a wall ring around the floor")
        width = require_int("dim_room[1]", dim_room[1], 3, "rooms need a wall ring around the floor")
        self.num_boxes = require_int("num_boxes", num_boxes, 1, "use num_boxes=1 for the paper's setting")
        interior = (height - 2) * (width - 2)
        if interior < self.num_boxes + 2:
            raise ValueError(
                f"dim_room={tuple(dim_room)} has {interior} cells inside its walls, fewer than num_boxes + 2 = "
                f"{self.num_boxes + 2} (targets, player, one free cell); use a larger room or fewer boxes"
            )
        self.dim_room = (height, width)
        self.search_depth = require_int("search_depth", search_depth, 1, "the default is search_depth=100")
        self.max_search_states = require_int(
            "max_search_states", max_search_states, 1, "the default is max_search_states=100000"
        )
        self._layout = None  # set by reset / load_room
        self._boxes: set[int] = set()
        self._player = -1
        self._boxes_on_target = 0

    def _rules(self) -> str:
        return RULES

    def _task(self) -> str:
        return TASK

    def reset(self, seed: int | None = None) -> str:
        """Start an episode on a fresh room; the same seed gives the same room (`None` draws from the env's RNG)."""
        seed = check_seed(seed, "room")
        if seed is not None:
            self.seed_rng(seed)
        room = generate_room(
            self.dim_room,
            self.num_boxes,
            self.rng,
            search_depth=self.search_depth,
            max_search_states=self.max_search_states,
        )
        return self.load_room(room)

    def load_room(self, room: SokobanRoom) -> str:
        """Start an episode from a given position (e.g. a hand-made room or a curated level)."""
        if not isinstance(room, SokobanRoom):
            raise TypeError(f"room must be a SokobanRoom, got {type(room).__name__}; see SokobanRoom.from_text")
        layout = layout_of(room)
        self._layout = layout
        self._boxes = {flat(layout, cell) for cell in room.boxes}
        self._player = flat(layout, room.player)
        self._boxes_on_target = len(self._boxes & layout.targets)
        self._start_episode(solved=self._boxes_on_target == len(self._boxes))
        return self.render()

    def step(self, action: str) -> StepResult:
        index = action_index(action, ACTION_LOOKUP)
        if index < 0 or self._done:
            return self._unusable_step()
        layout = self._layout
        boxes = self._boxes
        player = self._player
        new_player, box_from, box_to = push_move(layout.neighbors, player, boxes, index)
        on_target_before = self._boxes_on_target
        if box_from >= 0:
            boxes.remove(box_from)
            boxes.add(box_to)
            self._boxes_on_target += (box_to in layout.targets) - (box_from in layout.targets)
        # gym-sokoban's sum, in its order: the step penalty, then +1 or -1 on a change in the count of boxes on
        # targets (a push from one target onto another changes nothing), then the bonus
        reward = STEP_PENALTY
        if self._boxes_on_target > on_target_before:
            reward += BOX_ON_TARGET_REWARD
        elif self._boxes_on_target < on_target_before:
            reward += BOX_OFF_TARGET_PENALTY
        self._player = new_player
        solved = self._boxes_on_target == len(boxes)
        if solved:
            reward += SOLVED_BONUS
        done = self._end_move(solved)
        info = {"success": solved, "action_is_valid": True, "action_is_effective": new_player != player}
        return self.render(), reward, done, info

    def render(self) -> str:
        layout = self._layout
        if layout is None:
            raise RuntimeError("SokobanEnv has no room yet; call reset() or load_room() first")
        grid = render_grid(layout, self._boxes, self._player)
        if self.render_mode == "grid":
            return grid
        return grid + "\n" + render_coordinates(layout, self._boxes, self._player)

    def protocol_observation(self, observation: str, protocol: str) -> str:
        """RAGEN's layout for `protocol="ragen"` in `"grid_coord"` mode (`grid.ragen_layout` with
        `ragen_coordinate_lines`). Otherwise `observation`."""
        layout = self._layout
        if protocol != "ragen" or self.render_mode != "grid_coord" or layout is None:
            return observation
        lines = ragen_coordinate_lines(layout, self._boxes, self._player)
        return ragen_layout(layout.height, layout.width, lines, render_grid(layout, self._boxes, self._player))

    @property
    def room(self) -> SokobanRoom:
        """The current position (e.g. for `generation.solve`)."""
        layout = self._layout
        if layout is None:
            raise RuntimeError("SokobanEnv has no room yet; call reset() or load_room() first")
        return SokobanRoom(
            height=layout.height,
            width=layout.width,
            walls=frozenset(unflat(layout, c) for c, symbol in enumerate(layout.base_cells) if symbol == WALL),
            targets=frozenset(unflat(layout, c) for c in layout.targets),
            boxes=frozenset(unflat(layout, c) for c in self._boxes),
            player=unflat(layout, self._player),
        )


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


class SokobanToolEnv(ToolEnvAdapter):
    """Sokoban for `trl.GRPOTrainer(environment_factory=SokobanToolEnv)`: one `move` tool, reward = episode return.

    Each dataset row gives the room through `seed` (the same seed gives the same room, so the rollouts of a group
    share it) and optionally `env_config`, a JSON string of [`SokobanEnv`] keywords such as
    `'{"dim_room": [8, 8], "num_boxes": 2}'`. Other columns are ignored.
    """

    env_class = SokobanEnv
    tool_instructions = TOOL_INSTRUCTIONS
    episode_over_reply = "The episode is over; no further moves count."
    invalid_reply = "Error: {reason} (got {got})."

    def move(self, direction: str) -> str:
        """Move the player one cell in a direction; walking into a box pushes it.

        Args:
            direction: The direction to move (case-insensitive). (choices: ["Up", "Down", "Left", "Right"])

        Returns:
            The board after the move, the move's reward, and whether the episode is over.
        """
        return self._act(direction)

    def _reply(self, observation: str, reward: float, done: bool, info: dict[str, Any]) -> str:
        text = f"{observation}\nReward: {reward:g}"
        if info["success"]:
            return text + "\nAll boxes are on targets: solved. The episode is over."
        if done:
            return text + "\nNo moves left. The episode is over."
        return text


__all__ = ["SokobanEnv", "SokobanRoom", "SokobanToolEnv", "generate_room", "solve"]
