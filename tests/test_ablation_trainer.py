"""The paper's ablation filters and RAGEN's ranking metrics in `SNRFilteredGRPOTrainer`.

`within_group` keeps some rollouts of every group; its step must equal plain `GRPOTrainer`'s step on the kept
rollouts alone, a plain trainer with `num_generations = k` whose groups hold exactly those rollouts, so the group
statistics of the advantages are the kept rollouts' (as in RAGEN, which filters before computing advantages).
"""

from collections import Counter

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.models.tiny import make_tiny_model, tiny_model_path

from .exactness import assert_same_gradient, record_gradients
from .ppo_helpers import ppo_trainer, record_critic_rows
from .scripted import dataset, parity_reward_for, record_loss_rows, script_generation, tiny_trainer_args


EXACT = dict(optim="sgd", max_grad_norm=0.0, learning_rate=1e-2)
AMPLITUDES = {"P0:": 1.0, "P1:": 2.0, "P2:": 10.0, "P3:": 0.5}


def length_reward(prompts, completion_ids, **kwargs):
    """amplitude * completion length: a group's rollouts (lengths 2, 3, 4, 5) earn 2a, 3a, 4a, 5a."""
    return [AMPLITUDES[p] * len(ids) for p, ids in zip(prompts, completion_ids, strict=True)]


def make_trainer(tmp_path, tokenizer, trainer_cls, prompts, reward_funcs, **args):
    config_cls = SNRFilteredGRPOConfig if trainer_cls is SNRFilteredGRPOTrainer else GRPOConfig
    if config_cls is SNRFilteredGRPOConfig:
        args.setdefault("mi_diagnostics", False)
    trainer = trainer_cls(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=reward_funcs,
        args=tiny_trainer_args(tmp_path, config_cls, **args),
        train_dataset=dataset(prompts),
        processing_class=tokenizer,
    )
    return script_generation(trainer)


def generate_lengths(trainer, lengths_of):
    """Scripted generation: rollout k of a prompt is `lengths_of(prompt, k) - 1` tokens "x" and EOS."""
    tokenizer = trainer.processing_class
    token_id = tokenizer.encode("x")[0]

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        seen, completions = Counter(), []
        for ids in prompt_ids:
            copy_index = seen[tuple(ids)] % num_generations
            seen[tuple(ids)] += 1
            prompt = tokenizer.decode(ids, skip_special_tokens=True).strip()
            completions.append([token_id] * (lengths_of(prompt, copy_index) - 1) + [tokenizer.eos_token_id])
        return completions, None

    trainer._generate_single_turn = generate
    return trainer


# ---------------------------------------------------------------------------------------------------------------
# within_group: the step equals plain GRPOTrainer's on the kept rollouts

LAYOUTS = {
    "one_micro_batch": dict(per_device_train_batch_size=16),
    # 16 rows over 4 micro-steps of 4: the 8 kept rows go 2 per micro-step
    "four_micro_steps": dict(per_device_train_batch_size=4, gradient_accumulation_steps=4),
}


@pytest.mark.parametrize(
    "settings",
    [
        dict(loss_type="grpo"),
        dict(loss_type="grpo", entropy_coef=0.05),
        dict(loss_type="bnpo"),
        dict(loss_type="dr_grpo"),
        dict(loss_type="dapo", entropy_coef=0.05),
        dict(loss_type="grpo", scale_rewards="batch"),
        dict(loss_type="dapo", scale_rewards="none"),
    ],
    ids=["grpo", "grpo_entropy", "bnpo", "dr_grpo", "dapo_entropy", "grpo_scale_batch", "dapo_scale_none"],
)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_within_group_step_equals_plain_grpo_on_the_kept_rollouts(tmp_path, tiny_tokenizer, settings, layout):
    # G = 4, ratio 0.5: k = 2 per group, the lowest and the highest reward (lengths 2 and 5, variance 4.5 a^2)
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, list(AMPLITUDES),
                            [length_reward], reward_variance_filtering="within_group",
                            reward_variance_within_group_ratio=0.5, **LAYOUTS[layout], **EXACT,
                            **settings)  # fmt: skip
    grads = record_gradients(filtered)
    filtered.train()
    logs = filtered.state.log_history[0]
    assert logs["ragen2/filter/kept_rows"] == 8 and logs["ragen2/filter/kept_groups"] == 4
    assert logs["ragen2/filter/rollouts_per_group"] == 2 and logs["ragen2/filter/kept_rollout_fraction"] == 0.5

    # Plain GRPOTrainer with groups of 2 whose rollouts are exactly the kept ones: lengths 2 and 5.
    plain = make_trainer(tmp_path / "plain", tiny_tokenizer, GRPOTrainer, list(AMPLITUDES), [length_reward],
                         num_generations=2, per_device_train_batch_size=8, **EXACT, **settings)  # fmt: skip
    generate_lengths(plain, lambda prompt, k: (2, 5)[k])
    reference = record_gradients(plain)
    plain.train()
    assert_same_gradient(grads.steps[0], reference.steps[0])


