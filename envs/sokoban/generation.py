"""Sokoban rooms: their representation, the move rule, reverse-play generation and a breadth-first solver.

A room is a grid of walls and floor holding targets, as many boxes as targets, and one player. `generate_room`
builds one in three stages:

1. **Floor.** A random walk carves floor out of a solid block: it stamps a small brush at each step and turns with
   probability 0.35, for `int(1.7 * (height + width))` steps. The outer ring always stays wall.
2. **Solved position.** The targets and the player go on distinct random floor cells, every box on a target.
3. **Reverse play.** A breadth-first search over *reverse* moves from the solved position: the player walks to a
   free neighbouring cell, or steps away from an adjacent box and pulls it along. Replaying such moves backwards
   is a sequence of ordinary moves and pushes, so every position the search reaches is solvable by construction.
   Candidate starts are the positions right after a pull; the one whose boxes sit farthest (total Manhattan
   distance) from the targets they started on wins, ties broken at random.

The player then takes 1-3 random walking steps (RAGEN does the same), which keeps the room solvable. A room where
no box could be moved is degenerate, and a fresh floor is carved. `solve` (fewest moves, by breadth-first search)
double-checks solvability in the tests.

Coordinates are (row, col) with (0, 0) at the top left; internally a cell is the flat index `row * width + col`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


# ---------------------------------------------------------------------------------------------------------------
# Symbols and moves

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "X", "√", "P", "S"
ACTION_NAMES = ("Up", "Down", "Left", "Right")
ACTION_OFFSETS = ((-1, 0), (1, 0), (0, -1), (0, 1))  # (row, col) step of each entry of ACTION_NAMES
OPPOSITE_ACTION = (1, 0, 3, 2)

Cell = tuple[int, int]

# Floor carving
TURN_PROBABILITY = 0.35
WALK_LENGTH_PER_SIDE = 1.7
# Brushes stamped at each walk step, as (row, col) offsets: a cell, a domino either way, a 2x2 block, a plus.
BRUSHES = (
    ((0, 0),),
    ((0, 0), (0, 1)),
    ((0, 0), (1, 0)),
    ((0, 0), (0, 1), (1, 0), (1, 1)),
    ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)),
)


# ---------------------------------------------------------------------------------------------------------------
# Room representation


@dataclass(frozen=True)
class SokobanRoom:
    """One Sokoban position: the static walls and targets, and where the boxes and the player stand.

    Cells outside the grid count as walls, so a hand-written room needs no wall border. Build one from text with
    [`SokobanRoom.from_text`] (symbols: `#` wall, `_` floor, `O` target, `X` box, `√` box on target, `P` player,
    `S` player on target).
    """

    height: int
    width: int
    walls: frozenset[Cell]
    targets: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell

    def __post_init__(self) -> None:
        if self.height < 1 or self.width < 1:
            raise ValueError(f"room size must be at least 1x1, got height={self.height}, width={self.width}")
        for kind in ("walls", "targets", "boxes"):
            outside = [cell for cell in getattr(self, kind) if not self._inside(cell)]
            if outside:
                raise ValueError(f"{kind} {sorted(outside)} lie outside the {self.height}x{self.width} room")
        if not self._inside(self.player):
            raise ValueError(f"player={self.player} lies outside the {self.height}x{self.width} room")
        for kind in ("targets", "boxes"):
            on_wall = getattr(self, kind) & self.walls
            if on_wall:
                raise ValueError(f"{kind} {sorted(on_wall)} are on walls; a cell holds one thing")
        if self.player in self.walls or self.player in self.boxes:
            raise ValueError(f"player={self.player} stands on a wall or a box")
        if not self.targets or len(self.boxes) != len(self.targets):
            raise ValueError(
                f"a room needs as many boxes as targets (at least one), got {len(self.boxes)} boxes and "
                f"{len(self.targets)} targets"
            )

    def _inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.height and 0 <= cell[1] < self.width

    @classmethod
    def from_text(cls, text: str) -> SokobanRoom:
        """Parse a grid drawn with the room symbols, one row per line (blank lines around it are ignored)."""
        rows = [line.strip() for line in text.strip().splitlines()]
        if len({len(row) for row in rows}) != 1:
            raise ValueError(f"every row of a room must have the same length, got rows {rows}")
        walls, targets, boxes, players = set(), set(), set(), []
        for r, row in enumerate(rows):
            for c, symbol in enumerate(row):
                cell = (r, c)
                if symbol == WALL:
                    walls.add(cell)
                elif symbol in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                    targets.add(cell)
                elif symbol not in (FLOOR, BOX, PLAYER):
                    raise ValueError(f"unknown room symbol {symbol!r} at {cell}; use one of # _ O X √ P S")
                if symbol in (BOX, BOX_ON_TARGET):
                    boxes.add(cell)
                if symbol in (PLAYER, PLAYER_ON_TARGET):
                    players.append(cell)
        if len(players) != 1:
            raise ValueError(f"a room needs exactly one player (P or S), found {len(players)}")
        return cls(len(rows), len(rows[0]), frozenset(walls), frozenset(targets), frozenset(boxes), players[0])

    def to_text(self) -> str:
        """The room as a grid, one row per line."""
        layout = layout_of(self)
        return render_grid(layout, [flat(layout, cell) for cell in self.boxes], flat(layout, self.player))

    @property
    def is_solved(self) -> bool:
        """Whether the boxes stand exactly on the targets."""
        return self.boxes == self.targets


class RoomLayout:
    """The static part of a room in flat-index form; built once per room and shared by the env and the solver.

    `neighbors[cell][action]` is the adjacent cell in that direction, or -1 when it is a wall or off the grid.
    """

    __slots__ = ("base_cells", "coord_labels", "height", "neighbors", "targets", "width")

    def __init__(self, height: int, width: int, walls: frozenset[int], targets: frozenset[int]) -> None:
        self.height, self.width = height, width
        self.targets = targets
        neighbors = []
        for cell in range(height * width):
            row, col = divmod(cell, width)
            around = []
            for d_row, d_col in ACTION_OFFSETS:
                r, c = row + d_row, col + d_col
                inside = 0 <= r < height and 0 <= c < width
                around.append(r * width + c if inside and r * width + c not in walls else -1)
            neighbors.append(tuple(around))
        self.neighbors = tuple(neighbors)
        self.base_cells = tuple(
            WALL if cell in walls else TARGET if cell in targets else FLOOR for cell in range(height * width)
        )
        self.coord_labels = tuple(f"({cell // width}, {cell % width})" for cell in range(height * width))


@lru_cache(maxsize=1024)  # the rollouts of a group share a room
def _cached_layout(height: int, width: int, walls: frozenset[Cell], targets: frozenset[Cell]) -> RoomLayout:
    return RoomLayout(
        height, width, frozenset(r * width + c for r, c in walls), frozenset(r * width + c for r, c in targets)
    )


def layout_of(room: SokobanRoom) -> RoomLayout:
    """The room's static `RoomLayout`, cached: rooms with the same size, walls and targets share one."""
    return _cached_layout(room.height, room.width, room.walls, room.targets)


