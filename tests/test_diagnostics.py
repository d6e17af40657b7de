"""MIDiagnostics on hand-built GRPO batches, its config and schedule, and the callback on a plain trl.GRPOTrainer."""

import json
import logging
import math

import pytest
import torch

from trl_ragen2.collapse.diagnostics import STATE_FILE, MIDiagnostics, MIDiagnosticsCallback, MIDiagnosticsConfig
from trl_ragen2.collapse.scoring import TransformersCrossScorer

from .diagnostics_batches import ENV, ROLLOUTS, build_batch, encode


class RecordingScorer:
    """Scores with the transformers engine and records what it was asked to score."""

    def __init__(self, model):
        self.inner, self.calls, self.pairs_scored = TransformersCrossScorer(model), [], []

    def score(self, contexts, chains, mask=None, **kwargs):
        self.calls.append((contexts, chains))
        self.pairs_scored.append(len(contexts) * len(chains) if mask is None else int(mask.sum()))
        return self.inner.score(contexts, chains, mask, **kwargs)


def test_scopes_build_the_right_pairs(tiny_model, tiny_tokenizer):
    batch, prompts, completions = build_batch(tiny_tokenizer, ROLLOUTS)
    scorer = RecordingScorer(tiny_model)
    diagnostics = MIDiagnostics(MIDiagnosticsConfig(num_samples=64, trajectory_chains=None), scorer=scorer)
    metrics = diagnostics.compute(batch, [{}] * 4, tokenizer=tiny_tokenizer, scorer=scorer)
    think = encode(tiny_tokenizer, "<think>")
    # first turn: the two distinct prompts (+ <think>) are the columns; row 2's first turn has empty reasoning
    first_contexts, first_chains = scorer.calls[0]
    assert first_contexts == [prompts[0] + think, prompts[2] + think]
    decoded = sorted(tiny_tokenizer.decode(c) for c in first_chains)
    assert decoded == [" box is left ", " maybe down ", " the goal is up "]
    assert metrics["ragen2/mi/first_turn/num_pairs"] == 3
    assert metrics["ragen2/mi/first_turn/num_dropped_empty"] == 1
    assert metrics["ragen2/mi/first_turn/num_columns"] == 2
    # trajectory: contexts are prompt + completion history before the turn (+ <think>)
    traj_contexts, traj_chains = scorer.calls[1]
    second_turn = len(encode(tiny_tokenizer, ROLLOUTS[0][1][0] + ENV))
    assert prompts[0] + completions[0][:second_turn] + think in traj_contexts
    assert " now left " in {tiny_tokenizer.decode(c) for c in traj_chains}
    pairs = metrics["ragen2/mi/trajectory/num_pairs"]
    assert pairs + metrics["ragen2/mi/trajectory/num_dropped_empty"] == 64
    assert metrics["ragen2/mi/trajectory/num_columns"] == pairs  # each kept draw is a column
    assert 1 / pairs <= metrics["ragen2/mi/trajectory/retrieval_chance"] < 1  # repeated draws mark `same` columns
    finite = [k for k, v in metrics.items() if math.isfinite(v)]
    assert len(finite) == len(metrics)
    # the whole diagnostics' time holds both scopes' scoring
    scopes = metrics["ragen2/mi/first_turn/time_s"] + metrics["ragen2/mi/trajectory/time_s"]
    assert scopes <= metrics["ragen2/mi/time_s"] < scopes + 60


def test_trajectory_chains_score_a_subset_of_the_chains_against_every_context(tiny_model, tiny_tokenizer):
    batch, _, _ = build_batch(tiny_tokenizer, ROLLOUTS)
    results = {}
    for chains in (None, 5):
        diagnostics = MIDiagnostics(MIDiagnosticsConfig(trajectory_chains=chains))
        metrics = diagnostics.compute(
            batch, [{}] * 4, tokenizer=tiny_tokenizer, scorer=TransformersCrossScorer(tiny_model)
        )
        results[chains] = diagnostics.last_results["trajectory"], metrics
    (full, full_metrics), (subset, subset_metrics) = results[None], results[5]
    assert subset.logp.shape == (5, full.logp.shape[1])  # 5 chains, every column of the full matrix
    assert subset_metrics["ragen2/mi/trajectory/num_columns"] == full_metrics["ragen2/mi/trajectory/num_columns"]
    # each scored chain's row is its row of the full matrix: same chain, same own column, same scores
    full_rows = {
        (tuple(chain), target): row
        for chain, target, row in zip(full.chains, full.target.tolist(), full.logp, strict=True)
    }
    for chain, target, row in zip(subset.chains, subset.target.tolist(), subset.logp, strict=True):
        torch.testing.assert_close(row, full_rows[tuple(chain), target], rtol=0, atol=1e-4)
    # the first-turn scope is not subsampled
    assert subset_metrics["ragen2/mi/first_turn/num_pairs"] == full_metrics["ragen2/mi/first_turn/num_pairs"]


