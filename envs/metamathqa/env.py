"""MetaMathQA: answer a math word problem; retries pay less.

One episode is one problem. The observation is the question. A correct answer at attempt index `a` (0-based) earns
`1 / 2**a` and ends the episode; a wrong one earns 0, returns feedback, and uses up an attempt; the episode ends
when `max_attempts` are spent. An empty answer is an invalid action (state unchanged, no attempt used): RAGEN's
rollout never passes an empty action to the environment.

`max_attempts` defaults to 1: RAGEN-2's code runs MetaMathQA with one action per episode, which produced the
paper's numbers, while the paper's Table 3 describes it as multi-turn; pass `max_attempts=3` (and the same
`max_actions` to the prompt builders) for the retry variant.

Checking (`reward_rule`):

- `"ragen"` (default): RAGEN's exact match. The whole answer, lower-cased with every whitespace character removed,
  must equal the reference treated the same way; `12.`, `5.0` for `5` and `1/2` for `0.5` are wrong. For a
  MetaMathQA record the reference is RAGEN's: everything after the first "The answer is: " of the response,
  stripped (a record without that text can never be answered correctly).
- `"lenient"`: the library's own normalised match. The answer is what follows the last "The answer is" (else the
  whole reply); both sides are normalised (lower case, no whitespace, no `$`, no trailing `.`, no thousands
  separators, `\\boxed{}` unwrapped) and match when the strings are equal or both are the same number
  (`5 == 5.0 == 5.00`, `1/2 == 0.5 == \\frac{1}{2}`). `use_math_verify=True` also accepts what `math-verify` judges
  equivalent (LaTeX, algebra) within `math_verify_timeout_s` (2 s; an answer not judged in time is wrong, so
  `\\binom{10^{7}}{5*10^{6}}` cannot stall a rollout); it is in the `math` extra.

Problems: procedural GSM-style word problems (default; several multi-step families, integer answers, numbers
from the environment's generator; a substitute for the MetaMathQA data, which is not downloaded), or a local
.jsonl/.json/.parquet file with MetaMathQA records (`query`, `response` ending in "The answer is: X") or GSM8K
records (`question`, `answer` ending in "#### X"). With a file, the problem is `problems[seed % len(problems)]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..base import StepResult, TextEnv, finished_step, invalid_step, not_started_step
from ..problem_files import load_problem_file
from ..tool_adapter import ToolEnvAdapter
from .judge import DEFAULT_TIMEOUT_S, math_verify_verdict


# ---------------------------------------------------------------------------------------------------------------
# Prompts

INSTRUCTIONS = (
    "You are solving math word problems. Reason step by step, then give only the final numeric answer, "
    "for example <answer>42</answer>."
)
TOOL_INSTRUCTIONS = "Solve the problem, then submit the final numeric answer with the `answer` tool."


RAGEN_CORRECT = "Correct!"
RAGEN_INCORRECT = "Incorrect. Please think again."


def attempts_feedback(attempts_left: int) -> str:
    """The reply to a wrong answer, saying how many attempts are left."""
    if attempts_left == 0:
        return "Incorrect. No attempts left."
    return f"Incorrect. Please think again. You have {attempts_left} attempt(s) left."


# ---------------------------------------------------------------------------------------------------------------
# Game logic (pure functions)

_ANSWER_MARKER = re.compile(r"the answer is\s*:?", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{(.*)\}")
# ASCII digits only ([0-9], not \d, which also matches other scripts' digits).
_THOUSANDS = re.compile(r"-?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?")
_DECIMAL = re.compile(r"-?([0-9]{1,40})?(\.[0-9]{1,40})?")
_FRACTION = re.compile(r"(-?)(?:([0-9]{1,40})/([0-9]{1,40})|\\d?frac\{([0-9]{1,40})\}\{([0-9]{1,40})\})")
REWARD_RULES = ("ragen", "lenient")
MAX_ANSWER_CHARS = 1000  # longer answers are judged on their first characters only (bounds the checker's work)


def extract_answer(text: str) -> str:
    """The answer part of a reply: what follows the last "The answer is:", else the whole text, stripped."""
    text = text[:MAX_ANSWER_CHARS]
    markers = list(_ANSWER_MARKER.finditer(text))
    return (text[markers[-1].end() :] if markers else text).strip()


def normalize_answer(text: str) -> str:
    """Lower case; `\\boxed{x}` -> `x`; no whitespace, `$`, trailing `.` or thousands separators."""
    text = text.strip().lower()
    boxed = _BOXED.search(text)
    if boxed:
        text = boxed.group(1)
    text = re.sub(r"\s+", "", text).replace("\\$", "").replace("$", "").rstrip(".")
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    return text


def numeric_value(normalized: str) -> Fraction | None:
    """The exact value of a normalised integer, decimal or simple fraction (`a/b`, `\\frac{a}{b}`), else None."""
    if _DECIMAL.fullmatch(normalized) and any(char in "0123456789" for char in normalized):
        return Fraction(normalized)
    fraction = _FRACTION.fullmatch(normalized)
    if fraction:
        sign, numerator, denominator, latex_numerator, latex_denominator = fraction.groups()
        numerator, denominator = int(numerator or latex_numerator), int(denominator or latex_denominator)
        if denominator != 0:
            return Fraction(-numerator if sign else numerator, denominator)
    return None


def answers_match(predicted: str, reference: str) -> bool:
    """Whether two answers agree after normalisation, as strings or as numbers."""
    predicted, reference = normalize_answer(predicted), normalize_answer(reference)
    if not predicted or not reference:
        return False
    if predicted == reference:
        return True
    predicted_value, reference_value = numeric_value(predicted), numeric_value(reference)
    return predicted_value is not None and predicted_value == reference_value


RAGEN_ANSWER_MARKER = "The answer is: "


def ragen_reference(response: str) -> str:
    """RAGEN's reference answer of a MetaMathQA response: what follows its first "The answer is: ", stripped; empty
    when the marker is missing (RAGEN then has no reference, and no answer is correct)."""
    _, marker, rest = response.partition(RAGEN_ANSWER_MARKER)
    return rest.strip() if marker else ""


def ragen_normalize(text: str) -> str:
    """RAGEN's normal form of an answer: stripped, lower-cased, then every whitespace character removed."""
    return re.sub(r"\s+", "", text.strip().lower())


