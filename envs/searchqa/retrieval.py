"""Retrieval for SearchQA: a BM25 index over passages, an HTTP client for a remote index, and result formatting.

Both retrievers answer `search(query, top_k) -> list[SearchHit]`, best first:

- [`BM25Retriever`] indexes passages in-process with `bm25s` (Lucene BM25, k1=0.9, b=0.4, English stop words,
  Porter stemming via PyStemmer); title and text are indexed together.
- [`HTTPRetriever`] speaks RAGEN's retrieval API: `POST {url}/retrieve {"query": str, "top_k": int}` answered
  by `{"results": [{"id": str, "content": str, "score": float}, ...]}` (an optional `"title"` is used when
  present). It retries connection failures and 429/5xx answers with exponential backoff, caps the answer at
  16 MiB and its JSON nesting, and raises [`RetrievalError`] when a search cannot be answered.
  [`RetrievalServer`](server.py) serves a `BM25Retriever` with that API.

[`format_results`] writes hits the way the agent sees them under the library's rules: `[Document i] (Title, Score)`
then the content, each document capped at 800 characters and the whole observation at 4,000 (RAGEN's rules:
`ragen_rules.format_passages`).
"""

from __future__ import annotations

import http.client
import json
import math
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from .http_limits import MAX_JSON_DEPTH, decode_json


MAX_DOC_CHARS = 800
MAX_TOTAL_CHARS = 4000

BM25_METHOD = "lucene"
BM25_K1 = 0.9
BM25_B = 0.4


@dataclass(frozen=True)
class Passage:
    """One retrievable unit: a paragraph of a page, identified by `passage_id`."""

    passage_id: str
    title: str
    text: str


@dataclass(frozen=True)
class SearchHit:
    """One search result: the passage's id, title and text, and its retrieval score (higher is better)."""

    passage_id: str
    title: str
    content: str
    score: float


# ---------------------------------------------------------------------------------------------------------------
# In-process BM25


class BM25Retriever:
    """Lucene BM25 over `passages` (title and text indexed together).

    Args:
        passages: The corpus; `passage_id`s must be unique.
    """

    def __init__(self, passages: Sequence[Passage]):
        import bm25s
        import Stemmer

        if not passages:
            raise ValueError("passages is empty; a BM25 index needs at least one passage")
        ids = [p.passage_id for p in passages]
        if len(set(ids)) != len(ids):
            duplicate = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"passage_id {duplicate!r} appears more than once; passage ids must be unique")
        self.passages = list(passages)
        self._by_id = {p.passage_id: p for p in self.passages}
        stemmer = Stemmer.Stemmer("english")
        self._tokenizer = bm25s.tokenization.Tokenizer(stemmer=stemmer.stemWord, stopwords="en")
        corpus_tokens = self._tokenizer.tokenize(
            [f"{p.title}\n{p.text}" for p in self.passages], update_vocab=True, return_as="tuple", show_progress=False
        )
        self._index = bm25s.BM25(method=BM25_METHOD, k1=BM25_K1, b=BM25_B)
        self._index.index(corpus_tokens, show_progress=False)
        # The query tokenizer mutates no state with update_vocab=False, but bm25s keeps scratch buffers: serialise.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.passages)

    def passage(self, passage_id: str) -> Passage:
        """The passage with id `passage_id` (`KeyError` if there is none)."""
        return self._by_id[passage_id]

    def search(self, query: str, top_k: int = 3) -> list[SearchHit]:
        """The `top_k` best passages for `query` with a positive score (fewer when few passages match)."""
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        k = min(top_k, len(self.passages))
        with self._lock:
            query_ids = self._tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)
            docs, scores = self._index.retrieve(query_ids, k=k, show_progress=False, n_threads=0)
        hits = []
        for doc_index, score in zip(docs[0].tolist(), scores[0].tolist(), strict=True):
            if score <= 0.0:  # unknown words and stop words score 0: not a match
                continue
            passage = self.passages[doc_index]
            hits.append(SearchHit(passage.passage_id, passage.title, passage.text, float(score)))
        return hits


# ---------------------------------------------------------------------------------------------------------------
# Remote index (RAGEN's HTTP API)


class RetrievalError(ConnectionError):
    """The retrieval server could not answer a search: unreachable, an HTTP error, or an answer that is not results."""


MAX_RESPONSE_BYTES = 16 << 20  # a longer answer is an error, never read into memory
RETRY_STATUSES = (429, 502, 503, 504)  # worth asking again; other HTTP errors are final


