"""The entities of the procedural SearchQA world: invented names, kinds, and attributes that agree with each other.

[`make_entities`] makes countries, rivers, cities, universities, companies, people and inventions with consistent
attributes (a company is founded after its founder turns 20, a person studies at a university older than them,
...). Names are invented from syllables and unique across the world, so no real-world knowledge helps.
`trl_ragen2_envs.searchqa.pages` writes their pages and `trl_ragen2_envs.searchqa.world` puts both together.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


# ---------------------------------------------------------------------------------------------------------------
# Vocabulary

_ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "pr", "r", "s", "sh", "st"]
_ONSETS += ["t", "th", "tr", "v", "w", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou", "ia"]
_CODAS = ["", "", "", "n", "r", "l", "s", "m", "nd", "rk", "th", "x", "sk"]

OCCUPATIONS = [
    "cartographer", "glassblower", "botanist", "architect", "astronomer", "violinist", "engineer", "chemist",
    "novelist", "sculptor", "surveyor", "clockmaker", "economist", "painter", "linguist", "physician",
    "mathematician", "photographer", "shipbuilder", "composer",
]  # fmt: skip
INDUSTRIES = [
    "textiles", "shipping", "optics", "railways", "pharmaceuticals", "publishing", "mining", "brewing", "aviation",
    "ceramics",
]  # fmt: skip
COMPANY_SUFFIXES = [
    "Works", "Industries", "Laboratories", "Holdings", "Dynamics", "Foundry", "Company", "Brothers", "Manufacturing",
    "Group",
]  # fmt: skip
UNIVERSITY_FORMS = ("{} University", "University of {}", "{} Institute of Technology", "{} College")
DEVICES = {
    "loom": "weaving machine",
    "lamp": "signal lamp",
    "press": "printing press",
    "engine": "steam engine",
    "valve": "pressure valve",
    "compass": "navigation compass",
    "telescope": "refracting telescope",
    "pump": "water pump",
    "kiln": "brick kiln",
    "sextant": "marine sextant",
    "turbine": "wind turbine",
    "barometer": "mercury barometer",
}

DEFAULT_COUNTS = {
    "country": 12,
    "river": 40,
    "city": 120,
    "university": 40,
    "company": 160,
    "person": 800,
    "invention": 160,
}


# ---------------------------------------------------------------------------------------------------------------
# Entities


@dataclass
class Entity:
    """One entity of the world: its kind, unique name and attributes (also readable as `entity[key]`)."""

    kind: str
    name: str
    attrs: dict[str, object] = field(default_factory=dict)

    def __getitem__(self, key: str):
        return self.attrs[key]

    def get(self, key: str, default=None):
        """Attribute `key`, or `default` when the entity has none."""
        return self.attrs.get(key, default)


class _NameMaker:
    """Invented names from syllables; never the same word twice, so every name is unique."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, min_syllables: int = 2, max_syllables: int = 3) -> str:
        while True:
            n = int(self.rng.integers(min_syllables, max_syllables + 1))
            parts = [
                _ONSETS[self.rng.integers(len(_ONSETS))] + _VOWELS[self.rng.integers(len(_VOWELS))] for _ in range(n)
            ]
            word = ("".join(parts) + _CODAS[self.rng.integers(len(_CODAS))]).capitalize()
            if 4 <= len(word) <= 11 and word not in self.used:
                self.used.add(word)
                return word


def _pick(rng: np.random.Generator, items: list):
    return items[int(rng.integers(len(items)))]


def make_entities(rng: np.random.Generator, counts: dict[str, int]) -> dict[str, list[Entity]]:
    names = _NameMaker(rng)
    seas = [f"{names.word()} Sea" for _ in range(6)]
    countries = [
        Entity(
            "country",
            names.word(),
            {"founded": int(rng.integers(1100, 1900)), "currency": f"{names.word(2, 2)} crown"},
        )
        for _ in range(counts["country"])
    ]
    rivers = [
        Entity(
            "river",
            f"{names.word()} River",
            {"length_km": int(rng.integers(60, 3200)), "source": f"Mount {names.word()}", "mouth": _pick(rng, seas)},
        )
        for _ in range(counts["river"])
    ]
    cities = []
    for _ in range(counts["city"]):
        attrs = {
            "country": _pick(rng, countries).name,
            "population": int(rng.integers(5_000, 3_000_000)),
            "founded": int(rng.integers(700, 1850)),
        }
        if rng.random() < 0.75:
            attrs["river"] = _pick(rng, rivers).name
        cities.append(Entity("city", names.word(), attrs))
    for country in countries:
        own = [c for c in cities if c["country"] == country.name] or [_pick(rng, cities)]
        country.attrs["capital"] = _pick(rng, own).name
    universities = [
        Entity(
            "university",
            _pick(rng, list(UNIVERSITY_FORMS)).format(names.word()),
            {"city": _pick(rng, cities).name, "founded": int(rng.integers(1150, 1900))},
        )
        for _ in range(counts["university"])
    ]
    people = []
    for _ in range(counts["person"]):
        birth = int(rng.integers(1800, 1986))
        attrs = {"born": birth, "birthplace": _pick(rng, cities).name, "occupation": _pick(rng, OCCUPATIONS)}
        if birth < 1935:
            attrs["died"] = birth + int(rng.integers(45, 96))
        older = [u for u in universities if u["founded"] <= birth + 18]
        if older:
            attrs["alma_mater"] = _pick(rng, older).name
        people.append(Entity("person", f"{names.word()} {names.word()}", attrs))
    companies = []
    for _ in range(counts["company"]):
        founder = _pick(rng, people)
        attrs = {
            "founder": founder.name,
            "founded": founder["born"] + int(rng.integers(22, 50)),
            "industry": _pick(rng, INDUSTRIES),
            "headquarters": _pick(rng, cities).name,
        }
        companies.append(Entity("company", f"{names.word()} {_pick(rng, COMPANY_SUFFIXES)}", attrs))
    for person in people:
        open_then = [c for c in companies if c["founded"] <= person["born"] + 35 and c["founder"] != person.name]
        if open_then and rng.random() < 0.7:
            person.attrs["employer"] = _pick(rng, open_then).name
    inventions = []
    for _ in range(counts["invention"]):
        inventor = _pick(rng, people)
        device = _pick(rng, list(DEVICES))
        year = inventor["born"] + int(rng.integers(20, 45))
        attrs = {"inventor": inventor.name, "year": year, "device": device}
        makers = [c for c in companies if c["founded"] <= year + 10]
        if makers:
            attrs["manufacturer"] = _pick(rng, makers).name
        inventions.append(Entity("invention", f"{names.word()} {device}", attrs))
    return {
        "country": countries,
        "river": rivers,
        "city": cities,
        "university": universities,
        "company": companies,
        "person": people,
        "invention": inventions,
    }
