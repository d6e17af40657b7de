"""Where trl-ragen2 keeps what it builds or downloads once (the tiny model, prepared WebShop data).

The folder is `$TRL_RAGEN2_CACHE`, else `$XDG_CACHE_HOME/trl_ragen2`, else `~/.cache/trl_ragen2`.
"""

from __future__ import annotations

import os
from pathlib import Path


CACHE_ENV_VAR = "TRL_RAGEN2_CACHE"


def cache_root() -> Path:
    """`$TRL_RAGEN2_CACHE`, else `$XDG_CACHE_HOME/trl_ragen2`, else `~/.cache/trl_ragen2`."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "trl_ragen2"