def test_scopes_share_scores_within_a_batch(tiny_model, tiny_tokenizer):
    single_turn = [(user, segments[:1]) for user, segments in ROLLOUTS]
    batch, _, _ = build_batch(tiny_tokenizer, single_turn)
    scorer = RecordingScorer(tiny_model)
    metrics = MIDiagnostics().compute(batch, None, tokenizer=tiny_tokenizer, scorer=scorer)
    # every row is in the first-turn sample, so the single-turn trajectory draws repeat already-scored pairs
    assert scorer.pairs_scored == [3 * 2, 0]
    fresh = MIDiagnostics(MIDiagnosticsConfig(scopes=("trajectory",))).compute(
        batch, None, tokenizer=tiny_tokenizer, scorer=TransformersCrossScorer(tiny_model)
    )
    for key in ("mi_est", "retrieval_acc", "marginal_seq"):
        assert metrics[f"ragen2/mi/trajectory/{key}"] == pytest.approx(fresh[f"ragen2/mi/trajectory/{key}"], abs=1e-9)


def test_rollout_turn_spans_take_precedence(tiny_model, tiny_tokenizer):
    batch, _, completions = build_batch(tiny_tokenizer, ROLLOUTS[:2])
    del batch["tool_mask"]
    first = len(encode(tiny_tokenizer, ROLLOUTS[0][1][0]))
    rows = [{"turn_spans": [(0, first)]}, {}]  # row 0: only its first turn is a model turn; row 1: whole completion
    scorer = RecordingScorer(tiny_model)
    config = MIDiagnosticsConfig(scopes=("trajectory",), num_samples=20)
    MIDiagnostics(config).compute(batch, rows, tokenizer=tiny_tokenizer, scorer=scorer)
    chains = {tiny_tokenizer.decode(c) for c in scorer.calls[0][1]}
    assert chains == {" the goal is up ", " maybe down "}


def test_negatives_mode_scores_k_plus_one_columns(tiny_model, tiny_tokenizer):
    batch, _, _ = build_batch(tiny_tokenizer, ROLLOUTS)
    config = MIDiagnosticsConfig(scopes=("trajectory",), num_negatives=2, negative_sampling="similar")
    metrics = MIDiagnostics(config).compute(
        batch, None, tokenizer=tiny_tokenizer, scorer=TransformersCrossScorer(tiny_model)
    )
    assert metrics["ragen2/mi/trajectory/num_columns"] == 3
    assert metrics["ragen2/mi/trajectory/mi_upper_bound"] == pytest.approx(math.log(3))
    assert metrics["ragen2/mi/trajectory/retrieval_chance"] == pytest.approx(1 / 3)


def test_a_scope_without_reasoning_logs_nan_and_warns_once(tiny_model, tiny_tokenizer, caplog):
    empty = [("a", ["<think> </think><answer>Up</answer>"]), ("b", ["<think></think><answer>Up</answer>"])]
    batch, _, _ = build_batch(tiny_tokenizer, empty)
    diagnostics = MIDiagnostics(MIDiagnosticsConfig(scopes=("first_turn",)))
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            metrics = diagnostics.compute(
                batch, None, tokenizer=tiny_tokenizer, scorer=TransformersCrossScorer(tiny_model)
            )
    assert math.isnan(metrics["ragen2/mi/first_turn/mi_est"]) and math.isnan(
        metrics["ragen2/mi/first_turn/mi_zscore_ema"]
    )
    assert metrics["ragen2/mi/first_turn/num_pairs"] == 0 and metrics["ragen2/mi/first_turn/num_dropped_empty"] == 2
    assert caplog.text.count("could not be computed") == 1
    assert "no pair with non-empty reasoning" in caplog.text


