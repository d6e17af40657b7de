"""SearchQA: the procedural world, BM25 retrieval, answer scoring, the HTTP server, HotpotQA loading, TRL."""

import gzip
import json
import urllib.error
import urllib.request

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.searchqa import (
    BM25Retriever,
    HTTPRetriever,
    RetrievalServer,
    SearchHit,
    SearchQAEnv,
    SearchQAToolEnv,
    build_world,
    format_results,
    load_hotpotqa,
    normalize_answer,
    parse_action,
    sample_question,
    score_answer,
    token_f1,
)
from trl_ragen2_envs.searchqa.env import TOOL_INSTRUCTIONS, ParsedAction
from trl_ragen2_envs.searchqa.questions import TEMPLATES

from .tool_env_helpers import run_scripted_grpo_step


@pytest.fixture(scope="module")
def world():
    return build_world(0)


@pytest.fixture(scope="module")
def retriever(world):
    return BM25Retriever(world.passages)


# ---------------------------------------------------------------------------------------------------------------
# The procedural world


def test_world_is_deterministic_per_seed_and_a_few_thousand_passages():
    first, again, other = build_world.__wrapped__(3), build_world.__wrapped__(3), build_world.__wrapped__(4)
    assert first.passages == again.passages
    assert first.passages != other.passages
    assert 2000 <= len(first.passages) <= 5000
    assert len({p.passage_id for p in first.passages}) == len(first.passages)
    # Names are unique across kinds, so every relation points at exactly one entity.
    for entity in first.entities.values():
        for attr in ("birthplace", "alma_mater", "employer", "founder", "headquarters", "inventor", "river"):
            if attr in entity.attrs:
                assert entity.attrs[attr] in first.entities


def test_world_is_consistent(world):
    for company in world.of_kind("company"):
        assert company["founded"] >= world.entities[company["founder"]]["born"] + 20
    for person in world.of_kind("person"):
        if "alma_mater" in person.attrs:
            assert world.entities[person["alma_mater"]]["founded"] <= person["born"] + 18
        if "died" in person.attrs:
            assert person["died"] > person["born"]


@pytest.mark.parametrize("world_seed", [0, 1, 2])
def test_supporting_passages_are_found_by_searching_the_hop_entities(world_seed):
    world = build_world(world_seed)
    index = BM25Retriever(world.passages)
    for seed in range(60):
        question = sample_question(world, np.random.default_rng(seed))
        assert len(question.hops) == len(question.supporting) == 2
        for entity, passage_id in zip(question.hops, question.supporting, strict=True):
            found = [hit.passage_id for hit in index.search(entity, top_k=3)]
            assert passage_id in found, (question, entity)
            # the supporting passage states the fact: it names the entity it belongs to
            assert world.passages[int(passage_id.split("-")[1])].title == entity


def test_every_template_draws_a_question_with_an_exact_answer(world):
    rng = np.random.default_rng(0)
    for kind, templates in TEMPLATES.items():
        for name, template in templates.items():
            question = next(q for q in (template(world, rng) for _ in range(20)) if q is not None)
            assert question.kind == kind and question.template == name
            assert question.answer and question.question.endswith("?")
    answers = {sample_question(world, np.random.default_rng(s), ("comparison",)).answer for s in range(200)}
    assert {"yes", "no"} <= answers


def test_bridge_question_chain_is_visible_in_the_passages(world, retriever):
    for seed in range(40):
        question = sample_question(world, np.random.default_rng(seed), ("bridge",))
        first_hop = " ".join(hit.content for hit in retriever.search(question.hops[0], top_k=3))
        assert question.hops[1] in first_hop  # the first page names the second entity
        second_hop = " ".join(hit.content for hit in retriever.search(question.hops[1], top_k=3))
        assert question.answer in second_hop  # and the second page states the answer


@pytest.mark.parametrize("seed", range(8))
def test_scripted_policy_that_searches_the_hops_and_answers_gets_reward_1(seed):
    env = make_env("searchqa")
    observation = env.reset(seed)
    assert observation.startswith("Question: ") and env.episode.question in observation
    for entity in env.episode.hops:
        observation, reward, done, info = env.step(f"<think>look up {entity}</think> search[{entity}]")
        assert info["action_is_valid"] and not done and reward == 0.0
        assert "[Document 1] (" in observation
    observation, reward, done, info = env.step(f"finish[{env.episode.answer}]")
    assert (reward, done, info["success"], info["em"]) == (1.0, True, True, 1.0)


