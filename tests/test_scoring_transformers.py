"""TransformersCrossScorer against naive per-pair concatenation on the tiny model."""

import pytest
import torch

from trl_ragen2.collapse.scoring import TransformersCrossScorer, naive_cross_scores, resolve_causal_lm, unpad


def random_ids(lengths, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]


def padded(seqs, side, pad=0):
    """A padded `(B, L)` tensor and its mask, as TRL builds them (prompts left-padded, completions right-padded)."""
    width = max(len(s) for s in seqs)
    ids, mask = torch.full((len(seqs), width), pad), torch.zeros(len(seqs), width, dtype=torch.long)
    for r, s in enumerate(seqs):
        sl = slice(width - len(s), width) if side == "left" else slice(0, len(s))
        ids[r, sl], mask[r, sl] = torch.tensor(s), 1
    return ids, mask


@pytest.fixture
def batch(tiny_tokenizer):
    vocab = len(tiny_tokenizer)
    prompts = random_ids([5, 23, 1, 12], vocab, seed=1)
    chains = random_ids([1, 2, 9, 31, 6, 17, 4], vocab, seed=2)
    # round-trip through TRL-style padding on both sides
    contexts = unpad(*padded(prompts, "left"))
    chains = unpad(*padded(chains, "right"))
    return contexts, chains


def test_matches_naive_concatenation(tiny_model, batch):
    contexts, chains = batch
    # a small budget forces several chunks per context, and a small head chunk several LM-head passes
    scorer = TransformersCrossScorer(tiny_model, max_tokens_per_chunk=80, lm_head_chunk_rows=5)
    fast = scorer.score(contexts, chains)
    naive = naive_cross_scores(tiny_model, contexts, chains)
    assert fast.shape == (7, 4) and fast.dtype == torch.float64
    torch.testing.assert_close(fast, naive, atol=1e-4, rtol=0)
    batched = naive_cross_scores(tiny_model, contexts, chains, batch_size=3, chain_logits_only=True)
    torch.testing.assert_close(batched, naive, atol=1e-4, rtol=0)
    assert scorer._calls["head"] > len(contexts)  # chunked LM head was exercised


@pytest.mark.parametrize("lane_with_context", [False, True])
def test_histories_reuse_their_shared_prefix_exactly(tiny_model, tiny_tokenizer, lane_with_context):
    """Trajectory contexts: one rollout's histories are prefixes of each other, and rollouts share their prompt."""
    vocab = len(tiny_tokenizer)
    system, prompt_a, prompt_b = random_ids([9, 6, 7], vocab, seed=3)
    turns = random_ids([5, 4, 6, 3], vocab, seed=4)
    contexts = [
        system + prompt_a + turns[0] + turns[1],  # a later turn of the history below
        system + prompt_b,
        system + prompt_a,
        system + prompt_a + turns[0],
        system + prompt_a + turns[2],  # another rollout of prompt a
        system,  # a prefix of every other context
        system + prompt_a + turns[0],  # a duplicate
    ]
    chains = random_ids([3, 1, 8], vocab, seed=5)  # 2 + 0 + 7 tokens fed: one lane
    scorer = TransformersCrossScorer(tiny_model, max_tokens_per_chunk=32, lane_with_context=lane_with_context)
    calls = []  # (tokens, whether it has an attention mask) of every backbone forward

    def record(module, args, kwargs):
        calls.append((kwargs["input_ids"].shape[1], kwargs.get("attention_mask") is not None))

    handle = tiny_model.model.register_forward_pre_hook(record, with_kwargs=True)
    fast = scorer.score(contexts, chains)
    handle.remove()
    torch.testing.assert_close(fast, naive_cross_scores(tiny_model, contexts, chains), atol=1e-4, rtol=0)
    # each context runs only the tokens it does not share with the previous one (at least its last token), in sorted
    # order: system, +b, +a, +turn0 / +turn2 (after a), +turn1 (after turn0), the duplicate (its last token only)
    new_tokens = [9, 7, 6, 5, 6, 4, 1]
    if lane_with_context:
        # the first context (system) runs alone, then its lane; every later context carries its lane (9 tokens)
        assert calls[:2] == [(9, False), (9, True)]
        assert sorted(n for n, _ in calls[2:]) == sorted(n + 9 for n in new_tokens[1:])
    else:
        assert sorted(n for n, masked in calls if not masked) == sorted(new_tokens)
        assert [n for n, masked in calls if masked] == [9] * len(contexts)
    assert sum(new_tokens) < sum(map(len, contexts))
    # tokens_fed counts the real tokens: those contexts, then 2 + 0 + 7 chain tokens under each of the 7 contexts
    assert scorer.tokens_fed == sum(new_tokens) + 9 * len(contexts)


