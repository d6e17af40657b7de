"""SearchQA under RAGEN's rules (`rules="ragen"`), worked out by hand from RAGEN's search environment.

Every expected text, reward and step count below follows from RAGEN's code (mll-lab-nu/RAGEN, `ragen/env/search`:
`env.py`, `reward.py`, `retrieval_client.py`; read, not run here):

- the action is stripped; `search[`/`finish[` at the start and `]` at the end (case-sensitive) make a search or an
  answer whose argument is everything in between, unstripped; empty text is invalid; anything else is free text,
  from which an answer is extracted, scored, and the episode ends;
- every action adds one step; a search or an empty action on step `max_steps` ends the episode;
- observations: "Question: {q}\\n{LINE}"; "Search results for '{query}':\\n{results}\\n\\n{LINE}" (or the
  end-of-budget line); "Your answer: {a}. Reward: {r:.2f}" ("Your answer (extracted): ..." for free text);
- results: "[Document {i}] (ID: {id}, Score: {score:.3f})\\n{content}", content over 800 characters cut to 800 + "...",
  the whole text over 4,000 cut to 4,000 + "...", 5 results asked for (never more than 50);
- reward: 1 for an exact match after SQuAD normalisation, else the token F1 when >= 0.3, else 0; success when the
  match is exact or the reward is positive.
"""

import pytest

from trl_ragen2_envs import make_env
from trl_ragen2_envs.searchqa import SearchHit, SearchQAEnv, SearchQAToolEnv
from trl_ragen2_envs.searchqa.env import MAX_ACTION_CHARS, MAX_ARGUMENT_CHARS, SEARCH_UNAVAILABLE, Episode
from trl_ragen2_envs.searchqa.ragen_rules import extract_answer, format_passages, read_action
from trl_ragen2_envs.searchqa.retrieval import RetrievalError


LINE = "Available actions: search[<query>], finish[<answer>]"
QUESTION, GOLD = "Which river flows through Ulm?", "Ulm River"
HITS = [SearchHit("d1", "Ulm", "Ulm River is long.", 2.5), SearchHit("d2", "Bern", "Bern is a city.", 1 / 3)]
# format_passages(HITS): the title is not shown, the score has three decimals
RESULTS = (
    "[Document 1] (ID: d1, Score: 2.500)\nUlm River is long.\n\n[Document 2] (ID: d2, Score: 0.333)\nBern is a city."
)
INVALID = f"Invalid action. Use search[<query>] to search or finish[<answer>] to answer.\n{LINE}"
BUDGET_SPENT = "Maximum search steps reached. Episode ended without an answer."


class FixedRetriever:
    """Answers every search with the first `top_k` of `hits` and records the requests."""

    def __init__(self, hits=HITS, error=None):
        self.hits, self.error, self.requests = hits, error, []

    def search(self, query, top_k):
        self.requests.append((query, top_k))
        if self.error is not None:
            raise self.error
        return self.hits[:top_k]


def ragen_env(retriever=None, **kwargs) -> SearchQAEnv:
    """A `rules="ragen"` episode on QUESTION (gold GOLD) whose searches `retriever` answers."""
    env = SearchQAEnv(rules="ragen", **kwargs)
    episode = Episode(QUESTION, GOLD, (), "test", retriever or FixedRetriever())
    env._draw_episode = lambda: episode
    assert env.reset(0) == f"Question: {QUESTION}\n{LINE}"
    return env


def test_reset_shows_the_question_and_the_actions_line():
    env = make_env("searchqa", rules="ragen")
    assert env.reset(0) == f"Question: {env.episode.question}\n{LINE}" == env.render()


# ---------------------------------------------------------------------------------------------------------------
# Episodes: (action, observation, reward, done) step by step; the step count is the number of actions