def test_same_seed_same_question_and_wrong_answer_scores_zero():
    env, other = SearchQAEnv(), SearchQAEnv()
    assert env.reset(11) == other.reset(11)
    assert env.reset(11) != env.reset(12)
    env.reset(11)
    _, reward, done, info = env.step("finish[definitely not the answer]")
    assert (reward, done, info["success"], info["em"]) == (0.0, True, False, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# Actions and episode rules


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("search[Ulm River]", ParsedAction("search", "Ulm River")),
        ("SEARCH [ Ulm River ]", ParsedAction("search", "Ulm River")),
        ("<answer>Finish['1901']</answer>", ParsedAction("finish", "1901")),
        ("I will search[Foo [band]] now", ParsedAction("search", "Foo [band]")),
        ("research[x] then finish[y]", ParsedAction("finish", "y")),  # "research" is not the verb
    ],
)
def test_parse_action_accepts(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize("text", ["", "search Ulm", "search[]", "finish[  ]", "search[Ulm", "click[x]", None, 3])
def test_parse_action_rejects_with_a_reason(text):
    assert isinstance(parse_action(text), str)


def test_invalid_action_leaves_state_unchanged_and_uses_no_step():
    env = SearchQAEnv(max_steps=2)
    env.reset(5)
    observation, _, _, _ = env.step(f"search[{env.episode.hops[0]}]")
    for bad in ["hello", "search[", "finish[]"]:
        again, reward, done, info = env.step(bad)
        assert (again, reward, done, info["action_is_valid"]) == (observation, 0.0, False, False)
        assert info["invalid_reason"]
    assert env.steps == 1
    _, reward, done, info = env.step("search[anything]")  # the last of max_steps=2
    assert (reward, done, info["truncated"], info["success"]) == (0.0, True, True, False)
    _, _, _, info = env.step("finish[x]")
    assert not info["action_is_valid"]


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="top_k"):
        SearchQAEnv(top_k=0)
    with pytest.raises(ValueError, match="corpus"):
        SearchQAEnv(corpus="web")
    with pytest.raises(ValueError, match="question_kinds"):
        SearchQAEnv(question_kinds=("trivia",))
    with pytest.raises(FileNotFoundError, match="hotpotqa_path"):
        SearchQAEnv(hotpotqa_path="missing.json")
    with pytest.raises(ValueError, match="retriever_url"):
        SearchQAEnv(retriever_url="localhost:8000")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(st.text(max_size=60) | st.sampled_from(["search[x]", "finish[x]", "FINISH[", "search[[]"])))
def test_fuzzed_actions_never_raise(actions):
    env = SearchQAEnv(max_steps=4)
    env.reset(0)
    for action in actions:
        before = env.render()
        observation, reward, _, info = env.step(action)
        assert isinstance(observation, str) and 0.0 <= reward <= 1.0
        assert {"success", "action_is_valid"} <= info.keys()
        if not info["action_is_valid"]:
            assert observation == before and reward == 0.0


# ---------------------------------------------------------------------------------------------------------------
# Answer scoring


def test_normalisation_and_exact_match():
    assert normalize_answer("The  Ulm River.") == "ulm river"
    assert normalize_answer("An apple, a pear") == "apple pear"
    assert score_answer("the ulm river!", "Ulm River").reward == 1.0
    assert score_answer("Ulm", ["Ulm River", "Ulm"]).em == 1.0  # aliases: best one counts


def test_f1_reward_threshold():
    # "ulm river delta" vs "ulm river": precision 2/3, recall 1, F1 0.8 -> reward 0.8
    partial = score_answer("Ulm River delta", "Ulm River")
    assert (partial.em, partial.reward) == (0.0, pytest.approx(0.8))
    # one shared token out of 4 and 1: F1 = 2 * 0.25 * 1 / 1.25 = 0.4 >= 0.3
    assert score_answer("the big Ulm river area", "Ulm").reward == pytest.approx(0.4)
    # one of 6 tokens against one of 1: F1 = 2/7 < 0.3 -> 0
    low = score_answer("ulm a b c d e f", "ulm")
    assert low.f1 == pytest.approx(2 / 7) and low.reward == 0.0
    assert token_f1("yes indeed", "yes") == 0.0  # yes/no only count exactly
    assert score_answer("", "Ulm").reward == 0.0


