"""Answer scoring for SearchQA: SQuAD-style normalisation, exact match, token F1 and the episode reward.

The reward follows RAGEN's SearchQA: 1 for an exact match after normalisation, otherwise the token F1 when it
is at least 0.3, otherwise 0. Normalisation lower-cases, drops punctuation and the articles "a", "an", "the",
and collapses whitespace, so "The Ulm River." matches "ulm river".
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass


F1_REWARD_THRESHOLD = 0.3

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, strip punctuation and articles, and collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> bool:
    """Whether the two answers are equal after `normalize_answer`."""
    return normalize_answer(prediction) == normalize_answer(gold)


def token_f1(prediction: str, gold: str) -> float:
    """Harmonic mean of token precision and recall between the normalised answers.

    Yes/no/noanswer answers only score when they match exactly (a partial overlap with "yes" is meaningless).
    """
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    special = {"yes", "no", "noanswer"}
    if (" ".join(pred_tokens) in special or " ".join(gold_tokens) in special) and pred_tokens != gold_tokens:
        return 0.0
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class AnswerScore:
    """Exact match and token F1 (each in [0, 1]) of an answer, and the episode reward they give."""

    em: float
    f1: float
    reward: float


def score_answer(prediction: str, golds: str | list[str]) -> AnswerScore:
    """Score a prediction against one gold answer or several aliases (the best alias counts)."""
    gold_list = [golds] if isinstance(golds, str) else list(golds)
    em = max(float(exact_match(prediction, gold)) for gold in gold_list)
    f1 = max(token_f1(prediction, gold) for gold in gold_list)
    if em == 1.0:
        return AnswerScore(em=1.0, f1=1.0, reward=1.0)
    reward = f1 if f1 >= F1_REWARD_THRESHOLD else 0.0
    return AnswerScore(em=em, f1=f1, reward=reward)
