"""Attacks on the servers and environments, as a hostile model or client would make them, each contained.

Every server is bound to 127.0.0.1 on a free port, with short timeouts so each attack ends in seconds; each test
checks that the server's threads and connections are gone afterwards, and files live in `tmp_path`.

- SearchQA retrieval server: 200 concurrent steps, bad and negative Content-Length, oversized and chunked bodies,
  a JSON nesting bomb, non-UTF-8 bodies, stalled bodies and headers (slowloris), idle connections, the connection
  cap, a failing search, an overlong request line in the access log.
- SearchQA client: retries with backoff on 503 and resets, no retry on 400, an unreachable server, hostile answers
  (not JSON, a nesting bomb, 17 MiB, a non-finite score, lone surrogates); `step` turns failures into an
  observation, `info["env_error"]` and the `env_error_rate` metric.
- WebShop: a 30 MiB POST, the session cookie, `/replay` over hostile log folders, bounded log lines, lone
  surrogates with `log_path`.
- MetaMathQA with math-verify: a huge binomial in the main thread and in another thread.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from trl_ragen2_envs.searchqa import BM25Retriever, HTTPRetriever, RetrievalError, SearchQAEnv, build_world
from trl_ragen2_envs.searchqa.env import SEARCH_UNAVAILABLE
from trl_ragen2_envs.searchqa.retrieval import MAX_RESPONSE_BYTES
from trl_ragen2_envs.searchqa.server import MAX_LOG_CHARS, RetrievalServer, ServerLimits


# Short limits: a stalled read ends after 1 s, any connection after 2 s (plus the 0.5 s poll of serve_forever).
FAST = ServerLimits(read_timeout_s=1.0, request_timeout_s=2.0)


@pytest.fixture(scope="module")
def retriever():
    return BM25Retriever(build_world(0).passages)


@pytest.fixture
def no_leftover_threads():
    """Fails the test if a thread it started is still alive a few seconds after it ended."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not leftover:
            return
        time.sleep(0.05)
    pytest.fail(f"threads left running: {[t.name for t in leftover]}")


@pytest.fixture
def server(retriever, no_leftover_threads):
    with RetrievalServer(retriever, limits=FAST) as running:
        assert running.url.startswith("http://127.0.0.1:")
        yield running
        wait_until(lambda: running.httpd.open_connections == 0, "connections still open after the test")


def wait_until(condition, message, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(message)
        time.sleep(0.02)


def connect(server) -> socket.socket:
    return socket.create_connection(server.httpd.server_address[:2], timeout=10)


def exchange(server, data: bytes) -> tuple[int | None, bytes, float]:
    """Send `data` on a fresh connection (kept open for writing) and read the answer: (status, body, seconds)."""
    started = time.monotonic()
    with connect(server) as sock:
        sock.sendall(data)
        response = b""
        while chunk := sock.recv(1 << 16):
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    match = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    return (int(match.group(1)) if match else None), body, time.monotonic() - started


def post_head(*headers: str) -> bytes:
    return ("POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()


# ---------------------------------------------------------------------------------------------------------------
# SearchQA retrieval server


def test_200_concurrent_steps_all_succeed_without_client_retries(server):
    # Before the deep listen backlog, 69-73 of 200 simultaneous connections were reset (backlog 5, no retry).
    envs = [SearchQAEnv(retriever_url=server.url, retriever_retries=0) for _ in range(200)]
    for seed, env in enumerate(envs):
        env.reset(seed)
    start = threading.Barrier(len(envs))

    def search(env):
        start.wait()
        return env.step("search[river city]")

    with ThreadPoolExecutor(len(envs)) as pool:
        results = list(pool.map(search, envs))
    assert all("env_error" not in info for _, _, _, info in results), [r[3]["env_error"] for r in results][:3]
    assert all("[Document 1]" in observation for observation, _, _, _ in results)


@pytest.mark.parametrize(
    "values",
    [["-1"], ["abc"], ["+5"], ["1e3"], ["0x10"], ["\u0663"], ["5", "6"], ["9" * 19]],
    ids=["negative", "text", "plus", "exponent", "hex", "arabic-digit", "two-values", "19-digits"],
)
def test_bad_content_length_gets_400_without_reading_the_body(server, values):
    # The socket stays open for writing: a server that read "until the end" (Content-Length -1) would wait forever.
    status, body, seconds = exchange(server, post_head(*(f"Content-Length: {v}" for v in values)))
    assert status == 400 and "Content-Length" in json.loads(body)["error"]
    assert seconds < FAST.read_timeout_s  # answered at once, not after a read timed out


def test_announced_oversized_body_gets_413_before_any_byte_is_read(server):
    status, body, seconds = exchange(server, post_head(f"Content-Length: {50 << 20}"))
    assert status == 413 and "exceeds" in json.loads(body)["error"] and seconds < FAST.read_timeout_s


def test_chunked_body_gets_400(server):
    status, body, _ = exchange(server, post_head("Transfer-Encoding: chunked") + b"5\r\nhello\r\n0\r\n\r\n")
    assert status == 400 and "Transfer-Encoding" in json.loads(body)["error"]


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"[" * 200_000, "nests deeper than 16"),
        (b'{"query": ' + b"[" * 17 + b"]" * 17 + b"}", "nests deeper than 16"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"query": "unterminated', "not JSON"),
    ],
    ids=["nesting-bomb", "17-levels", "not-utf8", "unterminated"],
)
def test_hostile_json_bodies_get_400_with_a_reason(server, payload, reason):
    status, body, _ = exchange(server, post_head(f"Content-Length: {len(payload)}") + payload)
    assert status == 400 and reason in json.loads(body)["error"]


