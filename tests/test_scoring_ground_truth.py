"""Ground truth on a real, scored tiny model: MI is 0 for input-blind reasoning and high for input-specific reasoning."""

import pytest
import torch

from trl_ragen2.collapse.mi import mi_metrics
from trl_ragen2.collapse.scoring import TransformersCrossScorer
from trl_ragen2.models.tiny import make_tiny_model


KEYS = list("abcdefgh")


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def key_prompts(tokenizer):
    """Eight prompts that differ only in a key letter, primed with <think> as in the RAGEN protocol."""
    return [encode(tokenizer, f"<|im_start|>user\nkey {k}<|im_end|>\n<|im_start|>assistant\n<think>") for k in KEYS]


def metrics_for(model, prompts, chains, target):
    logp = TransformersCrossScorer(model).score(prompts, chains)
    return mi_metrics(logp, torch.tensor([len(c) for c in chains]), torch.tensor(target))


def test_input_blind_model_has_zero_mi_and_chance_retrieval(tiny_tokenizer):
    # Zeroing every attention output projection leaves each position a function of its own token only: the exact
    # limit of template collapse, where p(z | x) does not depend on x at all.
    model = make_tiny_model(tiny_tokenizer, seed=1)
    for layer in model.model.layers:
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
    prompts = key_prompts(tiny_tokenizer)
    template = [encode(tiny_tokenizer, " move up then left"), encode(tiny_tokenizer, " push the box")]
    chains = [c for _ in KEYS for c in template]  # chains identical for every prompt
    target = [i for i in range(len(KEYS)) for _ in template]
    m = metrics_for(model, prompts, chains, target)
    assert m["mi_est"] == pytest.approx(0.0, abs=1e-6)
    assert m["mi_seq_est"] == pytest.approx(0.0, abs=1e-6)
    assert m["retrieval_acc"] == pytest.approx(m["retrieval_chance"], abs=1e-9) == pytest.approx(1 / 8)
    assert m["cond_entropy"] > 1.0  # high entropy all the same: invisible to entropy


def test_reasoning_that_copies_its_prompt_is_retrieved(tiny_tokenizer):
    # Briefly teach the tiny model to repeat the prompt's key inside the think block, then cross-score chains that
    # carry their own prompt's key.
    torch.manual_seed(0)
    model = make_tiny_model(tiny_tokenizer, seed=0)
    prompts = key_prompts(tiny_tokenizer)
    chains = [encode(tiny_tokenizer, f" {k}" * repeats) for k in KEYS for repeats in (2, 3)]
    target = [i for i in range(len(KEYS)) for _ in (2, 3)]
    sequences = [(prompts[t], c) for t, c in zip(target, chains, strict=True)]
    width = max(len(p) + len(c) for p, c in sequences)
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    attention = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)  # loss on the chain only
    for i, (p, c) in enumerate(sequences):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attention[i, : len(p) + len(c)] = 1
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(c)
    before = metrics_for(model, prompts, chains, target)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(60):
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = metrics_for(model, prompts, chains, target)
    assert after["retrieval_acc"] == 1.0 > before["retrieval_acc"]
    assert after["mi_est"] > 0.5 > before["mi_est"]
    assert after["mi_seq_est"] > 0.8 * after["mi_upper_bound"]  # close to log 8: the key is fully recoverable