def test_within_group_advantages_use_the_kept_rollouts_statistics(tmp_path, tiny_tokenizer):
    """Rewards 2a and 5a kept of 2a ... 5a: (r - mean) / (std + 1e-4) over the pair is +-1/sqrt(2) (over the whole
    group it would be -1.16 and +1.16)."""
    trainer = make_trainer(tmp_path, tiny_tokenizer, SNRFilteredGRPOTrainer, list(AMPLITUDES), [length_reward],
                           reward_variance_filtering="within_group", reward_variance_within_group_ratio=0.5,
                           reward_variance_loss_scaling="linear")  # fmt: skip
    trainer.train()
    used = torch.tensor(list(trainer._logs["advantages"])[-16:])  # (16,), NaN on the dropped rollouts
    assert int(torch.isnan(used).sum()) == 8
    kept = used[~torch.isnan(used)]  # (8,): 1.5a / (3a / sqrt(2) + 1e-4), within 1e-4 of 1/sqrt(2) for a >= 0.5
    assert kept.abs().sub(2**-0.5).abs().max() < 1e-3
    assert int((kept > 0).sum()) == 4  # one rollout above and one below the pair's mean in each group
    assert trainer.state.log_history[0]["ragen2/filter/loss_scale"] == 0.5  # k / G, RAGEN's filter_kept_ratio


def length_rollout(prompts, trainer):
    """A rollout_func giving script_generation's completions (lengths 2 ... 5) and length_reward as a field."""
    tokenizer = trainer.processing_class
    token, seen = tokenizer.encode("x")[0], Counter()
    prompt_ids, completion_ids, scores = [], [], []
    for prompt in prompts:
        copy_index = seen[prompt] % trainer.num_generations
        seen[prompt] += 1
        prompt_ids.append(tokenizer(prompt)["input_ids"])
        completion_ids.append([token] * (copy_index + 1) + [tokenizer.eos_token_id])
        scores.append(AMPLITUDES[prompt] * (copy_index + 2))
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "score": scores}


def test_within_group_selects_before_the_reference_pass_from_rollout_fields(tmp_path, tiny_tokenizer):
    """With `rollout_field` rewards the within-group selection is known before TRL's reference pass, which then
    scores the 8 kept rows only; the step is still plain GRPOTrainer's on them (beta > 0)."""

    def score_reward(completions, score, **kwargs):
        return [float(value) for value in score]

    score_reward.rollout_field = "score"
    path = tiny_model_path(cache_dir=tmp_path / "models")  # beta > 0 reloads the reference model by name
    trainer = SNRFilteredGRPOTrainer(
        model=path,
        reward_funcs=score_reward,
        args=tiny_trainer_args(tmp_path / "snr", SNRFilteredGRPOConfig, beta=0.1, mi_diagnostics=False,
                               reward_variance_filtering="within_group", reward_variance_within_group_ratio=0.5,
                               **EXACT),
        train_dataset=dataset(list(AMPLITUDES)),
        processing_class=tiny_tokenizer,
        rollout_func=length_rollout,
    )  # fmt: skip
    grads = record_gradients(trainer)
    trainer.train()
    assert trainer.state.log_history[0]["ragen2/filter/scoring_rows_skipped"] == 8
    plain = GRPOTrainer(
        model=path,
        reward_funcs=[length_reward],
        args=tiny_trainer_args(tmp_path / "plain", GRPOConfig, beta=0.1, num_generations=2,
                               per_device_train_batch_size=8, **EXACT),
        train_dataset=dataset(list(AMPLITUDES)),
        processing_class=tiny_tokenizer,
    )  # fmt: skip
    generate_lengths(plain, lambda prompt, k: (2, 5)[k])
    reference = record_gradients(plain)
    plain.train()
    assert_same_gradient(grads.steps[0], reference.steps[0])