def test_json_strings_may_hold_brackets_and_lone_surrogate_escapes(server):
    payload = json.dumps({"query": "[[[[[[[[[[[[[[[[[[[[ river \ud800", "top_k": 2}).encode()
    status, body, _ = exchange(server, post_head(f"Content-Length: {len(payload)}") + payload)
    assert status == 200 and len(json.loads(body)["results"]) == 2


def test_stalled_body_gets_408_after_the_read_timeout(server):
    status, body, seconds = exchange(server, post_head("Content-Length: 100") + b"{")
    assert status == 408 and "did not arrive" in json.loads(body)["error"]
    assert FAST.read_timeout_s <= seconds < FAST.read_timeout_s + 1.5


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(None)  # with a timeout set, recv first waits for data even with MSG_DONTWAIT
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:  # open, nothing to read
        return False
    except OSError:  # reset
        return True


def test_slowloris_headers_are_cut_at_the_connection_deadline(server):
    # One byte every 0.3 s never trips the 1 s read timeout; the 2 s connection deadline still ends it.
    started = time.monotonic()
    with connect(server) as sock:
        sock.sendall(b"POST /retrieve HTTP/1.1\r\n")
        for _ in range(40):
            try:
                sock.sendall(b"X")
            except OSError:
                break
            if closed_by_peer(sock):
                break
            time.sleep(0.3)
        assert closed_by_peer(sock)
    seconds = time.monotonic() - started
    assert FAST.request_timeout_s - 0.1 <= seconds < FAST.request_timeout_s + 2.0


def test_idle_connections_do_not_delay_other_clients(server):
    idle = [connect(server) for _ in range(20)]  # connected, never send a byte
    try:
        started = time.monotonic()
        hits = HTTPRetriever(server.url, retries=0).search("river", 3)
        assert len(hits) == 3 and time.monotonic() - started < 0.5 * FAST.read_timeout_s
    finally:
        for sock in idle:
            sock.close()


def test_connections_beyond_the_cap_get_503_and_the_client_retries_through(retriever, no_leftover_threads):
    limits = ServerLimits(read_timeout_s=1.0, request_timeout_s=1.5, max_connections=2)
    with RetrievalServer(retriever, limits=limits) as server:
        idle = [connect(server) for _ in range(2)]
        wait_until(lambda: server.httpd.open_connections == 2, "the idle connections were not accepted")
        status, body, _ = exchange(server, post_head("Content-Length: 2") + b"{}")
        assert status == 503 and "connection limit" in json.loads(body)["error"]
        # The idle connections are shut at their deadline; a client with retries gets through after that.
        hits = HTTPRetriever(server.url, retries=6, backoff_s=0.2).search("river", 2)
        assert len(hits) == 2
        for sock in idle:
            sock.close()