# ---------------------------------------------------------------------------------------------------------------
# Result formatting


def test_results_are_formatted_and_capped():
    hits = [SearchHit(f"id{i}", f"Title {i}" if i % 2 else "", "word " * 400, 10.0 - i) for i in range(8)]
    text = format_results(hits)
    assert text.startswith("[Document 1] (id0, 10.000)\n")
    assert "[Document 2] (Title 1, 9.000)\n" in text  # the title when known, else the id
    assert len(text) <= 4000
    for block in text.split("\n\n"):
        _, content = block.split("\n", 1)
        assert len(content) <= 800
    short = format_results(hits[:2], max_doc_chars=50, max_total_chars=120)
    assert len(short) <= 120 and short.count("[Document") == 2
    assert format_results([]) == "No documents matched the query."


def test_search_ignores_unknown_and_stop_words(retriever):
    assert retriever.search("zzzqqq the of and", top_k=5) == []
    assert len(retriever.search("river", top_k=5)) == 5


# ---------------------------------------------------------------------------------------------------------------
# HTTP retrieval server


def test_http_server_round_trip_matches_in_process_search(world, retriever):
    with RetrievalServer(retriever) as server:
        assert server.url.startswith("http://127.0.0.1:")
        remote = HTTPRetriever(server.url)
        for query in ["Which river is longest", world.by_kind["person"][3], "zzzqqq"]:
            local_hits, remote_hits = retriever.search(query, 4), remote.search(query, 4)
            assert [h.passage_id for h in remote_hits] == [h.passage_id for h in local_hits]
            assert [h.score for h in remote_hits] == pytest.approx([h.score for h in local_hits])
            assert [h.title for h in remote_hits] == [h.title for h in local_hits]
        with urllib.request.urlopen(server.url + "/health") as response:
            assert json.loads(response.read()) == {"status": "ok", "documents": len(world.passages)}

        # The env over HTTP sees exactly what the in-process env sees.
        local_env, http_env = SearchQAEnv(top_k=5), SearchQAEnv(top_k=5, retriever_url=server.url)
        assert local_env.reset(4) == http_env.reset(4)
        for entity in local_env.episode.hops:
            assert local_env.step(f"search[{entity}]")[0] == http_env.step(f"search[{entity}]")[0]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/retrieve", b"not json", 400),
        ("/retrieve", b'{"top_k": 3}', 400),
        ("/retrieve", b'{"query": "x", "top_k": 0}', 400),
        ("/search", b'{"query": "x"}', 404),
    ],
)
def test_http_server_rejects_bad_requests(retriever, path, body, status):
    with RetrievalServer(retriever) as server:
        request = urllib.request.Request(server.url + path, data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request)
        assert error.value.code == status and "error" in json.loads(error.value.read())


def test_http_client_reports_an_unreachable_server():
    with RetrievalServer(BM25Retriever(build_world(0).passages[:5])) as server:
        url = server.url
    with pytest.raises(ConnectionError, match="cannot reach"):
        HTTPRetriever(url, timeout=2).search("x")


# ---------------------------------------------------------------------------------------------------------------
# HotpotQA files

HOTPOT_RECORDS = [
    {
        "_id": "a1",
        "question": "Which magazine was started first, Arthur's Magazine or First for Women?",
        "answer": "Arthur's Magazine",
        "type": "comparison",
        "supporting_facts": [["Arthur's Magazine", 0], ["First for Women", 0]],
        "context": [
            ["Arthur's Magazine", ["Arthur's Magazine (1844-1846) was an American literary periodical."]],
            ["First for Women", ["First for Women is a woman's magazine ", "started in 1989."]],
            ["Radio City", ["Radio City is India's first private FM radio station."]],
        ],
    },
    {
        "_id": "b2",
        "question": "What city hosts the radio station Radio City?",
        "answer": "Bangalore",
        "context": [["Radio City", ["Radio City is a radio station in Bangalore."]], ["Other", ["Nothing."]]],
    },
]