def test_within_group_trains_the_ppo_actor_and_critic_on_the_kept_rollouts(tmp_path, tiny_tokenizer):
    # parity rewards [0, a, 0, a] per group: k = 2 keeps one 0 and one a (variance a^2 / 2), or two rollouts when
    # a = 0; every group keeps 2 rows, for the actor's loss and the critic's
    trainer = ppo_trainer(tmp_path, tiny_tokenizer, reward_variance_filtering="within_group",
                          reward_variance_within_group_ratio=0.5)  # fmt: skip
    actor_rows, critic_rows = record_loss_rows(trainer), record_critic_rows(trainer)
    trainer.train()
    expected = Counter({"P0:": 2, "P1:": 2, "P2:": 2, "P3:": 2})
    assert sum((Counter(call) for call in actor_rows), Counter()) == expected
    assert sum((Counter(call) for call in critic_rows), Counter()) == expected
    assert trainer.state.log_history[0]["ragen2/filter/kept_rows"] == 8


# ---------------------------------------------------------------------------------------------------------------
# percentile_range and the ranking metrics in the trainer


def test_percentile_band_trains_on_its_groups_only(tmp_path, tiny_tokenizer):
    # parity rewards: variances 0, 1/3, 100/3, 0; with the zeros, ranked P2, P1, P0, P3; (0.25, 0.5) is rank 1
    amplitudes = {"P0:": 0.0, "P1:": 1.0, "P2:": 10.0, "P3:": 0.0}
    trainer = make_trainer(tmp_path, tiny_tokenizer, SNRFilteredGRPOTrainer, list(amplitudes),
                           [parity_reward_for(amplitudes)], reward_variance_filtering="percentile_range",
                           reward_variance_percentile_low=0.25, reward_variance_percentile_high=0.5,
                           reward_variance_include_zero=True)  # fmt: skip
    calls = record_loss_rows(trainer)
    trainer.train()
    assert [Counter(call) for call in calls] == [Counter({"P1:": 4})]
    logs = trainer.state.log_history[0]
    assert logs["ragen2/filter/kept_rollout_fraction"] == 0.25 and logs["ragen2/filter/rollouts_per_group"] == 4


def mean_versus_spread_reward(prompts, completion_ids, **kwargs):
    """P0 always earns 5 (highest mean, no variance); P2 earns 0 or 2 (mean 1, the only variance)."""
    values = {"P0:": lambda ids: 5.0, "P1:": lambda ids: 0.0, "P2:": lambda ids: 2.0 * (len(ids) % 2)}
    return [values.get(p, lambda ids: 0.0)(ids) for p, ids in zip(prompts, completion_ids, strict=True)]


@pytest.mark.parametrize("metric, trained", [("reward", "P0:"), ("reward_sum", "P0:"), ("variance", "P2:")])
def test_reward_metrics_rank_the_groups(tmp_path, tiny_tokenizer, metric, trained):
    trainer = make_trainer(tmp_path, tiny_tokenizer, SNRFilteredGRPOTrainer, ["P0:", "P1:", "P2:", "P3:"],
                           [mean_versus_spread_reward], reward_variance_filtering="top_k", reward_variance_top_k=1,
                           reward_variance_metric=metric)  # fmt: skip
    calls = record_loss_rows(trainer)
    trainer.train()
    assert {p for call in calls for p in call} == {trained}
    assert trainer._row_values() == {}  # the reward metrics need no per-rollout values (no entropy pass)


def test_length_metric_keeps_the_longest_group(tmp_path, tiny_tokenizer):
    # prompt Pi's rollout k has i + k + 2 tokens: mean lengths 3.5, 4.5, 5.5, 6.5; the longest is P3
    trainer = make_trainer(tmp_path, tiny_tokenizer, SNRFilteredGRPOTrainer, ["P0:", "P1:", "P2:", "P3:"],
                           [parity_reward_for(dict.fromkeys(["P0:", "P1:", "P2:", "P3:"], 1.0))],
                           reward_variance_filtering="top_k", reward_variance_top_k=1,
                           reward_variance_metric="length")  # fmt: skip
    generate_lengths(trainer, lambda prompt, k: int(prompt[1]) + k + 2)
    calls = record_loss_rows(trainer)
    trainer.train()
    assert {p for call in calls for p in call} == {"P3:"}
    grouped = trainer._row_values()["row_lengths"].view(4, 4)
    assert sorted(grouped.mean(dim=1).tolist()) == [3.5, 4.5, 5.5, 6.5]  # groups in the sampler's order


