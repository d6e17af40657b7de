"""The SNR-filtered update is exactly plain GRPOTrainer's update on the kept rows, for every TRL loss type.

Each optimizer step's gradient (SGD, no clipping, captured right before the step) is compared with plain
`GRPOTrainer`'s gradient on a batch holding only the rows that step trained on, as one micro-batch: either a whole
plain `GRPOTrainer` run on the kept prompt groups alone, or TRL's `_compute_loss` on the recorded rows.
"""

import pytest
import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.models.tiny import tiny_model_path

from .exact_runs import EXACT, LOSS_TYPES, loss_settings, make_trainer, plain_gradient_on
from .exactness import (
    assert_same_gradient,
    concat_micro_batches,
    record_gradients,
    record_kept_rows,
    reference_gradient,
)
from .scripted import (
    AMPLITUDES,
    alternating_reward_for,
    dataset,
    parity_reward_for,
    snapshot,
    tiny_trainer_args,
)


# Layouts of the 4 kept rows ("P2:", the one group with reward variance) over micro-steps:
LAYOUTS = {
    # all 4 prompt groups (16 rows) in one generation, one micro-batch
    "one_micro_batch": dict(prompts=list(AMPLITUDES), per_device_train_batch_size=16),
    # 3 groups (12 rows), 3 micro-steps: the kept rows split 2 + 1 + 1
    "uneven": dict(prompts=["P2:", "P0:", "P3:"], per_device_train_batch_size=4, gradient_accumulation_steps=3),
    # 4 groups, 8 micro-steps of 2 rows: 1 + 1 + 1 + 1 kept rows, then 4 placeholder-only micro-steps
    "placeholders": dict(prompts=list(AMPLITUDES), per_device_train_batch_size=2, gradient_accumulation_steps=8),
}


@pytest.mark.parametrize("entropy_coef", [0.0, 0.05], ids=["no_entropy", "entropy"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_step_equals_plain_grpo_on_the_kept_groups(tmp_path, tiny_tokenizer, loss_type, layout, entropy_coef):
    settings = loss_settings(loss_type, entropy_coef)
    layout_args = dict(LAYOUTS[layout])
    prompts = layout_args.pop("prompts")
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, prompts, **EXACT,
                            **layout_args, **settings)  # fmt: skip
    grads = record_gradients(filtered)
    filtered.train()
    assert filtered.state.log_history[0]["ragen2/filter/kept_rows"] == 4
    reference = plain_gradient_on(tmp_path, tiny_tokenizer, ["P2:"], **settings)
    assert_same_gradient(grads.steps[0], reference)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_step_equals_plain_grpo_with_a_reference_model(tmp_path, tiny_tokenizer, loss_type):
    # beta > 0 reloads the reference model by name: both trainers start from the same saved tiny model
    path = tiny_model_path(cache_dir=tmp_path / "models")
    settings = loss_settings(loss_type, 0.05, beta=0.1)
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, ["P2:", "P0:", "P3:"],
                            model=path, per_device_train_batch_size=4, gradient_accumulation_steps=3, **EXACT,
                            **settings)  # fmt: skip
    grads = record_gradients(filtered)
    filtered.train()
    reference = plain_gradient_on(tmp_path, tiny_tokenizer, ["P2:"], model=path, **settings)
    assert_same_gradient(grads.steps[0], reference)


def second_reward(prompts, completion_ids, **kwargs):
    """A second objective: completion length, so normalize_then_sum has two functions to z-score."""
    return [float(len(ids)) for ids in completion_ids]


