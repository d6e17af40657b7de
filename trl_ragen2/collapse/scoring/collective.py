"""The few collectives the MI diagnostics need, as no-ops in a single process.

Every method is a collective when several processes run: all of them must call it, in the same order, whatever
their local data (an empty payload is fine). That rule is what keeps a process without valid pairs from hanging.
"""

from __future__ import annotations

from typing import Any


class ProcessGroup:
    """All-gather and max over the processes of an `accelerate.Accelerator` (or a single process without one)."""

    def __init__(self, accelerator=None):
        self.accelerator = accelerator
        self.world_size = accelerator.num_processes if accelerator is not None else 1
        self.rank = accelerator.process_index if accelerator is not None else 0

    def all_gather(self, payload: Any) -> list[Any]:
        """One entry per process, in process order."""
        if self.world_size == 1:
            return [payload]
        from accelerate.utils import gather_object

        return gather_object([payload])

    def max(self, value: int) -> int:
        """The largest `value` over the processes (a collective)."""
        return max(self.all_gather(int(value)))
