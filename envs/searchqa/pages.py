"""Wiki-style pages for the procedural SearchQA world: one or two paragraphs per entity.

Each writer returns paragraphs as `(text, facts)` where `facts` names the attributes the paragraph states;
[`write_passages`] turns them into passages and the `(entity, attribute) -> passage id` map that questions
use for their supporting passages. Pages also mention related entities (people born in a city, a company's
inventions), as real encyclopedia pages do, so a search for a name returns other pages besides its own.
"""

from __future__ import annotations

from collections import defaultdict

from .entities import DEVICES, Entity
from .retrieval import Passage


Paragraph = tuple[str, tuple[str, ...]]


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _a(word: str) -> str:
    """The indefinite article and the word: "an engineer", "a chemist"."""
    return f"{'an' if word[0].lower() in 'aeiou' else 'a'} {word}"


def _surname(person: Entity) -> str:
    return person.name.split()[-1]


def _person_page(person: Entity, entities: dict[str, Entity], links: dict) -> list[Paragraph]:
    city = entities[person["birthplace"]]
    lifespan = f"{person['born']}–{person['died']}" if "died" in person.attrs else f"born {person['born']}"
    verb = "was" if "died" in person.attrs else "is"
    first = (
        (
            f"{person.name} ({lifespan}) {verb} {_a(person['occupation'])} born in {city.name}, a city in "
            f"{city['country']}. As {_a(person['occupation'])}, {_surname(person)} {verb} known across "
            f"{city['country']}."
        ),
        ("born", "died", "birthplace", "occupation"),
    )
    sentences, facts = [], []
    if "alma_mater" in person.attrs:
        sentences.append(f"studied at {person['alma_mater']}.")
        facts.append("alma_mater")
    if "employer" in person.attrs:
        sentences.append(f"later worked for {person['employer']}.")
        facts.append("employer")
    for company in links["founded_by"][person.name]:
        sentences.append(f"founded {company.name} in {company['founded']}.")
    for invention in links["invented_by"][person.name]:
        sentences.append(f"invented the {invention.name} in {invention['year']}.")
    if not sentences:
        return [first]
    # The full name opens the paragraph, the surname carries the rest: "A B studied at X. B founded Y in 1901."
    text = " ".join(f"{person.name if i == 0 else _surname(person)} {s}" for i, s in enumerate(sentences))
    return [first, (text, tuple(facts))]


def _city_page(city: Entity, entities: dict[str, Entity], links: dict) -> list[Paragraph]:
    country = entities[city["country"]]
    text = (
        f"{city.name} is a city in {country.name} with a population of {city['population']:,}. "
        f"{city.name} was founded in {city['founded']}."
    )
    if country["capital"] == city.name:
        text += f" It is the capital of {country.name}."
    paragraphs = [(text, ("country", "population", "founded"))]
    sentences, facts = [], []
    if "river" in city.attrs:
        sentences.append(f"{city.name} lies on the {city['river']}.")
        facts.append("river")
    natives = [p.name for p in links["born_in"][city.name][:3]]
    if natives:
        sentences.append(f"Notable people born in {city.name} include {_join(natives)}.")
    universities = [u.name for u in links["university_in"][city.name]]
    if universities:
        sentences.append(f"The city is home to {_join(universities)}.")
    companies = [c.name for c in links["headquartered_in"][city.name][:3]]
    if companies:
        sentences.append(f"Companies based in {city.name} include {_join(companies)}.")
    if sentences:
        paragraphs.append((" ".join(sentences), tuple(facts)))
    return paragraphs


def _country_page(country: Entity, entities: dict[str, Entity], links: dict) -> list[Paragraph]:
    cities = [c.name for c in links["city_in"][country.name][:4]]
    text = (
        f"{country.name} is a country established in {country['founded']}. Its capital is {country['capital']} "
        f"and its currency is the {country['currency']}."
    )
    if cities:
        text += f" Cities of {country.name} include {_join(cities)}."
    return [(text, ("founded", "capital", "currency"))]