@pytest.mark.parametrize(
    "settings",
    [
        dict(scale_rewards="batch"),
        dict(scale_rewards="none"),
        dict(multi_objective_aggregation="normalize_then_sum"),
    ],
    ids=["scale_batch", "scale_none", "normalize_then_sum"],
)
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_batch_defined_advantages_use_the_kept_rows(tmp_path, tiny_tokenizer, loss_type, settings):
    """TRL's batch-level advantage options are defined here on the kept rows: as if the batch held only them."""
    amplitudes = {"P0:": 0.0, "P1:": 10.0, "P2:": 10.0, "P3:": 1.0}  # rho = 0.9 keeps P1 and P2
    reward_funcs = [parity_reward_for(amplitudes)]
    if "multi_objective_aggregation" in settings:
        reward_funcs.append(second_reward)
    settings = {**loss_settings(loss_type), **settings}
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, list(amplitudes),
                            reward_funcs=reward_funcs, **EXACT, **settings)  # fmt: skip
    grads = record_gradients(filtered)
    filtered.train()
    assert filtered.state.log_history[0]["ragen2/filter/kept_rows"] == 8
    reference = plain_gradient_on(tmp_path, tiny_tokenizer, ["P1:", "P2:"], reward_funcs=reward_funcs, **settings)
    assert_same_gradient(grads.steps[0], reference)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_several_optimizer_steps_per_generation_fill_full_mini_batches(tmp_path, tiny_tokenizer, loss_type):
    """S = 2 * GA: 12 kept rows fill the first optimizer step (8 rows), the second gets the other 4.

    Each step's gradient equals plain GRPOTrainer's on exactly the rows it trained on (learning rate 0, so both
    steps see the same weights).
    """
    amplitudes = {"P0:": 10.0, "P1:": 10.0, "P2:": 10.0, "P3:": 0.0}  # three equal groups: rho = 0.9 keeps them
    settings = loss_settings(loss_type, 0.05)
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, list(amplitudes),
                            reward_funcs=parity_reward_for(amplitudes), per_device_train_batch_size=4,
                            gradient_accumulation_steps=2, steps_per_generation=4, max_steps=2,
                            **{**EXACT, "learning_rate": 0.0}, **settings)  # fmt: skip
    grads = record_gradients(filtered)
    rows = record_kept_rows(filtered)
    filtered.train()
    assert [sum(len(part["advantages"]) for part in rows[step]) for step in (0, 1)] == [8, 4]
    plain = make_trainer(tmp_path / "plain", tiny_tokenizer, GRPOTrainer, ["P0:"], **EXACT, **settings)
    for step in (0, 1):
        reference = reference_gradient(plain, concat_micro_batches(rows[step]))
        assert_same_gradient(grads.steps[step], reference)


