"""Template collapse (RAGEN-2 §2): measuring whether reasoning still depends on its input, while a run trains.

- `mi`: the MI proxies of an in-batch cross-scoring matrix (Retrieval-Acc, MI-Est, MI-ZScore(-EMA)), the
  reasoning regimes;
- `mi_uncertainty`: the permutation test and bootstrap intervals of those proxies;
- `scoring/`: (context, reasoning) pairs, reasoning spans, one scope across processes, and the two cross-scoring
  engines (transformers, vLLM);
- `text_metrics`, `text_diagnostics`: text template metrics of the reasoning (distinct-n, self-BLEU, overlap), and
  their batch at the diagnostic steps;
- `diagnostics`: when the MI diagnostics run during training, their settings, keys and state; a callback for a
  plain `GRPOTrainer`;
- `detector`, `alarm`: an early warning of collapse from the logged diagnostics, and its `TrainerCallback`;
- `mi_arguments`: the `mi_*` fields of the trainer configs.
- `rollout_file`, `diagnose`: saved rollouts (JSONL from any framework) and the trainer-free diagnosis of one batch of
  rollouts behind `trl-ragen2 diagnose`: proxies, regime, verdict, paired checkpoints, the terminal report.

The gradient SNR report (the paper's Figure 3, the §3 argument for filtering) is in `trl_ragen2.filtering`.

`mi`, `mi_uncertainty`, `text_metrics` and `detector` are pure (torch at most); the engines load
transformers or vLLM lazily; a trainer is only ever an argument here, never an import.
"""
