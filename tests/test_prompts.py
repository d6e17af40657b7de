"""The RAGEN prompt protocol: exact prompt texts and the answer parser."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.prompts import (
    RAGEN_PROMPT_BUDGETS,
    ParsedResponse,
    initial_messages,
    parse_response,
    prompt_budget,
    reward_feedback,
    system_prompt,
    turn_prompt,
)


RAGEN_PATTERN = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)


def test_system_prompt_is_preamble_plus_instructions():
    env = make_env("countdown")
    assert system_prompt(env) == "You're a helpful assistant. " + env.instructions


def test_turn_prompt_is_the_paper_text():
    expected = (
        "\nTurn 2:\nState:\nTarget: 24, nums: [3, 5, 8, 1]\nYou have 1 actions left. Always output: <think> [Your "
        "thoughts] </think> <answer> [your answer] </answer> with no extra text. Strictly follow this format. "
        "Max response length: 100 words (tokens)."
    )
    assert turn_prompt(2, "Target: 24, nums: [3, 5, 8, 1]", 1, 100) == expected


def test_reward_feedback():
    assert reward_feedback(0.1) == "Reward:\n0.1\n"
    assert reward_feedback(1.0) == "Reward:\n1.0\n"


def test_initial_messages():
    env = make_env("metamathqa")
    observation = env.reset(seed=3)
    messages = initial_messages(env, observation, actions_left=1, max_tokens=100)
    assert messages == [
        {"role": "system", "content": system_prompt(env)},
        {"role": "user", "content": turn_prompt(1, observation, 1, 100)},
    ]


def test_prompt_budget_defaults_and_overrides():
    assert prompt_budget("countdown") == (1, 100)
    assert prompt_budget("sokoban") == RAGEN_PROMPT_BUDGETS["sokoban"] == (10, 120)
    assert prompt_budget("metamathqa", max_actions=3) == (3, 100)
    assert prompt_budget("my_env", 2, 50) == (2, 50)
    with pytest.raises(ValueError, match="pass max_actions and max_tokens"):
        prompt_budget("my_env")
    with pytest.raises(ValueError, match="max_actions must be >= 1"):
        prompt_budget("countdown", max_actions=0)


# ---------------------------------------------------------------------------------------------------------------
# parse_response


@pytest.mark.parametrize(
    "text, expected",
    [
        # primed generation: the reply starts inside the think block
        ("I go up.</think><answer>Up</answer>", ParsedResponse("I go up.", "Up", ["Up"], True)),
        (
            "<think>plan</think> \n <answer> Up || Left </answer>",
            ParsedResponse("plan", "Up || Left", ["Up", "Left"], True),
        ),
        ("  <think>a</think><answer>1+2</answer><|im_end|>", ParsedResponse("a", "1+2", ["1+2"], True)),
        # the first complete think/answer pair wins
        ("x</think><answer>A</answer><think>y</think><answer>B</answer>", ParsedResponse("x", "A", ["A"], True)),
        # empty parts are dropped; an answer without actions is not well formatted
        ("t</think><answer> || Up ||  || </answer>", ParsedResponse("t", "|| Up ||  ||", ["Up"], True)),
        ("t</think><answer>   </answer>", ParsedResponse("t", "", [], False)),
        # a stray tag inside the think block is removed
        ("<think><think>deep</think><answer>Down</answer>", ParsedResponse("deep", "Down", ["Down"], True)),
        # format violations
        ("", ParsedResponse(None, None, [], False)),
        ("<answer>Up</answer>", ParsedResponse(None, None, [], False)),
        ("thinking</think> and then <answer>Up</answer>", ParsedResponse(None, None, [], False)),
        ("thinking</think><answer>Up", ParsedResponse(None, None, [], False)),
        ("thinking<answer>Up</answer>", ParsedResponse(None, None, [], False)),
    ],
)
def test_parse_response_cases(text, expected):
    assert parse_response(text, max_actions=2) == expected


def test_actions_are_truncated_to_max_actions():
    parsed = parse_response("t</think><answer>Up || Down || Left</answer>", max_actions=2)
    assert parsed.actions == ["Up", "Down"]
    assert parsed.answer == "Up || Down || Left"
    assert parse_response("t</think><answer>Up</answer>", max_actions=0).format_ok is False


def test_parse_response_on_non_text():
    assert parse_response(None, max_actions=1) == ParsedResponse(None, None, [], False)  # type: ignore[arg-type]


def test_parse_response_is_linear_on_many_unclosed_tags():
    # The backtracking regex would take ~n^2 steps here; the parser reads the text a bounded number of times.
    text = "<think>" * 200_000 + "</think>" + "<answer>" * 1000
    assert parse_response(text, max_actions=2).format_ok is False
    assert parse_response(text + "Up</answer>", max_actions=2).actions == ["Up"]


def _reference_parse(text: str, max_actions: int):
    """RAGEN's regex on the primed text, then the same clean-up."""
    primed = text if text.lstrip().startswith("<think>") else "<think>" + text
    match = RAGEN_PATTERN.search(primed)
    if match is None:
        return None
    return match.group(1), match.group(2)


TAG_SOUP = st.lists(
    st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "||", "Up", "é", "<", ">", "x"]),
    max_size=30,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(TAG_SOUP, st.integers(0, 4))
def test_parser_agrees_with_the_ragen_regex(text, max_actions):
    parsed = parse_response(text, max_actions=max_actions)
    reference = _reference_parse(text, max_actions)
    if reference is None:
        assert parsed == ParsedResponse(None, None, [], False)
        return
    stray = ("<think>", "</think>", "<answer>", "</answer>")
    think, answer = reference
    for token in stray:
        think, answer = think.replace(token, ""), answer.replace(token, "")
    assert parsed.think == think.strip()
    assert parsed.answer == answer.strip()
    expected_actions = [part.strip() for part in answer.strip().split("||") if part.strip()][:max_actions]
    assert parsed.actions == expected_actions
    assert parsed.format_ok == bool(expected_actions)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), TAG_SOUP, st.text(alphabet="<>/|thinkswer ", max_size=200)), st.integers(-2, 5))
def test_parse_response_never_raises(text, max_actions):
    parsed = parse_response(text, max_actions=max_actions)
    assert len(parsed.actions) <= max(max_actions, 0)
    assert all(action and action == action.strip() for action in parsed.actions)
    assert parsed.format_ok == bool(parsed.actions)