def _river_page(river: Entity, entities: dict[str, Entity], links: dict) -> list[Paragraph]:
    text = (
        f"The {river.name} is a river {river['length_km']} kilometres long. It rises on {river['source']} and "
        f"flows into the {river['mouth']}."
    )
    cities = [c.name for c in links["on_river"][river.name][:4]]
    if cities:
        text += f" Cities on the {river.name} include {_join(cities)}."
    return [(text, ("length_km", "source", "mouth"))]


def _university_page(university: Entity, entities: dict[str, Entity], links: dict) -> list[Paragraph]:
    city = entities[university["city"]]
    text = f"{university.name} is a university in {city.name}, {city['country']}, founded in {university['founded']}."
    alumni = [p.name for p in links["alumni_of"][university.name][:3]]
    if alumni:
        text += f" Alumni of {university.name} include {_join(alumni)}."
    return [(text, ("city", "founded"))]


def _company_page(company: Entity, entities: dict[str, Entity], links: dict) -> list[Paragraph]:
    first = (
        (
            f"{company.name} is {_a(company['industry'])} company founded in {company['founded']} by "
            f"{company['founder']}. Its headquarters are in {company['headquarters']}."
        ),
        ("founder", "founded", "industry", "headquarters"),
    )
    sentences = []
    staff = [p.name for p in links["employed_by"][company.name][:3]]
    if staff:
        sentences.append(f"People who worked for {company.name} include {_join(staff)}.")
    products = [i.name for i in links["made_by"][company.name][:3]]
    if products:
        sentences.append(f"{company.name} manufactured the {_join(products)}.")
    if not sentences:
        return [first]
    return [first, (" ".join(sentences), ())]


def _invention_page(invention: Entity, entities: dict[str, Entity], links: dict) -> list[Paragraph]:
    text = (
        f"The {invention.name} is {_a(DEVICES[invention['device']])} invented by {invention['inventor']} in "
        f"{invention['year']}."
    )
    facts = ["inventor", "year"]
    if "manufacturer" in invention.attrs:
        text += f" It was first manufactured by {invention['manufacturer']}."
        facts.append("manufacturer")
    return [(text, tuple(facts))]


_WRITERS = {
    "country": _country_page,
    "river": _river_page,
    "city": _city_page,
    "university": _university_page,
    "company": _company_page,
    "person": _person_page,
    "invention": _invention_page,
}


def _reverse_links(entities: dict[str, Entity]) -> dict[str, dict[str, list[Entity]]]:
    """Who points at whom: `links[relation][target name] -> [source entities]`."""
    relations = {
        ("person", "birthplace"): "born_in",
        ("person", "alma_mater"): "alumni_of",
        ("person", "employer"): "employed_by",
        ("company", "founder"): "founded_by",
        ("company", "headquarters"): "headquartered_in",
        ("invention", "inventor"): "invented_by",
        ("invention", "manufacturer"): "made_by",
        ("university", "city"): "university_in",
        ("city", "country"): "city_in",
        ("city", "river"): "on_river",
    }
    links: dict[str, dict[str, list[Entity]]] = {name: defaultdict(list) for name in relations.values()}
    for entity in entities.values():
        for (kind, attr), relation in relations.items():
            if entity.kind == kind and attr in entity.attrs:
                links[relation][entity.attrs[attr]].append(entity)
    return links


def write_passages(entities: dict[str, Entity], id_prefix: str) -> tuple[list[Passage], dict[tuple[str, str], str]]:
    """All pages as passages (`{id_prefix}-{n}`) and the map `(entity name, attribute) -> passage id`."""
    links = _reverse_links(entities)
    passages, fact_passage = [], {}
    for entity in entities.values():
        for text, facts in _WRITERS[entity.kind](entity, entities, links):
            passage_id = f"{id_prefix}-{len(passages)}"
            passages.append(Passage(passage_id, entity.name, text))
            for fact in facts:
                if fact in entity.attrs:
                    fact_passage[(entity.name, fact)] = passage_id
    return passages, fact_passage