def test_mask_scores_only_requested_pairs(tiny_model, batch):
    contexts, chains = batch
    mask = torch.zeros(len(chains), len(contexts), dtype=torch.bool)
    mask[0, 1] = mask[3, 0] = mask[6, 3] = True
    scores = TransformersCrossScorer(tiny_model).score(contexts, chains, mask)
    full = naive_cross_scores(tiny_model, contexts, chains)
    assert torch.isnan(scores[~mask]).all()
    torch.testing.assert_close(scores[mask], full[mask], atol=1e-4, rtol=0)


def test_peft_lora_model(tiny_model, batch):
    from peft import LoraConfig, get_peft_model

    contexts, chains = batch
    base = naive_cross_scores(tiny_model, contexts, chains)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
    peft_model = get_peft_model(tiny_model, config)  # random B: the adapter changes the scores
    fast = TransformersCrossScorer(peft_model, max_tokens_per_chunk=64).score(contexts, chains)
    naive = naive_cross_scores(peft_model, contexts, chains)
    torch.testing.assert_close(fast, naive, atol=1e-4, rtol=0)
    assert (fast - base).abs().max() > 1e-2


def test_unwraps_data_parallel_and_rejects_heads_without_backbone(tiny_model):
    lm, backbone, head = resolve_causal_lm(torch.nn.DataParallel(tiny_model))
    assert lm is tiny_model and backbone is tiny_model.model and head is tiny_model.lm_head
    with pytest.raises(ValueError, match="causal LM"):
        resolve_causal_lm(tiny_model.model)


def test_restores_train_mode_and_gradient_checkpointing(tiny_model, batch):
    contexts, chains = batch
    enable = getattr(tiny_model, "activation_checkpointing_enable", None) or tiny_model.gradient_checkpointing_enable
    enable()
    tiny_model.train()
    checkpointed = [m for m in tiny_model.modules() if getattr(m, "gradient_checkpointing", False)]
    assert checkpointed
    seen = []

    def record(module, args):
        seen.append(
            (tiny_model.training, torch.is_grad_enabled(), any(m.gradient_checkpointing for m in checkpointed))
        )

    handle = tiny_model.model.layers[0].register_forward_pre_hook(record)
    TransformersCrossScorer(tiny_model).score(contexts[:2], chains[:3])
    handle.remove()
    assert seen and all(s == (False, False, False) for s in seen)  # eval, no grad, checkpointing off while scoring
    assert tiny_model.training
    assert all(m.gradient_checkpointing for m in checkpointed)


def test_invalid_pairs(tiny_model):
    scorer = TransformersCrossScorer(tiny_model)
    with pytest.raises(ValueError, match="every chain"):
        scorer.score([[1, 2]], [[3], []])
    with pytest.raises(ValueError, match="every context"):
        scorer.score([[]], [[3]])
    with pytest.raises(ValueError, match="mask must have shape"):
        scorer.score([[1]], [[3]], torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="max_tokens_per_chunk"):
        TransformersCrossScorer(tiny_model, max_tokens_per_chunk=0)


def test_forward_calls_are_padded_to_the_largest_process(tiny_model, batch):
    contexts, chains = batch
    scorer = TransformersCrossScorer(tiny_model)
    scorer.score(contexts[:1], chains[2:3], forward_calls_sync=lambda n: n + 3)
    # 1 prefix forward + 1 chain chunk, padded with 3 dummy forwards (and likewise for the LM head)
    assert scorer._calls == {"backbone": 2 + 3, "head": 2 + 3}


