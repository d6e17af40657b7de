"""`SNRFilteredGRPOConfig`: `GRPOConfig` plus the RAGEN-2 settings, each group defined beside the code that reads it.

- the filter's `reward_variance_*` fields: `trl_ragen2.filtering.arguments.SNRFilterArguments`, and dynamic
  sampling's `reward_variance_refill*`: `trl_ragen2.filtering.refill.RefillArguments`;
- the MI diagnostics' `mi_*` fields: `trl_ragen2.collapse.mi_arguments.MIDiagnosticsArguments`;
- the gradient report's `grad_report_*` fields: `trl_ragen2.filtering.grad_report.GradientReportArguments`;
- the vLLM engine's fields: `trl_ragen2.models.vllm_cpu.VLLMEngineArguments`;
- the run folder's, resume and sample log fields: `trl_ragen2.runs.run_folder.RunFolderArguments`.

This module only composes them and checks what crosses groups. Every field is validated in `__post_init__` with an
error naming the field, its value and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from trl import GRPOConfig

from ..collapse.mi_arguments import MI_CONFIG_FIELDS, MIDiagnosticsArguments  # noqa: F401 - MI_CONFIG_FIELDS re-exported
from ..filtering.arguments import WITHIN_GROUP, SNRFilterArguments  # noqa: F401 - WITHIN_GROUP re-exported
from ..filtering.grad_report import GradientReportArguments, check_report_settings
from ..filtering.refill import RefillArguments
from ..models.vllm_cpu import VLLMEngineArguments
from ..runs.run_folder import RunFolderArguments
from .config_types import check_field_types


@dataclass
class SNRFilteredGRPOConfig(
    SNRFilterArguments,
    RefillArguments,
    MIDiagnosticsArguments,
    GradientReportArguments,
    VLLMEngineArguments,
    RunFolderArguments,
    GRPOConfig,
):
    r"""
    Configuration class for [`SNRFilteredGRPOTrainer`]: every [`~trl.GRPOConfig`] field, plus the RAGEN-2
    SNR-aware filtering fields documented in [`SNRFilterArguments`] and [`RefillArguments`], the MI diagnostics fields documented in
    [`MIDiagnosticsArguments`], the gradient report fields of [`GradientReportArguments`], and the output folder,
    resume and sample log fields of [`RunFolderArguments`].

    > [!NOTE]
    > The paper trains with P = 8 prompts x G = 16 rollouts per iteration, actor lr 1e-6, clip 0.2 / 0.28, entropy
    > coefficient 0.001 and no KL in the main tables; those are TRL fields (`num_generations`, `learning_rate`,
    > `epsilon`, `epsilon_high`, `beta`), left at TRL's defaults here and set by the recipes.
    """

    def __post_init__(self):
        check_field_types(
            self, parent=GRPOConfig
        )  # a YAML number or list skips argparse's conversion: checked before anything reads it
        super().__post_init__()
        self.validate_reward_variance_fields()
        self.validate_refill_fields(self.generation_batch_size // self.num_generations)
        self.mi_diagnostics_config()  # validates the mi_* fields
        self.validate_vllm_engine_fields()
        self.sample_log_settings()  # validates the sample_log_* fields
        check_report_settings(self, sharded=False)  # the trainer checks the sharding
        if self.reward_variance_filtering is not None and self.num_generations < 2:
            raise ValueError(
                f"reward_variance_filtering={self.reward_variance_filtering!r} needs prompt groups, but "
                f"num_generations={self.num_generations}; set num_generations >= 2 (the paper uses 16) or "
                "reward_variance_filtering=None"
            )