def test_a_failing_search_gets_500_with_a_json_error(no_leftover_threads):
    class Broken:
        def __len__(self):
            return 1

        def search(self, query, top_k):
            raise RuntimeError("index corrupted")

    with RetrievalServer(Broken(), limits=FAST) as server:
        with pytest.raises(RetrievalError, match="HTTP 500.*the search failed on the server"):
            HTTPRetriever(server.url, retries=0).search("x")


def test_access_log_lines_are_bounded(server, caplog):
    with caplog.at_level(logging.DEBUG, logger="trl_ragen2_envs.searchqa.server"):
        status, _, _ = exchange(server, b"GET /" + b"\xff" * 60_000 + b" HTTP/1.0\r\n\r\n")
    assert status == 404
    lines = [r.getMessage() for r in caplog.records if r.name == "trl_ragen2_envs.searchqa.server"]
    assert lines and all(len(line) < MAX_LOG_CHARS + 50 for line in lines)


# ---------------------------------------------------------------------------------------------------------------
# SearchQA client and environment


class ScriptedHandler(http.server.BaseHTTPRequestHandler):
    """Answers POSTs from the server's `answers` list in turn (status, body bytes), counting them."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        status, body = self.server.answers[min(self.server.calls, len(self.server.answers) - 1)]
        self.server.calls += 1
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted_server(no_leftover_threads):
    """An HTTP server on 127.0.0.1 answering from a script: `scripted_server(answers)` -> (url, server)."""
    servers = []

    def start(answers):
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ScriptedHandler)
        httpd.answers, httpd.calls = answers, 0
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        servers.append((httpd, thread))
        return f"http://127.0.0.1:{httpd.server_address[1]}", httpd

    yield start
    for httpd, thread in servers:
        httpd.shutdown()
        thread.join()
        httpd.server_close()


RESULTS = json.dumps({"results": [{"id": "a", "title": "T", "content": "river text", "score": 1.5}]}).encode()


def test_client_retries_503_with_backoff_then_succeeds(scripted_server):
    url, httpd = scripted_server([(503, b"busy"), (503, b"busy"), (200, RESULTS)])
    started = time.monotonic()
    hits = HTTPRetriever(url, retries=3, backoff_s=0.05).search("river")
    assert [h.content for h in hits] == ["river text"] and httpd.calls == 3
    assert time.monotonic() - started >= 0.05 * 0.5 + 0.1 * 0.5  # two backoffs (jitter: at least half each)


def test_client_gives_up_after_its_retries_and_never_retries_a_400(scripted_server):
    url, httpd = scripted_server([(503, b"busy")])
    with pytest.raises(RetrievalError, match=r"HTTP 503.*tried 2 times"):
        HTTPRetriever(url, retries=1, backoff_s=0.01).search("river")
    assert httpd.calls == 2
    url, httpd = scripted_server([(400, b'{"error": "bad"}')])
    with pytest.raises(RetrievalError, match="HTTP 400"):
        HTTPRetriever(url, retries=3, backoff_s=0.01).search("river")
    assert httpd.calls == 1


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"<html>", "not JSON"),
        (b"[" * 100_000, "nests deeper"),
        (b" " * (MAX_RESPONSE_BYTES + 1), "more than"),
        (b'{"results": [{"content": "x", "score": NaN}]}', "not a finite number"),
        (b'{"results": "none"}', "without a 'results' list"),
    ],
    ids=["html", "nesting-bomb", "17-MiB", "nan-score", "no-results"],
)
def test_client_rejects_hostile_answers_with_a_retrieval_error(scripted_server, body, reason):
    url, _ = scripted_server([(200, body)])
    with pytest.raises(RetrievalError, match=reason):
        HTTPRetriever(url, retries=0).search("river")


def test_client_makes_lone_surrogates_in_answers_valid_text(scripted_server):
    url, _ = scripted_server([(200, b'{"results": [{"id": "\\ud800", "title": "a\\udfffb", "content": "c"}]}')])
    (hit,) = HTTPRetriever(url, retries=0).search("river")
    assert (hit.passage_id, hit.title) == ("?", "a?b")
    hit.title.encode("utf-8")  # valid UTF-8: the tokenizer can read it


def test_step_turns_an_unreachable_server_into_an_observation_under_ragens_rules(server):
    dead_url = server.url
    server.shutdown()
    env = SearchQAEnv(rules="ragen", retriever_url=dead_url, retriever_retries=0, retriever_timeout=1.0)
    env.reset(0)
    observation, reward, done, info = env.step("search[anything]")
    assert observation.startswith(f"Search results for 'anything':\n{SEARCH_UNAVAILABLE}\n\nAvailable actions: ")
    assert (reward, done, info["action_is_valid"], info["num_results"], env.steps) == (0.0, False, True, 0, 1)
    assert "cannot reach the retrieval server" in info["env_error"]


def test_step_turns_an_unreachable_server_into_an_observation_and_a_metric(server, tiny_tokenizer):
    from trl_ragen2.agents.generation import ScriptedPolicy
    from trl_ragen2.agents.rollout import RolloutConfig, RolloutEngine
    from trl_ragen2.agents.rollout_func import evaluate_episodes
    from trl_ragen2_envs.datasets import build_rows

    dead_url = server.url  # a port that refuses connections once the server is gone
    server.shutdown()
    env = SearchQAEnv(retriever_url=dead_url, retriever_retries=1, retriever_timeout=1.0)
    question = env.reset(0)
    observation, reward, done, info = env.step("search[anything]")
    assert observation.startswith(question) and SEARCH_UNAVAILABLE in observation
    assert (reward, done, info["action_is_valid"], info["num_results"], env.steps) == (0.0, False, True, 0, 1)
    assert "cannot reach the retrieval server" in info["env_error"] and "tried 2 times" in info["env_error"]

    rows = build_rows("searchqa", "validation", 2, env_config={"retriever_url": dead_url, "retriever_retries": 0})
    engine = RolloutEngine(tiny_tokenizer, RolloutConfig(max_turns=2, max_actions_per_turn=1))
    policy = ScriptedPolicy(lambda episode: "look it up </think><answer>search[river]</answer>", tiny_tokenizer)
    metrics = evaluate_episodes(engine, policy, rows)["metrics"]
    assert metrics["searchqa/env_error_rate"] == 1.0 and metrics["searchqa/valid_action_rate"] == 1.0


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("sokoban", {}), ("frozen_lake", {}), ("countdown", {}), ("metamathqa", {}), ("searchqa", {}),
     ("searchqa", {"rules": "ragen"})],
    ids=["sokoban", "frozen_lake", "countdown", "metamathqa", "searchqa", "searchqa-ragen-rules"],
)  # fmt: skip
@pytest.mark.parametrize(
    "action",
    ["x" * 10_000_000, "search[" + "river " * 3_000 + "]", "finish[" + "a " * 9_000 + "]", "[" * 1_000_000,
     "<think>" * 2_850, "\\boxed{" * 2_850, "**" * 9_999],
    ids=["10M-chars", "18k-query", "18k-answer", "1M-brackets", "unclosed-think", "unclosed-boxed", "stars"],
)  # fmt: skip
def test_huge_actions_are_fast_and_give_bounded_observations(name, kwargs, action):
    # The last three are free text that RAGEN's rules read as an answer; a regex search from each unclosed tag to
    # the end of the text would take quadratic time.
    from trl_ragen2_envs import make_env

    env = make_env(name, **kwargs)
    env.reset(0)
    started = time.monotonic()
    observation, _, _, info = env.step(action)
    assert time.monotonic() - started < 1.0 and len(observation) < 10_000
    assert len(json.dumps(info, default=str)) < 10_000


# ---------------------------------------------------------------------------------------------------------------
# WebShop


@pytest.fixture(scope="module")
def shop_kwargs(tmp_path_factory):
    pytest.importorskip("flask")
    from .webshop_data import index_cache_dir

    return {"procedural": True, "procedural_products": 300, "cache_dir": index_cache_dir(tmp_path_factory)}


def test_webshop_ui_caps_request_size_and_keeps_messages_out_of_the_cookie(shop_kwargs, tmp_path):
    from trl_ragen2_envs.webshop.ui.server import MAX_MESSAGE_CHARS, create_app

    client = create_app(log_dir=str(tmp_path), **shop_kwargs).test_client()
    client.get("/")
    assert client.post("/act", data={"search": "x" * (30 << 20)}).status_code == 413
    assert sum(path.stat().st_size for path in tmp_path.iterdir()) < 10_000  # the 30 MiB never reached the log

    # A 990-character element makes a 1,000-character invalid-action message; the cookie holds only the session id.
    assert client.post("/act", data={"click": "y" * 990}).status_code == 302
    cookie = client.get_cookie("session")
    assert cookie is not None and len(cookie.value) < 200
    page = client.get("/").get_data(as_text=True)
    message = re.search(r"That did nothing: [^<]*", page).group()
    assert len(message.replace("&#39;", "'")) <= MAX_MESSAGE_CHARS and message.endswith("...")
    assert "That did nothing" not in client.get("/").get_data(as_text=True)  # shown once


def write_hostile_log_folder(folder, good_line: str) -> None:
    (folder / "good.jsonl").write_text(good_line + "\n")
    (folder / "binary.jsonl").write_bytes(os.urandom(4000) + b"\n\xff\xfe\n" + good_line.encode() + b"\n")
    records = [
        {"episode": "e1", "step": 0, "info": None, "reward": None, "done": "yes", "observation": ["x"]},
        {"episode": "e1", "step": "abc"},  # not a step record: skipped
        {"episode": "e1", "step": 1, "info": "text", "reward": "high", "action": {"a": 1}},
        {"episode": ["e2"], "step": 0},  # not a record: skipped
        {"episode": "e3", "step": 0, "action": "\ud800 lone", "info": {"\udfff": "\ud83d"}},
    ]
    odd = [json.dumps(r) for r in records] + [
        "[" * 100_000,
        "x" * (2 << 20),
        '{"episode": 1, "step": 99999999999999999999}',
    ]
    (folder / "odd.jsonl").write_text("\n".join(odd) + "\n")
    (folder / ("n" * 240 + ".jsonl")).write_text(good_line + "\n")
    (folder / "folder.jsonl").mkdir()
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "fifo.jsonl")  # opening it for reading would block forever


def test_replay_survives_a_hostile_log_folder(shop_kwargs, tmp_path):
    from trl_ragen2_envs.webshop import WebShopEnv
    from trl_ragen2_envs.webshop.ui.server import create_app

    env = WebShopEnv(split="test", log_path=str(tmp_path / "agent.log"), **shop_kwargs)
    env.reset(seed=1)
    env.step("search[shirt]")
    good_line = (tmp_path / "agent.log").read_text().splitlines()[1]
    logs = tmp_path / "logs"
    logs.mkdir()
    write_hostile_log_folder(logs, good_line)
    client = create_app(log_dir=str(logs), **shop_kwargs).test_client()

    index = client.get("/replay")
    assert index.status_code == 200
    links = re.findall(r'href="(/replay/[^"]+)"', index.get_data(as_text=True))
    assert {link.split("/")[2] for link in links} >= {"good.jsonl", "binary.jsonl", "odd.jsonl"}
    for link in links:
        for step in ("", "?step=1", "?step=-5", "?step=" + "9" * 5000):
            assert client.get(link + step).status_code == 200, link + step
    odd = client.get("/replay/odd.jsonl/e3").get_data(as_text=True)
    assert "? lone" in odd  # the lone surrogate shown as "?"
    for name, episode in [
        ("fifo.jsonl", "x"),
        ("folder.jsonl", "x"),
        ("n" * 300 + ".jsonl", "x"),
        ("good.jsonl", "e" * 5000),
        ("missing.jsonl", "x"),
        ("..%2Fagent.log", "x"),
    ]:
        assert client.get(f"/replay/{name}/{episode}").status_code == 404, name


def test_webshop_log_lines_are_bounded_and_hold_lone_surrogates(shop_kwargs, tmp_path):
    from trl_ragen2_envs.webshop import WebShopEnv
    from trl_ragen2_envs.webshop.episode_log import read_episodes

    log = tmp_path / "steps.jsonl"
    env = WebShopEnv(split="test", log_path=str(log), **shop_kwargs)
    env.reset(seed=3)
    huge = "search[" + "x" * (30 << 20) + "]"
    _, _, _, info = env.step(huge)
    assert not info["action_is_valid"] and "characters long" in info["invalid_reason"]
    for action in ["search[\ud800]", "click[\udcff back]", "\ud83d"]:
        env.step(action)  # must not raise
    lines = log.read_bytes().splitlines()
    assert len(lines) == 5 and max(len(line) for line in lines) < 64 << 10
    records = [json.loads(line) for line in lines]  # every line is valid UTF-8 JSON
    assert records[1]["action_chars"] == len(huge) and len(records[1]["action"]) == 1000
    assert records[2]["action"] == "search[\ud800]"  # logged without loss (as a JSON escape)
    (episode,) = read_episodes(log).values()
    assert episode[2]["action"] == "search[?]"  # and shown as valid text


# ---------------------------------------------------------------------------------------------------------------
# MetaMathQA with math-verify


@pytest.fixture
def math_judge():
    pytest.importorskip("math_verify")
    from trl_ragen2_envs.metamathqa import judge as module

    yield module
    module._WORKER.stop()  # no judging process outlives the test


def test_math_verify_is_bounded_in_the_main_thread_and_restores_the_alarm(math_judge):
    from trl_ragen2_envs.metamathqa import MetaMathQAEnv

    assert threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGALRM)
    env = MetaMathQAEnv(reward_rule="lenient", use_math_verify=True, math_verify_timeout_s=0.5)
    env.reset(seed=0)
    math_judge.math_verify_verdict("1", "1")  # imports and parser set-up happen once, untimed
    started = time.monotonic()
    _, reward, done, info = env.step(r"\binom{10^{7}}{5*10^{6}}")  # over 60 s without a time limit
    assert time.monotonic() - started < 3.0 and (reward, done, info["action_is_valid"]) == (0.0, True, True)
    assert signal.getsignal(signal.SIGALRM) is previous
    assert math_judge.math_verify_verdict(r"\frac{1}{2}", "0.5", 5.0) == "equal"  # the judge still judges


def test_math_verify_is_bounded_in_another_thread(math_judge):
    verdicts = {}

    def judge_in_thread():
        verdicts["half"] = math_judge.math_verify_verdict(r"\frac{1}{2}", "0.5", 5.0)  # starts the worker
        started = time.monotonic()
        verdicts["binomial"] = math_judge.math_verify_verdict(r"\binom{10^{7}}{5*10^{6}}", "42", 0.5)
        verdicts["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=judge_in_thread)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert verdicts["half"] == "equal" and verdicts["binomial"] == "timeout"
    assert verdicts["seconds"] < 0.5 + math_judge.WORKER_MARGIN_S
    assert math_judge._WORKER.process.poll() is None  # the worker timed out the judgement itself and lives on


def test_an_unresponsive_math_worker_is_killed_and_replaced(math_judge, monkeypatch):
    started_processes = []
    real_popen = math_judge.subprocess.Popen

    def recording_popen(*args, **kwargs):
        started_processes.append(real_popen(*args, **kwargs))
        return started_processes[-1]

    monkeypatch.setattr(math_judge.subprocess, "Popen", recording_popen)
    worker = math_judge._Worker()
    worker.command = (sys.executable, "-c", "import time; time.sleep(60)")  # reads nothing, answers nothing
    monkeypatch.setattr(math_judge, "WORKER_START_S", 0.0)
    started = time.monotonic()
    assert worker.ask("1", "1", 0.3) == "timeout"
    assert time.monotonic() - started < 0.3 + math_judge.WORKER_MARGIN_S + 1.0
    assert worker.process is None and started_processes[0].poll() is not None  # killed and reaped
    worker.command = math_judge._Worker.command
    monkeypatch.setattr(math_judge, "WORKER_START_S", 60.0)
    assert worker.ask("1", "1", 5.0) == "equal"  # a new worker answers
    worker.stop()
    assert started_processes[1].poll() is not None


def test_the_first_judgement_of_a_process_does_not_spend_its_budget_on_imports():
    pytest.importorskip("math_verify")
    import subprocess

    code = (
        "from trl_ragen2_envs.metamathqa.judge import math_verify_verdict as v; print(v('a^2-b^2', '(a-b)(a+b)', 0.5))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "equal", result.stderr[-500:]  # cold imports alone take longer than 0.5 s