EPISODES = {
    "search, then the exact answer": (10, [
        ("search[Ulm River]", f"Search results for 'Ulm River':\n{RESULTS}\n\n{LINE}", 0.0, False),
        ("finish[Ulm River]", "Your answer: Ulm River. Reward: 1.00", 1.0, True),
    ]),
    # the whole action is stripped, its argument is not: the query keeps its spaces
    "spaces": (10, [
        ("  search[ Ulm ]\n", f"Search results for ' Ulm ':\n{RESULTS}\n\n{LINE}", 0.0, False),
        ("finish[ Ulm River ]", "Your answer:  Ulm River . Reward: 1.00", 1.0, True),
    ]),
    # starts with "search[" and ends with "]": one search for everything in between
    "two verbs": (10, [
        ("search[a] then finish[b]", f"Search results for 'a] then finish[b':\n{RESULTS}\n\n{LINE}", 0.0, False),
    ]),
    "empty query": (10, [("search[]", f"Search results for '':\n{RESULTS}\n\n{LINE}", 0.0, False)]),
    # "ulm" against "ulm river": precision 1, recall 1/2, F1 2/3 >= 0.3, shown with two decimals
    "partial answer": (10, [("finish[Ulm]", "Your answer: Ulm. Reward: 0.67", 2 / 3, True)]),
    # "ulm b c d e" (articles dropped) against "ulm river": P 1/5, R 1/2, F1 = 0.2 / 0.7 = 0.2857 < 0.3
    "low F1": (10, [("finish[the Ulm a b c d e]", "Your answer: the Ulm a b c d e. Reward: 0.00", 0.0, True)]),
    "empty answer": (10, [("finish[]", "Your answer: . Reward: 0.00", 0.0, True)]),
    # the verbs are case-sensitive: free text; its one sentence is the answer, "searchulm river" after
    # normalisation: shares "river" with the gold, F1 = 2 * (1/2 * 1/2) / 1 = 0.5
    "capitalised verb": (10, [("Search[Ulm River]", "Your answer (extracted): Search[Ulm River]. Reward: 0.50", 0.5, True)]),
    "upper-case verb": (10, [("FINISH[Ulm River]", "Your answer (extracted): FINISH[Ulm River]. Reward: 0.50", 0.5, True)]),
    # text around the verb: free text, "i will searchulm" shares no token with the gold
    "surrounded verb": (10, [("I will search[Ulm]", "Your answer (extracted): I will search[Ulm]. Reward: 0.00", 0.0, True)]),
    "missing bracket": (10, [("finish[Ulm River", "Your answer (extracted): finish[Ulm River. Reward: 0.50", 0.5, True)]),
    # free text announcing the answer: the phrase's sentence, an exact match
    "free text": (10, [("The answer is Ulm River.", "Your answer (extracted): Ulm River. Reward: 1.00", 1.0, True)]),
    # empty text uses a step and changes the observation; the search on the last step ends the episode
    "budget": (2, [
        ("   ", INVALID, 0.0, False),
        ("search[Ulm]", f"Search results for 'Ulm':\n{RESULTS}\n\n{BUDGET_SPENT}", 0.0, True),
    ]),
    "empty text on the last step": (1, [("", INVALID, 0.0, True)]),
}  # fmt: skip


@pytest.mark.parametrize("name", EPISODES)
def test_episodes_step_by_step(name):
    max_steps, steps = EPISODES[name]
    env = ragen_env(max_steps=max_steps)
    for count, (action, observation, reward, done) in enumerate(steps, start=1):
        got = env.step(action)
        assert got[:3] == (observation, pytest.approx(reward), done)
        assert env.steps == count and env.render() == observation


@pytest.mark.parametrize(
    ("action", "action_type", "valid", "success"),
    [
        ("search[Ulm]", "search", True, False),
        ("finish[Ulm River]", "finish", True, True),
        ("finish[Ulm]", "finish", True, True),  # F1 2/3: RAGEN's success counts any reward
        ("finish[Bern]", "finish", True, False),
        ("Ulm River it is", "fallback", False, True),  # read and scored, yet not a valid action
        ("", "invalid", False, False),
    ],
)
def test_info_flags_are_ragens(action, action_type, valid, success):
    info = ragen_env().step(action)[3]
    assert (info["action_type"], info["action_is_valid"], info["success"]) == (action_type, valid, success)
    assert info["action_is_effective"] == (action_type != "invalid")


def test_non_text_is_an_empty_action():
    env = ragen_env(max_steps=3)
    assert env.step(None)[:3] == (INVALID, 0.0, False) and env.steps == 1


# ---------------------------------------------------------------------------------------------------------------
# Reading an action and extracting an answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("search[x]", ("search", "x")),
        (" \tfinish[ y ]\n", ("finish", " y ")),
        ("search[]", ("search", "")),
        ("search[x]]", ("search", "x]")),
        ("search[a] finish[b]", ("search", "a] finish[b")),
        ("Search[x]", ("fallback", "Search[x]")),
        ("search [x]", ("fallback", "search [x]")),
        ("finish[x].", ("fallback", "finish[x].")),
        ("  Bern  ", ("fallback", "Bern")),
        ("", ("invalid", "")),
        (" \n\t ", ("invalid", "")),
    ],
)
def test_read_action(text, expected):
    assert read_action(text) == expected


