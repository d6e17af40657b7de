"""SNRFilteredGRPOTrainer on the tiny offline model: which rows train, exact loss, empty steps, resume, options."""

import dataclasses
import json
import logging
import math
from collections import Counter

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_ragen2 import MIDiagnosticsConfig, SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.grpo.grpo_config import MI_CONFIG_FIELDS, MIDiagnosticsArguments
from trl_ragen2.models.tiny import make_tiny_model, tiny_model_path

from .scripted import (
    AMPLITUDES,
    dataset,
    parity_reward_for,
    record_loss_rows,
    script_generation,
    scripted_trainer,
    snapshot,
    tiny_trainer_args,
)


def make_args(tmp_path, cls=SNRFilteredGRPOConfig, **overrides):
    return tiny_trainer_args(tmp_path, cls, **overrides)


def assert_same_params(a, b, atol=0.0):
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=0, msg=name)


def test_only_the_kept_groups_reach_the_loss(tmp_path, tiny_tokenizer):
    trainer = scripted_trainer(tmp_path, tiny_tokenizer)
    calls = record_loss_rows(trainer)
    before = snapshot(trainer.model)
    trainer.train()
    assert [Counter(call) for call in calls] == [Counter({"P2:": 4})]
    after = snapshot(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before), "the kept group must train the model"
    logs = trainer.state.log_history[0]
    assert logs["ragen2/filter/kept_groups"] == 1 and logs["ragen2/filter/num_groups"] == 4
    assert logs["ragen2/filter/kept_rows"] == 4
    assert logs["ragen2/filter/kept_fraction"] == 0.25
    assert logs["ragen2/filter/kept_variance_share"] == pytest.approx((100 / 3) / (101 / 3))
    assert logs["ragen2/filter/zero_variance_groups"] == 2
    assert logs["ragen2/filter/zero_variance_at_min"] == 2  # P0 and P3 earn 0 everywhere, the batch minimum
    assert logs["ragen2/filter/empty"] == 0


@pytest.mark.parametrize("scaling, factor", [("none", 1.0), ("linear", 0.25), ("sqrt", 0.5)])
def test_loss_equals_plain_grpo_on_the_kept_groups_alone(tmp_path, tiny_tokenizer, scaling, factor):
    # SGD: parameters move linearly with the gradient (Adam's first step would amplify float noise to lr-size).
    filtered = scripted_trainer(tmp_path / "snr", tiny_tokenizer, optim="sgd", reward_variance_loss_scaling=scaling)
    filtered.train()
    # Plain GRPOTrainer, same model and seed, given only the group the filter keeps.
    plain = scripted_trainer(
        tmp_path / "plain",
        tiny_tokenizer,
        prompts=["P2:"],
        trainer_cls=GRPOTrainer,
        per_device_train_batch_size=4,
        optim="sgd",
    )
    plain.train()
    filtered_loss = filtered.state.log_history[0]["loss"]
    plain_loss = plain.state.log_history[0]["loss"]
    assert plain_loss != 0.0
    assert filtered_loss == pytest.approx(plain_loss * factor, rel=1e-5, abs=1e-7)
    if scaling == "none":
        assert_same_params(snapshot(filtered.model), snapshot(plain.model), atol=1e-6)


def test_filtering_off_matches_grpo_trainer_exactly(tmp_path, tiny_tokenizer):
    """With real sampling (no script), same seed: identical parameters after two steps."""
    prompts = [f"Count to {i}:" for i in range(8)]

    def length_reward(completions, **kwargs):
        return [float(len(c)) for c in completions]

    def run(trainer_cls, config_cls, out, **extra):
        torch.manual_seed(0)
        trainer = trainer_cls(
            model=make_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=length_reward,
            args=make_args(out, config_cls, per_device_train_batch_size=8, max_steps=2, **extra),
            train_dataset=dataset(prompts),
            processing_class=tiny_tokenizer,
        )
        trainer.train()
        return snapshot(trainer.model), trainer.state.log_history

    plain_params, plain_logs = run(GRPOTrainer, GRPOConfig, tmp_path / "a")
    snr_params, snr_logs = run(
        SNRFilteredGRPOTrainer, SNRFilteredGRPOConfig, tmp_path / "b", reward_variance_filtering=None
    )
    assert_same_params(plain_params, snr_params)
    assert plain_logs[0]["loss"] == snr_logs[0]["loss"]
    assert not any(key.startswith("ragen2/filter") for key in snr_logs[0])


