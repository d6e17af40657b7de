"""The gradient SNR report: buckets by reward variance, norms with known answers and against TRL's own loss, and a
training step that is exactly the one without the report."""

import math

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_ragen2 import SNRFilteredGRPOConfig
from trl_ragen2.filtering.grad_snr import aggregate, component_losses, global_norm, reward_variance_buckets
from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model, tiny_model_path

from .exactness import reference_gradient
from .scripted import (
    AMPLITUDES,
    dataset,
    parity_reward_for,
    scripted_trainer,
    snapshot,
)


PROMPTS = list(AMPLITUDES)  # group rewards [0, a, 0, a]: variances 0, 1/3, 100/3, 0
ROW_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "ref_per_token_logps")


def test_buckets_are_reward_variance_quantiles_lowest_first():
    rewards = torch.tensor([[0.0, a, 0.0, a] for a in AMPLITUDES.values()]).flatten()
    assert reward_variance_buckets(rewards, 4, 2) == [[0, 3], [1, 2]]  # ties (0 and 3) by group index
    assert reward_variance_buckets(rewards, 4, 3) == [[0], [3], [1, 2]]  # the last bucket takes the remainder
    assert reward_variance_buckets(rewards, 4, 6) == [[0], [3], [1], [2]]  # fewer groups than buckets
    with pytest.raises(ValueError, match="num_buckets must be >= 1"):
        reward_variance_buckets(rewards, 4, 0)


def test_component_losses_by_hand():
    # two rows, three tokens, the last token of row 2 masked; on-policy (ratio 1), so task = -A per token
    logps = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    advantages = torch.tensor([2.0, -1.0])
    entropies = torch.tensor([[0.5, 0.5, 0.5], [1.0, 1.0, 9.0]])
    ref = logps - 0.1  # KL per token: exp(-0.1) + 0.1 - 1
    common = dict(old_logps=None, ref_logps=ref, epsilon_low=0.2, epsilon_high=0.28, max_completion_length=3)
    grpo = component_losses(
        logps, entropies, mask, advantages, loss_type="grpo", total_rows=2, total_tokens=5, **common
    )
    assert grpo["task"].item() == pytest.approx((-2.0 + 1.0) / 2)  # mean over rows of per-row token means
    assert grpo["kl"].item() == pytest.approx(math.exp(-0.1) + 0.1 - 1, rel=1e-5)  # float32
    assert grpo["entropy"].item() == pytest.approx((0.5 * 3 + 1.0 * 2) / 5)
    dapo = component_losses(
        logps, entropies, mask, advantages, loss_type="dapo", total_rows=2, total_tokens=5, **common
    )
    assert dapo["task"].item() == pytest.approx((-2.0 * 3 + 1.0 * 2) / 5)
    dr = aggregate(torch.ones(2, 3), mask, "dr_grpo", total_rows=4, total_tokens=5, max_completion_length=3)
    assert dr.item() == pytest.approx(5 / (4 * 3))  # a chunk of 2 rows of a 4-row bucket: its share
    assert component_losses(logps, entropies, mask, advantages, loss_type="grpo", total_rows=2, total_tokens=5,
                            **{**common, "ref_logps": None})["kl"] is None  # fmt: skip
    with pytest.raises(ValueError, match="supports loss_type in"):
        aggregate(logps, mask, "cispo", total_rows=2, total_tokens=5, max_completion_length=3)


def report_trainer(tmp_path, tokenizer, model=None, **overrides):
    settings = dict(
        mi_diagnostics=False,
        grad_report_every_n_steps=1,
        grad_report_num_buckets=2,
        optim="sgd",
        max_grad_norm=0.0,
        max_steps=1,
    )
    settings.update(overrides)
    return scripted_trainer(tmp_path, tokenizer, prompts=PROMPTS, model=model, **settings)


def capture(trainer):
    """Record the pre-filter batch the report measured and what it logged."""
    seen = []
    measure = trainer.gradient_report.measure

    def recording(trainer_, batch, rewards):
        metrics = measure(trainer_, batch, rewards)
        copy = {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in batch.items()}
        seen.append((copy, metrics, reward_variance_buckets(rewards.cpu(), 4, 2)))
        return metrics

    trainer.gradient_report.measure = recording
    return seen


def plain_trainer(tmp_path, tokenizer, model=None, **settings):
    args = GRPOConfig(
        output_dir=str(tmp_path / "plain"),
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=8,
        **CPU_TRAINING_KWARGS,
        **settings,
    )
    model = model if model is not None else make_tiny_model(tokenizer, seed=0)
    return GRPOTrainer(model=model, reward_funcs=parity_reward_for(AMPLITUDES), args=args,
                       train_dataset=dataset(PROMPTS), processing_class=tokenizer)  # fmt: skip