class OptimizerStateRecorder(TrainerCallback):
    """Copies of the parameters and of every optimizer moment after each optimizer step."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.states = []

    def on_step_end(self, args, state, control, **kwargs):
        optimizer = self.trainer.optimizer.optimizer  # the torch optimizer inside accelerate's wrapper
        moments = {
            name: {key: value.clone() for key, value in optimizer.state[p].items()}
            for name, p in self.trainer.model.named_parameters()
        }
        self.states.append((snapshot(self.trainer.model), moments))


def test_optimizer_steps_without_a_kept_row_are_true_no_ops(tmp_path, tiny_tokenizer):
    """AdamW with weight decay: a step whose micro-batches hold no kept row changes no parameter and no moment."""
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, list(AMPLITUDES),
                            per_device_train_batch_size=2, gradient_accumulation_steps=2, steps_per_generation=8,
                            max_steps=4, optim="adamw_torch", weight_decay=0.1)  # fmt: skip
    recorder = OptimizerStateRecorder(filtered)
    filtered.add_callback(recorder)
    filtered.train()
    # The 4 kept rows fill the first optimizer step (2 micro-steps x 2 rows); steps 2-4 of the generation are empty.
    logs = [log for log in filtered.state.log_history if "ragen2/filter/skipped_updates" in log]
    assert [log["ragen2/filter/skipped_updates"] for log in logs] == [0.0, 1.0, 1.0, 1.0]
    (params_1, moments_1), *later = recorder.states
    assert moments_1["model.embed_tokens.weight"], "the first step updated the weights"
    for params, moments in later:
        for name in params_1:
            assert torch.equal(params_1[name], params[name]), name
            for key, value in moments_1[name].items():
                assert torch.equal(value, moments[name][key]), f"{name} {key}"


def test_an_empty_generation_keeps_the_gradient_of_the_others_in_its_step(tmp_path, tiny_tokenizer):
    """steps_per_generation < gradient_accumulation_steps: two generations per optimizer step, the second empty.

    Each generation is its share S / GA of the step, as in TRL: the step's gradient is half of plain GRPOTrainer's
    on the first generation's kept group, not discarded.
    """
    rewarded = []  # the prompt whose group earns variance: the first group of the first generation

    def first_generation_only(prompts, completion_ids, **kwargs):
        if rewarded:
            return [0.0] * len(prompts)
        rewarded.append(prompts[0])
        return rewarded_group(rewarded)(prompts, completion_ids)

    prompts = [f"Q{i}:" for i in range(8)]  # 2 generations of 4 groups
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, prompts,
                            reward_funcs=first_generation_only, per_device_train_batch_size=16,
                            gradient_accumulation_steps=2, steps_per_generation=1, **EXACT)  # fmt: skip
    grads = record_gradients(filtered)
    filtered.train()
    assert [log["ragen2/filter/empty"] for log in filtered.state.log_history[:1]] == [0.5]  # one of two generations
    reference = plain_gradient_on(tmp_path, tiny_tokenizer, rewarded, reward_funcs=rewarded_group(rewarded))
    assert_same_gradient(grads.steps[0], {name: 0.5 * g for name, g in reference.items()})


def rewarded_group(rewarded):
    """Parity rewards of amplitude 10 on the group of `rewarded[0]`, 0 elsewhere."""

    def reward(prompts, completion_ids, **kwargs):
        return [
            10.0 * (len(ids) % 2) if p == rewarded[0] else 0.0 for p, ids in zip(prompts, completion_ids, strict=True)
        ]

    return reward


# ---------------------------------------------------------------------------------------------------------------
# Positions: the loss sees the columns the old and reference log-probabilities were computed on


def absolute_position_model(tokenizer):
    """A tiny GPT-2: learned absolute positions, so any shift of a prompt changes its log-probabilities."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                        bos_token_id=tokenizer.eos_token_id)  # fmt: skip
    return GPT2LMHeadModel(config)


def test_loss_log_probs_match_the_old_log_probs_when_the_longest_prompt_is_filtered(tmp_path, tiny_tokenizer):
    """S = 2 > GA = 1, learning rate 0: TRL computes old log-probs on the whole batch; the loss must see the same
    positions (a trim of left padding would shift the kept prompts once the longest prompt's group is gone)."""
    amplitudes = {"P2:": 10.0, "Q0 is a much longer prompt than the others:": 0.0, "P1:": 0.0, "P3:": 0.0}
    filtered = make_trainer(tmp_path, tiny_tokenizer, SNRFilteredGRPOTrainer, list(amplitudes),
                            reward_funcs=parity_reward_for(amplitudes), model=absolute_position_model(tiny_tokenizer),
                            per_device_train_batch_size=8, steps_per_generation=2, **{**EXACT, "learning_rate": 0.0},
                            pad_to_multiple_of=8)  # fmt: skip
    gaps, widths = [], []
    original = filtered._compute_loss

    def compare(model, inputs):
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        width = inputs["completion_ids"].size(1)
        with torch.no_grad():
            logps, _, _ = filtered._get_per_token_logps_and_entropies(model, ids, attention, width)
        mask = inputs["completion_mask"].bool()
        gaps.append(float((logps - inputs["old_per_token_logps"])[mask].abs().max()) if mask.any() else 0.0)
        widths.append((inputs["prompt_ids"].size(1), width))
        return original(model, inputs)

    filtered._compute_loss = compare
    filtered.train()
    assert max(gaps) < 1e-5, gaps
    # pad_to_multiple_of holds for every micro-batch, placeholders included
    assert all(prompt % 8 == 0 and completion % 8 == 0 for prompt, completion in widths), widths
    assert widths[0][0] >= len(tiny_tokenizer("Q0 is a much longer prompt than the others:")["input_ids"])


