"""Loader for user-supplied HotpotQA files (distractor or fullwiki format) for the SearchQA environment.

A file is a JSON list (`.json`), or one record per line (`.jsonl`), optionally gzipped (`.gz`). Each record
needs `question` (str), `answer` (str) and `context`, a list of `[title, [sentence, ...]]` pairs (the 10
paragraphs of the distractor split); `_id`, `type`, `level` and `supporting_facts` (`[[title, sentence
index], ...]`) are kept when present. HotpotQA is CC BY-SA 4.0 and is not bundled: point the loader at your copy.

Two corpora are possible: each question's own paragraphs (`question_passages`, the distractor setting), or
the union of all loaded paragraphs, deduplicated by title and text (`global_passages`).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from .retrieval import Passage


@dataclass(frozen=True)
class HotpotQuestion:
    """One HotpotQA record: id, question, answer, context paragraphs, supporting titles, type and level."""

    qid: str
    question: str
    answer: str
    paragraphs: tuple[tuple[str, str], ...]  # (title, text)
    supporting_titles: tuple[str, ...] = ()
    qtype: str = ""
    level: str = ""


_RECORD_SHAPE = "a HotpotQA record needs question (str), answer (str) and context ([[title, [sentences...]], ...])"


def _read_records(path: Path) -> list:
    opener = gzip.open if path.suffix == ".gz" else open
    stem_suffix = Path(path.stem).suffix if path.suffix == ".gz" else path.suffix
    with opener(path, "rt", encoding="utf-8") as f:
        if stem_suffix == ".jsonl":
            return [json.loads(line) for line in f if line.strip()]
        data = json.load(f)
    if not isinstance(data, list):
        raise TypeError(f"{path}: expected a JSON list of HotpotQA records, got {type(data).__name__}")
    return data


def _parse_record(record: object, index: int, path: Path) -> HotpotQuestion:
    where = f"{path}: record {index}"
    if not isinstance(record, dict):
        raise TypeError(f"{where} is a {type(record).__name__}, expected an object with question, answer, context")
    for key, kind in (("question", str), ("answer", str), ("context", list)):
        if key not in record:
            raise ValueError(f"{where} has no {key!r}; {_RECORD_SHAPE}")
        if not isinstance(record[key], kind):
            raise TypeError(f"{where} has {key}={repr(record[key])[:80]}; {_RECORD_SHAPE}")
    paragraphs = []
    for j, item in enumerate(record["context"]):
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], list)):
            raise TypeError(f"{where}: context[{j}] must be [title, [sentences...]], got {str(item)[:80]!r}")
        title, sentences = item
        text = " ".join(str(s).strip() for s in sentences if str(s).strip())
        paragraphs.append((str(title), text))
    supporting = record.get("supporting_facts") or []
    titles = tuple(dict.fromkeys(str(fact[0]) for fact in supporting if isinstance(fact, (list, tuple)) and fact))
    return HotpotQuestion(
        qid=str(record.get("_id", record.get("id", f"q{index}"))),
        question=record["question"],
        answer=record["answer"],
        paragraphs=tuple(paragraphs),
        supporting_titles=titles,
        qtype=str(record.get("type", "")),
        level=str(record.get("level", "")),
    )


def load_hotpotqa(path: str | Path, limit: int | None = None) -> list[HotpotQuestion]:
    """Read HotpotQA records from `path` (see the module docstring for the accepted formats)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"hotpotqa_path={str(path)!r} does not exist; pass a HotpotQA .json/.jsonl(.gz) file")
    records = _read_records(path)
    if limit is not None:
        records = records[:limit]
    questions = [_parse_record(record, i, path) for i, record in enumerate(records)]
    if not questions:
        raise ValueError(f"{path} holds no HotpotQA records")
    return questions


def question_passages(question: HotpotQuestion) -> list[Passage]:
    """The question's own paragraphs (the distractor setting): ids `{qid}-{j}`."""
    return [Passage(f"{question.qid}-{j}", title, text) for j, (title, text) in enumerate(question.paragraphs)]


def global_passages(questions: list[HotpotQuestion]) -> list[Passage]:
    """All paragraphs of all questions, each distinct (title, text) once: ids `p{n}`."""
    unique = dict.fromkeys(pair for q in questions for pair in q.paragraphs)
    return [Passage(f"p{n}", title, text) for n, (title, text) in enumerate(unique)]