def test_empty_steps_change_no_parameter_and_stop_after_patience(tmp_path, tiny_tokenizer, caplog):
    flat = dict.fromkeys(AMPLITUDES, 0.0)  # every rollout earns 0: no group has variance
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward_for(flat),
        args=make_args(tmp_path, max_steps=6, weight_decay=0.1, reward_variance_empty_patience=2),
        train_dataset=dataset(AMPLITUDES),
        processing_class=tiny_tokenizer,
    )
    script_generation(trainer)
    before = snapshot(trainer.model)
    with caplog.at_level(logging.WARNING, logger="trl_ragen2.grpo.grpo_trainer"):
        trainer.train()
    assert_same_params(before, snapshot(trainer.model))  # not even weight decay moved them
    assert trainer.state.global_step == 2, "training stops once patience is reached"
    assert trainer.filter_state.empty_steps == 2 and trainer.filter_state.consecutive_empty_steps == 2
    assert "kept no prompt group for 2 consecutive steps" in caplog.text
    assert "reward_variance_empty_patience=0" in caplog.text
    assert [log["ragen2/filter/empty_steps"] for log in trainer.state.log_history if "loss" in log] == [1.0, 2.0]


def test_uneven_split_trains_every_kept_row(tmp_path, tiny_tokenizer):
    """S = 3 micro-batches for 4 kept rows: split 2 + 1 + 1; TRL's floor split would drop one row."""
    trainer = scripted_trainer(
        tmp_path,
        tiny_tokenizer,
        prompts=["P2:", "P0:", "P3:"],
        per_device_train_batch_size=4,
        gradient_accumulation_steps=3,
    )
    calls = record_loss_rows(trainer)
    trainer.train()
    assert sorted(len(call) for call in calls) == [1, 1, 2]
    assert sum(Counter(call)["P2:"] for call in calls) == 4


def test_resume_restores_filter_state(tmp_path, tiny_tokenizer):
    flat = dict.fromkeys(AMPLITUDES, 0.0)

    def trainer_for(max_steps):
        trainer = SNRFilteredGRPOTrainer(
            model=make_tiny_model(tiny_tokenizer, seed=0),
            reward_funcs=parity_reward_for(flat),
            args=make_args(
                tmp_path, max_steps=max_steps, save_strategy="steps", save_steps=1, reward_variance_empty_patience=0
            ),
            train_dataset=dataset(AMPLITUDES),
            processing_class=tiny_tokenizer,
        )
        return script_generation(trainer)

    first = trainer_for(2)
    first.train()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    with open(checkpoint / "ragen2_filter_state.json") as f:
        assert json.load(f)["empty_steps"] == 2
    assert "RAGEN-2 training details" in (tmp_path / "out" / "README.md").read_text()  # written at each save

    resumed = trainer_for(3)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 3
    assert resumed.filter_state.empty_steps == 3 and resumed.filter_state.consecutive_empty_steps == 3


def test_mi_diagnostics_run_on_the_pre_filter_batch_and_resume(tmp_path, tiny_tokenizer):
    trainer = scripted_trainer(
        tmp_path, tiny_tokenizer, max_steps=2, mi_every_n_steps=1, save_strategy="steps", save_steps=1,
        mi_num_samples=8,
    )  # fmt: skip
    trainer.train()
    logs = trainer.state.log_history[0]
    # all 4 prompts are distinct columns of the first-turn scope, although the filter keeps only one group
    assert logs["ragen2/mi/first_turn/mi_upper_bound"] == pytest.approx(math.log(4))
    assert logs["ragen2/mi/first_turn/num_pairs"] == 8
    for key in ("retrieval_acc", "mi_est", "mi_zscore", "cond_entropy", "mi_zscore_ema"):
        assert math.isfinite(logs[f"ragen2/mi/first_turn/{key}"])
    saved = json.loads((tmp_path / "out" / "checkpoint-2" / "mi_diagnostics_state.json").read_text())

    assert saved["ema"]["first_turn"]["sigma"] is not None

    # Resuming at the last step runs no step, so the diagnostics state is exactly what the checkpoint holds.
    resumed = scripted_trainer(tmp_path, tiny_tokenizer, max_steps=2, mi_every_n_steps=1, mi_num_samples=8)
    assert resumed.mi_diagnostics.ema["first_turn"].sigma is None
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    assert resumed.mi_diagnostics.state_dict()["ema"] == saved["ema"]
    assert resumed.mi_diagnostics.next_step == saved["next_step"] == 3