# ---------------------------------------------------------------------------------------------------------------
# Metrics: TRL's per-row statistics come from the kept rows only


def test_trl_metrics_come_from_kept_rows_only(tmp_path, tiny_tokenizer):
    """4 kept rows over 8 micro-steps: 4 micro-steps hold one kept row, 4 only placeholders.

    TRL averages its per-micro-batch values over the logging window; plain GRPOTrainer with the 4 rows in 4
    micro-batches of one row logs the same entropy. Placeholder-only micro-steps add nothing (not 0).
    """
    layout = dict(LAYOUTS["placeholders"])
    prompts = layout.pop("prompts")
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, prompts, **EXACT, **layout)
    filtered.train()
    plain = make_trainer(tmp_path / "plain", tiny_tokenizer, GRPOTrainer, ["P2:"], per_device_train_batch_size=1,
                         gradient_accumulation_steps=4, **EXACT)  # fmt: skip
    plain.train()
    snr_log, plain_log = filtered.state.log_history[0], plain.state.log_history[0]
    assert snr_log["entropy"] == pytest.approx(plain_log["entropy"], rel=1e-5)
    assert snr_log["clip_ratio/region_mean"] == plain_log["clip_ratio/region_mean"] == 0.0  # on-policy


def test_an_empty_generation_logs_no_trl_row_metrics(tmp_path, tiny_tokenizer):
    flat = dict.fromkeys(AMPLITUDES, 0.0)
    filtered = make_trainer(tmp_path, tiny_tokenizer, SNRFilteredGRPOTrainer, list(AMPLITUDES),
                            reward_funcs=parity_reward_for(flat), entropy_coef=0.05, **EXACT)  # fmt: skip
    filtered.train()
    log = filtered.state.log_history[0]
    assert log["ragen2/filter/empty"] == 1.0 and log["ragen2/filter/skipped_updates"] == 1.0
    for key in ("entropy", "clip_ratio/region_mean", "clip_ratio/low_min", "policy_loss"):
        assert key not in log, key


# ---------------------------------------------------------------------------------------------------------------
# Scoring passes skip the rows the filter drops, when the rollout already returned the rewards


def scripted_rollout(amplitudes):
    """A rollout_func returning script_generation's completions and each row's parity reward as a field."""

    def rollout(prompts, trainer):
        tokenizer = trainer.processing_class
        token, seen = tokenizer.encode("x")[0], {}
        prompt_ids, completion_ids, scores = [], [], []
        for prompt in prompts:
            copy_index = seen.get(prompt, 0) % trainer.num_generations
            seen[prompt] = seen.get(prompt, 0) + 1
            prompt_ids.append(tokenizer(prompt)["input_ids"])
            completion_ids.append([token] * (copy_index + 1) + [tokenizer.eos_token_id])
            scores.append(amplitudes[prompt] * ((copy_index + 2) % 2))
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "score": scores}

    return rollout


def score_reward(completions, score, **kwargs):
    return [float(value) for value in score]


@pytest.mark.parametrize("declared", [True, False], ids=["rollout_field", "reward_function"])
def test_reference_pass_scores_only_the_kept_rows(tmp_path, tiny_tokenizer, declared):
    reward = lambda completions, score, **kwargs: score_reward(completions, score)  # noqa: E731
    if declared:
        reward.rollout_field = "score"
    reward.__name__ = "score_reward"
    path = tiny_model_path(cache_dir=tmp_path / "models")
    trainer = SNRFilteredGRPOTrainer(
        model=path,
        reward_funcs=reward,
        args=tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, beta=0.1, mi_diagnostics=False, **EXACT),
        train_dataset=dataset(AMPLITUDES),
        processing_class=tiny_tokenizer,
        rollout_func=scripted_rollout(AMPLITUDES),
    )
    grads = record_gradients(trainer)
    trainer.train()
    skipped = trainer.state.log_history[0]["ragen2/filter/scoring_rows_skipped"]
    assert skipped == (12 if declared else 0)  # the reference pass ran on the 4 kept rows out of 16
    reference = plain_gradient_on(tmp_path, tiny_tokenizer, ["P2:"], model=path, beta=0.1)
    assert_same_gradient(grads.steps[0], reference)


