"""BM25 product search as WebShop's Lucene index does it, on `bm25s` (no Java), built once and cached on disk.

- **Analyzer** (Lucene's English analyzer, as Anserini configures it): lower case; word tokens in the spirit of
  Lucene's StandardTokenizer (letters/digits, keeping `'` and `.` between them, so "women's" and "3.5" stay
  whole, "x-large" splits); the English possessive `'s` removed; Lucene's 33 English stop words dropped; Porter
  stemming (PyStemmer).
- **Scoring**: `bm25s.BM25(method="lucene", k1=0.9, b=0.4)`, Lucene's BM25 with Anserini's defaults. The
  document-term score matrix is computed here with vectorised numpy (the same formula as `bm25s.BM25.index`, which
  a test checks) so a 1.18 M-product catalogue indexes in minutes without holding every token as a Python string;
  queries are scored by `bm25s`.
- **Results**: the top 50 documents with a positive score, best first, ties broken by catalogue position (Lucene's
  doc-id order).
- **Cache**: the index is saved with `bm25s`' own format under `cache_dir/bm25-<key>/`, where the key hashes the
  analyzer settings and every indexed text in order; a later load with the same catalogue reads it back without
  rebuilding. The cache folder defaults to `$TRL_RAGEN2_WEBSHOP_CACHE`, else `$XDG_CACHE_HOME/trl_ragen2/webshop`,
  else `~/.cache/trl_ragen2/webshop`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np


SEARCH_RETURN_N = 50
K1, B = 0.9, 0.4
ANALYZER_VERSION = "lucene-english-v1"
CACHE_ENV_VAR = "TRL_RAGEN2_WEBSHOP_CACHE"
# org.apache.lucene.analysis.en.EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
LUCENE_STOP_WORDS = frozenset(
    ("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of",
     "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with")
)  # fmt: skip
_WORD = re.compile(r"[^\W_]+(?:['\u2019.][^\W_]+)*")
_POSSESSIVE = ("'s", "\u2019s")


def default_cache_dir() -> Path:
    """The search index cache: `$TRL_RAGEN2_WEBSHOP_CACHE`, else `${XDG_CACHE_HOME:-~/.cache}/trl_ragen2/webshop`."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR])
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "trl_ragen2" / "webshop"


# ---------------------------------------------------------------------------------------------------------------
# Analyzer


class Analyzer:
    """Text -> index terms: lower case, word tokens, possessive and stop-word removal, Porter stems."""

    def __init__(self) -> None:
        try:
            import Stemmer
        except ImportError:
            raise ImportError("WebShop search needs PyStemmer: pip install PyStemmer") from None
        self._stemmer = Stemmer.Stemmer("porter")

    def __call__(self, text: str) -> list[str]:
        words = [w[:-2] if w.endswith(_POSSESSIVE) else w for w in _WORD.findall(text.lower())]
        return self._stemmer.stemWords([w for w in words if w and w not in LUCENE_STOP_WORDS])


# ---------------------------------------------------------------------------------------------------------------
# Index construction (vectorised Lucene BM25 document-term scores)