def test_mi_arguments_are_written_as_the_diagnostics_config_defines_them():
    """The `mi_*` fields are plain dataclass fields (readable, typed); they stay equal to MIDiagnosticsConfig's."""
    import typing

    config_types = typing.get_type_hints(MIDiagnosticsConfig)
    argument_types = typing.get_type_hints(MIDiagnosticsArguments)
    arguments = {f.name: f for f in dataclasses.fields(MIDiagnosticsArguments)}
    for config_field in dataclasses.fields(MIDiagnosticsConfig):
        if config_field.name not in MI_CONFIG_FIELDS:
            continue
        argument = arguments[MI_CONFIG_FIELDS[config_field.name]]
        assert argument.metadata["help"] == config_field.metadata["help"], argument.name
        expected = config_types[config_field.name]
        if typing.get_origin(expected) is tuple:  # a tuple setting is a list on the command line
            expected = list[typing.get_args(expected)[0]]
        assert argument_types[argument.name] == expected, argument.name
        assert f"        {argument.name} (" in MIDiagnosticsArguments.__doc__, argument.name


def test_mi_config_errors_name_the_trainer_field(tmp_path):
    # every MIDiagnosticsConfig setting but ks and seed comes from one mi_* field, whose name its errors carry
    assert set(MI_CONFIG_FIELDS) == {f.name for f in dataclasses.fields(MIDiagnosticsConfig)} - {"ks", "seed"}
    assert sorted(MI_CONFIG_FIELDS.values()) == sorted(f.name for f in dataclasses.fields(MIDiagnosticsArguments))
    # and defaults to the same value
    trainer_defaults = {f.name: f.default_factory() if callable(f.default_factory) else f.default
                        for f in dataclasses.fields(MIDiagnosticsArguments)}  # fmt: skip
    for name, field in {f.name: f for f in dataclasses.fields(MIDiagnosticsConfig)}.items():
        if name in MI_CONFIG_FIELDS:
            default = trainer_defaults[MI_CONFIG_FIELDS[name]]
            assert (tuple(default) if isinstance(default, list) else default) == field.default, name
    with pytest.raises(ValueError, match=r"^mi_every_n_steps=0 is invalid; use an integer >= 1"):
        make_args(tmp_path, mi_every_n_steps=0)
    with pytest.raises(ValueError, match=r"^mi_scopes=\('everything',\) is invalid; .*, or set mi_diagnostics=False$"):
        make_args(tmp_path, mi_scopes=["everything"])
    with pytest.raises(ValueError, match=r"^mi_ema_alpha=1.0 is invalid"):
        make_args(tmp_path, mi_ema_alpha=1.0)
    with pytest.raises(ValueError, match=r"^MIDiagnosticsConfig.every_n_steps=0 is invalid"):
        MIDiagnosticsConfig(every_n_steps=0)  # built directly, it names its own field
    config = make_args(
        tmp_path, mi_every_n_steps=3, mi_scopes=["trajectory"], mi_ema_alpha=0.5
    ).mi_diagnostics_config()
    assert (config.every_n_steps, config.scopes, config.ema_alpha, config.seed) == (3, ("trajectory",), 0.5, 7)


def test_mi_scorer_takes_the_trainers_scoring_budgets(tmp_path, tiny_tokenizer):
    trainer = scripted_trainer(tmp_path, tiny_tokenizer, mi_pack_tokens=None, mi_max_tokens_per_chunk=512)
    scorer = trainer.mi_diagnostics._scorer_for(trainer)
    assert (scorer.pack_tokens, scorer.max_tokens_per_chunk) == (None, 512)
    with pytest.raises(ValueError, match=r"^mi_pack_tokens=0 is invalid; use an integer >= 1, or None"):
        make_args(tmp_path, mi_pack_tokens=0)