def test_a_rollout_field_that_disagrees_with_the_reward_is_an_error(tmp_path, tiny_tokenizer):
    def liar(completions, score, **kwargs):
        return [100.0 * value if value == 1.0 else value for value in score]  # P3's group now wins

    liar.rollout_field = "score"
    trainer = SNRFilteredGRPOTrainer(
        model=tiny_model_path(cache_dir=tmp_path / "models"),
        reward_funcs=liar,
        args=tiny_trainer_args(tmp_path, SNRFilteredGRPOConfig, beta=0.1, mi_diagnostics=False),
        train_dataset=dataset(AMPLITUDES),
        processing_class=tiny_tokenizer,
        rollout_func=scripted_rollout({"P0:": 0.0, "P1:": 0.0, "P2:": 10.0, "P3:": 1.0}),
    )
    with pytest.raises(RuntimeError, match="liar.*rollout_field"):
        trainer.train()


# ---------------------------------------------------------------------------------------------------------------
# Mixture-of-experts policies: the router's load-balancing loss enters the step as in plain GRPOTrainer


def make_tiny_moe_model(tokenizer, seed: int = 0):
    """A randomly initialised tiny `Qwen3MoeForCausalLM` (4 experts, 2 per token), deterministic for `seed`."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        router_aux_loss_coef=0.5,  # large, so the router term is a visible share of the gradient
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen3MoeForCausalLM(config)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_moe_step_equals_plain_grpo_on_the_kept_groups(tmp_path, tiny_tokenizer, loss_type):
    settings = loss_settings(loss_type, 0.05)
    filtered = make_trainer(tmp_path / "snr", tiny_tokenizer, SNRFilteredGRPOTrainer, list(AMPLITUDES),
                            model=make_tiny_moe_model(tiny_tokenizer), **EXACT, **settings)  # fmt: skip
    assert filtered.aux_loss_enabled
    grads = record_gradients(filtered)
    filtered.train()
    log = filtered.state.log_history[0]
    assert log["ragen2/filter/kept_rows"] == 4
    reference = plain_gradient_on(
        tmp_path, tiny_tokenizer, ["P2:"], model=make_tiny_moe_model(tiny_tokenizer), **settings
    )
    assert_same_gradient(grads.steps[0], reference)
    # and the router term is part of it: without it the gradient differs
    no_router = plain_gradient_on(tmp_path / "no_router", tiny_tokenizer, ["P2:"], model=make_tiny_moe_model(tiny_tokenizer),
                                  router_aux_loss_coef=0.0, **settings)  # fmt: skip
    assert any(not torch.allclose(reference[n], no_router[n], atol=1e-6) for n in reference)


def test_moe_logs_aux_loss_on_every_step(tmp_path, tiny_tokenizer):
    # Batches 1 and 3 earn 0 everywhere (an empty step: the rule keeps nothing), batches 2 and 4 the parity reward.
    alternating_reward = alternating_reward_for(AMPLITUDES)

    filtered = make_trainer(tmp_path, tiny_tokenizer, SNRFilteredGRPOTrainer, list(AMPLITUDES),
                            reward_funcs=alternating_reward, model=make_tiny_moe_model(tiny_tokenizer), max_steps=4,
                            reward_variance_empty_patience=0, **EXACT)  # fmt: skip
    filtered.train()
    logs = [log for log in filtered.state.log_history if "ragen2/filter/empty" in log]
    assert [log["ragen2/filter/empty"] for log in logs] == [1.0, 0.0, 1.0, 0.0]
    aux = [log["aux_loss"] for log in logs]
    assert aux[0] == aux[2] == 0.0  # no row trained: no router loss entered the update
    assert aux[1] > 0 and aux[3] > 0