@pytest.mark.parametrize("suffix", [".json", ".jsonl.gz"])
def test_hotpotqa_loader_and_env(tmp_path, suffix):
    path = tmp_path / f"tiny{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(HOTPOT_RECORDS))
    else:
        with gzip.open(path, "wt") as f:
            f.write("\n".join(json.dumps(r) for r in HOTPOT_RECORDS))
    questions = load_hotpotqa(path)
    assert [q.qid for q in questions] == ["a1", "b2"]
    assert questions[0].paragraphs[1] == ("First for Women", "First for Women is a woman's magazine started in 1989.")
    assert questions[0].supporting_titles == ("Arthur's Magazine", "First for Women")

    env = SearchQAEnv(hotpotqa_path=str(path))
    assert [env.reset(s) and env.episode.answer for s in range(4)] == ["Arthur's Magazine", "Bangalore"] * 2
    seed = 1
    observation, _, _, _ = env.step("search[Radio City station]")
    assert "(Radio City, " in observation and "[Document 2] (Other" not in observation  # own corpus: 2 passages
    assert env.step("finish[bangalore]")[1] == 1.0

    global_env = SearchQAEnv(hotpotqa_path=str(path), corpus="global")
    global_env.reset(seed)
    observation, _, _, _ = global_env.step("search[Radio City]")
    assert observation.count("(Radio City, ") == 2  # both distinct Radio City paragraphs of the file


def test_hotpotqa_loader_names_the_bad_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"question": "q?", "context": []}]))
    with pytest.raises(ValueError, match=r"record 0 has no 'answer'"):
        load_hotpotqa(path)
    path.write_text(json.dumps([{"question": "q?", "answer": 3, "context": []}]))
    with pytest.raises(TypeError, match=r"record 0 has answer=3"):
        load_hotpotqa(path)
    path.write_text(json.dumps({"question": "q"}))
    with pytest.raises(TypeError, match="JSON list"):
        load_hotpotqa(path)


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


def test_tool_env_schema_and_episode():
    from transformers.utils import get_json_schema

    env = SearchQAToolEnv()
    for tool, argument in ((env.search, "query"), (env.finish, "answer")):
        schema = get_json_schema(tool)["function"]
        assert schema["parameters"]["required"] == [argument]
        assert schema["parameters"]["properties"][argument]["type"] == "string"
        assert schema["description"] and schema["parameters"]["properties"][argument]["description"]

    row = {"prompt": [{"role": "user", "content": "Answer."}], "seed": 9, "env_config": '{"top_k": 2}'}
    question = env.reset(**row)
    assert question.startswith("\n\nQuestion: ") and question.endswith(TOOL_INSTRUCTIONS)
    hops, answer = env.env.episode.hops, env.env.episode.answer
    assert env.search(hops[0]).count("[Document") == 2  # env_config reached the env
    assert env.finish(answer) == f"Answer recorded: {answer}."
    assert env.get_reward() == 1.0
    assert env.search("more").startswith("The episode is over")
    env.reset(seed=9)  # a row without env_config goes back to the defaults
    assert env.get_reward() == 0.0 and env.env.top_k == 3
    with pytest.raises(ValueError, match="env_config"):
        env.reset(seed=1, env_config="{not json")
    with pytest.raises(TypeError, match="env_config"):
        env.reset(seed=1, env_config="[1, 2]")
    with pytest.raises(TypeError, match="bogus"):
        env.reset(seed=1, env_config={"bogus": 1})


def test_grpo_trainer_runs_one_step_with_scripted_tool_calls(tiny_tokenizer, tiny_model, tmp_path):
    probe = SearchQAEnv()
    probe.reset(7)
    answer, first_hop = probe.episode.answer, probe.episode.hops[0]
    row = {"prompt": [{"role": "user", "content": "Answer the question."}], "seed": 7}  # every rollout shares it
    calls = [
        ("finish", {"answer": answer}),  # rollout 0 answers right away
        ("search", {"query": first_hop}),  # rollout 1 searches (no answer: reward 0)
    ]
    trainer, logged = run_scripted_grpo_step(
        SearchQAToolEnv, row, calls, tiny_model, tiny_tokenizer, tmp_path, max_tool_calling_iterations=2
    )
    environments = trainer.environments
    assert [e.get_reward() for e in environments] == [1.0, 0.0, 0.0, 0.0]
    assert environments[1].env.steps == 1 and environments[1].env.last_results.startswith("Search results")
    assert logged["rewards/SearchQAToolEnv/mean"] == pytest.approx(0.25)
    assert logged["tools/call_frequency"] == pytest.approx(0.5)


def test_default_search_shows_three_passages():
    env = SearchQAEnv()
    env.reset(0)
    observation = env.step(f"search[{env.episode.hops[0]}]")[0]
    assert observation.count("[Document ") == 3