def test_model_card_carries_tags_and_citation(tmp_path, tiny_tokenizer):
    trainer = scripted_trainer(tmp_path, tiny_tokenizer)
    trainer.model_card_details["Catalogue"] = "procedural-100-seed0"
    trainer.train()
    trainer.create_model_card(model_name="tiny-ragen2")
    card = (tmp_path / "out" / "README.md").read_text()
    assert "ragen2" in card and "snr-filtering" in card
    assert "2604.06268" in card and "RAGEN-2: Reasoning Collapse in Agentic RL" in card
    assert "SNR-aware filtering: `top_p`" in card and "Catalogue: procedural-100-seed0" in card


@pytest.mark.parametrize(
    "options",
    [
        {"num_iterations": 2, "max_steps": 2},
        {"beta": 0.1},
        {
            "gradient_accumulation_steps": 2,
            "per_device_train_batch_size": 4,
            "steps_per_generation": 4,
            "max_steps": 2,
        },
        {"loss_type": "grpo"},
        {"reward_variance_filtering": "top_k", "reward_variance_top_k": 0.5},
        {"reward_variance_filtering": "min_p", "reward_variance_min_p": 0.01},
        {"reward_variance_top_p_mode": "softmax", "reward_variance_include_zero": True},
    ],
    ids=["num_iterations", "beta", "steps_per_generation", "loss_grpo", "top_k", "min_p", "softmax"],
)
def test_training_options(tmp_path, tiny_tokenizer, options):
    # beta > 0 reloads the reference model by name, so pass the tiny model as a saved folder
    model = tiny_model_path(cache_dir=tmp_path / "models") if options.get("beta") else None
    trainer = scripted_trainer(tmp_path, tiny_tokenizer, model=model, **options)
    before = snapshot(trainer.model)
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert "ragen2/filter/kept_groups" in trainer.state.log_history[0]
    assert trainer.state.log_history[-1]["train_loss"] is not None


def test_peft_model(tmp_path, tiny_tokenizer):
    from peft import LoraConfig

    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tiny_tokenizer, seed=0),
        reward_funcs=parity_reward_for(AMPLITUDES),
        args=make_args(tmp_path, beta=0.05),  # beta > 0 with PEFT: the reference is the adapter-disabled model
        train_dataset=dataset(AMPLITUDES),
        processing_class=tiny_tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    script_generation(trainer)
    calls = record_loss_rows(trainer)
    lora_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert [Counter(call) for call in calls] == [Counter({"P2:": 4})]
    assert any(not torch.equal(lora_before[n], p) for n, p in trainer.model.named_parameters() if "lora_B" in n)