def test_lm_head_projections_stay_within_the_logits_budget(tiny_model, tiny_tokenizer, batch):
    """Each LM-head call materialises at most `max_logits_elements` logits; the scores do not change."""
    contexts, chains = batch
    vocab = tiny_model.get_output_embeddings().weight.shape[0]
    budget = 3 * vocab + 1  # three positions per projection
    rows_seen = []
    handle = tiny_model.get_output_embeddings().register_forward_pre_hook(
        lambda module, args: rows_seen.append(args[0].reshape(-1, args[0].shape[-1]).shape[0])
    )
    try:
        fast = TransformersCrossScorer(tiny_model, max_logits_elements=budget).score(contexts, chains)
    finally:
        handle.remove()
    assert max(rows_seen) == 3 and max(rows_seen) * vocab <= budget
    torch.testing.assert_close(fast, naive_cross_scores(tiny_model, contexts, chains), atol=1e-4, rtol=0)


def test_default_logits_budget_is_64_mb_for_any_vocabulary():
    from trl_ragen2.collapse.scoring.transformers_scorer import DEFAULT_MAX_LOGITS_ELEMENTS, lm_head_rows

    for vocab, rows in ((49152, 341), (151936, 110), (262144, 64)):  # SmolLM2, Qwen2.5, Gemma 3
        assert lm_head_rows(vocab) == rows and rows * vocab * 4 <= 64 * 2**20
    assert DEFAULT_MAX_LOGITS_ELEMENTS == 2**24
    assert lm_head_rows(2**25) == 1  # a vocabulary larger than the budget still projects one row at a time


def _chain_forward_rows(model, fn):
    """Run `fn()`; return its scores and the rows of every chain forward (the backbone calls with an attention mask)."""
    rows = []

    def record(module, args, kwargs):
        if kwargs.get("attention_mask") is not None:
            rows.append(kwargs["input_ids"].shape[0])

    handle = model.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        return fn(), rows
    finally:
        handle.remove()


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("pack_tokens", [None, 1, 5, 16, 128])
def test_packed_lanes_match_naive_concatenation(tiny_model, batch, attention, pack_tokens):
    """Chains side by side in one row see only the context and themselves: a leak across lane neighbours, or a
    position that does not restart after the context, changes the scores."""
    contexts, chains = batch
    tiny_model.set_attn_implementation(attention)
    naive = naive_cross_scores(tiny_model, contexts, chains)
    scorer = TransformersCrossScorer(tiny_model, pack_tokens=pack_tokens, max_tokens_per_chunk=96)
    fast, rows = _chain_forward_rows(tiny_model, lambda: scorer.score(contexts, chains))
    torch.testing.assert_close(fast, naive, atol=1e-4, rtol=0)
    # tokens fed per chain: 0 (a one-token chain), 1, 8, 30, 5, 16, 3 -> lanes first-fit, longest first
    lanes = {None: 6, 1: 6, 5: 5, 16: 4, 128: 1}[pack_tokens]
    assert sum(rows) == lanes * len(contexts)


def test_sliding_window_models_score_one_chain_per_row(tiny_tokenizer, batch):
    """A sliding-window cache has dropped old positions, so no custom 4D mask: every chain runs in its own row."""
    from trl_ragen2.models.tiny import make_tiny_model

    contexts, chains = batch
    model = make_tiny_model(tiny_tokenizer)
    config = model.config
    config.use_sliding_window, config.sliding_window, config.max_window_layers = True, 8, 0
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    model = type(model)(config).eval()
    fast, rows = _chain_forward_rows(model, lambda: TransformersCrossScorer(model).score(contexts, chains))
    torch.testing.assert_close(fast, naive_cross_scores(model, contexts, chains), atol=1e-4, rtol=0)
    assert sum(rows) == 6 * len(contexts)


def test_pack_tokens_is_validated(tiny_model):
    with pytest.raises(ValueError, match="pack_tokens must be >= 1 or None"):
        TransformersCrossScorer(tiny_model, pack_tokens=0)


def test_kernels_without_custom_masks_score_one_chain_per_row(tiny_model, batch, monkeypatch):
    """Only kernels that take a 4D additive mask as it is get packed lanes; any other scores one chain per row."""
    from trl_ragen2.collapse.scoring import transformers_scorer

    contexts, chains = batch
    tiny_model.set_attn_implementation("sdpa")
    monkeypatch.setattr(transformers_scorer, "PACKABLE_ATTENTION", ("eager",))  # sdpa now stands for e.g. flash
    fast, rows = _chain_forward_rows(tiny_model, lambda: TransformersCrossScorer(tiny_model).score(contexts, chains))
    torch.testing.assert_close(fast, naive_cross_scores(tiny_model, contexts, chains), atol=1e-4, rtol=0)
    assert sum(rows) == 6 * len(contexts)
