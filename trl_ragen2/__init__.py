"""trl-ragen2: RAGEN-2 template-collapse diagnostics and SNR-aware filtering for Hugging Face TRL.

Public names are imported lazily, on first access: `from trl_ragen2 import SNRFilteredGRPOTrainer` imports the
trainer module (and TRL), while `import trl_ragen2.filtering.selection` stays free of TRL and transformers (see
`docs/architecture.md`). A name whose module needs a package that is not installed raises a `ModuleNotFoundError`
naming the public name and the missing package.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version


try:
    __version__ = version("trl-ragen2")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

# public name -> module that defines it
_LAZY = {
    "group_reward_scores": "trl_ragen2.filtering.selection",
    "select_groups": "trl_ragen2.filtering.selection",
    "filter_stats": "trl_ragen2.filtering.selection",
    "SNRFilteredGRPOConfig": "trl_ragen2.grpo.grpo_config",
    "SNRFilteredGRPOTrainer": "trl_ragen2.grpo.grpo_trainer",
    "SNRFilteredPPOConfig": "trl_ragen2.ppo.ppo_config",
    "SNRFilteredPPOTrainer": "trl_ragen2.ppo.ppo_trainer",
    "MIDiagnostics": "trl_ragen2.collapse.diagnostics",
    "MIDiagnosticsCallback": "trl_ragen2.collapse.diagnostics",
    "MIDiagnosticsConfig": "trl_ragen2.collapse.diagnostics",
    "CollapseAlarm": "trl_ragen2.collapse.alarm",
    "CollapseDetector": "trl_ragen2.collapse.detector",
    "mi_metrics": "trl_ragen2.collapse.mi",
    "TransformersCrossScorer": "trl_ragen2.collapse.scoring",
    "VLLMCrossScorer": "trl_ragen2.collapse.scoring",
    "ThinkTagExtractor": "trl_ragen2.collapse.scoring",
    "MIZScoreEMA": "trl_ragen2.collapse.mi",
    "reasoning_regime": "trl_ragen2.collapse.mi",
    "RagenRollout": "trl_ragen2.agents.rollout_func",
    "env_return": "trl_ragen2.agents.rollout_func",
    "evaluate_episodes": "trl_ragen2.agents.rollout_func",
    "RolloutConfig": "trl_ragen2.agents.rollout",
    "RolloutEngine": "trl_ragen2.agents.rollout",
    "EpisodeSpec": "trl_ragen2.agents.rollout",
    "TrainerGeneration": "trl_ragen2.agents.generation",
    "ModelGeneration": "trl_ragen2.agents.generation",
    "EngineGeneration": "trl_ragen2.agents.generation",
    "ScriptedPolicy": "trl_ragen2.agents.generation",
    "MetricsJSONLCallback": "trl_ragen2.runs.tracking",
    "plot_run": "trl_ragen2.plots.figures",
    "plot_regimes": "trl_ragen2.plots.figures",
    "plot_training_curves": "trl_ragen2.plots.figures",
    "make_tiny_model": "trl_ragen2.models.tiny",
    "make_tiny_tokenizer": "trl_ragen2.models.tiny",
    "load_model_and_tokenizer": "trl_ragen2.models.loader",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'trl_ragen2' has no attribute {name!r}")
    try:
        module = import_module(_LAZY[name])
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if not missing or missing == __name__:
            raise
        raise ModuleNotFoundError(
            f"trl_ragen2.{name} needs {missing!r}, which is not installed ({error}); `pip install trl-ragen2` "
            "installs the dependencies of every public name",
            name=error.name,
        ) from error
    return getattr(module, name)


def __dir__():
    return sorted(list(globals()) + __all__)
