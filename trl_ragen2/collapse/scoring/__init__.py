"""In-batch cross-scoring for the RAGEN-2 MI diagnostics: pairs, reasoning spans and two scoring engines.

- `reasoning`: turn boundaries in a completion (`turn_spans`) and the reasoning inside a turn (`ThinkTagExtractor`).
- `pairs`: the first-turn and trajectory pair sampling of RAGEN-2, context/reasoning tokenisation (`PairBuilder`),
  deduplicated columns and the cheap negatives mode.
- `transformers_scorer`: exact teacher-forced scoring with prefix KV-cache reuse (`TransformersCrossScorer`) and the
  naive concatenation reference (`naive_cross_scores`).
- `vllm_scorer`: scoring through the trainer's vLLM prompt logprobs (`VLLMCrossScorer`); vLLM is imported lazily.
- `scopes`, `collective`: one scope across processes, with the collectives every process runs.
"""

from .collective import ProcessGroup
from .pairs import (
    NEGATIVE_SAMPLING,
    Draw,
    PairBuilder,
    RowInfo,
    chains_to_score,
    expand_columns,
    negatives_matrix,
    sample_first_turn,
    sample_trajectory,
    scope_generator,
    select_negatives,
    unique_contexts,
)
from .reasoning import ReasoningExtractor, ThinkTagExtractor, completion_lengths, turn_spans
from .scopes import LocalRollouts, ScopeResult, ScoreMemo, gather_rows, score_scope
from .transformers_scorer import TransformersCrossScorer, naive_cross_scores, resolve_causal_lm, scoring_mode, unpad
from .vllm_scorer import VLLMCrossScorer, supports_token_id_scoring


__all__ = [
    "NEGATIVE_SAMPLING",
    "Draw",
    "LocalRollouts",
    "PairBuilder",
    "ProcessGroup",
    "ReasoningExtractor",
    "RowInfo",
    "ScopeResult",
    "ScoreMemo",
    "ThinkTagExtractor",
    "TransformersCrossScorer",
    "VLLMCrossScorer",
    "chains_to_score",
    "completion_lengths",
    "expand_columns",
    "gather_rows",
    "naive_cross_scores",
    "negatives_matrix",
    "resolve_causal_lm",
    "sample_first_turn",
    "sample_trajectory",
    "score_scope",
    "scope_generator",
    "scoring_mode",
    "select_negatives",
    "supports_token_id_scoring",
    "turn_spans",
    "unique_contexts",
    "unpad",
]