def ragen_answers_match(answer: str, reference: str) -> bool:
    """RAGEN's exact match: the normal forms are equal and the reference is not empty."""
    return bool(reference) and ragen_normalize(answer) == ragen_normalize(reference)


def math_verify_match(predicted: str, reference: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """`math-verify`'s judgement within `timeout_s` seconds, from any thread (`judge.py`); no verdict in
    time counts as not equal."""
    return math_verify_verdict(predicted, reference, timeout_s) == "equal"


@dataclass(frozen=True)
class MathProblem:
    """One problem; `family` names the generator template, or the file format of a loaded record.

    `ragen_answer` is the reference of the `"ragen"` rule when it is not `answer`: for a MetaMathQA record, RAGEN's
    reading of the response ([`ragen_reference`]; `""` when it has none).
    """

    question: str
    answer: str
    family: str
    ragen_answer: str | None = None

    @property
    def ragen_reference(self) -> str:
        return self.answer if self.ragen_answer is None else self.ragen_answer


# Each family draws its numbers from `rng` and returns (question, integer answer).
_NAMES = ("Ava", "Ben", "Chloe", "Diego", "Emma", "Farid", "Grace", "Hiro", "Isla", "Jamal", "Kira", "Liam")
_ITEMS = ("stickers", "marbles", "pencils", "cards", "beads", "stamps", "crayons", "buttons")
_PASTRIES = ("muffins", "croissants", "bagels", "cookies", "scones")
_PRODUCTS = ("jacket", "lamp", "backpack", "pair of boots", "board game", "desk chair")
_PLACES = ("garden", "playground", "paddock", "vegetable patch", "parking lot")
_VEHICLES = ("train", "bus", "truck", "car", "ferry")


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _int(rng: np.random.Generator, low: int, high: int) -> int:
    """A uniform integer in [low, high]."""
    return int(rng.integers(low, high + 1))


def _packs_left(rng: np.random.Generator) -> tuple[str, int]:
    name, item = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    packs, per_pack = _int(rng, 2, 12), _int(rng, 3, 25)
    total = packs * per_pack
    given = _int(rng, 1, total // 2)
    used = _int(rng, 1, total - given)
    question = (
        f"{name} buys {packs} packs of {item} with {per_pack} {item} in each pack. {name} gives {given} of them "
        f"to a friend and uses {used} for a school project. How many {item} does {name} have left?"
    )
    return question, total - given - used


def _savings(rng: np.random.Generator) -> tuple[str, int]:
    name = _pick(rng, _NAMES)
    wage, hours, weeks = _int(rng, 8, 30), _int(rng, 3, 20), _int(rng, 2, 8)
    earned = wage * hours * weeks
    spent = _int(rng, 1, earned - 1)
    question = (
        f"{name} earns ${wage} per hour and works {hours} hours each week. After {weeks} weeks, {name} spends "
        f"${spent} on a new bike. How many dollars does {name} have left?"
    )
    return question, earned - spent


def _trip(rng: np.random.Generator) -> tuple[str, int]:
    vehicle = _pick(rng, _VEHICLES)
    speed1, hours1 = _int(rng, 20, 80), _int(rng, 1, 6)
    speed2, hours2 = _int(rng, 20, 80), _int(rng, 1, 6)
    question = (
        f"A {vehicle} travels at {speed1} miles per hour for {hours1} hours, stops for lunch, and then travels "
        f"at {speed2} miles per hour for {hours2} more hours. How many miles does the {vehicle} travel in total?"
    )
    return question, speed1 * hours1 + speed2 * hours2


def _equal_shares(rng: np.random.Generator) -> tuple[str, int]:
    name, item = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    friends, boxes, per_box = _int(rng, 2, 9), _int(rng, 1, 6), _int(rng, 4, 12)
    bought = boxes * per_box
    share = _int(rng, bought // friends + 1, bought // friends + 20)  # keeps the starting amount positive
    start = share * friends - bought
    question = (
        f"{name} has {start} {item}. {name} buys {boxes} boxes with {per_box} {item} in each box, then shares "
        f"all the {item} equally among {friends} friends. How many {item} does each friend get?"
    )
    return question, share


def _discount(rng: np.random.Generator) -> tuple[str, int]:
    name, product = _pick(rng, _NAMES), _pick(rng, _PRODUCTS)
    price, percent, count = 20 * _int(rng, 1, 15), 5 * _int(rng, 1, 15), _int(rng, 1, 5)
    # price is a multiple of 20 and the percentage a multiple of 5, so the sale price is a whole dollar amount.
    sale_price = price * (100 - percent) // 100
    question = (
        f"A {product} costs ${price}. During a sale every {product} is {percent}% off. {name} buys {count} at "
        f"the sale price. How many dollars does {name} pay?"
    )
    return question, count * sale_price


def _ages(rng: np.random.Generator) -> tuple[str, int]:
    older, younger = rng.choice(len(_NAMES), size=2, replace=False)
    older, younger = _NAMES[int(older)], _NAMES[int(younger)]
    young_age, factor, years = _int(rng, 2, 15), _int(rng, 2, 5), _int(rng, 2, 10)
    old_age = factor * young_age
    total = old_age + young_age + 2 * years
    question = (
        f"{older} is {factor} times as old as {younger}. In {years} years, the sum of their ages will be "
        f"{total}. How old is {older} now?"
    )
    return question, old_age


def _fence(rng: np.random.Generator) -> tuple[str, int]:
    place = _pick(rng, _PLACES)
    length, width, cost = _int(rng, 5, 60), _int(rng, 3, 40), _int(rng, 2, 15)
    question = (
        f"A rectangular {place} is {length} meters long and {width} meters wide. Fencing costs ${cost} per "
        f"meter. How many dollars does it cost to put a fence around the whole {place}?"
    )
    return question, 2 * (length + width) * cost


def _bakery(rng: np.random.Generator) -> tuple[str, int]:
    pastry = _pick(rng, _PASTRIES)
    batches, per_batch, days = _int(rng, 2, 6), _int(rng, 6, 24), _int(rng, 2, 7)
    baked = batches * per_batch * days
    sold = _int(rng, baked // 3, baked - 1)
    stale = _int(rng, 1, baked - sold)
    question = (
        f"A bakery bakes {batches} batches of {per_batch} {pastry} every day for {days} days. It sells {sold} "
        f"{pastry} and throws away {stale} that went stale. How many {pastry} are left?"
    )
    return question, baked - sold - stale


PROBLEM_FAMILIES = {
    "packs_left": _packs_left,
    "savings": _savings,
    "trip": _trip,
    "equal_shares": _equal_shares,
    "discount": _discount,
    "ages": _ages,
    "fence": _fence,
    "bakery": _bakery,
}


def generate_problem(rng: np.random.Generator, families: tuple[str, ...] = tuple(PROBLEM_FAMILIES)) -> MathProblem:
    """A word problem from a uniformly drawn family."""
    family = families[int(rng.integers(len(families)))]
    question, answer = PROBLEM_FAMILIES[family](rng)
    return MathProblem(question=question, answer=str(answer), family=family)


def problem_from_record(record: dict[str, Any], *, where: str) -> MathProblem:
    """A problem from a MetaMathQA (`query`, `response`) or GSM8K (`question`, `answer`) record."""
    if "query" in record and "response" in record:
        question, solution, field, family = record["query"], record["response"], "response", "metamathqa"
        marker = "The answer is:"
    elif "question" in record and "answer" in record:
        question, solution, field, family = record["question"], record["answer"], "answer", "gsm8k"
        marker = "####"
    else:
        raise ValueError(
            f"{where}: expected MetaMathQA fields 'query' and 'response' or GSM8K fields 'question' and 'answer', "
            f"got fields {sorted(record)}"
        )
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: the question field must be non-empty text, got {question!r}")
    if not isinstance(solution, str) or marker not in solution:
        raise ValueError(f"{where}: field {field!r} must be text containing {marker!r} before the final answer")
    answer = solution.rsplit(marker, 1)[1].strip()
    if not answer:
        raise ValueError(f"{where}: field {field!r} has nothing after {marker!r}")
    ragen_answer = ragen_reference(solution) if family == "metamathqa" else None
    # The question is shown as stored, as RAGEN shows the record's query.
    return MathProblem(question=question, answer=answer, family=family, ragen_answer=ragen_answer)


def load_problems(path: str | Path) -> tuple[MathProblem, ...]:
    """MetaMathQA- or GSM8K-format records from a local .jsonl, .json or .parquet file (cached per file version)."""
    return load_problem_file(path, problem_from_record, what="math problems", expected="a MetaMathQA or GSM8K file")


# ---------------------------------------------------------------------------------------------------------------
# Env class


class MetaMathQAEnv(TextEnv):
    """Math word problems with RAGEN's retry reward. See the module docstring for the rules."""

    name = "metamathqa"

    def __init__(
        self,
        data_path: str | None = None,
        *,
        reward_rule: str = "ragen",
        max_attempts: int = 1,
        use_math_verify: bool = False,
        math_verify_timeout_s: float = DEFAULT_TIMEOUT_S,
        families: list[str] | None = None,
    ) -> None:
        super().__init__()
        if reward_rule not in REWARD_RULES:
            raise ValueError(
                f"reward_rule must be one of {REWARD_RULES}, got {reward_rule!r}; 'ragen' is RAGEN's exact match "
                "(the paper's numbers), 'lenient' also accepts equal numbers written differently"
            )
        if use_math_verify and reward_rule != "lenient":
            raise ValueError(
                f"use_math_verify=True needs reward_rule='lenient', got reward_rule={reward_rule!r}; RAGEN's rule "
                "is an exact string match"
            )
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        timeout = math_verify_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
            raise ValueError(
                f"math_verify_timeout_s must be a number of seconds in (0, 600], got {timeout!r}; it bounds how "
                "long math-verify may judge one answer"
            )
        if use_math_verify:
            try:
                import math_verify  # noqa: F401
            except ImportError:
                raise ImportError(
                    'use_math_verify=True needs math-verify; install it with pip install "trl-ragen2[math]"'
                ) from None
        chosen = tuple(PROBLEM_FAMILIES) if families is None else tuple(families)
        unknown = [family for family in chosen if family not in PROBLEM_FAMILIES]
        if unknown or not chosen:
            raise ValueError(f"families={families!r} must be a non-empty subset of {list(PROBLEM_FAMILIES)}")
        self.reward_rule = reward_rule
        self.max_attempts = max_attempts
        self.use_math_verify = use_math_verify
        self.math_verify_timeout_s = float(timeout)
        self.families = chosen
        self.problems = load_problems(data_path) if data_path is not None else None
        self.problem: MathProblem | None = None
        self.attempt = 0
        self.done = False
        self.success = False
        self.observation = ""

    @property
    def instructions(self) -> str:
        return INSTRUCTIONS

    def reset(self, seed: int | None = None) -> str:
        self.seed_rng(seed)
        if self.problems is not None:
            self.problem = self.pick_for_seed(self.problems, seed)
        else:
            self.problem = generate_problem(self.rng, self.families)
        self.attempt, self.done, self.success = 0, False, False
        self.observation = self.problem.question
        return self.observation

    def is_correct(self, answer: str) -> bool:
        """Whether an answer matches the current problem's reference under the reward rule (`"lenient"`: the
        extracted answer)."""
        if self.reward_rule == "ragen":
            return ragen_answers_match(answer, self.problem.ragen_reference)
        if answers_match(answer, self.problem.answer):
            return True
        return self.use_math_verify and math_verify_match(answer, self.problem.answer, self.math_verify_timeout_s)

    def step(self, action: str) -> StepResult:
        """Check one answer (a wrong one uses an attempt)."""
        if self.problem is None:
            return not_started_step()
        if self.done:
            return finished_step(self.observation, self.success, "the episode is over")
        ragen = self.reward_rule == "ragen"
        text = action if isinstance(action, str) else ""
        answer = text if ragen else extract_answer(text)
        if not (ragen_normalize(answer) if ragen else normalize_answer(answer)):
            return invalid_step(self.observation, "the answer is empty", attempt=self.attempt)
        attempt = self.attempt
        if self.is_correct(answer):
            reward, self.done, self.success = 1.0 / 2**attempt, True, True
            self.observation = RAGEN_CORRECT
        else:
            reward, self.attempt = 0.0, attempt + 1
            self.done = self.attempt >= self.max_attempts
            self.observation = RAGEN_INCORRECT if ragen else attempts_feedback(self.max_attempts - self.attempt)
        info = {"success": self.success, "action_is_valid": True, "action_is_effective": True, "attempt": attempt}
        return self.observation, reward, self.done, info

    def render(self) -> str:
        return self.observation


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


class MetaMathQAToolEnv(ToolEnvAdapter):
    """MetaMathQA for `trl.GRPOTrainer(environment_factory=MetaMathQAToolEnv)`: one `answer` tool.

    `reset(**row)` reads `seed` and the optional `env_config` (JSON text or dict of `MetaMathQAEnv` keywords) from
    the dataset row; the reward is `1 / 2**attempt` for a correct answer at attempt `attempt`, else 0.
    """

    env_class = MetaMathQAEnv
    tool_instructions = TOOL_INSTRUCTIONS
    reset_layout = "{observation}\n{instructions}"
    not_started_reply = "No problem is loaded yet."
    episode_over_reply = "The problem is already finished; no further answers are scored."
    invalid_reply = "Invalid answer ({reason}). Try again."

    def answer(self, value: str) -> str:
        """Submit the final answer to the current math problem.

        Args:
            value: The final answer, for example "42" or "3/4".

        Returns:
            Whether the answer is correct, and how many attempts are left if it is not.
        """
        return self._act(value)
