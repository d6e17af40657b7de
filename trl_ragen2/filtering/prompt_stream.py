"""`PromptStream`: the training dataloader as one stream of generation batches, from which refill rounds draw.

TRL's training dataloader yields each generation batch `steps_per_generation * num_iterations` times in a row (its
`RepeatSampler` repeats the batch so that every micro-step pulls one; only the first pull of a "slot" is generated
from). The Trainer pulls a fixed number of items per epoch. A refill round (`trl_ragen2.filtering.refill`) needs the
next generation batch nobody has started, without upsetting either count:

- the stream runs on across the sampler's passes (a Trainer epoch continues where the last one stopped, so the
  Trainer still makes `max_steps` optimizer steps however many prompts refill drew);
- `draw()` reads ahead to the first slot no one has read, takes it, and hides its repeats from the Trainer; the
  items it reads past (repeats of a slot the Trainer is in) stay queued for the Trainer;
- every prompt is drawn once per pass, in the sampler's order (up to the Trainer's prefetch: a slot it has already
  pulled is not drawn again);
- `state()` / `restore()` put it in a checkpoint: a resumed run replays the sampler from its start to the same
  position (the sampler's shuffles depend only on how many passes it made), so it draws what an uninterrupted run
  draws.

The stream owns its position; the trainer owns the stream (`SNRFilteredGRPOTrainer.get_train_dataloader`). A new
read runs under `torch.random.fork_rng`: a DataLoader draws each pass's base seed from the global generator, and a
resumed run, which replays the passes before the Trainer restores that generator, must train on the same draws.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import torch


class PromptStream:
    """Wraps a training dataloader whose items come in slots of `slot_size` equal items (one per micro-step).

    Args:
        loader: the prepared training dataloader (its length must be a multiple of `slot_size`).
        slot_size (`int`): items per generation batch, `steps_per_generation * num_iterations`.
    """

    def __init__(self, loader, slot_size: int):
        if len(loader) % slot_size:
            raise ValueError(
                f"the training dataloader yields {len(loader)} items per pass, not a multiple of the "
                f"{slot_size} pulls each generation batch serves; refill needs whole generation batches"
            )
        self.loader, self.slot_size = loader, slot_size
        self.items_read = 0  # items read from the loader, over every pass
        self.passes_started = 0  # passes of the loader begun (its sampler's shuffles)
        self.drawn_slots: set[int] = set()  # slots refill took that the Trainer has not passed yet
        self.slots_drawn = 0  # slots refill took, in all (the metric "prompts consumed" counts them)
        self.trainer_slot = -1  # slot of the last item handed to the Trainer
        self._ahead: deque[tuple[int, int, Any]] = deque()  # (read index, slot, item) read past, for the Trainer
        self._iterator: Iterator | None = None
        self._replay: tuple[int, set[int]] | None = None  # restored position, replayed on the first read

    def __len__(self) -> int:
        return len(self.loader)  # what the Trainer counts an epoch in

    def __iter__(self) -> PromptStream:
        return self  # one stream: each Trainer epoch continues it

    def __next__(self):
        """The Trainer's pull: the next item of a slot refill did not take."""
        while True:
            _, slot, item = self._ahead.popleft() if self._ahead else self._read()
            if slot in self.drawn_slots:
                continue
            self.drawn_slots = {s for s in self.drawn_slots if s > slot}  # passed: forget
            self.trainer_slot = slot
            return item

    def draw(self):
        """Refill's pull: the first item of the first slot no one has read; its repeats never reach the Trainer."""
        if self._replay is not None:
            self._fast_forward()
        newest = (self.items_read - 1) // self.slot_size  # every slot up to this one was begun by someone
        while True:
            index, slot, item = self._read()
            if slot > newest:
                self.drawn_slots.add(slot)
                self.slots_drawn += 1
                return item
            if slot not in self.drawn_slots:
                self._ahead.append((index, slot, item))  # a repeat of a slot the Trainer is in

    def slots_started(self) -> int:
        """Generation batches begun by the Trainer or drawn by refill (prompts consumed = this * prompts per batch)."""
        return self.trainer_slot + 1 + len([s for s in self.drawn_slots if s > self.trainer_slot])

    def _read(self) -> tuple[int, int, Any]:
        if self._replay is not None:
            self._fast_forward()
        if self._iterator is None:
            self._new_pass()
        with torch.random.fork_rng(devices=[]):  # the loader's draws (a pass's base seed) leave the generator alone
            try:
                item = next(self._iterator)
            except StopIteration:
                self._new_pass()
                item = next(self._iterator)  # a loader without items raises StopIteration, as the Trainer expects
        index = self.items_read
        self.items_read += 1
        return index, index // self.slot_size, item

    def _new_pass(self) -> None:
        self._iterator = iter(self.loader)
        self.passes_started += 1

    # -----------------------------------------------------------------------------------------------------------
    # Checkpoints

    def state(self) -> dict:
        """The position, as JSON: what `restore` needs to continue exactly here."""
        return {
            "items_read": self.items_read,
            "trainer_slot": self.trainer_slot,
            "drawn_slots": sorted(self.drawn_slots),
            "slots_drawn": self.slots_drawn,
            "ahead": [index for index, _, _ in self._ahead],
        }

    def restore(self, state: dict) -> None:
        """Continue from `state()`: the loader is replayed from its first pass on the next read."""
        self.trainer_slot = state["trainer_slot"]
        self.drawn_slots = set(state["drawn_slots"])
        self.slots_drawn = state["slots_drawn"]
        self.items_read, self.passes_started, self._iterator, self._ahead = 0, 0, None, deque()
        self._replay = (state["items_read"], set(state["ahead"]))

    def _fast_forward(self) -> None:
        """Read (and drop) every item up to the restored position, keeping the ones that were queued for the Trainer."""
        target, ahead = self._replay
        self._replay = None
        while self.items_read < target:
            index, slot, item = self._read()
            if index in ahead:
                self._ahead.append((index, slot, item))
