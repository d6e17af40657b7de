"""One short training run with TRL's vLLM colocate engine on vLLM's CPU build; prints its findings as JSON.

Run as a script (vLLM's engine needs a `__main__` guard and one engine per process):

    python tests/vllm/colocate_run.py --trainer grpo --steps 3 [--multi_turn] [--lora] [--refill] [--out result.json]
    torchrun --nproc_per_node 2 tests/vllm/colocate_run.py ...    (one engine per process; --out gets `.rank<N>`)

It trains the tiny model (2 heads of 32, which vLLM's CPU attention supports) with a float32 engine, then
reports:
- `sampling_logp_difference_max`: TRL's own per-step `sampling/sampling_logp_difference/max`, the largest gap between
  the log-probabilities vLLM sampled with and the training model's on the same tokens, at every step;
- `engine_vs_policy_max`: after one more weight sync, the largest gap between vLLM's prompt log-probs of fixed
  sequences and the trained model's own;
- `engine_vs_initial_max`: the same sequences against the initial weights (how far training moved them: what a stale
  engine would be off by);
- `scorer_vs_transformers_max`: `VLLMCrossScorer` on the engine against `TransformersCrossScorer` on the trained model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile


os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: an explicit KV cache, whatever else runs on the host
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def fixed_sequences(tokenizer, count=4, length=24):
    import torch

    generator = torch.Generator().manual_seed(0)
    return [torch.randint(3, len(tokenizer) - 1, (length,), generator=generator).tolist() for _ in range(count)]


def engine_logps(llm, sequences):
    """vLLM's prompt log-prob of every token after the first, per sequence (the portable `prompt_logprobs=0`)."""
    from vllm import SamplingParams

    outputs = llm.generate(
        [{"prompt_token_ids": ids} for ids in sequences],
        SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False),
        use_tqdm=False,
    )
    return [
        [out.prompt_logprobs[p][ids[p]].logprob for p in range(1, len(ids))]
        for out, ids in zip(outputs, sequences, strict=True)
    ]


def model_logps(model, sequences):
    import torch

    rows = []
    with torch.no_grad():
        for ids in sequences:
            logits = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
            rows.append([logits[p - 1, ids[p]].item() for p in range(1, len(ids))])
    return rows


def max_gap(a, b):
    return max(abs(x - y) for row_a, row_b in zip(a, b, strict=True) for x, y in zip(row_a, row_b, strict=True))


def length_reward(completion_ids, **kwargs):
    """Rewards that differ within each group, so every group has variance and the filter keeps rows."""
    return [float(len(ids) % 3) for ids in completion_ids]


def one_prompt_reward(prompts, completion_ids, **kwargs):
    """The parity of the token ids' sum on "Go left or right?" (it varies within a group however long the
    completions are) and 0 on "Say a number:": a refill targeting both groups of the batch needs a second round."""
    return [float(sum(ids) % 2) if "Go" in str(p) else 0.0 for p, ids in zip(prompts, completion_ids, strict=True)]


