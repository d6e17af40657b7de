"""SearchQA: answer a multi-hop question by searching a document collection, then submit the answer.

One episode: `reset(seed)` draws a question and shows it. Each turn the agent either searches, `search[query]`,
and sees the best passages, or answers, `finish[answer]`, which ends the episode. Two sets of rules (`rules`):

`"trl_ragen2"` (default): the observation is the question, then the results of the last search (3 passages,
`[Document i] (Title, Score)` then the text, 800 characters per document, 4,000 in all). The verb is
case-insensitive and may be surrounded by other text; anything else is an invalid action (state unchanged, no step
used). An episode ends after `max_steps` (10) valid actions without an answer, with reward 0. `success` is an exact
match.

`"ragen"`: RAGEN's search environment on every input (`ragen_rules.py`): its observation texts, 5 passages in its
client's format, its strict reading of the whole action, free text read as a final answer (extracted, scored, the
episode ends), every action counting toward `max_steps`, and `success` for an exact match or any reward. `info`
carries RAGEN's `action_type` ("search", "finish", "fallback", "invalid") and `action_is_valid` (False for text
that is not `search[...]` or `finish[...]`, even when it is read as an answer).

Under both rules an action over `MAX_ACTION_CHARS` is refused (state unchanged, no step used), a query or answer is
cut to `MAX_ARGUMENT_CHARS`, and an action after the episode's end pays nothing and changes nothing.

Reward (RAGEN's): 1 for an exact match after SQuAD normalisation, else the token F1 when it is at least 0.3,
else 0; `info` carries `em`, `f1` and `success`.

Data. By default a procedural multi-hop world (`world.py`, fixed by `world_seed`): the seed of `reset` draws
a bridge or comparison question over it. With `hotpotqa_path`, questions come from a HotpotQA file and the
corpus is each question's own paragraphs (`corpus="question"`) or all loaded paragraphs (`corpus="global"`).
Retrieval is BM25 in-process, or any server speaking RAGEN's API via `retriever_url` (see `server.py`). A search
the server cannot answer (after the client's retries) is a valid step whose results say the search engine is
unavailable, with the cause in `info["env_error"]`; it never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..base import StepResult, TextEnv, finished_step, invalid_step, not_started_step
from ..tool_adapter import ToolEnvAdapter
from . import ragen_rules
from .answers import score_answer
from .hotpotqa import HotpotQuestion, global_passages, load_hotpotqa, question_passages
from .questions import QUESTION_KINDS, sample_question
from .retrieval import MAX_DOC_CHARS, MAX_TOTAL_CHARS, BM25Retriever, HTTPRetriever, RetrievalError, format_results
from .world import build_world


# ---------------------------------------------------------------------------------------------------------------
# Prompts

INSTRUCTIONS = (
    "You answer questions by searching a collection of encyclopedia passages. Actions: search[query] shows "
    "the passages that best match the query; finish[answer] submits your final answer and ends the episode. "
    "Answers are short: a name, a place, a year, a number, or yes/no. Many questions need several searches: "
    "look up the entity the question names, then the entity its page leads you to."
)

SEARCH_UNAVAILABLE = "The search engine is unavailable right now; no documents were retrieved. Try again."
MAX_ERROR_CHARS = 500  # `info["env_error"]` is cut here

TOOL_INSTRUCTIONS = (
    "Answer the question above. Use the search tool to look up passages in an encyclopedia (search one name "
    "or phrase at a time; many questions need two searches, the second for an entity found by the first), "
    "then call the finish tool once with a short final answer: a name, a place, a year, a number, or yes/no."
)


# ---------------------------------------------------------------------------------------------------------------
# Game logic (pure functions)

RULES = ("trl_ragen2", "ragen")
TOP_K = 3  # passages per search under the library's rules (RAGEN's: ragen_rules.TOP_K)

# Longer actions are refused before parsing, and longer queries and answers are cut, so no text the model writes
# makes a step slow or an observation long. A 400-token reply (RAGEN's turn limit) stays far below both.
MAX_ACTION_CHARS = 20_000
MAX_ARGUMENT_CHARS = 2_000

_VERB = re.compile(r"\b(search|finish)\s*\[", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAction:
    """A `search[...]` or `finish[...]` action: the lower-case verb and its argument."""

    verb: str  # "search" or "finish"
    argument: str


def parse_action(text: object) -> ParsedAction | str:
    """The first `search[...]` or `finish[...]` in `text`, or the reason it has none.

    Brackets may nest inside the argument (`search[Foo [band]]`); surrounding quotes are dropped. Text over
    `MAX_ACTION_CHARS` is refused; the argument is cut to `MAX_ARGUMENT_CHARS`.
    """
    if not isinstance(text, str):
        return f"the action must be text, got {type(text).__name__}"
    if len(text) > MAX_ACTION_CHARS:
        return f"the action is {len(text)} characters long (at most {MAX_ACTION_CHARS})"
    match = _VERB.search(text)
    if match is None:
        return "no search[query] or finish[answer] action found"
    depth, start = 1, match.end()
    for position in range(start, len(text)):
        char = text[position]
        depth += char == "["
        depth -= char == "]"
        if depth == 0:
            argument = text[start:position].strip().strip("\"'`").strip()[:MAX_ARGUMENT_CHARS]
            if not argument:
                return f"{match.group(1).lower()}[] is empty"
            return ParsedAction(match.group(1).lower(), argument)
    return f"{match.group(1).lower()}[ has no closing ]"


@dataclass(frozen=True)
class Episode:
    """One question: its gold answer, supporting evidence, kind, and the retriever its searches use."""

    question: str
    answer: str
    supporting: tuple[str, ...]  # supporting passage ids (procedural) or titles (HotpotQA)
    kind: str
    retriever: Any  # anything with search(query, top_k) -> list[SearchHit]
    hops: tuple[str, ...] = ()  # procedural questions: the entity names to look up, in order


@lru_cache(maxsize=4)
def _world_retriever(world_seed: int, world_scale: float) -> BM25Retriever:
    return BM25Retriever(build_world(world_seed, world_scale).passages)


@lru_cache(maxsize=4)
def _hotpotqa_questions(path: str, mtime: float, limit: int | None) -> tuple[HotpotQuestion, ...]:
    return tuple(load_hotpotqa(path, limit))


@lru_cache(maxsize=4)
def _hotpotqa_global_retriever(path: str, mtime: float, limit: int | None) -> BM25Retriever:
    return BM25Retriever(global_passages(list(_hotpotqa_questions(path, mtime, limit))))


@lru_cache(maxsize=1024)
def _hotpotqa_question_retriever(question: HotpotQuestion) -> BM25Retriever:
    return BM25Retriever(question_passages(question))


# ---------------------------------------------------------------------------------------------------------------
# Environment


class SearchQAEnv(TextEnv):
    """Multi-hop question answering with a search engine (see the module docstring).

    Args:
        rules: `"trl_ragen2"` (the library's) or `"ragen"` (RAGEN's search environment); see the module docstring.
        hotpotqa_path: A HotpotQA file (`.json` list or `.jsonl`, optionally `.gz`); `None` uses the
            procedural world.
        corpus: For HotpotQA, `"question"` (each question's paragraphs) or `"global"` (all paragraphs).
        hotpotqa_limit: Read only the first this many HotpotQA records.
        world_seed: Seed of the procedural world (the corpus); episode seeds draw questions over it.
        world_scale: Size multiplier of the procedural world (1.0: about 2,400 passages).
        question_kinds: Procedural question kinds to draw, a subset of `("bridge", "comparison")`.
        top_k: Passages shown per search; `None`: 3 (`"trl_ragen2"`) or RAGEN's 5 (`"ragen"`).
        max_steps: Actions per episode (valid ones under `"trl_ragen2"`, every one under `"ragen"`).
        retriever_url: Search through a server speaking RAGEN's API instead of the local index.
        retriever_timeout: Seconds the server may take to answer one try of a search.
        retriever_retries: Further tries of a search that failed to connect, timed out or got 429/5xx.
        max_doc_chars: Characters shown per passage.
        max_total_chars: Characters shown per search.
    """

    name = "searchqa"

    def __init__(
        self,
        *,
        rules: str = "trl_ragen2",
        hotpotqa_path: str | None = None,
        corpus: str = "question",
        hotpotqa_limit: int | None = None,
        world_seed: int = 0,
        world_scale: float = 1.0,
        question_kinds: tuple[str, ...] | list[str] = QUESTION_KINDS,
        top_k: int | None = None,
        max_steps: int = 10,
        retriever_url: str | None = None,
        retriever_timeout: float = 10.0,
        retriever_retries: int = 3,
        max_doc_chars: int = MAX_DOC_CHARS,
        max_total_chars: int = MAX_TOTAL_CHARS,
    ):
        super().__init__()
        if rules not in RULES:
            raise ValueError(
                f"rules must be one of {RULES}, got {rules!r}; 'ragen' reproduces RAGEN's search environment (the "
                "paper configs), 'trl_ragen2' is the library's (the default)"
            )
        if top_k is None:
            top_k = ragen_rules.TOP_K if rules == "ragen" else TOP_K
        if corpus not in ("question", "global"):
            raise ValueError(f"corpus must be 'question' or 'global', got {corpus!r}")
        for field_name, value in (("top_k", top_k), ("max_steps", max_steps), ("max_doc_chars", max_doc_chars)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{field_name} must be a positive integer, got {value!r}")
        if max_total_chars < max_doc_chars:
            raise ValueError(f"max_total_chars ({max_total_chars}) must be >= max_doc_chars ({max_doc_chars})")
        self.question_kinds = tuple(question_kinds)
        if not self.question_kinds or set(self.question_kinds) - set(QUESTION_KINDS):
            raise ValueError(f"question_kinds must be a non-empty subset of {QUESTION_KINDS}, got {question_kinds!r}")
        self.rules, self.corpus, self.top_k, self.max_steps = rules, corpus, top_k, max_steps
        self.max_doc_chars, self.max_total_chars = max_doc_chars, max_total_chars
        self.world_seed, self.world_scale = world_seed, float(world_scale)
        self.remote = HTTPRetriever(retriever_url, retriever_timeout, retriever_retries) if retriever_url else None
        self._hotpotqa_key = None
        if hotpotqa_path is not None:
            path = Path(hotpotqa_path).expanduser().resolve()
            if not path.is_file():
                raise FileNotFoundError(f"hotpotqa_path={hotpotqa_path!r} does not exist")
            self._hotpotqa_key = (str(path), path.stat().st_mtime, hotpotqa_limit)
            _hotpotqa_questions(*self._hotpotqa_key)  # load (and validate) now, not at the first reset
        elif self.remote is None:
            _world_retriever(self.world_seed, self.world_scale)
        self.episode: Episode | None = None
        self._seed: int | None = None
        self.steps = 0
        self.done = False
        self.succeeded = False
        self.last_results = ""
        self.observation = ""  # the last observation under RAGEN's rules

    @property
    def instructions(self) -> str:
        return INSTRUCTIONS

    def _draw_episode(self) -> Episode:
        if self._hotpotqa_key is not None:
            questions = _hotpotqa_questions(*self._hotpotqa_key)
            unseeded_first = self.rules == "ragen" and self._seed is None  # RAGEN plays its first question
            q = questions[0] if unseeded_first else self.pick_for_seed(questions, self._seed)
            if self.remote is not None:
                retriever = self.remote
            elif self.corpus == "global":
                retriever = _hotpotqa_global_retriever(*self._hotpotqa_key)
            else:
                retriever = _hotpotqa_question_retriever(q)
            return Episode(q.question, q.answer, q.supporting_titles, q.qtype or "hotpotqa", retriever)
        world = build_world(self.world_seed, self.world_scale)
        q = sample_question(world, self.rng, self.question_kinds)
        retriever = self.remote or _world_retriever(self.world_seed, self.world_scale)
        return Episode(q.question, q.answer, q.supporting, q.kind, retriever, q.hops)

    def reset(self, seed: int | None = None) -> str:
        self.seed_rng(seed)
        self._seed = None if seed is None else int(seed)
        self.episode = self._draw_episode()
        self.steps, self.done, self.last_results, self.succeeded = 0, False, "", False
        self.observation = ragen_rules.first_observation(self.episode.question)
        return self.render()

    def render(self) -> str:
        if self.episode is None:
            return "Call reset() to start an episode."
        if self.rules == "ragen":
            return self.observation
        text = f"Question: {self.episode.question}"
        return f"{text}\n\n{self.last_results}" if self.last_results else text

    def step(self, action: str) -> StepResult:
        if self.episode is None:
            return not_started_step()
        if self.done:
            return finished_step(self.render(), self.succeeded)
        if self.rules == "ragen":
            return self._ragen_step(action)
        parsed = parse_action(action)
        if isinstance(parsed, str):
            return invalid_step(self.render(), parsed)
        self.steps += 1
        info: dict[str, Any] = {"action_is_valid": True, "success": False, "action": parsed.verb, "steps": self.steps}
        if parsed.verb == "finish":
            score = score_answer(parsed.argument, self.episode.answer)
            self.done = True
            self.last_results = f"Answer submitted: {parsed.argument}"
            self.succeeded = score.em == 1.0
            info.update(em=score.em, f1=score.f1, success=self.succeeded, answer=parsed.argument)
            return self.render(), score.reward, True, info
        hits = self._search(parsed.argument, self.top_k, info)
        results = (
            SEARCH_UNAVAILABLE if hits is None else format_results(hits, self.max_doc_chars, self.max_total_chars)
        )
        info["num_results"] = len(hits or [])
        self.last_results = f'Search results for "{parsed.argument}":\n{results}'
        if self.steps >= self.max_steps:
            self.done = True
            info.update(em=0.0, f1=0.0, truncated=True)
        return self.render(), 0.0, self.done, info

    def _ragen_step(self, action: object) -> StepResult:
        """One step under RAGEN's rules (`ragen_rules`): every action but a refused one uses a step."""
        if isinstance(action, str) and len(action) > MAX_ACTION_CHARS:
            return invalid_step(
                self.render(), f"the action is {len(action)} characters long (at most {MAX_ACTION_CHARS})"
            )
        self.steps += 1
        kind, argument = ragen_rules.read_action(action if isinstance(action, str) else "")
        info: dict[str, Any] = {
            "action_is_valid": kind in (ragen_rules.SEARCH, ragen_rules.FINISH),
            "action_is_effective": kind != ragen_rules.INVALID,
            "success": False,
            "action_type": kind,
            "steps": self.steps,
        }
        if kind == ragen_rules.INVALID:
            self.done = self.steps >= self.max_steps
            self.observation = ragen_rules.INVALID_OBSERVATION
            info["invalid_reason"] = "the action is empty"
            if self.done:
                info.update(em=0.0, f1=0.0, truncated=True)
            return self.observation, 0.0, self.done, info
        if kind == ragen_rules.SEARCH:
            query = argument[:MAX_ARGUMENT_CHARS]
            hits = self._search(query, min(self.top_k, ragen_rules.MAX_REQUESTED_RESULTS), info)
            if hits is None:
                results = SEARCH_UNAVAILABLE
            else:
                results = ragen_rules.format_passages(hits, self.top_k, self.max_doc_chars, self.max_total_chars)
            self.done = self.steps >= self.max_steps
            self.last_results = f"Search results for '{query}':\n{results}"
            self.observation = ragen_rules.search_observation(query, results, budget_spent=self.done)
            info.update(query=query, num_results=len(hits or []))
            if self.done:
                info.update(em=0.0, f1=0.0, truncated=True)
            return self.observation, 0.0, self.done, info
        if kind == ragen_rules.FALLBACK:
            info["invalid_reason"] = "neither search[...] nor finish[...]: read as the final answer"
            argument = ragen_rules.extract_answer(argument)
        answer = argument[:MAX_ARGUMENT_CHARS]
        score = score_answer(answer, self.episode.answer)
        self.done, self.succeeded = True, score.em == 1.0 or score.reward > 0
        self.observation = ragen_rules.answer_observation(answer, score.reward, extracted=kind == ragen_rules.FALLBACK)
        info.update(em=score.em, f1=score.f1, success=self.succeeded, answer=answer)
        return self.observation, score.reward, True, info

    def _search(self, query: str, top_k: int, info: dict[str, Any]) -> list | None:
        """The hits for `query`, or None (the cause in `info["env_error"]`) when the search engine failed: then the
        step is used and shows no results, as the failure is not the agent's."""
        try:
            return self.episode.retriever.search(query, top_k)
        except RetrievalError as error:
            info["env_error"] = str(error)[:MAX_ERROR_CHARS]
            return None

    def search_results(self, query: str) -> list:
        """The hits a `search[query]` action would show now (for inspection; uses no step)."""
        if self.episode is None:
            raise RuntimeError("call reset() before search_results()")
        return self.episode.retriever.search(query, self.top_k)


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter (environment_factory)


class SearchQAToolEnv(ToolEnvAdapter):
    """SearchQA for `trl.GRPOTrainer(environment_factory=SearchQAToolEnv)`: tools `search` and `finish`.

    Dataset rows carry `seed` (the question) and optionally `env_config`, JSON text or a dict of
    [`SearchQAEnv`] keywords; `reset` returns the question and the tool instructions, which TRL appends to the
    prompt. The reward (`get_reward`) is the answer's reward (EM 1, else F1 >= 0.3, else 0), 0 without an answer.
    """

    env_class = SearchQAEnv
    tool_instructions = TOOL_INSTRUCTIONS
    reset_layout = "\n\n{observation}\n{instructions}"
    episode_over_reply = "The episode is over: an answer was already submitted or the search budget is spent."
    invalid_reply = "Invalid call: {reason}."

    def search(self, query: str) -> str:
        """Search the encyclopedia for passages matching a query.

        Args:
            query: What to look up, such as the name of a person, place, company or invention.

        Returns:
            The best matching passages, each headed by its title and relevance score.
        """
        return self._act(f"search[{query}]")

    def finish(self, answer: str) -> str:
        """Submit the final answer to the question; this ends the episode.

        Args:
            answer: The short answer: a name, a place, a year, a number, or yes/no.

        Returns:
            A confirmation that the answer was recorded.
        """
        return self._act(f"finish[{answer}]")

    def _reply(self, observation: str, reward: float, done: bool, info: dict[str, Any]) -> str:
        if self.env.rules == "ragen":  # RAGEN's observation: the results, or the answer and its reward
            return observation
        if info["action"] == "finish":
            return f"Answer recorded: {info['answer']}."
        return self.env.last_results
