"""The library's configs accept every value `trl.GRPOConfig` accepts for TRL's own fields, and parse them alike.

Each case builds `trl.GRPOConfig` and both library configs from the same values (in Python, and as strings from the
command line) and compares the parsed field: where TRL accepts a value the library must accept it and end with the
same value; where TRL refuses it the library must refuse it too. Only the library's own fields are held to their
declared types (`trl_ragen2.grpo.config_types`).
"""

import dataclasses
import typing

import pytest
from transformers import TrainingArguments
from trl import GRPOConfig, TrlParser

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredPPOConfig


LIBRARY_CONFIGS = (SNRFilteredGRPOConfig, SNRFilteredPPOConfig)
# Fields PPO sets on purpose whatever it is given (GAE replaces the group advantage; docs/ppo.md).
PPO_OVERRIDES = {"scale_rewards"}
TRL_FIELDS = [
    field
    for field in dataclasses.fields(GRPOConfig)
    if field.init and field.name not in {f.name for f in dataclasses.fields(TrainingArguments)}
]
SIMPLE = (bool, int, float, str)


def base(tmp_path) -> dict:
    return dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, per_device_train_batch_size=8, report_to="none")


def build(config_class, tmp_path, **values):
    try:
        return config_class(**base(tmp_path), **values), None
    except Exception as error:  # noqa: BLE001 - compared with TRL's outcome
        return None, error


def assert_parsed_alike(config_class, name, trl_config, trl_error, ours, our_error):
    if trl_error is not None:
        assert our_error is not None, f"{config_class.__name__} accepted {name} where TRL refused it: {trl_error}"
        return
    assert our_error is None, f"{config_class.__name__} refused a {name} that TRL accepts: {our_error}"
    if config_class is SNRFilteredPPOConfig and name in PPO_OVERRIDES:
        return
    assert getattr(ours, name) == getattr(trl_config, name), name


def allows_none(field) -> bool:
    return type(None) in typing.get_args(field.type) or field.default is None


# TRL's documented and tested values of its own fields (trl's tests/test_grpo_trainer.py and the GRPOConfig docs)
LEGACY_AND_DOCUMENTED = [
    ("scale_rewards", True),
    ("scale_rewards", False),
    ("scale_rewards", "group"),
    ("scale_rewards", "batch"),
    ("scale_rewards", "none"),
    ("loss_type", "grpo"),
    ("loss_type", "dr_grpo"),
    ("loss_type", "bnpo"),
    ("importance_sampling_level", "sequence"),
    ("epsilon_high", 0.28),
    ("top_entropy_quantile", 0.2),
    ("pad_to_multiple_of", "none"),
    ("pad_to_multiple_of", 8),
    ("reward_weights", [0.7, 0.3]),
    ("generation_kwargs", {"top_k": 5}),
    ("mask_truncated_completions", True),
    ("num_iterations", 2),
]


@pytest.mark.parametrize("config_class", LIBRARY_CONFIGS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name, value", LEGACY_AND_DOCUMENTED, ids=[f"{n}={v!r}" for n, v in LEGACY_AND_DOCUMENTED])
def test_trl_values_parse_alike(tmp_path, config_class, name, value):
    trl_config, trl_error = build(GRPOConfig, tmp_path, **{name: value})
    ours, our_error = build(config_class, tmp_path, **{name: value})
    assert_parsed_alike(config_class, name, trl_config, trl_error, ours, our_error)


@pytest.mark.parametrize("config_class", LIBRARY_CONFIGS, ids=lambda c: c.__name__)
def test_none_where_trl_allows_it(tmp_path, config_class):
    fields = [field for field in TRL_FIELDS if allows_none(field)]
    assert len(fields) > 20
    for field in fields:
        trl_config, trl_error = build(GRPOConfig, tmp_path, **{field.name: None})
        ours, our_error = build(config_class, tmp_path, **{field.name: None})
        assert_parsed_alike(config_class, field.name, trl_config, trl_error, ours, our_error)


@pytest.mark.parametrize("config_class", LIBRARY_CONFIGS, ids=lambda c: c.__name__)
def test_every_trl_field_from_the_command_line(tmp_path, config_class):
    """Each TRL field of a simple type, given its default as a string on the command line (`--beta 0.0`)."""
    checked = 0
    for field in TRL_FIELDS:
        default = field.default
        if not isinstance(default, SIMPLE) or field.default is dataclasses.MISSING:
            continue
        argv = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false", "--report_to", "none"]
        argv += ["--per_device_train_batch_size", "8", f"--{field.name}", str(default)]
        results = []
        for cls in (GRPOConfig, config_class):
            try:
                (parsed,) = TrlParser(cls).parse_args_into_dataclasses(argv)
                results.append((parsed, None))
            except (Exception, SystemExit) as error:  # noqa: BLE001 - compared with TRL's outcome
                results.append((None, error))
        (trl_config, trl_error), (ours, our_error) = results
        assert_parsed_alike(config_class, field.name, trl_config, trl_error, ours, our_error)
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("text, expected", [("0.04", 0.04), ("1e-3", 1e-3)])
def test_numbers_given_as_strings_from_the_command_line(tmp_path, text, expected):
    argv = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false", "--beta", text]
    argv += ["--epsilon_high", text, "--max_completion_length", "64", "--num_generations", "4"]
    for cls in (GRPOConfig, *LIBRARY_CONFIGS):
        (parsed,) = TrlParser(cls).parse_args_into_dataclasses(argv)
        assert (parsed.beta, parsed.epsilon_high) == (expected, expected)
        assert (parsed.max_completion_length, parsed.num_generations) == (64, 4)


def test_the_librarys_own_fields_keep_their_types(tmp_path):
    with pytest.raises(ValueError, match="reward_variance_top_p must be a number, got '0.9'"):
        SNRFilteredGRPOConfig(**base(tmp_path), reward_variance_top_p="0.9")
    with pytest.raises(ValueError, match="mi_every_n_steps must be an integer, got 1.5"):
        SNRFilteredPPOConfig(**base(tmp_path), mi_every_n_steps=1.5)