def flat(layout: RoomLayout, cell: Cell) -> int:
    """The flat index of a (row, col) cell: `row * width + col`."""
    return cell[0] * layout.width + cell[1]


def unflat(layout: RoomLayout, index: int) -> Cell:
    """The (row, col) cell of a flat index (the inverse of `flat`)."""
    return divmod(index, layout.width)


def render_grid(layout: RoomLayout, boxes, player: int) -> str:
    """The grid text of a position: one row per line, one symbol per cell."""
    cells = list(layout.base_cells)
    targets = layout.targets
    for box in boxes:
        cells[box] = BOX_ON_TARGET if box in targets else BOX
    cells[player] = PLAYER_ON_TARGET if player in targets else PLAYER
    width = layout.width
    return "\n".join(["".join(cells[start : start + width]) for start in range(0, len(cells), width)])


# ---------------------------------------------------------------------------------------------------------------
# The move rule


def push_move(neighbors: tuple[tuple[int, ...], ...], player: int, boxes, action: int) -> tuple[int, int, int]:
    """Where one move takes the player, and which box it pushes.

    Returns `(player, box_from, box_to)`. The player steps into a free cell, or into a box's cell when the cell
    beyond the box is free (the box moves there); `box_from` is -1 when no box moved. A step into a wall, or a push
    against a wall or another box, leaves the player where it was.
    """
    step_to = neighbors[player][action]
    if step_to < 0:
        return player, -1, -1
    if step_to in boxes:
        beyond = neighbors[step_to][action]
        if beyond < 0 or beyond in boxes:
            return player, -1, -1
        return step_to, step_to, beyond
    return step_to, -1, -1


