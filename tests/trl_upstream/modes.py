"""The classes each `TRL_DROPIN` mode binds to the test module's `GRPOTrainer` and `GRPOConfig` names.

Importing this module imports TRL and the library. The configs are module-level classes, so a saved
`training_args.bin` (a pickle) can name them.
"""

import dataclasses

import trl

import trl_ragen2.grpo.grpo_trainer as trainer_module
from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer


@dataclasses.dataclass
class FilterOffGRPOConfig(SNRFilteredGRPOConfig):
    """`SNRFilteredGRPOConfig` whose `reward_variance_filtering` defaults to `None` (the filter off)."""

    reward_variance_filtering: str | None = dataclasses.field(
        default=None, metadata=SNRFilteredGRPOConfig.__dataclass_fields__["reward_variance_filtering"].metadata
    )


def dropin_classes(mode: str) -> tuple[type, type]:
    """`(GRPOTrainer, GRPOConfig)` of `mode`: `plain`, `filter_off` or `filter_on`."""
    if mode == "plain":
        return trl.GRPOTrainer, trl.GRPOConfig
    if mode == "filter_on":
        return SNRFilteredGRPOTrainer, SNRFilteredGRPOConfig
    if mode == "filter_off":
        # `SNRFilteredGRPOTrainer(args=None)` builds its own config: with the filter off too.
        trainer_module.SNRFilteredGRPOConfig = FilterOffGRPOConfig
        return SNRFilteredGRPOTrainer, FilterOffGRPOConfig
    raise ValueError(f"unknown TRL_DROPIN mode {mode!r}")