def test_a_broken_batch_is_reported_not_raised(tiny_tokenizer, caplog):
    with caplog.at_level(logging.WARNING):
        metrics = MIDiagnostics().compute(
            {"prompt_ids": torch.zeros(1, 1)}, None, tokenizer=tiny_tokenizer, scorer=None
        )
    assert all(math.isnan(v) for k, v in metrics.items() if k.endswith("mi_est"))
    assert "reading the batch failed" in caplog.text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("every_n_steps", 0),
        ("num_samples", 0),
        ("trajectory_chains", 1),
        ("scopes", ("first_turn", "all")),
        ("engine", "sglang"),
        ("max_tokens_per_chunk", 0),
        ("pack_tokens", 0),
        ("num_negatives", 0),
        ("negative_sampling", "hardest"),
        ("marginal", "mean"),
        ("ema_alpha", 1.0),
        ("ks", (0,)),
        ("num_permutations", -1),
        ("num_bootstrap", -1),
        ("confidence_level", 1.0),
    ],
)
def test_config_errors_name_field_and_value(field, value):
    with pytest.raises(
        ValueError, match=rf"MIDiagnosticsConfig\.{field}={value!r}".replace("(", r"\(").replace(")", r"\)")
    ):
        MIDiagnosticsConfig(**{field: value})


def test_trainer_config_names_the_mi_field_of_a_bad_uncertainty_setting(tmp_path):
    from trl_ragen2 import SNRFilteredGRPOConfig
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS

    with pytest.raises(ValueError, match=r"mi_num_bootstrap=-1 is invalid; use 0 \(off\)"):
        SNRFilteredGRPOConfig(output_dir=str(tmp_path), mi_num_bootstrap=-1, **CPU_TRAINING_KWARGS)
    config = SNRFilteredGRPOConfig(
        output_dir=str(tmp_path), mi_num_permutations=0, mi_confidence_level=0.9, **CPU_TRAINING_KWARGS
    )
    assert config.mi_diagnostics_config().num_permutations == 0
    assert config.mi_diagnostics_config().confidence_level == 0.9


def test_every_scope_logs_its_p_value_and_intervals_identically_on_a_rerun(tiny_model, tiny_tokenizer):
    batch, _, _ = build_batch(tiny_tokenizer, ROLLOUTS)
    config = MIDiagnosticsConfig(num_samples=64, num_permutations=99, num_bootstrap=200, seed=3)
    runs = [
        MIDiagnostics(config).compute(
            batch, [{}] * 4, tokenizer=tiny_tokenizer, scorer=TransformersCrossScorer(tiny_model), step=5
        )
        for _ in range(2)
    ]
    for run in runs:  # wall times differ; everything else is a function of the matrix, seed, step and scope
        run.pop("ragen2/mi/first_turn/time_s"), run.pop("ragen2/mi/trajectory/time_s"), run.pop("ragen2/mi/time_s")
    assert runs[0] == runs[1]
    for scope in ("first_turn", "trajectory"):
        m = runs[0]
        p = m[f"ragen2/mi/{scope}/retrieval_pvalue"]
        assert 1 / 100 <= p <= 1.0
        assert (
            m[f"ragen2/mi/{scope}/mi_est_ci_low"]
            <= m[f"ragen2/mi/{scope}/mi_est"]
            <= m[f"ragen2/mi/{scope}/mi_est_ci_high"]
        )
        assert 0.0 <= m[f"ragen2/mi/{scope}/retrieval_null_high"] <= 1.0
    off = MIDiagnostics(MIDiagnosticsConfig(num_permutations=0, num_bootstrap=0)).compute(
        batch, [{}] * 4, tokenizer=tiny_tokenizer, scorer=TransformersCrossScorer(tiny_model)
    )
    assert math.isnan(off["ragen2/mi/first_turn/retrieval_pvalue"]) and math.isnan(
        off["ragen2/mi/first_turn/mi_est_ci_low"]
    )
    assert not math.isnan(off["ragen2/mi/first_turn/mi_est"])


def test_text_metrics_cover_every_turn_of_the_batch(tiny_model, tiny_tokenizer):
    from trl_ragen2.collapse.text_metrics import text_template_metrics

    batch, _, _ = build_batch(tiny_tokenizer, ROLLOUTS)
    metrics = MIDiagnostics(MIDiagnosticsConfig(scopes=("first_turn",))).compute(
        batch, [{}] * 4, tokenizer=tiny_tokenizer, scorer=TransformersCrossScorer(tiny_model)
    )
    # the five non-empty reasoning spans, grouped by prompt (row 2's first turn is empty)
    texts = [
        (" the goal is up ", 0),
        (" now left ", 0),
        (" maybe down ", 0),
        (" box is right ", 1),
        (" box is left ", 1),
    ]
    expected = text_template_metrics([encode(tiny_tokenizer, t) for t, _ in texts], [g for _, g in texts])
    logged = {key.removeprefix("ragen2/text/"): v for key, v in metrics.items() if key.startswith("ragen2/text/")}
    assert logged.keys() == expected.keys() and logged["num_chains"] == 5
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, nan_ok=True), key
    quiet = MIDiagnostics(MIDiagnosticsConfig(scopes=("first_turn",), text_metrics=False)).compute(
        batch, [{}] * 4, tokenizer=tiny_tokenizer, scorer=TransformersCrossScorer(tiny_model)
    )
    assert not any(key.startswith("ragen2/text/") for key in quiet)