EXTRACTIONS = [
    ("\\boxed{ 12 } and **Ulm River**", "12"),  # a box first, stripped
    ("\\boxed{} then \\boxed{Bern}", "Bern"),  # an empty box does not count
    ("\\boxed{Bern", "\\boxed{Bern"),  # never closed: no box; the one sentence (11 > 5 characters)
    ("**Hi** and **Ulm River**", "Ulm River"),  # bold spans of at most 2 characters are skipped
    # no bold span with a word character; the single-star spans are " ! " and " then " (the stars pair up left
    # to right), so the answer is "then"
    ("** ! ** then *Bern city*", "then"),
    ("*Ulm River*", "Ulm River"),
    ("The correct answer is: Ulm River. Yes.", "Ulm River"),  # up to the next "."
    ("The answer is 42. So it is Bern", "it is Bern"),  # "42" is too short (<= 3): the "so" phrase is next
    ("I also think Bern is right", "think Bern is right"),  # "so" inside "also"
    ("Thus, it is... Bern.", "it is"),  # ", " after the phrase is skipped; 5 characters > 3
    ("Hence!!", "Hence!!"),  # nothing after "Hence"; its sentence has 5 characters, not > 5: the text itself
    ("<think>Bern?</think> Ulm   River", "Ulm River"),  # the think block goes, spaces collapse
    ("<think>only thoughts</think>", ""),
    ("<think>a</think>b<think>c", "b<think>c"),  # a think block needs its closing tag
    ("<think>a</think>b</think>", "b</think>"),  # each block ends at the first closing tag
    ("Hi. Ok! Bern", "Hi. Ok! Bern"),  # every sentence has <= 5 characters: the first 100 characters
    ("Hi. " * 30, ("Hi. " * 25).strip()),
    ("Paris is big. Bern", "Paris is big"),  # the first sentence over 5 characters
]


@pytest.mark.parametrize(("text", "expected"), EXTRACTIONS)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


# ---------------------------------------------------------------------------------------------------------------
# Search results


def test_passage_format_and_cuts():
    long = SearchHit("d9", "T", "a" * 801, 5)  # an int score (JSON) prints as 5.000
    assert format_passages([long], 5) == "[Document 1] (ID: d9, Score: 5.000)\n" + "a" * 800 + "..."
    exact = SearchHit("d9", "T", "a" * 800, 5.0)
    assert format_passages([exact], 5).endswith("\n" + "a" * 800)  # 800 characters are not cut
    # 35 characters of header, the newline, then 4 of the content reach 40: cut there and "..." added
    assert format_passages(HITS, 5, max_total_chars=40) == "[Document 1] (ID: d1, Score: 2.500)\nUlm ..."
    assert format_passages(HITS, 1) == "[Document 1] (ID: d1, Score: 2.500)\nUlm River is long."
    assert format_passages([], 5) == "No relevant documents found for the query."


def test_five_results_are_asked_for_and_never_more_than_fifty():
    retriever = FixedRetriever(hits=[SearchHit(f"d{i}", "", "x", 1.0) for i in range(60)])
    ragen_env(retriever).step("search[q]")
    wide = ragen_env(retriever, top_k=60)
    observation = wide.step("search[q]")[0]
    assert retriever.requests == [("q", 5), ("q", 50)]
    assert "[Document 50]" in observation and "[Document 51]" not in observation
    five = make_env("searchqa", rules="ragen")
    five.reset(0)
    assert five.step(f"search[{five.episode.hops[0]}]")[0].count("[Document ") == 5 and five.top_k == 5


def test_real_search_shows_ragens_client_text():
    env = make_env("searchqa", rules="ragen")
    env.reset(0)
    hits = env.search_results("Nidreitas")[:5]
    blocks = [f"[Document {i}] (ID: {h.passage_id}, Score: {h.score:.3f})\n{h.content}" for i, h in enumerate(hits, 1)]
    observation, reward, done, info = env.step("search[Nidreitas]")
    assert observation == "Search results for 'Nidreitas':\n" + "\n\n".join(blocks) + f"\n\n{LINE}"
    assert (reward, done, info["num_results"], info["query"]) == (0.0, False, 5, "Nidreitas")


# ---------------------------------------------------------------------------------------------------------------
# Deliberate differences (the card's table)


def test_actions_after_the_end_pay_nothing():
    # RAGEN's manager never steps a finished environment; its environment itself would score a second answer again.
    env = ragen_env()
    observation = env.step("finish[Ulm River]")[0]
    again = env.step("finish[Ulm River]")
    assert again[:3] == (observation, 0.0, True) and not again[3]["action_is_valid"] and env.steps == 1