def bucket_rows(batch, groups):
    index = torch.tensor([g * 4 + k for g in groups for k in range(4)])
    return {key: batch[key][index] for key in ROW_KEYS if batch.get(key) is not None}


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_norms_match_trl_loss_on_the_bucket_rows(tmp_path, tiny_tokenizer, loss_type):
    trainer = report_trainer(tmp_path, tiny_tokenizer, loss_type=loss_type)
    seen = capture(trainer)
    trainer.train()
    batch, metrics, buckets = seen[0]  # the sampler shuffles prompts: find the groups of each bucket
    # bucket 1: the two zero-variance groups (P0:, P3:), all advantages 0: no task gradient at all
    assert metrics["ragen2/grad/bucket_1/task"] == 0.0
    assert (
        metrics["ragen2/grad/bucket_1/reward_variance"] == 0.0 and metrics["ragen2/grad/bucket_1/num_rows"] == 16 / 2
    )
    assert metrics["ragen2/grad/bucket_2/reward_variance"] == pytest.approx((1 / 3 + 100 / 3) / 2)
    assert math.isnan(metrics["ragen2/grad/bucket_1/kl"])  # beta = 0: no reference, no KL term
    # bucket 2 (P1:, P2:): TRL's loss on those rows alone, beta 0 and no entropy bonus, has the same gradient norm
    assert (batch["advantages"].view(4, 4)[buckets[0]] == 0).all() and (
        batch["advantages"].view(4, 4)[buckets[1]] != 0
    ).all()
    rows = bucket_rows(batch, buckets[1])
    task = reference_gradient(plain_trainer(tmp_path, tiny_tokenizer, loss_type=loss_type, entropy_coef=0.0), rows)
    assert metrics["ragen2/grad/bucket_2/task"] == pytest.approx(global_norm(list(task.values())), rel=1e-5)
    assert metrics["ragen2/grad/bucket_2/task"] > 1e-4
    # entropy: TRL's bonus L(0) - L(c) = c * mean entropy, so its gradient norm is |g(0) - g(c)| / c
    c = 0.5
    with_bonus = reference_gradient(plain_trainer(tmp_path, tiny_tokenizer, loss_type=loss_type, entropy_coef=c), rows)
    entropy = [(task[name] - with_bonus[name]) / c for name in task]
    assert metrics["ragen2/grad/bucket_2/entropy"] == pytest.approx(global_norm(entropy), rel=1e-4)
    assert metrics["ragen2/grad/bucket_1/entropy"] > 0  # zero-variance groups still carry the entropy gradient


def test_kl_gradient_is_zero_while_the_policy_is_the_reference(tmp_path, tiny_tokenizer):
    trainer = report_trainer(tmp_path, tiny_tokenizer, model=tiny_model_path(seed=0), beta=0.1, max_steps=2)
    seen = capture(trainer)
    trainer.train()
    (_, first, _), (_, second, _) = seen
    for bucket in (1, 2):
        assert first[f"ragen2/grad/bucket_{bucket}/kl"] < 1e-6  # step 1: policy == reference
        assert first[f"ragen2/grad/bucket_{bucket}/entropy"] > 1e-4
    assert second["ragen2/grad/bucket_2/kl"] > 1e-6  # after an update the policy has moved away


def test_the_training_step_is_the_same_with_and_without_the_report(tmp_path, tiny_tokenizer):
    runs = []
    for every in (0, 1):
        trainer = report_trainer(tmp_path / str(every), tiny_tokenizer, grad_report_every_n_steps=every, max_steps=3)
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        grads = [h for h in trainer.state.log_history if "ragen2/grad/bucket_2/task" in h]
        runs.append((snapshot(trainer.model), losses, len(grads)))
    (plain_params, plain_losses, none), (report_params, report_losses, reported) = runs
    assert none == 0 and reported == 3
    assert plain_losses == report_losses
    for name, value in plain_params.items():
        assert torch.equal(value, report_params[name]), name  # bitwise: no gradient, optimizer or RNG change


@pytest.mark.parametrize("beta, terms", [(0.0, 2), (0.04, 3)])
def test_a_report_costs_one_forward_pass_per_term_over_every_row(tmp_path, tiny_tokenizer, beta, terms):
    """The documented cost: per report, each term (task and entropy, plus KL when beta > 0) is one forward (and
    backward) pass over every row of the generation batch."""
    trainer = report_trainer(tmp_path, tiny_tokenizer, model=tiny_model_path(seed=0), beta=beta)
    measuring, rows_forwarded, batch_rows = [], [], []

    def count_rows(module, args, kwargs):
        if measuring:
            rows_forwarded.append((kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[0])

    measure = trainer.gradient_report.measure

    def counted_measure(trainer_, batch, rewards):
        batch_rows.append(batch["completion_mask"].shape[0])
        measuring.append(True)
        try:
            return measure(trainer_, batch, rewards)
        finally:
            measuring.clear()

    trainer.gradient_report.measure = counted_measure
    handle = trainer.model.register_forward_pre_hook(count_rows, with_kwargs=True)
    try:
        trainer.train()
    finally:
        handle.remove()
    assert batch_rows and sum(rows_forwarded) == terms * sum(batch_rows)


def test_schedule_resumes_at_the_next_multiple():
    from trl_ragen2.filtering.grad_report import GradientReport

    report, ran = GradientReport(every_n_steps=5), []
    for step in range(1, 12):
        if report.is_due(step):
            ran.append(step)
            report.next_step = (step // 5 + 1) * 5  # what on_batch does after a report
    assert ran == [1, 5, 10]
    resumed = GradientReport(every_n_steps=5)
    assert not resumed.is_due(7) and resumed.next_step == 10


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(grad_report_every_n_steps=-1), "grad_report_every_n_steps=-1 is invalid"),
        (dict(grad_report_num_buckets=0), "grad_report_num_buckets=0 is invalid"),
        (dict(grad_report_every_n_steps=5, loss_type="cispo"), "needs a clipped-ratio loss, but loss_type='cispo'"),
        (
            dict(grad_report_every_n_steps=5, importance_sampling_level="sequence"),
            "needs importance_sampling_level='token'",
        ),
    ],
)
def test_settings_errors_name_the_field(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SNRFilteredGRPOConfig(output_dir=str(tmp_path), **CPU_TRAINING_KWARGS, **settings)


def test_ppo_refuses_the_report(tmp_path):
    from trl_ragen2 import SNRFilteredPPOConfig

    with pytest.raises(ValueError, match="grad_report_every_n_steps=5 is not available with PPO"):
        SNRFilteredPPOConfig(output_dir=str(tmp_path), grad_report_every_n_steps=5, **CPU_TRAINING_KWARGS)