def test_schedule_runs_at_step_one_then_every_n_steps():
    diagnostics = MIDiagnostics(MIDiagnosticsConfig(every_n_steps=5))
    ran = []
    for step in range(1, 16):
        if diagnostics.is_due(step):
            ran.append(step)
            diagnostics._advance(step)
    assert ran == [1, 5, 10, 15]
    late = MIDiagnostics(MIDiagnosticsConfig(every_n_steps=5))
    late._advance(1)
    assert not late.is_due(4) and late.is_due(7)  # a missed step 5 (no generation then) runs at the next batch
    assert not MIDiagnostics(MIDiagnosticsConfig(enabled=False)).is_due(1)


def test_state_round_trip(tmp_path):
    diagnostics = MIDiagnostics()
    diagnostics.ema["first_turn"].update(
        {"marginal_std": 0.5, "marginal_std_seq": 3.0, "mi_est": 0.1, "mi_seq_est": 1.0}
    )
    diagnostics.next_step = 15
    path = diagnostics.save(tmp_path)
    restored = MIDiagnostics()
    assert restored.load(tmp_path) and json.loads(open(path).read())["next_step"] == 15
    assert restored.next_step == 15 and restored.ema["first_turn"].sigma == 0.5
    assert restored.ema["trajectory"].sigma is None
    assert not MIDiagnostics().load(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------------------------
# Plain GRPOTrainer


def grpo_trainer(tokenizer, output_dir, max_steps, seed=0):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model

    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Count to {i}"}] for i in range(64)]})

    def length_reward(completions, **kwargs):
        return [float(len(c[0]["content"])) for c in completions]

    args = GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        num_generations=2,  # 4 distinct prompts per batch
        max_completion_length=12,
        max_steps=max_steps,
        learning_rate=1e-3,
        **CPU_TRAINING_KWARGS,
        logging_steps=1,
        save_strategy="steps",
        save_steps=2,
        seed=seed,
    )
    return GRPOTrainer(
        model=make_tiny_model(tokenizer, seed=seed),
        reward_funcs=length_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def mi_logs(trainer):
    return {
        h["step"]: {k: v for k, v in h.items() if k.startswith("ragen2/mi/")}
        for h in trainer.state.log_history
        if "loss" in h
    }


def test_callback_on_plain_grpo_trainer_logs_and_resumes(tiny_tokenizer, tmp_path):
    config = MIDiagnosticsConfig(every_n_steps=2, num_samples=8)
    trainer = grpo_trainer(tiny_tokenizer, tmp_path, max_steps=4)
    callback = MIDiagnosticsCallback(config)
    assert callback.attach(trainer) is trainer and callback in trainer.callback_handler.callbacks
    with pytest.raises(ValueError, match="already attached"):
        MIDiagnosticsCallback(config).attach(trainer)
    trainer.train()
    logs = mi_logs(trainer)
    assert [step for step, keys in logs.items() if keys] == [1, 2, 4]  # step 1, then every 2 steps
    expected_keys = {
        f"ragen2/mi/{scope}/{key}"
        for scope in ("first_turn", "trajectory")
        for key in callback.diagnostics.metric_keys
    } | {"ragen2/mi/time_s"}
    for step in (1, 2, 4):
        assert set(logs[step]) == expected_keys
        assert all(math.isfinite(v) for v in logs[step].values()), logs[step]
        assert logs[step]["ragen2/mi/first_turn/num_columns"] == 4

    saved = json.loads((tmp_path / "checkpoint-2" / STATE_FILE).read_text())
    assert saved["next_step"] == 4
    sigma_at_2 = saved["ema"]["trajectory"]["sigma"]
    assert sigma_at_2 == pytest.approx(
        0.9 * logs[1]["ragen2/mi/trajectory/marginal_std"] + 0.1 * logs[2]["ragen2/mi/trajectory/marginal_std"]
    )

    resumed = grpo_trainer(tiny_tokenizer, tmp_path, max_steps=4)
    MIDiagnosticsCallback(config).attach(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    after = mi_logs(resumed)
    assert not after[3] and after[4]  # the restored schedule: no catch-up run at step 3
    sigma_at_4 = after[4]["ragen2/mi/trajectory/marginal_std"]
    assert after[4]["ragen2/mi/trajectory/marginal_std_ema"] == pytest.approx(0.9 * sigma_at_2 + 0.1 * sigma_at_4)