def build_trainer(options, output_dir):
    import torch
    from datasets import Dataset

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer, SNRFilteredPPOConfig, SNRFilteredPPOTrainer
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, VLLM_CPU_SIZES, tiny_model_path

    config_cls, trainer_cls = (
        (SNRFilteredPPOConfig, SNRFilteredPPOTrainer)
        if options.trainer == "ppo"
        else (SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer)
    )
    path = tiny_model_path(seed=0, **VLLM_CPU_SIZES)
    kwargs = dict(
        output_dir=output_dir,
        per_device_train_batch_size=8,  # 2 prompts x 4 rollouts
        num_generations=4,
        max_completion_length=12,
        max_steps=options.steps,
        learning_rate=5e-2,  # large: each step moves the tiny model far more than the engine's float32 error
        logging_steps=1,
        save_strategy="no",
        seed=3,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_dtype="float32",
        vllm_importance_sampling_correction=True,
        mi_diagnostics=True,
        mi_every_n_steps=1,
        mi_engine=options.mi_engine,
        **CPU_TRAINING_KWARGS,
    )
    if options.refill:
        kwargs.update(reward_variance_refill="nonzero_variance", shuffle_dataset=False)
    if torch.cuda.is_available():  # the same run on a GPU machine (tests/gpu/run_gpu_checks.sh): train on CUDA too
        kwargs.update(use_cpu=False, vllm_gpu_memory_utilization=0.2)
    peft_config = None
    if options.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj"])
    rollout_func, reward = None, one_prompt_reward if options.refill else length_reward
    if options.multi_turn:
        from trl_ragen2 import RagenRollout, RolloutConfig, env_return
        from trl_ragen2_envs.datasets import build_rows

        rows = build_rows("frozen_lake", "train", 8)
        dataset = Dataset.from_list(rows)
        kwargs["max_completion_length"] = 64
        rollout_func = RagenRollout(RolloutConfig(max_turns=2, max_tokens_per_turn=12))
        reward = env_return
    else:
        dataset = Dataset.from_dict({"prompt": ["Go left or right?", "Say a number:"] * 4})
    return trainer_cls(
        model=path,
        reward_funcs=reward,
        args=config_cls(**kwargs),
        train_dataset=dataset,
        peft_config=peft_config,
        rollout_func=rollout_func,
    )


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer", choices=["grpo", "ppo"], default="grpo")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--multi_turn", action="store_true")
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--refill", action="store_true", help="dynamic sampling: a second round every step")
    parser.add_argument("--mi_engine", choices=["vllm", "auto", "transformers"], default="vllm")
    parser.add_argument("--out")
    options = parser.parse_args(argv)

    import torch

    from trl_ragen2.collapse.scoring import TransformersCrossScorer, VLLMCrossScorer

    with tempfile.TemporaryDirectory() as output_dir:
        trainer = build_trainer(options, output_dir)
        tokenizer = trainer.processing_class
        sequences = fixed_sequences(tokenizer)
        policy = trainer.accelerator.unwrap_model(trainer.model)
        initial = model_logps(policy, sequences)
        trainer.train()
        history = trainer.state.log_history
        trainer.vllm_generation.sync_weights()  # the engine now holds the weights after the last optimizer step
        llm = trainer.vllm_generation.llm
        engine = engine_logps(llm, sequences)
        policy.eval()
        if options.lora:
            policy.merge_adapter()  # what the engine holds: the base weights plus the merged adapter
        trained = model_logps(policy, sequences)
        contexts, chains = sequences[:3], [ids[:9] for ids in sequences[1:]]
        vllm_scores = VLLMCrossScorer(llm=llm).score(contexts, chains)
        hf_scores = TransformersCrossScorer(policy).score(contexts, chains)
        if options.lora:
            policy.unmerge_adapter()
        result = {
            "steps": trainer.state.global_step,
            "sampling_logp_difference_max": [
                row["sampling/sampling_logp_difference/max"]
                for row in history
                if "sampling/sampling_logp_difference/max" in row
            ],
            "importance_sampling_ratio_min": [
                row["sampling/importance_sampling_ratio/min"]
                for row in history
                if "sampling/importance_sampling_ratio/min" in row
            ],
            "engine_vs_policy_max": max_gap(engine, trained),
            "engine_vs_initial_max": max_gap(engine, initial),
            "scorer_vs_transformers_max": (vllm_scores - hf_scores).abs().max().item(),
            "mi_retrieval_acc": [row[k] for row in history for k in row if k.endswith("mi/first_turn/retrieval_acc")],
            "mi_num_pairs": [row[k] for row in history for k in row if k.endswith("mi/first_turn/num_pairs")],
            "mi_vllm_engine": {
                scope: [
                    row[f"ragen2/mi/{scope}/vllm_engine"] for row in history if f"ragen2/mi/{scope}/vllm_engine" in row
                ]
                for scope in ("first_turn", "trajectory")
            },
            "mi_engine_rates": trainer.mi_diagnostics.engines.rates,
            "kept_fraction": [row[k] for row in history for k in row if k == "ragen2/filter/kept_fraction"],
            "critic_loss": [
                row[k] for row in history for k in row if k.startswith("ragen2/critic/") or k == "critic/loss"
            ],
            "nan_in_history": any(
                isinstance(v, float) and math.isnan(v) for row in history for k, v in row.items() if "ragen2/mi" in k
            ),
            "torch_threads": torch.get_num_threads(),
            "world_size": trainer.accelerator.num_processes,
            "generation_rounds": [
                row["ragen2/filter/generation_rounds"] for row in history if "ragen2/filter/generation_rounds" in row
            ],
            "kept_rows": [row["ragen2/filter/kept_rows"] for row in history if "ragen2/filter/kept_rows" in row],
            "num_groups": [row["ragen2/filter/num_groups"] for row in history if "ragen2/filter/num_groups" in row],
            "trained_logps": trained,  # the replicas of a data-parallel run must hold the same weights
        }
    text = json.dumps(result)
    if options.out:
        rank = int(os.environ.get("RANK", "0"))
        out = options.out if result["world_size"] == 1 else f"{options.out}.rank{rank}"
        with open(out, "w") as handle:
            handle.write(text)
    print(text)  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
