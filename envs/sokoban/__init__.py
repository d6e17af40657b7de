"""Sokoban: push every box onto a target in a walled room (RAGEN-2's main grid puzzle).

Modules: `env` (`SokobanEnv`, registered as `make_env("sokoban")`, and the TRL tool adapter `SokobanToolEnv`) and
`generation` (rooms, the move rule, the reverse-play generator and the breadth-first solver).
"""

from .env import SokobanEnv, SokobanToolEnv
from .generation import SokobanRoom, generate_room, solve


__all__ = ["SokobanEnv", "SokobanRoom", "SokobanToolEnv", "generate_room", "solve"]