def _lucene_scores(doc_ids: np.ndarray, term_ids: np.ndarray, doc_lengths: np.ndarray, num_terms: int):
    """CSC arrays (by term) of Lucene BM25 scores for all (document, term) pairs.

    Args:
        doc_ids, term_ids: one entry per token occurrence, documents in ascending order; shape (T,).
        doc_lengths: tokens per document after analysis; shape (D,).
        num_terms: vocabulary size V.

    Returns:
        `data` (float32, nnz), `indices` (document of each entry, int32), `indptr` (V + 1, int64).
    """
    num_docs = len(doc_lengths)
    # unique (document, term) pairs and their term frequencies; key = doc * V + term keeps document order
    keys = doc_ids.astype(np.int64) * num_terms + term_ids
    pair_keys, tf = np.unique(keys, return_counts=True)  # (nnz,)
    pair_docs, pair_terms = np.divmod(pair_keys, num_terms)
    df = np.bincount(pair_terms, minlength=num_terms)  # (V,)
    idf = np.log(1.0 + (num_docs - df + 0.5) / (df + 0.5))  # Lucene's idf, (V,)
    avg_length = doc_lengths.mean() if num_docs else 0.0
    norm = K1 * ((1.0 - B) + B * doc_lengths[pair_docs] / avg_length)  # (nnz,)
    scores = (idf[pair_terms] * tf / (tf + norm)).astype(np.float32)
    order = np.argsort(pair_terms, kind="stable")  # by term, documents ascending within a term
    indptr = np.zeros(num_terms + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    return scores[order], pair_docs[order].astype(np.int32), indptr


def build_bm25(texts: Iterable[str], analyzer: Analyzer):
    """A `bm25s.BM25` index over `texts` (one per document, in catalogue order)."""
    import bm25s

    vocab: dict[str, int] = {}
    term_ids = array("i")  # every token of every document, concatenated
    lengths = array("q")
    for text in texts:
        terms = analyzer(text)
        term_ids.extend([vocab.setdefault(term, len(vocab)) for term in terms])
        lengths.append(len(terms))
    vocab.setdefault("", len(vocab))  # bm25s' placeholder for empty queries
    doc_lengths = np.frombuffer(lengths, dtype=np.int64) if lengths else np.zeros(0, np.int64)
    doc_ids = np.repeat(np.arange(len(lengths), dtype=np.int32), doc_lengths)  # (T,)
    term_array = np.frombuffer(term_ids, dtype=np.int32) if term_ids else np.zeros(0, np.int32)
    data, indices, indptr = _lucene_scores(doc_ids, term_array, doc_lengths.astype(np.float64), len(vocab))
    retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
    retriever.scores = {"data": data, "indices": indices, "indptr": indptr, "num_docs": len(lengths)}
    retriever.vocab_dict = vocab
    retriever.unique_token_ids_set = set(vocab.values())
    retriever.nonoccurrence_array = None
    return retriever


def index_key(texts: Iterable[str]) -> str:
    """Hash of the analyzer settings and of every indexed text, in order."""
    digest = hashlib.sha256(f"{ANALYZER_VERSION}|k1={K1}|b={B}|".encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:24]


# ---------------------------------------------------------------------------------------------------------------
# Search engine


class SearchEngine:
    """Top-50 BM25 search over a catalogue's index texts; `search(query)` returns catalogue positions.

    Args:
        texts: A callable returning an iterable of the index texts in catalogue order (called once to hash, and
            once more only when the index has to be built).
        cache_dir: Where indexes are saved; `None` uses `default_cache_dir()`; `False` disables the disk cache.
    """

    def __init__(self, texts, cache_dir: str | Path | None | bool = None):
        import bm25s

        self.analyzer = Analyzer()
        self.key = index_key(texts())
        self.loaded_from_cache = False
        self.index_dir: Path | None = None
        if cache_dir is False:
            self._bm25 = build_bm25(texts(), self.analyzer)
        else:
            root = Path(cache_dir) if cache_dir else default_cache_dir()
            self.index_dir = root / f"bm25-{self.key}"
            if (self.index_dir / "params.index.json").exists():
                self._bm25 = bm25s.BM25.load(str(self.index_dir), show_progress=False, verbosity=0)
                self._bm25.nonoccurrence_array = None
                self.loaded_from_cache = True
            else:
                self._bm25 = build_bm25(texts(), self.analyzer)
                self._save(root)
        self.num_docs = int(self._bm25.scores["num_docs"])

    def _save(self, root: Path) -> None:
        """Write the index atomically: into a temporary folder, then renamed into place."""
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".bm25-tmp-", dir=root))
        try:
            self._bm25.save(str(tmp), show_progress=False)
            (tmp / "webshop_index.json").write_text(
                json.dumps({"analyzer": ANALYZER_VERSION, "k1": K1, "b": B, "num_docs": self._bm25.scores["num_docs"]})
            )
            os.replace(tmp, self.index_dir)
        except OSError:
            if not (self.index_dir / "params.index.json").exists():
                raise
            # another process saved the same index first; theirs is identical
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for `query`; shape (num_docs,)."""
        ids = self._bm25.get_tokens_ids(self.analyzer(query))
        if not ids:
            return np.zeros(self.num_docs, dtype=np.float32)
        return self._bm25.get_scores_from_ids(ids)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Catalogue positions of the top `k` documents with a positive score, best first."""
        scores = self.scores(query)
        positive = np.flatnonzero(scores > 0)
        top = scores[positive]
        if len(positive) > k:
            kth = np.partition(top, len(top) - k)[len(top) - k]  # the k-th largest score
            above = np.flatnonzero(top > kth)
            tied = np.flatnonzero(top == kth)[: k - len(above)]  # lowest positions win ties, as in Lucene
            keep = np.concatenate([above, tied])
            positive, top = positive[keep], top[keep]
        order = np.lexsort((positive, -top))
        return positive[order].tolist()
