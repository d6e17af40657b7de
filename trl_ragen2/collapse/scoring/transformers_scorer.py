"""Exact teacher-forced cross-scoring, log p(z_n | x_m) summed over z_n's tokens, with a transformers causal LM.

Naive cross-scoring runs every concatenation [x_m | z_n] through the model: M*N*(|x|+|z|) tokens, and an LM head
over every position. [`TransformersCrossScorer`] instead

1. runs each context x_m once (`use_cache=True`) and keeps its KV cache; the last position's logits give
   log p(z_1 | x_m) for every chain at once. Contexts run in sorted order and each reuses the cached prefix it
   shares with the one before it, so a history's earlier turns, a group's prompt and the system prompt run once;
2. packs the chains of one context side by side into lanes of up to `pack_tokens` tokens, each chain restarting
   its positions after the context, under a block-causal 4D attention mask: a chain sees the context and its own
   earlier tokens, never its lane neighbours. Where a 4D mask cannot be passed (attention kernels other than
   `sdpa`/`eager`, sliding-window caches) every chain is its own lane;
3. runs the first lane in the context's own forward, after the context's new tokens, in the same row: one forward
   fewer per context, and a wider one (small forwards run far below a CPU's matmul speed). With a history's earlier
   turns reused from the cache, a trajectory scope's few chains all ride along with their history this way;
4. cuts the other lanes into chunks whose rows x (|x_m| + lane width) stay under `max_tokens_per_chunk`, and per chunk
   expands the cache to the chunk's rows (a broadcast view; the forward's concatenation copies it). Packing is what
   keeps this cheap: the context's KV is copied (and repeated across grouped-query heads) once per lane, not once per
   chain, and short chains leave no right padding;
5. projects only the real chain positions through the LM head, at most `max_logits_elements // vocab` rows at a
   time (64 MB of fp32 logits by default, whatever the vocabulary), and takes log-softmax via a fused
   cross-entropy, so a `[rows, vocab]` logits tensor is never built for the whole batch.

Memory is bounded by the two budgets, not by the batch: one chain forward holds at most `max_tokens_per_chunk`
tokens of replicated KV cache, one LM-head projection at most `max_logits_elements` logits (and as many for the
cross-entropy's log-softmax).

Scoring runs under `torch.no_grad` with the model in eval mode and gradient checkpointing off; both are restored
afterwards. PEFT (LoRA-style) models, DDP/accelerate-wrapped models and DeepSpeed ZeRO-3 / FSDP2 sharded models are
supported (the latter with `forward_calls_sync`, so every process runs the same number of forwards).
[`naive_cross_scores`] is the plain concatenation reference.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm


DEFAULT_MAX_LOGITS_ELEMENTS = 2**24  # 64 MB of fp32 logits per LM-head projection
DEFAULT_PACK_TOKENS = 128  # lane width: a few reasoning turns side by side (benchmarks/mi_cost.py compares widths)
PACKABLE_ATTENTION = ("sdpa", "eager")  # kernels that take a custom 4D additive mask as it is


def lm_head_rows(vocab_size: int, max_logits_elements: int = DEFAULT_MAX_LOGITS_ELEMENTS) -> int:
    """Positions projected through the LM head at once so that `rows x vocab_size` stays within the budget (>= 1)."""
    return max(1, max_logits_elements // max(1, vocab_size))


def _validate_pairs(contexts, chains, mask) -> torch.Tensor:
    if any(len(context) == 0 for context in contexts):
        raise ValueError("every context must hold at least one token (a chain is scored after its context)")
    if any(len(chain) == 0 for chain in chains):
        raise ValueError("every chain must hold at least one token; drop empty reasoning before scoring")
    shape = (len(chains), len(contexts))
    if mask is None:
        return torch.ones(shape, dtype=torch.bool)
    mask = torch.as_tensor(mask, dtype=torch.bool)
    if mask.shape != shape:
        raise ValueError(f"mask must have shape (num_chains, num_contexts) = {shape}, got {tuple(mask.shape)}")
    return mask


def resolve_causal_lm(model, accelerator=None):
    """`(causal_lm, backbone, lm_head)` of a possibly wrapped model (accelerate/DDP/DeepSpeed, PEFT)."""
    if accelerator is not None:
        model = accelerator.unwrap_model(model)
    while isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        model = model.module
    if hasattr(model, "peft_config") and hasattr(model, "get_base_model"):
        active = getattr(model, "active_peft_config", None)
        if active is not None and getattr(active, "is_prompt_learning", False):
            raise ValueError(
                "prompt-learning PEFT adapters (prompt/prefix/p-tuning) add virtual tokens in forward and cannot be "
                "cross-scored by TransformersCrossScorer; use a LoRA-style adapter or engine='vllm'"
            )
        model = model.get_base_model()  # adapter layers are injected into the base model's modules
    backbone = getattr(model, "base_model", model)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if backbone is model or head is None:
        raise ValueError(
            f"{type(model).__name__} is not a causal LM with a separate backbone and LM head "
            "(expected e.g. a *ForCausalLM model); pass the causal LM the trainer optimizes"
        )
    return model, backbone, head


@contextmanager
def scoring_mode(model: torch.nn.Module):
    """Eval mode, gradient checkpointing off and `torch.no_grad`; the previous state is restored on exit."""
    was_training = model.training
    checkpointed = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    for module in checkpointed:
        module.gradient_checkpointing = False
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module in checkpointed:
            module.gradient_checkpointing = True
        model.train(was_training)


def _layer_types(*names: str) -> tuple[type, ...]:
    try:
        from transformers import cache_utils
    except ImportError:  # pragma: no cover
        return ()
    return tuple(getattr(cache_utils, name) for name in names if hasattr(cache_utils, name))


def _has_layers(cache, types: tuple[type, ...]) -> bool:
    layers = getattr(cache, "layers", None)
    return bool(types) and layers is not None and all(type(layer) in types for layer in layers)


def _prefix_cache(cache, length: int):
    """A view of the first `length` positions of a 1-row cache, or None where the cache type cannot be cut.

    Only full-attention layers (`DynamicLayer`) qualify: a sliding-window layer has already dropped old positions.
    `update` concatenates into new tensors, so feeding tokens after the view never changes `cache`.
    """
    if not _has_layers(cache, _layer_types("DynamicLayer")):
        return None
    prefix = copy.copy(cache)
    prefix.layers = []
    for layer in cache.layers:
        layer = copy.copy(layer)
        if layer.is_initialized:
            layer.keys = layer.keys[..., :length, :]  # (1, kv_heads, length, head_dim)
            layer.values = layer.values[..., :length, :]
        prefix.layers.append(layer)
    return prefix


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _expand_cache(cache, rows: int):
    """A cache holding `rows` copies of a 1-row prefix cache, without copying the prefix where possible."""
    viewable = _layer_types("DynamicLayer", "DynamicSlidingWindowLayer")
    layers = getattr(cache, "layers", None)
    if _has_layers(cache, viewable):
        expanded = copy.copy(cache)
        expanded.layers = []
        for layer in layers:
            layer = copy.copy(layer)  # `update` concatenates into new tensors, so the shared views stay intact
            if layer.is_initialized:
                layer.keys = layer.keys.expand(rows, *layer.keys.shape[1:])
                layer.values = layer.values.expand(rows, *layer.values.shape[1:])
            expanded.layers.append(layer)
        return expanded
    expanded = copy.deepcopy(cache)  # other cache types: copy, then repeat along the batch
    expanded.batch_repeat_interleave(rows)
    return expanded


class TransformersCrossScorer:
    """Teacher-forced log p(chain | context) for every (chain, context) pair, reusing each context's KV cache.

    Args:
        model: a causal LM (`*ForCausalLM`), possibly PEFT- or accelerate/DDP-wrapped.
        max_tokens_per_chunk (`int`, defaults to `16384`):
            Token budget of one chain forward: rows x (context length + widest lane in the chunk). Bounds the
            replicated KV cache and the activations; a chain longer than the budget still runs alone.
        max_logits_elements (`int`, defaults to `2**24`):
            Logits materialised by one LM-head projection: `max_logits_elements // vocab` positions run at once, so
            the logits (and the cross-entropy's log-softmax) stay at 64 MB of fp32 each for any vocabulary (341
            rows for SmolLM2's 49k, 110 for Qwen2.5's 152k).
        lm_head_chunk_rows (`int`, *optional*):
            A fixed number of positions per LM-head projection instead (logits memory: rows x vocab x 4 bytes).
        accelerator (*optional*): used to unwrap the model.
        show_progress (`bool`, defaults to `False`): show a progress bar over the contexts while scoring.
        reuse_prefix (`bool`, defaults to `True`): reuse the KV cache of the prefix a context shares with the one
            scored before it (`False` runs every context from its first token; the scores are the same).
        pack_tokens (`int` or `None`, defaults to `128`): lane width for packing a context's chains into one row
            (a longer chain gets a lane of its own). `None` scores every chain in its own row; the scores are the same.
        lane_with_context (`bool`, defaults to `True`): run a context's first lane in the context's own forward
            (where lanes are packed and the model's cache is full-attention). `False` gives every lane a forward
            after the context's; the scores are the same.

    ```python
    scorer = TransformersCrossScorer(model)
    logp = scorer.score(contexts, chains)  # (len(chains), len(contexts)), float64, summed over chain tokens
    ```
    """

    def __init__(
        self,
        model,
        *,
        max_tokens_per_chunk: int = 16384,
        max_logits_elements: int = DEFAULT_MAX_LOGITS_ELEMENTS,
        lm_head_chunk_rows: int | None = None,
        accelerator=None,
        show_progress: bool = False,
        reuse_prefix: bool = True,
        pack_tokens: int | None = DEFAULT_PACK_TOKENS,
        lane_with_context: bool = True,
    ):
        if max_tokens_per_chunk < 1:
            raise ValueError(f"max_tokens_per_chunk must be >= 1, got {max_tokens_per_chunk}")
        if max_logits_elements < 1:
            raise ValueError(f"max_logits_elements must be >= 1, got {max_logits_elements}")
        if lm_head_chunk_rows is not None and lm_head_chunk_rows < 1:
            raise ValueError(f"lm_head_chunk_rows must be >= 1 or None, got {lm_head_chunk_rows}")
        if pack_tokens is not None and pack_tokens < 1:
            raise ValueError(f"pack_tokens must be >= 1 or None (no packing), got {pack_tokens}")
        self.model = model
        self.max_tokens_per_chunk = max_tokens_per_chunk
        self.max_logits_elements = max_logits_elements
        self.lm_head_chunk_rows = lm_head_chunk_rows
        self.accelerator = accelerator
        self.show_progress = show_progress
        self.reuse_prefix = reuse_prefix
        self.pack_tokens = pack_tokens
        self.lane_with_context = lane_with_context
        self.tokens_fed = 0  # real (unpadded) tokens fed to the backbone by every score call so far

    def score(
        self,
        contexts: Sequence[Sequence[int]],
        chains: Sequence[Sequence[int]],
        mask=None,
        *,
        forward_calls_sync: Callable[[int], int] | None = None,
    ) -> torch.Tensor:
        """Score chains under contexts.

        Args:
            contexts: M unpadded token lists (a left-padded prompt must be unpadded first, see `unpad`).
            chains: N unpadded token lists.
            mask (`(N, M)` bool, *optional*): which pairs to score; all by default.
            forward_calls_sync (*optional*): `max over processes` of an int. With sharded parameters (ZeRO-3, FSDP2)
                every forward is a collective, so each process pads its forwards to the largest count with dummies.

        Returns:
            `(N, M)` float64 CPU tensor of summed log-probabilities; NaN where `mask` is False.
        """
        mask = _validate_pairs(contexts, chains, mask)
        lm, backbone, head = resolve_causal_lm(self.model, self.accelerator)
        self._cache_kwarg = "cache" if "cache" in inspect.signature(backbone.forward).parameters else "past_key_values"
        self._softcap = getattr(lm.config, "final_logit_softcapping", None)
        self._attention = getattr(lm.config, "_attn_implementation", None)
        self._calls = {"backbone": 0, "head": 0}
        scores = torch.full(mask.shape, float("nan"), dtype=torch.float64)
        with scoring_mode(lm):
            device = next(backbone.parameters()).device
            # Sorted contexts: each one shares the longest possible prefix with the one before it (histories of one
            # rollout, rollouts of one prompt, the system prompt), whose KV cache it reuses.
            order = sorted(range(len(contexts)), key=lambda c: list(contexts[c]))
            columns = tqdm(
                ((c, contexts[c]) for c in order),
                total=len(contexts),
                desc="MI cross-scoring",
                unit="context",
                leave=False,
                disable=not self.show_progress,
            )
            self._previous = None  # (ids, 1-row cache) of the last context run, whose prefix the next one reuses
            for column, context in columns:
                rows = mask[:, column].nonzero().flatten().tolist()
                if rows:
                    scores[rows, column] = self._score_context(
                        backbone, head, list(context), [chains[r] for r in rows], device
                    )
            self._previous = None
            if forward_calls_sync is not None:
                self._pad_forward_calls(backbone, head, device, forward_calls_sync)
        return scores

    # -----------------------------------------------------------------------------------------------------------
    # Internals

    def _backbone(self, backbone, **kwargs):
        self._calls["backbone"] += 1
        if "cache" in kwargs:
            kwargs[self._cache_kwarg] = kwargs.pop("cache")
        out = backbone(use_cache=True, **kwargs)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.last_hidden_state, cache

    def _head_rows(self, head) -> int:
        if self.lm_head_chunk_rows is not None:
            return self.lm_head_chunk_rows
        vocab = head.weight.shape[0] if hasattr(head, "weight") else head.out_features
        return lm_head_rows(vocab, self.max_logits_elements)

    def _token_logprobs(self, head, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(targets) from hidden states `(T, H)`, a bounded number of rows per projection -> `(T,)`."""
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        step = self._head_rows(head)
        for start in range(0, hidden.shape[0], step):
            stop = start + step
            self._calls["head"] += 1
            logits = head(hidden[start:stop]).float()  # (rows, V)
            if self._softcap:
                logits = torch.tanh(logits / self._softcap) * self._softcap
            out[start:stop] = -F.cross_entropy(logits, targets[start:stop], reduction="none")
        return out

    def _lanes(self, lengths: list[int], packable: bool) -> list[list[int]]:
        """Indices into `lengths` (tokens fed per chain), longest first, packed first-fit into lanes of `pack_tokens`.

        Chains that feed nothing (one token, scored by the context's last position) get no lane."""
        order = sorted((i for i in range(len(lengths)) if lengths[i]), key=lambda i: -lengths[i])
        if not packable or self.pack_tokens is None:
            return [[i] for i in order]
        lanes, room = [], []
        for i in order:
            fit = next((lane for lane, free in enumerate(room) if free >= lengths[i]), None)
            if fit is None:
                lanes.append([i])
                room.append(self.pack_tokens - lengths[i])
            else:
                lanes[fit].append(i)
                room[fit] -= lengths[i]
        return lanes

    def _chunks(self, context_len: int, widths: list[int]) -> list[list[int]]:
        """Indices into `widths` (widest first), grouped so that rows x (context + widest row) stays under budget."""
        chunks, current = [], []
        for i in sorted(range(len(widths)), key=lambda i: -widths[i]):
            width = context_len + widths[current[0]] if current else 0
            if current and (len(current) + 1) * width > self.max_tokens_per_chunk:
                chunks.append(current)
                current = []
            current.append(i)
        if current:
            chunks.append(current)
        return chunks

    def _context_forward(self, backbone, context: list[int], device, lane: dict[str, torch.Tensor] | None = None):
        """`(hidden of the context's last position (1, H), cache of the context alone, hidden of `lane` (w, H))`.

        Reuses the KV cache of the prefix the context shares with the previous one; at least the last token always
        runs, so its hidden state is computed here. `lane` (one row of [`_lane_inputs`] for this context) runs in
        the same forward, after the context's new tokens; its hidden is None without a lane.
        """
        reused, prefix = 0, None
        if self._previous is not None and self.reuse_prefix:
            reused = min(_common_prefix(self._previous[0], context), len(context) - 1)
            prefix = _prefix_cache(self._previous[1], reused) if reused else None
            reused = reused if prefix is not None else 0
        new = len(context) - reused
        kwargs = {"input_ids": torch.tensor([context[reused:]])}  # (1, new)
        if prefix is not None:
            kwargs["cache"] = prefix
        if prefix is not None or lane is not None:
            kwargs["position_ids"] = torch.arange(reused, len(context))[None]
        if lane is not None:
            # keys: [reused prefix | new tokens | lane]; the new tokens see the context causally, never the lane
            width = lane["input_ids"].shape[1]
            causal = torch.arange(len(context))[None, :] <= torch.arange(reused, len(context))[:, None]
            context_rows = torch.full((1, 1, new, len(context) + width), torch.finfo(lane["attention_mask"].dtype).min)
            context_rows[0, 0, :, : len(context)].masked_fill_(causal, 0.0)
            kwargs["input_ids"] = torch.cat([kwargs["input_ids"], lane["input_ids"]], dim=1)  # (1, new + w)
            kwargs["position_ids"] = torch.cat([kwargs["position_ids"], lane["position_ids"]], dim=1)
            kwargs["attention_mask"] = torch.cat([context_rows, lane["attention_mask"]], dim=2)  # (1, 1, new + w, .)
        hidden, cache = self._backbone(
            backbone, **{k: v.to(device) if torch.is_tensor(v) else v for k, v in kwargs.items()}
        )
        self.tokens_fed += new
        if lane is not None:
            cache = _prefix_cache(cache, len(context))  # later forwards must not see the lane's positions
        self._previous = (context, cache)
        return hidden[:, new - 1], cache, (hidden[0, new:] if lane is not None else None)

    def _lane_with_context(self) -> bool:
        """Whether the next context's first lane can run in its forward: a kernel that takes a 4D mask as it is, and
        a full-attention cache (known from the previous context's, so never for the first context)."""
        return (
            self.lane_with_context
            and self.pack_tokens is not None
            and self._attention in PACKABLE_ATTENTION
            and self._previous is not None
            and _has_layers(self._previous[1], _layer_types("DynamicLayer"))
        )

    def _chain_logprobs(self, head, hidden: torch.Tensor, inputs: dict[str, torch.Tensor], num_chains: int):
        """Summed log-probs per chain `(num_chains,)` float64 from lane rows' hidden states `(rows, width, H)`."""
        valid = inputs["chain"] >= 0  # (rows, width)
        self.tokens_fed += int(valid.sum())
        token_logps = self._token_logprobs(
            head, hidden[valid.to(hidden.device)], inputs["targets"][valid].to(hidden.device)
        )
        per_chain = torch.zeros(num_chains, dtype=torch.float64)
        per_chain.index_add_(0, inputs["chain"][valid], token_logps.double().cpu())
        return per_chain

    def _score_context(self, backbone, head, context: list[int], chains, device) -> torch.Tensor:
        context_len = len(context)
        fed = [chain[:-1] for chain in chains]  # the last token is predicted, never fed
        lengths = [len(ids) for ids in fed]
        lanes, first = None, None
        if self._lane_with_context():
            lanes = self._lanes(lengths, packable=True)
            if lanes:
                dtype = self._previous[1].layers[0].keys.dtype
                first = self._lane_inputs(lanes[:1], fed, chains, context_len, packed=True, dtype=dtype)
        last_hidden, cache, first_hidden = self._context_forward(backbone, context, device, first)
        self._calls["head"] += 1
        last_logits = head(last_hidden).float()  # (1, V): predicts every chain's first token
        if self._softcap:
            last_logits = torch.tanh(last_logits / self._softcap) * self._softcap
        last_logps = last_logits.log_softmax(-1)[0]
        sums = last_logps[torch.tensor([chain[0] for chain in chains], device=device)].double().cpu()  # (n,)
        if first is not None:
            sums += self._chain_logprobs(head, first_hidden[None], first, len(chains))
        # a 4D mask replaces the model's own masks: only for full-attention caches under kernels that take it as is
        packable = self._attention in PACKABLE_ATTENTION and _has_layers(cache, _layer_types("DynamicLayer"))
        rest = lanes[1:] if lanes is not None else self._lanes(lengths, packable)
        widths = [sum(len(fed[i]) for i in lane) for lane in rest]
        for chunk in self._chunks(context_len, widths):
            chunk_lanes = [rest[k] for k in chunk]
            inputs = self._lane_inputs(chunk_lanes, fed, chains, context_len, packed=packable, dtype=last_hidden.dtype)
            chunk_hidden, _ = self._backbone(
                backbone,
                input_ids=inputs["input_ids"].to(device),
                attention_mask=inputs["attention_mask"].to(device),
                position_ids=inputs["position_ids"].to(device),
                cache=_expand_cache(cache, len(chunk_lanes)),
            )  # (rows, width, H)
            sums += self._chain_logprobs(head, chunk_hidden, inputs, len(chains))
        return sums

    @staticmethod
    def _lane_inputs(lanes, fed, chains, context_len: int, *, packed: bool, dtype) -> dict[str, torch.Tensor]:
        """Right-padded rows of side-by-side chains, with positions restarting after the context for each chain.

        `chain` (rows, width) names the chain of every position (-1: padding). Packed rows get a `(rows, 1, width,
        context + width)` additive mask (a chain sees the context and its own earlier tokens); unpacked rows, one chain
        each, the plain `(rows, context + width)` padding mask.
        """
        rows, width = len(lanes), max(sum(len(fed[i]) for i in lane) for lane in lanes)
        input_ids = torch.zeros(rows, width, dtype=torch.long)
        targets = torch.zeros(rows, width, dtype=torch.long)
        chain = torch.full((rows, width), -1, dtype=torch.long)
        offset = torch.zeros(rows, width, dtype=torch.long)  # position within its own chain
        for r, lane in enumerate(lanes):
            start = 0
            for i in lane:
                n = len(fed[i])
                input_ids[r, start : start + n] = torch.tensor(fed[i])
                targets[r, start : start + n] = torch.tensor(chains[i][1:])
                chain[r, start : start + n] = i
                offset[r, start : start + n] = torch.arange(n)
                start += n
        position_ids = context_len + offset
        valid = chain >= 0
        if not packed:
            attention_mask = torch.cat([torch.ones(rows, context_len, dtype=torch.long), valid.long()], dim=1)
        else:
            same = (chain[:, :, None] == chain[:, None, :]) & valid[:, :, None]  # (rows, query, key)
            causal = offset[:, None, :] <= offset[:, :, None]
            sees = torch.cat([torch.ones(rows, width, context_len, dtype=torch.bool), same & causal], dim=2)
            attention_mask = torch.zeros(rows, 1, width, context_len + width, dtype=dtype)
            attention_mask.masked_fill_(~sees[:, None], torch.finfo(dtype).min)
        return {"input_ids": input_ids, "targets": targets, "chain": chain, "position_ids": position_ids,
                "attention_mask": attention_mask}  # fmt: skip

    def _pad_forward_calls(self, backbone, head, device, sync: Callable[[int], int]) -> None:
        for kind in ("backbone", "head"):
            missing = sync(self._calls[kind]) - self._calls[kind]
            for _ in range(missing):
                if kind == "backbone":
                    self._backbone(backbone, input_ids=torch.zeros(1, 1, dtype=torch.long, device=device))
                else:
                    self._calls["head"] += 1
                    hidden_size = head.weight.shape[1] if hasattr(head, "weight") else backbone.config.hidden_size
                    head(torch.zeros(1, hidden_size, device=device, dtype=next(head.parameters()).dtype))


def naive_cross_scores(
    model,
    contexts: Sequence[Sequence[int]],
    chains: Sequence[Sequence[int]],
    mask=None,
    *,
    batch_size: int = 1,
    chain_logits_only: bool = False,
) -> torch.Tensor:
    """Reference cross-scoring by plain concatenation: every [context | chain] through the full model.

    Per context, `batch_size` right-padded concatenations per forward. With `chain_logits_only=False` the LM head runs
    over every position (plain `model(...)`); `True` keeps only the chain positions (`logits_to_keep`), as TRL's own
    log-prob pass does. Returns the same `(N, M)` float64 matrix as [`TransformersCrossScorer.score`].
    """
    mask = _validate_pairs(contexts, chains, mask)
    lm, _, _ = resolve_causal_lm(model)
    scores = torch.full(mask.shape, float("nan"), dtype=torch.float64)
    device = next(lm.parameters()).device
    with scoring_mode(lm):
        for column, context in enumerate(contexts):
            rows = mask[:, column].nonzero().flatten().tolist()
            for start in range(0, len(rows), batch_size):
                batch = rows[start : start + batch_size]
                seqs = [list(context) + list(chains[r]) for r in batch]
                width = max(len(seq) for seq in seqs)
                ids = torch.zeros(len(batch), width, dtype=torch.long)
                attn = torch.zeros(len(batch), width, dtype=torch.long)
                for r, seq in enumerate(seqs):
                    ids[r, : len(seq)], attn[r, : len(seq)] = torch.tensor(seq), 1
                keep = width - len(context) + 1 if chain_logits_only else 0  # 0 keeps every position
                logits = lm(input_ids=ids.to(device), attention_mask=attn.to(device), logits_to_keep=keep).logits
                offset = width - logits.shape[1]  # logits[:, p] predicts token offset + p + 1
                logps = logits.float().log_softmax(-1)
                for r, chain_row in enumerate(batch):
                    chain = chains[chain_row]
                    positions = torch.arange(len(context) - 1, len(context) - 1 + len(chain)) - offset
                    picked = logps[r, positions.to(device), torch.tensor(chain, device=device)]
                    scores[chain_row, column] = picked.double().sum().item()
    return scores


def unpad(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Rows of a padded `(B, L)` id tensor as token lists, keeping the positions where `mask` is 1 (any padding side)."""
    return [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