def test_entropy_metric_uses_the_policys_token_entropies_of_the_pre_filter_batch(tmp_path, tiny_tokenizer):
    trainer = make_trainer(tmp_path, tiny_tokenizer, SNRFilteredGRPOTrainer, ["P0:", "P1:", "P2:", "P3:"],
                           [parity_reward_for(dict.fromkeys(["P0:", "P1:", "P2:", "P3:"], 1.0))],
                           reward_variance_filtering="top_k", reward_variance_top_k=1,
                           reward_variance_metric="entropy")  # fmt: skip
    generate_lengths(trainer, lambda prompt, k: int(prompt[1]) + k + 2)
    expected = {}
    original = trainer._filter_batch

    def filter_batch(batch):
        # An independent computation on the batch the filter sees: the model's token entropies at temperature 1.
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            logits = trainer.model(input_ids=ids, attention_mask=attention).logits.float()
        logits = logits[:, batch["prompt_ids"].size(1) - 1 : -1] / trainer.args.temperature  # (B, Lc, V)
        logp = torch.log_softmax(logits, dim=-1)
        tokens = -(logp.exp() * logp).sum(dim=-1)  # (B, Lc)
        mask = batch["completion_mask"].float()
        expected["rows"] = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        expected["prompts"] = trainer.processing_class.batch_decode(batch["prompt_ids"], skip_special_tokens=True)
        return original(batch)

    trainer._filter_batch = filter_batch
    calls = record_loss_rows(trainer)
    trainer.train()
    torch.testing.assert_close(trainer._row_values()["row_entropies"], expected["rows"], rtol=1e-4, atol=1e-5)
    group_means = expected["rows"].view(4, 4).mean(dim=1)  # (P,), the batch is in group order
    best = expected["prompts"][4 * int(group_means.argmax())].strip()
    assert {p for call in calls for p in call} == {best}


# ---------------------------------------------------------------------------------------------------------------
# Config


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"reward_variance_filtering": "within_group"},
            "reward_variance_within_group_ratio must be in \\(0, 1\\] when reward_variance_filtering='within_group', "
            "got None; e.g. 0.5",
        ),
        (
            {"reward_variance_filtering": "within_group", "reward_variance_within_group_ratio": 1.5},
            "reward_variance_within_group_ratio must be in \\(0, 1\\] .* got 1.5",
        ),
        (
            {"reward_variance_filtering": "within_group", "reward_variance_within_group_ratio": 0.5,
             "reward_variance_metric": "entropy"},
            "reward_variance_metric='entropy' has no effect with reward_variance_filtering='within_group'",
        ),
        (
            {"reward_variance_filtering": "within_group", "reward_variance_within_group_ratio": 0.5,
             "reward_variance_min_kept_fraction": 0.5},
            "reward_variance_min_kept_fraction=0.5 has no effect with reward_variance_filtering='within_group'",
        ),
        (
            {"reward_variance_filtering": "percentile_range", "reward_variance_percentile_low": 0.5,
             "reward_variance_percentile_high": 0.5},
            "reward_variance_percentile_low \\(0.5\\) must be below reward_variance_percentile_high \\(0.5\\)",
        ),
        ({"reward_variance_percentile_low": -0.25}, "reward_variance_percentile_low must be a number in \\[0, 1\\]"),
        ({"reward_variance_percentile_high": 2}, "reward_variance_percentile_high must be a number in \\[0, 1\\]"),
        (
            {"reward_variance_filtering": "percentile_range", "reward_variance_top_p_schedule": "linear",
             "reward_variance_top_p_end": 0.5, "reward_variance_schedule_steps": 3},
            "reward_variance_filtering='percentile_range' does not use",
        ),
        ({"reward_variance_metric": "perplexity"}, "reward_variance_metric must be one of .*'entropy_variance'"),
    ],
)  # fmt: skip
def test_config_validation_names_the_field(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, **overrides)