# ---------------------------------------------------------------------------------------------------------------
# Generation


def carve_floor(height: int, width: int, rng: np.random.Generator) -> list[bool]:
    """A random-walk floor mask (flat, `True` = floor) inside a wall ring."""
    num_steps = int(WALK_LENGTH_PER_SIDE * (height + width))
    row, col = int(rng.integers(1, height - 1)), int(rng.integers(1, width - 1))
    direction = int(rng.integers(4))
    turns = (rng.random(num_steps) < TURN_PROBABILITY).tolist()
    new_directions = rng.integers(0, 4, num_steps).tolist()
    brushes = rng.integers(0, len(BRUSHES), num_steps).tolist()
    floor = [False] * (height * width)
    for turn, new_direction, brush in zip(turns, new_directions, brushes, strict=True):
        for d_row, d_col in BRUSHES[brush]:
            r, c = row + d_row, col + d_col
            if 0 < r < height - 1 and 0 < c < width - 1:
                floor[r * width + c] = True
        if turn:
            direction = new_direction
        d_row, d_col = ACTION_OFFSETS[direction]
        row = min(max(row + d_row, 1), height - 2)
        col = min(max(col + d_col, 1), width - 2)
    return floor


def reverse_play(
    layout: RoomLayout, player: int, rng: np.random.Generator, search_depth: int, max_states: int
) -> tuple[int, tuple[int, ...]] | None:
    """Search reverse moves from the solved position; return the chosen start `(player, boxes)`, or `None`.

    Boxes are tracked by identity (box i starts on target i) so a pull's displacement is measured from the box's
    own target. Explores at most `search_depth` reverse moves deep, and stops after the first depth at which
    `max_states` positions have been seen.
    """
    neighbors = layout.neighbors
    targets = tuple(sorted(layout.targets))
    target_set = layout.targets
    width = layout.width
    start = (player, targets)
    seen = {start}
    frontier = [start]
    best_score, best = 0, []
    for _ in range(search_depth):
        next_frontier = []
        for position in frontier:
            at, boxes = position
            for action in range(4):
                step_to = neighbors[at][action]
                if step_to < 0 or step_to in boxes:
                    continue
                walked = (step_to, boxes)
                if walked not in seen:
                    seen.add(walked)
                    next_frontier.append(walked)
                behind = neighbors[at][OPPOSITE_ACTION[action]]
                if behind < 0 or behind not in boxes:
                    continue
                i = boxes.index(behind)
                pulled = (step_to, boxes[:i] + (at,) + boxes[i + 1 :])
                if pulled in seen:
                    continue
                seen.add(pulled)
                next_frontier.append(pulled)
                if set(pulled[1]) == target_set:  # boxes swapped targets: still solved, not a start
                    continue
                score = sum(
                    abs(box // width - target // width) + abs(box % width - target % width)
                    for box, target in zip(pulled[1], targets, strict=True)
                )
                if score > best_score:
                    best_score, best = score, [pulled]
                elif score == best_score:
                    best.append(pulled)
        if not next_frontier or len(seen) >= max_states:
            break
        frontier = next_frontier
    if not best:
        return None
    return best[int(rng.integers(len(best)))]


def generate_room(
    dim_room: tuple[int, int],
    num_boxes: int,
    rng: np.random.Generator,
    *,
    search_depth: int = 100,
    max_search_states: int = 100_000,
    max_attempts: int = 50,
) -> SokobanRoom:
    """Generate a solvable room of size `dim_room` = (height, width) with `num_boxes` boxes (see module docstring)."""
    height, width = dim_room
    for _ in range(max_attempts):
        floor = carve_floor(height, width, rng)
        floor_cells = [cell for cell, is_floor in enumerate(floor) if is_floor]
        if len(floor_cells) < num_boxes + 2:  # targets, the player and one spare cell to pull into
            continue
        picks = rng.choice(len(floor_cells), size=num_boxes + 1, replace=False).tolist()
        player, targets = floor_cells[picks[0]], frozenset(floor_cells[i] for i in picks[1:])
        walls = frozenset(cell for cell, is_floor in enumerate(floor) if not is_floor)
        layout = RoomLayout(height, width, walls, targets)
        chosen = reverse_play(layout, player, rng, search_depth, max_search_states)
        if chosen is None:
            continue
        player, boxes = chosen
        for action in rng.integers(0, 4, size=int(rng.integers(1, 4))).tolist():
            step_to = layout.neighbors[player][action]
            if step_to >= 0 and step_to not in boxes:
                player = step_to
        return SokobanRoom(
            height=height,
            width=width,
            walls=frozenset(unflat(layout, cell) for cell in walls),
            targets=frozenset(unflat(layout, cell) for cell in targets),
            boxes=frozenset(unflat(layout, cell) for cell in boxes),
            player=unflat(layout, player),
        )
    raise RuntimeError(
        f"no solvable {height}x{width} room with num_boxes={num_boxes} after {max_attempts} attempts; "
        "use a larger dim_room, fewer boxes or a larger search_depth"
    )


# ---------------------------------------------------------------------------------------------------------------
# Solver


def solve(room: SokobanRoom, max_states: int = 1_000_000) -> list[str] | None:
    """A shortest list of moves (action names) that puts every box on a target, by breadth-first search.

    Returns `[]` when the room is already solved and `None` when no sequence of moves solves it. Boxes pushed into
    a corner off a target are pruned (they can never move again). Raises `RuntimeError` if more than `max_states`
    positions would be visited, rather than answering "unsolvable" without proof.
    """
    layout = layout_of(room)
    neighbors, targets = layout.neighbors, layout.targets
    # A non-target floor cell with walls on two perpendicular sides traps a box for good.
    dead = {
        cell
        for cell, around in enumerate(neighbors)
        if cell not in targets
        and layout.base_cells[cell] != WALL
        and (around[0] < 0 or around[1] < 0)
        and (around[2] < 0 or around[3] < 0)
    }
    start = (flat(layout, room.player), frozenset(flat(layout, cell) for cell in room.boxes))
    if start[1] == targets:
        return []
    parents: dict[tuple[int, frozenset[int]], tuple | None] = {start: None}
    queue = deque([start])
    while queue:
        position = queue.popleft()
        player, boxes = position
        for action in range(4):
            new_player, box_from, box_to = push_move(neighbors, player, boxes, action)
            if new_player == player or box_to in dead:
                continue
            new_boxes = boxes if box_from < 0 else (boxes - {box_from}) | {box_to}
            successor = (new_player, new_boxes)
            if successor in parents:
                continue
            parents[successor] = (position, action)
            if new_boxes == targets:
                return _moves_to(successor, parents)
            if len(parents) > max_states:
                raise RuntimeError(
                    f"solve visited more than max_states={max_states} positions without an answer; raise max_states"
                )
            queue.append(successor)
    return None


def _moves_to(position, parents) -> list[str]:
    moves = []
    while parents[position] is not None:
        position, action = parents[position]
        moves.append(ACTION_NAMES[action])
    return moves[::-1]