def test_evaluation_is_never_filtered(tmp_path, tiny_tokenizer):
    trainer = scripted_trainer(tmp_path, tiny_tokenizer, per_device_eval_batch_size=16, eval_strategy="no")
    trainer.eval_dataset = dataset(AMPLITUDES)
    calls = record_loss_rows(trainer)
    metrics = trainer.evaluate()
    assert "eval_loss" in metrics
    assert Counter(calls[0]) == Counter(dict.fromkeys(AMPLITUDES, 4)), "evaluation keeps every row"
    assert trainer.filter_state.filtered_steps == 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"reward_variance_filtering": "top_q"}, "reward_variance_filtering must be one of"),
        ({"reward_variance_top_p": 1.2}, "reward_variance_top_p must be in \\(0, 1\\], got 1.2"),
        ({"reward_variance_filtering": "top_k"}, "reward_variance_top_k must be set .* got None; pass a number"),
        (
            {"reward_variance_filtering": "top_k", "reward_variance_top_k": 2.0},
            "reward_variance_top_k=2.0 is a float, so it is a fraction .* in \\(0, 1\\]; for a number of groups pass "
            "an int \\(e.g. reward_variance_top_k=4\\)",
        ),
        (
            {"reward_variance_filtering": "top_k", "reward_variance_top_k": 0},
            "reward_variance_top_k must be >= 1 when it is an int \\(a number of groups\\), got 0",
        ),
        (
            {"reward_variance_filtering": "top_k", "reward_variance_top_k": True},
            "reward_variance_top_k must be an int",
        ),
        ({"reward_variance_filtering": "min_p", "reward_variance_min_p": 3}, "reward_variance_min_p must be in"),
        ({"reward_variance_metric": "mad"}, "reward_variance_metric must be one of"),
        ({"reward_variance_top_p_mode": "cubic"}, "reward_variance_top_p_mode must be one of"),
        ({"reward_variance_loss_scaling": "rho"}, "reward_variance_loss_scaling must be one of"),
        ({"reward_variance_empty_patience": -1}, "reward_variance_empty_patience must be >= 0"),
        ({"reward_variance_selection_eps": -1.0}, "reward_variance_selection_eps must be >= 0"),
        (
            {"reward_variance_selection_eps_mode": "scaled"},
            "reward_variance_selection_eps_mode must be one of \\('relative', 'absolute'\\), got 'scaled'; 'relative'",
        ),
        (
            {"reward_variance_selection_eps": 1.5},
            "reward_variance_selection_eps=1.5 must be below 1 with reward_variance_selection_eps_mode='relative' .*"
            "reward_variance_selection_eps_mode='absolute' for a margin in score units",
        ),
        (
            {"reward_variance_selection_eps": 0.9},
            "reward_variance_selection_eps=0.9 must be below reward_variance_top_p=0.9 with "
            "reward_variance_selection_eps_mode='relative'.* would keep no group; use a share such as 0.01",
        ),
        (
            {
                "reward_variance_selection_eps": 0.5,
                "reward_variance_top_p": 1.0,
                "reward_variance_top_p_schedule": "linear",
                "reward_variance_top_p_end": 0.4,
                "reward_variance_schedule_steps": 10,
            },
            "reward_variance_selection_eps=0.5 must be below reward_variance_top_p_end=0.4",
        ),
    ],
)
def test_config_validation(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        make_args(tmp_path, **overrides)


@pytest.mark.parametrize("text", ["None", "none", "null"])
def test_no_filter_can_be_written_as_text(tmp_path, text):
    """A command line or YAML gives `--reward_variance_filtering None` as text: it means no filter."""
    assert make_args(tmp_path, reward_variance_filtering=text).reward_variance_filtering is None


def test_selection_eps_is_a_share_by_default_and_absolute_on_request(tmp_path):
    assert make_args(tmp_path).reward_variance_selection_eps_mode == "relative"
    # an absolute margin is in score units, so any size is allowed; so is a large share where no top-p walk uses it
    assert make_args(tmp_path, reward_variance_selection_eps=2.0, reward_variance_selection_eps_mode="absolute")
    assert make_args(tmp_path, reward_variance_selection_eps=0.95, reward_variance_top_p_mode="softmax")


@pytest.mark.parametrize("text, value", [("4", 4), ("1", 1), ("0.25", 0.25), ("1.0", 1.0)])
def test_top_k_on_the_command_line_keeps_int_and_float_apart(tmp_path, text, value):
    """`--reward_variance_top_k 4` is a number of groups and `1.0` a fraction (all groups), as in Python."""
    from trl import TrlParser

    argv = ["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false", "--report_to", "none"]
    argv += ["--reward_variance_filtering", "top_k", "--reward_variance_top_k", text]
    (args,) = TrlParser((SNRFilteredGRPOConfig,)).parse_args_and_config(argv)
    assert args.reward_variance_top_k == value and type(args.reward_variance_top_k) is type(value)


def test_plain_grpo_config_is_rejected_with_a_fix(tmp_path, tiny_tokenizer):
    with pytest.raises(TypeError, match="SNRFilteredGRPOConfig"):
        SNRFilteredGRPOTrainer(
            model=make_tiny_model(tiny_tokenizer),
            reward_funcs=parity_reward_for(AMPLITUDES),
            args=make_args(tmp_path, GRPOConfig),
            train_dataset=dataset(AMPLITUDES),
            processing_class=tiny_tokenizer,
        )
