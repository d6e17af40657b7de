"""`trl-ragen2 diagnose` on policies whose answer is known: an input-dependent and a template policy, taught by
imitation to the tiny model (`tests/diagnose_helpers.py`), diagnosed from their checkpoint folders, a run folder of
checkpoints, and the rollouts they saved."""

import json
import random

import pytest

from trl_ragen2.cli import main
from trl_ragen2.collapse.rollout_file import read_rollouts, write_rollouts
from trl_ragen2.diagnose import diagnose

from .diagnose_helpers import train_policy, write_prompts


FEW = {"max_new_tokens": 16, "num_bootstrap": 300, "num_permutations": 300}  # short chains, fewer resamples


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    """A run folder whose checkpoint-10 is the input-dependent policy and checkpoint-20 the template policy."""
    root = tmp_path_factory.mktemp("diagnose")
    run = root / "run"
    train_policy(run / "checkpoint-10", template=False, steps=60)
    train_policy(run / "checkpoint-20", template=True, steps=60)
    return run, write_prompts(root / "prompts.jsonl")


@pytest.fixture(scope="module")
def run_result(policies, tmp_path_factory):
    run, prompts = policies
    out = tmp_path_factory.mktemp("out")
    return diagnose([str(run)], prompts=str(prompts), out=out, save_rollouts=True, **FEW), out


def test_input_dependent_and_template_policies_get_opposite_verdicts(run_result):
    result, _ = run_result
    healthy, template = result.diagnoses  # the run folder's checkpoints, in step order
    assert (healthy.name, template.name) == ("checkpoint-10", "checkpoint-20")
    assert healthy.regime == "diverse reasoning" and healthy.action.startswith("Healthy")
    assert template.regime == "template collapse" and template.action.startswith("Template collapse")
    good, bad = healthy.scopes["first_turn"].metrics, template.scopes["first_turn"].metrics
    assert good["mi_est_ci_low"] > bad["mi_est_ci_high"]  # the intervals exclude each other
    assert good["retrieval_pvalue"] < 0.01 < bad["retrieval_pvalue"]
    assert good["retrieval_chance"] == bad["retrieval_chance"] == pytest.approx(1 / 8)
    assert list(healthy.scopes) == ["first_turn"]  # single-turn rollouts: no trajectory scope
    # paired over the same eight prompts: the MI drop is sure
    (comparison,) = result.comparisons
    diff, low, high = comparison["differences"]["mi_est"]
    assert high < 0 and low <= diff <= high
    assert result.collapse_alarm == "checkpoint-20"  # the trainers' detector fires where the template begins


def test_saved_rollouts_give_the_same_numbers_as_the_model_path(policies, run_result):
    run, _ = policies
    result, out = run_result
    saved = out / "rollouts-checkpoint-10.jsonl"
    again = diagnose([str(run / "checkpoint-10")], rollouts=str(saved), **FEW).diagnoses[0]
    original = result.diagnoses[0]
    numbers, expected = again.scopes["first_turn"].metrics, original.scopes["first_turn"].metrics
    assert set(numbers) == set(expected)
    for key in set(numbers) - {"time_s"}:  # everything but the wall time
        assert numbers[key] == pytest.approx(expected[key], nan_ok=True), key
    assert again.text == pytest.approx(original.text)
    assert again.scopes["first_turn"].chains == original.scopes["first_turn"].chains


def test_permuted_prompt_control_gives_mi_near_zero(policies, run_result, tmp_path):
    """The input-dependent policy's own chains, each given the prompt of a random row: no input dependence left.

    Retrieval falls to chance and MI-Est to about 0 (its interval covers 0), below the regime threshold. (Slightly below 0: under shuffled
    labels the own column is a random one, whose mean score lies below the log-mean-exp marginal by Jensen's gap,
    which grows with how much the chains' scores differ across prompts; for the template policy it is 0.)"""
    run, _ = policies
    result, out = run_result
    rows = list(read_rollouts(out / "rollouts-checkpoint-10.jsonl"))
    shuffled = [(row.prompt, row.group) for row in rows]
    random.Random(0).shuffle(shuffled)
    for row, (prompt, group) in zip(rows, shuffled, strict=True):
        row.prompt, row.group = prompt, group
    control = diagnose(
        [str(run / "checkpoint-10")], rollouts=write_rollouts(tmp_path / "permuted.jsonl", rows), **FEW
    ).diagnoses[0]
    healthy = result.diagnoses[0].scopes["first_turn"].metrics["mi_est"]
    metrics = control.scopes["first_turn"].metrics
    assert -0.5 * healthy < metrics["mi_est"] < 0.05, (metrics["mi_est"], healthy)  # healthy: about 0.33
    assert metrics["mi_est_ci_low"] < 0 < metrics["mi_est_ci_high"]  # consistent with no dependence
    assert metrics["retrieval_pvalue"] > 0.05
    assert abs(metrics["retrieval_acc"] - metrics["retrieval_chance"]) < 0.1
    assert control.regime == "template collapse"