class HTTPRetriever:
    """Client of a retrieval server speaking RAGEN's API (ours: `python -m trl_ragen2_envs.searchqa.server`).

    A search that fails to connect, is reset, times out or gets 429/502/503/504 is tried again up to `retries`
    times, after `backoff_s`, then twice that, and so on (capped at 2 s, with jitter so that many clients do not
    retry in step). Every failure ends as a [`RetrievalError`] naming the endpoint and the cause.

    Args:
        url: Base URL (`http://127.0.0.1:8000`) or the full endpoint (`.../retrieve`).
        timeout: Seconds to wait for one answer.
        retries: Further tries after a failed one (0: a single try).
        backoff_s: Wait before the first retry, in seconds.
    """

    def __init__(self, url: str, timeout: float = 10.0, retries: int = 3, backoff_s: float = 0.1):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever_url must start with http:// or https://, got {url!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"retriever timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retriever retries must be an integer >= 0, got {retries!r}")
        if isinstance(backoff_s, bool) or not isinstance(backoff_s, (int, float)) or not 0 <= backoff_s < math.inf:
            raise ValueError(f"retriever backoff_s must be a number of seconds >= 0, got {backoff_s!r}")
        self.endpoint = url if url.rstrip("/").endswith("/retrieve") else url.rstrip("/") + "/retrieve"
        self.timeout, self.retries, self.backoff_s = float(timeout), retries, float(backoff_s)
        self._jitter = random.Random()

    def search(self, query: str, top_k: int = 3) -> list[SearchHit]:
        """The server's hits for `query`, best first; [`RetrievalError`] when every try failed."""
        body = json.dumps({"query": query, "top_k": int(top_k)}).encode()  # ASCII: lone surrogates are escaped
        for attempt in range(self.retries + 1):
            try:
                return parse_results_payload(self._post(body), self.endpoint)[: int(top_k)]
            except _Retryable as error:
                if attempt == self.retries:
                    raise RetrievalError(f"{error} (tried {attempt + 1} times)") from error.__cause__
            except TypeError as error:  # an answer without results
                raise RetrievalError(str(error)) from error
            time.sleep(min(2.0, self.backoff_s * 2**attempt) * (0.5 + self._jitter.random()))
        raise AssertionError("unreachable")

    def _post(self, body: bytes) -> object:
        request = urllib.request.Request(
            self.endpoint, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as error:
            detail = error.read(2000).decode(errors="replace")[:200]
            message = f"retrieval server {self.endpoint} answered HTTP {error.code}: {detail}"
            if error.code in RETRY_STATUSES:
                raise _Retryable(message) from error
            raise RetrievalError(message) from error
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError) as error:
            raise _Retryable(
                f"cannot reach the retrieval server at {self.endpoint} ({error}); start one with "
                "`python -m trl_ragen2_envs.searchqa.server` or fix retriever_url"
            ) from error
        if len(raw) > MAX_RESPONSE_BYTES:
            raise RetrievalError(f"retrieval server {self.endpoint} answered more than {MAX_RESPONSE_BYTES} bytes")
        payload, error = decode_json(raw, MAX_JSON_DEPTH)
        if error is not None:
            raise RetrievalError(f"retrieval server {self.endpoint} answered with a bad body: {error}")
        return payload


class _Retryable(Exception):
    """A failure worth another try (its message is the final error's)."""


def parse_results_payload(payload: object, source: str = "server") -> list[SearchHit]:
    """Read `{"results": [{"id"?, "content", "score"?, "title"?}, ...]}` into hits, checking the fields.

    A result without an id is `doc_<rank>`, without a score 0.0, as in RAGEN's client.

    Text fields are made valid Unicode (a lone surrogate, which JSON escapes can carry, becomes `?`), so what the
    agent sees can always be tokenised; a malformed answer raises `TypeError`.
    """
    results = payload.get("results") if isinstance(payload, dict) else None
    if not isinstance(results, list):
        raise TypeError(f"{source} answered without a 'results' list: {_clean(str(payload)[:200])}")
    hits = []
    for i, item in enumerate(results):
        if not isinstance(item, dict) or "content" not in item:
            raise TypeError(f"{source} result {i} has no 'content' field: {_clean(str(item)[:200])}")
        score = item.get("score", 0.0)
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise TypeError(f"{source} result {i} has a score that is not a finite number: {_clean(str(score)[:40])}")
        hits.append(
            SearchHit(
                _clean(str(item.get("id", f"doc_{i + 1}"))),  # RAGEN's client numbers results without an id so
                _clean(str(item.get("title", ""))),
                _clean(str(item["content"])),
                float(score),
            )
        )
    return hits


def _clean(text: str) -> str:
    """`text` with every lone surrogate replaced by `?` (valid UTF-8 afterwards)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def hits_to_payload(hits: Sequence[SearchHit]) -> dict:
    """The inverse of [`parse_results_payload`] (what the server sends)."""
    return {"results": [{"id": h.passage_id, "title": h.title, "content": h.content, "score": h.score} for h in hits]}


# ---------------------------------------------------------------------------------------------------------------
# What the agent sees


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def format_results(
    hits: Sequence[SearchHit], max_doc_chars: int = MAX_DOC_CHARS, max_total_chars: int = MAX_TOTAL_CHARS
) -> str:
    """`[Document i] (Title, Score)\\ncontent` blocks, best first.

    Each document's content is cut to `max_doc_chars`; the whole text to `max_total_chars` (the block that
    crosses the limit is cut, later ones dropped). Hits without a title show their id.
    """
    if not hits:
        return "No documents matched the query."
    blocks, used = [], 0
    for i, hit in enumerate(hits, start=1):
        label = hit.title or hit.passage_id
        block = f"[Document {i}] ({label}, {hit.score:.3f})\n{_truncate(hit.content, max_doc_chars)}"
        separator = 2 if blocks else 0  # the blank line between blocks
        room = max_total_chars - used - separator
        if room <= 0:
            break
        block = _truncate(block, room)
        blocks.append(block)
        used += separator + len(block)
    return "\n\n".join(blocks)
