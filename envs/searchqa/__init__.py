"""SearchQA: multi-hop question answering with a real BM25 search engine (procedural world or HotpotQA)."""

from .answers import exact_match, normalize_answer, score_answer, token_f1
from .env import SearchQAEnv, SearchQAToolEnv, parse_action
from .hotpotqa import HotpotQuestion, load_hotpotqa
from .questions import WorldQuestion, sample_question
from .retrieval import BM25Retriever, HTTPRetriever, Passage, RetrievalError, SearchHit, format_results
from .world import World, build_world


def __getattr__(name):
    # The HTTP server module is imported on demand, so `python -m trl_ragen2_envs.searchqa.server` runs it once.
    if name == "RetrievalServer":
        from .server import RetrievalServer

        return RetrievalServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BM25Retriever",
    "HTTPRetriever",
    "HotpotQuestion",
    "Passage",
    "RetrievalError",
    "RetrievalServer",
    "SearchHit",
    "SearchQAEnv",
    "SearchQAToolEnv",
    "World",
    "WorldQuestion",
    "build_world",
    "exact_match",
    "format_results",
    "load_hotpotqa",
    "normalize_answer",
    "parse_action",
    "sample_question",
    "score_answer",
    "token_f1",
]