def test_length_limits_hold_under_ragens_rules():
    # RAGEN has no limits: it would read the long text as an answer and show the whole query.
    env = ragen_env()
    refused = env.step("finish[" + "x" * MAX_ACTION_CHARS + "]")
    assert refused[:3] == (f"Question: {QUESTION}\n{LINE}", 0.0, False) and env.steps == 0
    query = "q" * (MAX_ARGUMENT_CHARS + 500)
    observation = env.step(f"search[{query}]")[0]
    assert observation.startswith(f"Search results for '{query[:MAX_ARGUMENT_CHARS]}':\n") and env.steps == 1
    assert env.episode.retriever.requests == [(query[:MAX_ARGUMENT_CHARS], 5)]
    # Only the first 2,000 characters are scored and shown: "Ulm River" and spaces, an exact match. RAGEN scores
    # the whole text, "ulm river extra words": P 2/4, R 1, F1 2/3.
    padded = "Ulm River" + " " * 2_500 + "extra words"
    assert env.step(f"finish[{padded}]")[:2] == (f"Your answer: {padded[:MAX_ARGUMENT_CHARS]}. Reward: 1.00", 1.0)


def test_a_failed_search_shows_the_library_message_in_place_of_the_results():
    # RAGEN's client writes the failure's own text (a timeout, a refused connection, an HTTP status) there.
    env = ragen_env(FixedRetriever(error=RetrievalError("cannot reach the retrieval server")))
    observation, reward, done, info = env.step("search[Ulm]")
    assert observation == f"Search results for 'Ulm':\n{SEARCH_UNAVAILABLE}\n\n{LINE}"
    assert (reward, done, env.steps, info["num_results"]) == (0.0, False, 1, 0)
    assert "cannot reach" in info["env_error"]


# ---------------------------------------------------------------------------------------------------------------
# Selection, defaults, adapter, rollout


def test_hotpotqa_unseeded_reset_plays_the_first_question(tmp_path):
    import json

    records = [
        {"_id": str(i), "question": f"q{i}?", "answer": f"a{i}", "context": [["T", ["text."]]]} for i in range(3)
    ]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(records))
    env = SearchQAEnv(rules="ragen", hotpotqa_path=str(path))
    assert [env.reset(seed) for seed in (None, None, 4)] == [f"Question: q{i}?\n{LINE}" for i in (0, 0, 1)]


def test_rules_default_and_errors():
    assert SearchQAEnv().rules == "trl_ragen2" and SearchQAEnv().top_k == 3
    assert SearchQAEnv(rules="ragen", top_k=2).top_k == 2
    with pytest.raises(ValueError, match="rules must be one of \\('trl_ragen2', 'ragen'\\), got 'RAGEN'"):
        SearchQAEnv(rules="RAGEN")


def test_tool_adapter_replies_with_ragens_observations():
    tool_env = SearchQAToolEnv(rules="ragen")
    tool_env.reset(seed=0)
    answer = tool_env.env.episode.answer
    assert tool_env.search("Nidreitas").startswith("Search results for 'Nidreitas':\n[Document 1] (ID: ")
    assert tool_env.finish(answer) == f"Your answer: {answer}. Reward: 1.00"
    assert tool_env.get_reward() == 1.0 and tool_env.env.steps == 2


@pytest.mark.parametrize(("protocol", "turn_rewards"), [("ragen", [0.0, 0.5]), ("trl_ragen2", [0.0, -0.1])])
def test_rollout_with_ragens_rules(tiny_tokenizer, protocol, turn_rewards):
    """Seed 0 asks about Nidreitas (the answer). Free text "Nidreitas it is" is read as the answer: F1 against
    "nidreitas" is 2 * (1/3 * 1) / (4/3) = 0.5. RAGEN's manager has no action table, so it is not penalised; the
    library's protocol penalises an action the environment flags invalid and pays it nothing."""
    from trl_ragen2.agents.generation import ScriptedPolicy
    from trl_ragen2.agents.rollout import EpisodeSpec, RolloutConfig, RolloutEngine

    replies = ["x</think><answer>search[Nidreitas]</answer>", "x</think><answer>Nidreitas it is</answer>"]
    engine = RolloutEngine(tiny_tokenizer, RolloutConfig(protocol=protocol, max_turns=5, max_actions_per_turn=1))
    policy = ScriptedPolicy(lambda episode: replies[min(episode.turns, 1)], tiny_tokenizer)
    (episode,) = engine.run([EpisodeSpec("searchqa", 0, {"rules": "ragen"})], policy)
    assert episode.turns == 2 and episode.turn_rewards == [pytest.approx(r) for r in turn_rewards]
    second_turn = [m["content"] for m in episode.messages if m["role"] == "user"][1]
    assert "State:\nSearch results for 'Nidreitas':\n[Document 1] (ID: w0-" in second_turn
    assert f"\n\n{LINE}\nYou have 9 actions left." in second_turn
