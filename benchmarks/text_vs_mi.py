"""Text template metrics against the MI proxies, on the policies of `notebooks/template_collapse_explained.ipynb`.

1. **The notebook's regimes.** The four tiny policies of the notebook (input-dependent / input-agnostic reasoning,
   diverse / repetitive), each trained from the same weights for 400 imitation steps; 64 chains sampled at
   temperature 1 and cross-scored. One row per policy: H(Z|X), Retrieval-Acc, MI-Est, and the text metrics of
   `trl_ragen2.collapse.text_metrics` (distinct-2, self-BLEU within and across prompts, cross-prompt trigram overlap).
2. **A drift between them.** From the healthy policy (300 steps), training continues for 150 steps on a mixture
   with a template share of 0, 0.2, ..., 1 (the input-agnostic diverse template); each end point is measured. The
   Spearman rank correlation of every text metric with MI-Est and with Retrieval-Acc over these points says how
   well the text metrics track the loss of input dependence.
3. **A real model** (`--real-model`, needs the SmolLM2 kit of `docs/real_model.md`): SmolLM2-135M-Instruct's
   reasoning about P Countdown inputs (the conditions of `benchmarks/mi_validity.py`), G chains each, either
   sampled under each input ("specific") or sampled under a generic prompt that shows no instance, G different
   chains handed to each input ("template": varied text that ignores its input). MI proxies with their p-value
   and interval, and the text metrics, per condition.

    python benchmarks/text_vs_mi.py                 # parts 1 and 2 (tiny model)
    python benchmarks/text_vs_mi.py --real-model    # part 3 only
"""

from __future__ import annotations

import copy
import os
import random
import sys
import time


sys.path.insert(0, os.path.dirname(__file__))

from reasoning_policies import REGIMES, Kit, input_dependent_diverse, template_share  # noqa: E402


TEXT = ("text/distinct_2", "text/self_bleu_within", "text/self_bleu_across", "text/cross_prompt_overlap")
MI = ("mi_est", "retrieval_acc")
SHARES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2  # ties share their mean rank
        i = j + 1
    return out


def spearman(x, y) -> float:
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else float("nan")


def row(name, m) -> str:
    cells = [m["cond_entropy"], m["retrieval_acc"], m["mi_est"], *(m[key] for key in TEXT)]
    return f"| {name} | " + " | ".join(f"{value:.3f}" for value in cells) + " |"


def real_model(num_prompts=6, num_chains=4, max_new_tokens=40, seed=0):
    import torch
    from mi_validity import countdown_prompts, generic_prompt, sample_reasoning
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ragen2.collapse.mi import mi_metrics
    from trl_ragen2.collapse.mi_uncertainty import mi_uncertainty
    from trl_ragen2.collapse.scoring import PairBuilder, TransformersCrossScorer
    from trl_ragen2.collapse.text_metrics import text_template_metrics
    from trl_ragen2.models.smollm2 import smollm2_path

    began = time.time()
    path = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    builder = PairBuilder(tokenizer)
    prompts = countdown_prompts(tokenizer, num_prompts)
    contexts = [builder.context(prompt) for prompt in prompts]
    target = torch.tensor([m for m in range(num_prompts) for _ in range(num_chains)])
    conditions = {
        "specific": sample_reasoning(model, tokenizer, prompts, num_chains, max_new_tokens, seed),
        # P*G different chains written without seeing any instance, G of them handed to each input
        "template": sample_reasoning(
            model, tokenizer, [generic_prompt(tokenizer)], num_prompts * num_chains, max_new_tokens, seed + 10_000
        ),  # fmt: skip
    }
    scorer = TransformersCrossScorer(model)
    print(f"3. SmolLM2-135M-Instruct, P={num_prompts} Countdown inputs x G={num_chains} chains\n")
    print("| condition | H(Z\\|X) | Retrieval-Acc (chance) | p-value | MI-Est [95% interval] | distinct-2 | "
          "self-BLEU within | self-BLEU across | overlap |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for name, chains in conditions.items():
        logp = scorer.score(contexts, chains)
        lengths = torch.tensor([len(chain) for chain in chains])
        m = mi_metrics(logp, lengths, target)
        u = mi_uncertainty(logp, lengths, target, seed=seed)
        t = text_template_metrics(chains, target.tolist())
        print(f"| {name} | {m['cond_entropy']:.3f} | {m['retrieval_acc']:.3f} ({m['retrieval_chance']:.3f}) | "
              f"{u['retrieval_pvalue']:.3f} | {m['mi_est']:.3f} [{u['mi_est_ci_low']:.3f}, {u['mi_est_ci_high']:.3f}] | "
              + " | ".join(f"{t[k.removeprefix('text/')]:.3f}" for k in TEXT) + " |", flush=True)  # fmt: skip
    print(f"\n({time.time() - began:.0f}s)")


def main():
    if "--real-model" in sys.argv[1:]:
        return real_model()
    began = time.time()
    kit = Kit()
    header = (
        "| policy | H(Z\\|X) | Retrieval-Acc | MI-Est | distinct-2 | self-BLEU within | self-BLEU across | overlap |"
    )
    print("1. The notebook's regimes (400 imitation steps each)\n")
    print(header + "\n|---|" + "---|" * 7)
    for name, (write_chain, regime) in REGIMES.items():
        model, optimizer = kit.fresh_policy(seed=0)
        kit.imitate(model, optimizer, write_chain, random.Random(0), 400)
        print(row(f"{name} ({regime})", kit.measure(model, seed=0)), flush=True)

    print("\n2. Drift from healthy reasoning to the template (300 + 150 steps per point)\n")
    model, optimizer = kit.fresh_policy(seed=0)
    kit.imitate(model, optimizer, input_dependent_diverse, random.Random(0), 300)
    start = (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()))
    points = []
    print(header.replace("policy", "template share") + "\n|---|" + "---|" * 7)
    for share in SHARES:
        model.load_state_dict(start[0])
        optimizer.load_state_dict(start[1])
        kit.imitate(model, optimizer, template_share(share), random.Random(1), 150)
        measured = kit.measure(model, seed=1)
        points.append(measured)
        print(row(f"{share:.1f}", measured), flush=True)
    print("\nSpearman rank correlation over the drift points\n")
    print("| text metric | with MI-Est | with Retrieval-Acc |\n|---|---|---|")
    for key in TEXT:
        values = [p[key] for p in points]
        print(f"| {key.removeprefix('text/')} | " + " | ".join(
            f"{spearman(values, [p[m] for p in points]):+.2f}" for m in MI) + " |")  # fmt: skip
    print(f"\n({time.time() - began:.0f}s)")


if __name__ == "__main__":
    main()
