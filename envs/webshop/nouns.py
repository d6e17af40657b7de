"""Title nouns for the reward's type factor: the NOUN/PROPN tokens of a product name, by ASIN.

WebShop tags both product names with spaCy at reward time. Both names come from the catalogue, so the tags are
looked up instead: from a precomputed file (`name_type_tokens*.json`, ASIN -> lower-cased noun tokens in order,
duplicates kept), from the procedural generator (which knows its nouns), or, for catalogues without such a file,
from spaCy on first use of each name (`spacy_noun_tagger`, needs `pip install spacy` and an English model).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


NounTagger = Callable[[str], list[str]]
SPACY_NOUN_TAGS = ("NOUN", "PROPN")


class TitleNouns:
    """ASIN -> title noun list, from a precomputed mapping with an optional tagger for names it lacks."""

    def __init__(self, precomputed: dict[str, list[str]] | None = None, tagger: NounTagger | None = None):
        self._nouns: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in (precomputed or {}).items()}
        self._tagger = tagger

    def __len__(self) -> int:
        return len(self._nouns)

    def covers(self, asins: Any) -> bool:
        """Whether every ASIN in `asins` has precomputed nouns."""
        return all(asin in self._nouns for asin in asins)

    def get(self, asin: str, name: str) -> tuple[str, ...]:
        """The noun tokens of product `asin` whose name is `name` (tagged and remembered if not precomputed)."""
        nouns = self._nouns.get(asin)
        if nouns is None:
            if self._tagger is None:
                raise KeyError(
                    f"no title nouns for product {asin!r}; provide a name_type_tokens*.json file next to the catalogue "
                    "or install spaCy with an English model (pip install spacy && python -m spacy download "
                    "en_core_web_sm) so names are tagged on demand"
                )
            nouns = tuple(self._tagger(name))
            self._nouns[asin] = nouns
        return nouns


def spacy_noun_tagger(model: str = "en_core_web_sm") -> NounTagger:
    """A tagger returning the lower-cased NOUN/PROPN tokens of a name with the spaCy pipeline `model`."""
    try:
        import spacy
    except ImportError:
        raise ImportError(
            "tagging product names needs spaCy: pip install spacy && python -m spacy download en_core_web_sm "
            "(or provide precomputed nouns as name_type_tokens*.json in the data folder)"
        ) from None
    try:
        nlp = spacy.load(model, disable=["parser", "ner", "lemmatizer"])
    except OSError:
        raise ImportError(
            f"spaCy model {model!r} is not installed: python -m spacy download {model} "
            "(or provide precomputed nouns as name_type_tokens*.json in the data folder)"
        ) from None

    def tag(name: str) -> list[str]:
        return [token.text.lower() for token in nlp(name) if token.pos_ in SPACY_NOUN_TAGS]

    return tag
