"""HotpotQA-style questions over the procedural world, with exact answers and their supporting passages.

- **Bridge** questions hop from one page to another: "In which city was the founder of Quellix Works born?"
  needs the company page (its founder) and then the founder's page (the birthplace).
- **Comparison** questions compare one attribute of two entities ("Which river is longer, ...?"), including
  yes/no questions ("Were A and B born in the same country?"), balanced between yes and no.

`sample_question(world, rng)` draws a template and its entities; `hops` lists the entity names a solver has
to look up in order, `supporting` the passages that state the needed facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .entities import Entity
from .world import World


QUESTION_KINDS = ("bridge", "comparison")


@dataclass(frozen=True)
class WorldQuestion:
    """A question over the procedural world: its exact answer, the names to look up and the supporting passages."""

    question: str
    answer: str
    kind: str  # "bridge" or "comparison"
    template: str
    hops: tuple[str, ...]  # entity names to search for, in order
    supporting: tuple[str, ...]  # ids of the passages stating the facts the answer needs


def _pick(rng: np.random.Generator, entities: list[Entity]) -> Entity | None:
    return entities[int(rng.integers(len(entities)))] if entities else None


def _with(world: World, kind: str, *attrs: str) -> list[Entity]:
    return [e for e in world.of_kind(kind) if all(a in e.attrs for a in attrs)]


def _hop(
    world: World, rng: np.random.Generator, kind: str, link: str, attr: str, template: str, phrasing: str
) -> WorldQuestion | None:
    """Bridge: an entity of `kind` -(link)-> a second entity, whose `attr` is the answer (None when no entity of
    `kind` leads to one with `attr`). `phrasing` names the first entity as {a}."""
    first = _pick(rng, [e for e in _with(world, kind, link) if attr in world.entities[e[link]].attrs])
    if first is None:
        return None
    second = world.entities[first[link]]
    supporting = (world.fact_passage[(first.name, link)], world.fact_passage[(second.name, attr)])
    question = phrasing.format(a=first.name)
    return WorldQuestion(question, str(second[attr]), "bridge", template, (first.name, second.name), supporting)


# ---------------------------------------------------------------------------------------------------------------
# Bridge templates


def _founder_birthplace(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "In which city was the founder of {a} born?"
    return _hop(world, rng, "company", "founder", "birthplace", "founder_birthplace", phrasing)


def _alma_mater_founded(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "In what year was the university attended by {a} founded?"
    return _hop(world, rng, "person", "alma_mater", "founded", "alma_mater_founded", phrasing)


def _headquarters_country(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "In which country does {a} have its headquarters?"
    return _hop(world, rng, "company", "headquarters", "country", "headquarters_country", phrasing)


def _employer_founder(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "Who founded the company that {a} worked for?"
    return _hop(world, rng, "person", "employer", "founder", "employer_founder", phrasing)


def _inventor_occupation(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "What was the profession of the inventor of the {a}?"
    return _hop(world, rng, "invention", "inventor", "occupation", "inventor_occupation", phrasing)


def _birthplace_river(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "On which river does the birthplace of {a} lie?"
    return _hop(world, rng, "person", "birthplace", "river", "birthplace_river", phrasing)


def _city_river_length(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "How many kilometres long is the river on which {a} lies?"
    return _hop(world, rng, "city", "river", "length_km", "city_river_length", phrasing)


def _manufacturer_headquarters(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "In which city is the company that first manufactured the {a} headquartered?"
    return _hop(world, rng, "invention", "manufacturer", "headquarters", "manufacturer_headquarters", phrasing)


# ---------------------------------------------------------------------------------------------------------------
# Comparison templates


def _compare(
    world: World, rng: np.random.Generator, kind: str, attr: str, template: str, phrasing: str, larger_wins: bool
) -> WorldQuestion | None:
    """Two entities of `kind` with different `attr`; the answer is the one with the larger (or smaller) value."""
    candidates = _with(world, kind, attr)
    first, second = _pick(rng, candidates), _pick(rng, candidates)
    if first is None or first[attr] == second[attr]:
        return None
    winner = (
        max((first, second), key=lambda e: e[attr]) if larger_wins else min((first, second), key=lambda e: e[attr])
    )
    supporting = (world.fact_passage[(first.name, attr)], world.fact_passage[(second.name, attr)])
    question = phrasing.format(a=first.name, b=second.name)
    return WorldQuestion(question, winner.name, "comparison", template, (first.name, second.name), supporting)


def _same(
    world: World, rng: np.random.Generator, kind: str, attr: str, value, template: str, phrasing: str
) -> WorldQuestion | None:
    """Yes/no: do two entities share `value(entity)`? "Yes" and "no" are drawn equally often."""
    candidates = _with(world, kind, attr)
    first = _pick(rng, candidates)
    want_same = bool(rng.random() < 0.5)
    pool = [e for e in candidates if e is not first and (value(e) == value(first)) == want_same]
    second = _pick(rng, pool)
    if first is None or second is None:
        return None
    pair = (first, second) if rng.random() < 0.5 else (second, first)
    supporting = tuple(world.fact_passage[(e.name, attr)] for e in pair)
    question = phrasing.format(a=pair[0].name, b=pair[1].name)
    answer = "yes" if want_same else "no"
    return WorldQuestion(question, answer, "comparison", template, (pair[0].name, pair[1].name), supporting)


def _company_older(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "Which company was founded first, {a} or {b}?"
    return _compare(world, rng, "company", "founded", "company_older", phrasing, larger_wins=False)


def _person_older(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "Who was born first, {a} or {b}?"
    return _compare(world, rng, "person", "born", "person_older", phrasing, larger_wins=False)


def _river_longer(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "Which river is longer, the {a} or the {b}?"
    return _compare(world, rng, "river", "length_km", "river_longer", phrasing, larger_wins=True)


def _city_larger(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "Which city has the larger population, {a} or {b}?"
    return _compare(world, rng, "city", "population", "city_larger", phrasing, larger_wins=True)


def _same_birth_country(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    def country(person: Entity) -> str:
        return world.entities[person["birthplace"]]["country"]

    phrasing = "Were {a} and {b} born in the same country?"
    return _same(world, rng, "person", "birthplace", country, "same_birth_country", phrasing)


def _same_industry(world: World, rng: np.random.Generator) -> WorldQuestion | None:
    phrasing = "Are {a} and {b} in the same industry?"
    return _same(world, rng, "company", "industry", lambda c: c["industry"], "same_industry", phrasing)


TEMPLATES: dict[str, dict[str, Callable[[World, np.random.Generator], WorldQuestion | None]]] = {
    "bridge": {
        "founder_birthplace": _founder_birthplace,
        "alma_mater_founded": _alma_mater_founded,
        "headquarters_country": _headquarters_country,
        "employer_founder": _employer_founder,
        "inventor_occupation": _inventor_occupation,
        "birthplace_river": _birthplace_river,
        "city_river_length": _city_river_length,
        "manufacturer_headquarters": _manufacturer_headquarters,
    },
    "comparison": {
        "company_older": _company_older,
        "person_older": _person_older,
        "river_longer": _river_longer,
        "city_larger": _city_larger,
        "same_birth_country": _same_birth_country,
        "same_industry": _same_industry,
    },
}


def sample_question(world: World, rng: np.random.Generator, kinds: tuple[str, ...] = QUESTION_KINDS) -> WorldQuestion:
    """A question of one of `kinds` (drawn evenly), its template drawn evenly within the kind."""
    unknown = set(kinds) - set(TEMPLATES)
    if not kinds or unknown:
        raise ValueError(f"question_kinds must be a non-empty subset of {QUESTION_KINDS}, got {kinds!r}")
    for _ in range(100):
        kind = kinds[int(rng.integers(len(kinds)))]
        names = list(TEMPLATES[kind])
        question = TEMPLATES[kind][names[int(rng.integers(len(names)))]](world, rng)
        if question is not None:
            return question
    raise RuntimeError(f"world {world.seed} is too small to draw a {kinds} question; raise world_scale")
