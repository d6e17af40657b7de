"""`trl-ragen2 diagnose` through vLLM's CPU build: generation and scoring on the real engine, and the same rollouts
scored by transformers give the same numbers."""

import json

import pytest


pytestmark = pytest.mark.vllm
vllm = pytest.importorskip("vllm")

from trl_ragen2.cli import main  # noqa: E402
from trl_ragen2.diagnose import diagnose  # noqa: E402


FLOAT32_TOLERANCE = 1e-4  # nats per token; the scorers agree to about 2e-6 per pair (test_vllm_scoring.py)
FEW = {"num_prompts": 4, "group_size": 2, "max_new_tokens": 8, "num_bootstrap": 50, "num_permutations": 50}


def test_diagnose_rolls_out_and_scores_with_vllm(path, tmp_path):  # no capsys: vLLM needs real file descriptors
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Push the box to target {t}."}) + "\n" for t in "abcd"))
    out = tmp_path / "out"
    result = diagnose([path], prompts=str(prompts), engine="vllm", out=out, save_rollouts=True, **FEW)
    (diagnosis,) = result.diagnoses
    assert result.notes == [] and diagnosis.engine == {"first_turn": "vllm"}
    assert diagnosis.num_rollouts == 8 and diagnosis.num_prompts == 4
    metrics = diagnosis.scopes["first_turn"].metrics
    assert metrics["num_pairs"] > 0 and metrics["num_unscored"] == 0
    # the rollouts vLLM generated, scored again by transformers through the command line
    (saved,) = out.glob("rollouts-*.jsonl")
    argv = ["diagnose", path, "--rollouts", str(saved), "--engine", "transformers", "--out", str(tmp_path / "again")]
    argv += ["--num-bootstrap", "50", "--num-permutations", "50"]
    assert main(argv) == 0
    (again,) = json.loads((tmp_path / "again" / "diagnosis.json").read_text())["diagnoses"]
    assert again["engine"] == {"first_turn": "transformers"}
    other = again["scopes"]["first_turn"]["metrics"]
    for key in ("mi_est", "cond_entropy", "marginal_entropy"):
        assert other[key] == pytest.approx(metrics[key], abs=FLOAT32_TOLERANCE), key
    assert other["num_pairs"] == metrics["num_pairs"]


def test_auto_probes_the_engines_once_over_a_series(path, tmp_path):
    """`engine="auto"` with vLLM: generation by vLLM; scoring as in a trainer's `mi_engine="auto"`: both engines time
    a slice of the first model's pairs, and the faster one scores every model of the series."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Go to {t}."}) + "\n" for t in "ab"))
    small = dict(FEW, num_prompts=2)
    result = diagnose([path, path], prompts=str(prompts), engine="auto", **small)
    assert result.notes == []  # vLLM started for both
    first, second = (d.engine["first_turn"] for d in result.diagnoses)
    assert first == second and first in ("transformers", "vllm")
    assert len(result.comparisons) == 1