def test_cli_writes_json_and_the_page_into_out_only(policies, tmp_path, monkeypatch, capsys):
    run, prompts = policies
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.rglob("*"))
    argv = ["diagnose", str(run / "checkpoint-20"), "--prompts", str(prompts), "--num-prompts", "4"]
    argv += ["--group-size", "4", "--max-new-tokens", "12", "--num-bootstrap", "100", "--num-permutations", "100"]
    assert main([*argv, "--json", "--html", "--out", "diag"]) == 0
    report = json.loads(capsys.readouterr().out)
    (diagnosis,) = report["diagnoses"]
    assert diagnosis["num_rollouts"] == 16 and diagnosis["num_prompts"] == 4
    assert diagnosis["regime"] in ("template collapse", "diverse reasoning", "low-entropy collapse")
    assert {"mi_est", "mi_est_ci_low", "retrieval_pvalue", "cond_entropy"} <= set(
        diagnosis["scopes"]["first_turn"]["metrics"]
    )
    written = {p.relative_to(tmp_path).as_posix() for p in set(tmp_path.rglob("*")) - before}
    assert written == {"diag", "diag/diagnosis.json", "diag/diagnosis.html"}
    page = (tmp_path / "diag" / "diagnosis.html").read_text()
    assert "<script" not in page and "regime plane" in page and "class='heat'" in page
    assert "Push the box to target" in page  # the contexts' text, escaped
    stored = json.loads((tmp_path / "diag" / "diagnosis.json").read_text())
    assert len(stored["diagnoses"][0]["scopes"]["first_turn"]["logp"]) == 16  # the matrix, one row per chain
    # the terminal table
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "Retrieval-Acc" in table and "regime thresholds: MI-Est 0.05" in table


def test_cli_names_a_folder_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a model")
    assert main(["diagnose", str(tmp_path), "--env", "sokoban"]) == 1
    error = capsys.readouterr().err
    assert str(tmp_path) in error and "config.json" in error and "adapter_config.json" in error


def test_a_peft_adapter_folder_is_diagnosed(policies, tmp_path):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, prompts = policies
    base = run / "checkpoint-10"
    model = AutoModelForCausalLM.from_pretrained(base)
    adapter = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=True))
    adapter.save_pretrained(tmp_path / "adapter")  # zero-initialised LoRA: the merged model is the base model
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp_path / "adapter")
    small = dict(FEW, num_prompts=4, group_size=4)
    merged = diagnose([str(tmp_path / "adapter")], prompts=str(prompts), **small).diagnoses[0]
    plain = diagnose([str(base)], prompts=str(prompts), **small).diagnoses[0]
    assert merged.scopes["first_turn"].metrics["mi_est"] == pytest.approx(
        plain.scopes["first_turn"].metrics["mi_est"], abs=1e-5
    )


def test_an_environment_rollout_has_a_trajectory_scope_and_its_saved_rollouts_agree(policies, tmp_path):
    """Sokoban through the RAGEN turn loop: multi-turn rollouts give the trajectory scope too, and their saved file
    (turns and the environment's messages as chat messages) is scored to the same numbers."""
    run, _ = policies
    model = str(run / "checkpoint-10")
    small = dict(FEW, num_prompts=2, group_size=2, max_turns=2, max_new_tokens=8)
    result = diagnose([model], task="sokoban", out=tmp_path, save_rollouts=True, **small)
    (diagnosis,) = result.diagnoses
    assert list(diagnosis.scopes) == ["first_turn", "trajectory"] and diagnosis.num_prompts == 2
    rows = list(read_rollouts(tmp_path / "rollouts-checkpoint-10.jsonl"))
    assert any(len(row.completion) > 1 for row in rows) and all(row.reward is not None for row in rows)
    again = diagnose([model], rollouts=str(tmp_path / "rollouts-checkpoint-10.jsonl"), **FEW).diagnoses[0]
    for scope in ("first_turn", "trajectory"):
        for key in ("mi_est", "cond_entropy", "retrieval_acc", "num_pairs"):
            assert again.scopes[scope].metrics[key] == pytest.approx(diagnosis.scopes[scope].metrics[key]), key
