"""`MIDiagnosticsArguments`: the `mi_*` fields of the trainer configs, which set the MI diagnostics' settings.

Each field `mi_<name>` sets `MIDiagnosticsConfig.<name>` (`mi_diagnostics` sets `enabled`), with the same default and
help text; `tests/test_grpo_trainer.py` holds the two equal, field by field. `ks` stays at its default and `seed` is
the run's `seed`. A tuple setting is a list here (what `TrlParser` reads from several command-line values or a YAML
list).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..runs.keys import MI_SCOPES
from .diagnostics import DEFAULT_TRAJECTORY_CHAINS, MIDiagnosticsConfig


# MIDiagnosticsConfig fields a trainer config does not carry: the Recall@k cut-offs stay at their default, and the
# pair sampling is seeded with the run's `seed`.
MI_CONFIG_ONLY = ("ks", "seed")


def mi_field_name(name: str) -> str:
    """The trainer-config field that sets `MIDiagnosticsConfig.<name>`."""
    return "mi_diagnostics" if name == "enabled" else f"mi_{name}"


# MIDiagnosticsConfig field -> the MIDiagnosticsArguments field that sets it
MI_CONFIG_FIELDS = {
    f.name: mi_field_name(f.name) for f in dataclasses.fields(MIDiagnosticsConfig) if f.name not in MI_CONFIG_ONLY
}


@dataclass
class MIDiagnosticsArguments:
    r"""
    RAGEN-2 mutual-information collapse diagnostics (arXiv 2604.06268, §2.3, Table 1), run on the pre-filter batch.

    Every reasoning chain of a sample of the batch is scored under every prompt of the batch; from the log-probability
    matrix come Retrieval-Acc, Recall@k, MI-Est, MI-Seq-Est, MI-ZScore and MI-ZScore-EMA beside H(Z|X), logged for
    each scope (`first_turn`, `trajectory`; the keys of `trl_ragen2.runs.keys.mi_key`). Each field sets the
    [`~trl_ragen2.collapse.diagnostics.MIDiagnosticsConfig`] field of the same name without `mi_`, whose docstring
    describes it in full.

    Parameters:
        mi_diagnostics (`bool`, *optional*, defaults to `True`):
            Run the RAGEN-2 MI collapse diagnostics.
        mi_every_n_steps (`int`, *optional*, defaults to `5`):
            Run at step 1, then every N steps (RAGEN: 5).
        mi_num_samples (`int`, *optional*, defaults to `64`):
            Pairs sampled per scope (RAGEN: 64).
        mi_trajectory_chains (`int` or `None`, *optional*, defaults to `16`):
            Trajectory chains scored, a uniform subset, against every context (None: all, RAGEN).
        mi_scopes (`list[str]`, *optional*, defaults to `["first_turn", "trajectory"]`):
            Scopes: first_turn and/or trajectory.
        mi_engine (`str`, *optional*, defaults to `"auto"`):
            'transformers', 'vllm' or 'auto' (with vLLM: the faster per scope).
        mi_max_tokens_per_chunk (`int`, *optional*, defaults to `16384`):
            Token budget of one scoring forward.
        mi_pack_tokens (`int` or `None`, *optional*, defaults to `128`):
            Lane width for packing chains side by side in scoring (None: one per row).
        mi_num_negatives (`int` or `None`, *optional*, defaults to `None`):
            Negatives per chain instead of all prompts (biased, cheaper).
        mi_negative_sampling (`str`, *optional*, defaults to `"random"`):
            'random' or 'similar' negatives.
        mi_marginal (`str`, *optional*, defaults to `"ragen"`):
            'ragen' (plotted curves) or 'paper' (Eq. 1).
        mi_ema_alpha (`float`, *optional*, defaults to `0.9`):
            EMA decay of MI-ZScore-EMA's sigma (paper: 0.9).
        mi_num_permutations (`int`, *optional*, defaults to `1000`):
            Label shuffles of the retrieval permutation test (0: off).
        mi_num_bootstrap (`int`, *optional*, defaults to `1000`):
            Bootstrap resamples of the intervals (0: off).
        mi_confidence_level (`float`, *optional*, defaults to `0.95`):
            Level of the MI confidence intervals.
        mi_text_metrics (`bool`, *optional*, defaults to `True`):
            Also log distinct-n, self-BLEU and n-gram overlap of the reasoning.
    """

    mi_diagnostics: bool = field(default=True, metadata={"help": "Run the RAGEN-2 MI collapse diagnostics."})
    mi_every_n_steps: int = field(default=5, metadata={"help": "Run at step 1, then every N steps (RAGEN: 5)."})
    mi_num_samples: int = field(default=64, metadata={"help": "Pairs sampled per scope (RAGEN: 64)."})
    mi_trajectory_chains: int | None = field(
        default=DEFAULT_TRAJECTORY_CHAINS,
        metadata={"help": "Trajectory chains scored, a uniform subset, against every context (None: all, RAGEN)."},
    )
    mi_scopes: list[str] = field(
        default_factory=lambda: list(MI_SCOPES), metadata={"help": "Scopes: first_turn and/or trajectory."}
    )
    mi_engine: str = field(
        default="auto", metadata={"help": "'transformers', 'vllm' or 'auto' (with vLLM: the faster per scope)."}
    )
    mi_max_tokens_per_chunk: int = field(default=16384, metadata={"help": "Token budget of one scoring forward."})
    mi_pack_tokens: int | None = field(
        default=128, metadata={"help": "Lane width for packing chains side by side in scoring (None: one per row)."}
    )
    mi_num_negatives: int | None = field(
        default=None, metadata={"help": "Negatives per chain instead of all prompts (biased, cheaper)."}
    )
    mi_negative_sampling: str = field(default="random", metadata={"help": "'random' or 'similar' negatives."})
    mi_marginal: str = field(default="ragen", metadata={"help": "'ragen' (plotted curves) or 'paper' (Eq. 1)."})
    mi_ema_alpha: float = field(default=0.9, metadata={"help": "EMA decay of MI-ZScore-EMA's sigma (paper: 0.9)."})
    mi_num_permutations: int = field(
        default=1000, metadata={"help": "Label shuffles of the retrieval permutation test (0: off)."}
    )
    mi_num_bootstrap: int = field(default=1000, metadata={"help": "Bootstrap resamples of the intervals (0: off)."})
    mi_confidence_level: float = field(default=0.95, metadata={"help": "Level of the MI confidence intervals."})
    mi_text_metrics: bool = field(
        default=True, metadata={"help": "Also log distinct-n, self-BLEU and n-gram overlap of the reasoning."}
    )

    def mi_diagnostics_config(self) -> MIDiagnosticsConfig:
        """The [`~trl_ragen2.collapse.diagnostics.MIDiagnosticsConfig`] these fields describe (validated there; its
        errors name these fields)."""
        values = {name: getattr(self, field_name) for name, field_name in MI_CONFIG_FIELDS.items()}
        return MIDiagnosticsConfig(**values, seed=getattr(self, "seed", 0), field_names=MI_CONFIG_FIELDS)
