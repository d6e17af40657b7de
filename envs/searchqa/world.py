"""A procedural multi-hop world for SearchQA: fictional entities, their relations, and wiki-style pages.

`build_world(seed)` makes the entities (`trl_ragen2_envs.searchqa.entities`: countries, rivers, cities,
universities, companies, people and inventions with consistent attributes) and their pages
(`trl_ragen2_envs.searchqa.pages`). Each entity gets a page of one or two paragraphs; every paragraph is one
retrievable [`Passage`] titled with the entity's name, and `World.fact_passage` records which paragraph states
each fact, so a question knows its supporting passages. The same seed gives the same world, about 2,400 passages
at the default size.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .entities import DEFAULT_COUNTS, Entity, make_entities
from .pages import write_passages
from .retrieval import Passage


@dataclass
class World:
    """A generated world: its entities by name and kind, their passages, and which passage states each fact."""

    seed: int
    entities: dict[str, Entity]  # name -> entity; names are unique across kinds
    by_kind: dict[str, list[str]]  # kind -> names, in creation order
    passages: list[Passage]
    fact_passage: dict[tuple[str, str], str]  # (entity name, attribute) -> id of the passage stating it

    def of_kind(self, kind: str) -> list[Entity]:
        """The entities of `kind`, in creation order."""
        return [self.entities[name] for name in self.by_kind[kind]]


@lru_cache(maxsize=4)
def build_world(seed: int = 0, scale: float = 1.0) -> World:
    """The world for `seed` (cached): `scale` multiplies the entity counts of `DEFAULT_COUNTS`."""
    if not 0.05 <= scale <= 20:
        raise ValueError(f"world_scale must be in [0.05, 20], got {scale}")
    counts = {kind: max(2, round(n * scale)) for kind, n in DEFAULT_COUNTS.items()}
    rng = np.random.default_rng([seed, 0x5EA7C4])  # a stream of its own, apart from episode seeds
    made = make_entities(rng, counts)
    entities = {e.name: e for kind_entities in made.values() for e in kind_entities}
    passages, fact_passage = write_passages(entities, id_prefix=f"w{seed}")
    by_kind = {kind: [e.name for e in kind_entities] for kind, kind_entities in made.items()}
    return World(seed, entities, by_kind, passages, fact_passage)
