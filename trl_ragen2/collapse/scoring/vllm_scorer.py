"""Cross-scoring with vLLM prompt log-probabilities: every [context | chain] is prefilled, and the logprob vLLM
reports for each real chain token is summed.

Two engines, both reached through the trainer's own vLLM (`trainer.vllm_generation`):

- **colocate**: the in-process `vllm.LLM` of this process. Requests use `max_tokens=1` (the one sampled token is
  discarded) and either
  - the token-id path, on vLLM versions whose `SamplingParams` takes one `prompt_logprob_token_ids` list per row
    (vLLM >= 0.33; feature-detected by `supports_token_id_scoring`): `prompt_logprob_token_ids=[[t] for t in chain]` and
    `prompt_logprob_start=len(context) - 1`, read back from `RequestOutput.prompt_token_id_logprobs`
    (a `[len(chain), 1]` array); the LM head then runs only on chain rows, or
  - the portable path, `prompt_logprobs=0`: `RequestOutput.prompt_logprobs` is one entry per prompt position
    (`None` at position 0), each a dict `{token_id: Logprob}` that always holds the real token.

  vLLM does not read its prefix cache for a prompt-logprob request by default: the positions served from the cache
  get no logprob (their rows are left unwritten). Only the chain's positions are read here, so on the portable path
  the scorer lets each request read the cache (`skip_reading_prefix_cache=False`) and prefills each context once:
  the first pair of every context goes first, the others then reuse its KV blocks (whole blocks only: 128 tokens on
  the CPU build). A request whose cached blocks reach into its chain (`RequestOutput.num_cached_tokens` >=
  `len(context)`, e.g. the same chain scored twice under one context) is scored again without the cache, so every
  value is one vLLM computed; `reuse_context_cache=False` turns the reuse off.

  With `vllm_enable_sleep_mode`, generation ends with `llm.sleep(level=2)`, which discards the weights; the scorer
  then re-pushes the current weights (`sync_weights`), wakes the KV cache, scores, and puts the engine back to sleep.
  With `vllm_tensor_parallel_size > 1`, the processes of a tensor-parallel group pool their requests, as TRL's
  generation does. Since weight syncing and tensor parallelism are collectives, every process calls `score`.
- **server**: TRL's `VLLMClient.get_sequence_logprobs(..., top_logprobs=0)`, which exists on the main process only:
  every process's requests are gathered there, scored, and the results broadcast back. `score` is therefore a
  collective in server mode: every process must call it, with or without pairs.

vLLM never applies a sampling temperature to prompt logprobs, so these are the model's untempered log-probabilities
(as are [`TransformersCrossScorer`]'s). A token whose logprob is missing (`None`, absent, NaN or -inf) makes its pair
NaN; the caller drops such chains and a warning says how many. vLLM is imported lazily, so this module imports on
machines without it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import torch

from .transformers_scorer import _validate_pairs


logger = logging.getLogger(__name__)

TOKEN_ID_FIELDS = ("prompt_logprob_token_ids", "prompt_logprob_start")


def supports_token_id_scoring(sampling_params_cls) -> bool:
    """Whether this vLLM's `SamplingParams` takes one candidate list per prompt row (vLLM >= 0.33).

    vLLM 0.31 and 0.32 have a field of the same name that holds one flat list of candidates scored at every row
    (`list[int]`, at most `max_logprobs` distinct ids), which cannot hold each row's own next token: those versions
    take the portable path. The per-row form is recognised by its annotation, `list[list[int]]`.
    """
    fields = getattr(sampling_params_cls, "__struct_fields__", ())
    if not all(field in fields for field in TOKEN_ID_FIELDS):
        return False
    annotations = {}
    for klass in reversed(getattr(sampling_params_cls, "__mro__", (sampling_params_cls,))):
        annotations.update(getattr(klass, "__annotations__", {}))
    annotation = annotations.get(TOKEN_ID_FIELDS[0])
    return "list[list[" in str(annotation).replace("typing.List", "list").replace(" ", "")


def _logprob_value(entry) -> float:
    value = entry.logprob if hasattr(entry, "logprob") else entry["logprob"] if isinstance(entry, dict) else entry
    value = float(value)
    return value if math.isfinite(value) else math.nan


def sum_prompt_logprobs(prompt_logprobs, sequence: Sequence[int], start: int) -> float:
    """Sum of the logprobs vLLM reported for `sequence[start:]` (portable `prompt_logprobs` format); NaN if any is missing."""
    if prompt_logprobs is None or len(prompt_logprobs) < len(sequence):
        return math.nan
    total = 0.0
    for position in range(start, len(sequence)):
        per_position = prompt_logprobs[position]
        if per_position is None:
            return math.nan
        entry = per_position.get(sequence[position], per_position.get(str(sequence[position])))
        if entry is None:
            return math.nan
        total += _logprob_value(entry)
    return total


def sum_token_id_logprobs(values, num_tokens: int) -> float:
    """Sum of a `prompt_token_id_logprobs` array `[num_tokens, 1]` (token-id format); NaN if absent or malformed."""
    if values is None:
        return math.nan
    array = torch.as_tensor(values, dtype=torch.float64)
    if array.dim() == 1:
        array = array[:, None]
    if array.dim() != 2 or array.shape[0] != num_tokens or array.shape[1] < 1:
        return math.nan
    column = array[:, 0]
    return column.sum().item() if torch.isfinite(column).all() else math.nan


class VLLMCrossScorer:
    """Teacher-forced log p(chain | context) from vLLM prompt logprobs (see the module docstring).

    Args:
        llm (*optional*): a `vllm.LLM` (colocate). Exactly one of `llm`, `client` or `vllm_generation` is needed.
        client (*optional*): a TRL `VLLMClient` (server), or `None` on processes other than the main one.
        vllm_generation (*optional*): TRL's `trainer.vllm_generation`; picks its mode, engine and sleep handling.
        accelerator (*optional*): needed in server mode with several processes (gather and broadcast).
        sampling_params_cls (*optional*): `vllm.SamplingParams` by default.
        token_id_path (`bool` or `None`): force the token-id path on/off; `None` detects it.
        request_batch_size (`int`, defaults to `1024`): requests per engine call.
        reuse_context_cache (`bool`, defaults to `True`): prefill each context once and let its other pairs read
            the KV blocks from vLLM's prefix cache (portable path, on vLLM versions with `skip_reading_prefix_cache`).

    ```python
    scorer = VLLMCrossScorer.from_trainer(trainer)
    logp = scorer.score(contexts, chains)  # (len(chains), len(contexts)), NaN where a logprob was missing
    ```
    """

    def __init__(
        self,
        *,
        llm=None,
        client=None,
        vllm_generation=None,
        accelerator=None,
        sampling_params_cls=None,
        token_id_path: bool | None = None,
        request_batch_size: int = 1024,
        reuse_context_cache: bool = True,
    ):
        if vllm_generation is not None:
            self.mode = vllm_generation.mode
            llm = getattr(vllm_generation, "llm", None)
            client = getattr(vllm_generation, "vllm_client", None)
            accelerator = accelerator or getattr(vllm_generation, "accelerator", None)
        else:
            self.mode = "colocate" if llm is not None else "server"
        if self.mode == "colocate" and llm is None:
            raise ValueError("colocate mode needs the in-process vllm.LLM (llm=...) ")
        if self.mode == "server" and client is None and (accelerator is None or accelerator.is_main_process):
            raise ValueError("server mode needs TRL's VLLMClient (client=...) on the main process")
        if request_batch_size < 1:
            raise ValueError(f"request_batch_size must be >= 1, got {request_batch_size}")
        self.llm, self.client, self.vllm_generation, self.accelerator = llm, client, vllm_generation, accelerator
        self.request_batch_size = request_batch_size
        self.reuse_context_cache = reuse_context_cache
        self._sampling_params_cls = sampling_params_cls
        self._token_id_path = token_id_path
        self.num_missing = 0  # pairs left NaN by the last `score` call

    @classmethod
    def from_trainer(cls, trainer, **kwargs) -> VLLMCrossScorer:
        """A scorer on a TRL trainer's vLLM engine (`use_vllm=True`); `kwargs` go to the constructor."""
        generation = getattr(trainer, "vllm_generation", None)
        if generation is None:
            raise ValueError("the trainer has no vLLM engine (use_vllm=False); use engine='transformers'")
        return cls(vllm_generation=generation, accelerator=trainer.accelerator, **kwargs)

    @property
    def sampling_params_cls(self):
        """The class requests are built with: the one given, else `vllm.SamplingParams` (imported on first use)."""
        if self._sampling_params_cls is None:
            from vllm import SamplingParams

            self._sampling_params_cls = SamplingParams
        return self._sampling_params_cls

    def score(
        self, contexts: Sequence[Sequence[int]], chains: Sequence[Sequence[int]], mask=None, **_
    ) -> torch.Tensor:
        """`(N, M)` float64 summed log-probabilities; NaN where `mask` is False or a logprob was missing."""
        mask = _validate_pairs(contexts, chains, mask)
        pairs = [(n, m) for m in range(len(contexts)) for n in mask[:, m].nonzero().flatten().tolist()]
        sequences = [[int(t) for t in contexts[m]] + [int(t) for t in chains[n]] for n, m in pairs]
        starts = [len(contexts[m]) for _, m in pairs]
        if self.mode == "colocate":
            values = self._score_colocate(sequences, starts)
        else:
            values = self._score_server(sequences, starts)
        scores = torch.full(mask.shape, math.nan, dtype=torch.float64)
        for (n, m), value in zip(pairs, values, strict=True):
            scores[n, m] = value
        self.num_missing = sum(math.isnan(value) for value in values)
        if self.num_missing:
            logger.warning(
                "vLLM returned no logprob for some chain token in %d of %d pairs", self.num_missing, len(pairs)
            )
        return scores

    # -----------------------------------------------------------------------------------------------------------
    # Colocate

    def _use_token_ids(self) -> bool:
        if self._token_id_path is None:
            self._token_id_path = supports_token_id_scoring(self.sampling_params_cls)
        return self._token_id_path

    def _reads_cache(self) -> bool:
        """Whether requests may read vLLM's prefix cache: the portable path, on a vLLM that lets a request opt in."""
        fields = getattr(self.sampling_params_cls, "__struct_fields__", ())
        return self.reuse_context_cache and not self._use_token_ids() and "skip_reading_prefix_cache" in fields

    def _params(self, sequence: list[int], start: int, read_cache: bool = False):
        if self._use_token_ids():
            return self.sampling_params_cls(
                max_tokens=1,
                detokenize=False,
                prompt_logprob_token_ids=[[token] for token in sequence[start:]],
                prompt_logprob_start=start - 1,
            )
        if read_cache:
            return self.sampling_params_cls(
                max_tokens=1, detokenize=False, prompt_logprobs=0, skip_reading_prefix_cache=False
            )
        return self.sampling_params_cls(max_tokens=1, detokenize=False, prompt_logprobs=0)

    def _read(self, output, sequence: list[int], start: int) -> float:
        if self._use_token_ids():
            return sum_token_id_logprobs(getattr(output, "prompt_token_id_logprobs", None), len(sequence) - start)
        return sum_prompt_logprobs(output.prompt_logprobs, sequence, start)

    def _run(self, indices: list[int], sequences, starts, read_cache: bool) -> dict[int, tuple[float, bool]]:
        """{index: (summed logprob, whether it is valid)} for the requests `indices`, in engine calls of
        `request_batch_size`. A request that read the cache is valid only if the cache stopped before its chain: the
        logprob of token p comes from row p - 1, and rows below `num_cached_tokens` are never written."""
        results = {}
        for begin in range(0, len(indices), self.request_batch_size):
            batch = indices[begin : begin + self.request_batch_size]
            prompts = [{"prompt_token_ids": sequences[i]} for i in batch]
            params = [self._params(sequences[i], starts[i], read_cache) for i in batch]
            outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
            for out, i in zip(outputs, batch, strict=True):
                cached = getattr(out, "num_cached_tokens", None) if read_cache else 0
                valid = cached is not None and cached <= starts[i] - 1
                results[i] = (self._read(out, sequences[i], starts[i]), valid)
        return results

    def _generate(self, sequences: list[list[int]], starts: list[int]) -> list[float]:
        if not self._reads_cache():
            results = self._run(list(range(len(sequences))), sequences, starts, read_cache=False)
            return [results[i][0] for i in range(len(sequences))]
        # the first pair of each context fills the cache with its blocks; the other pairs then read them
        first_of_context = {}
        for i, (sequence, start) in enumerate(zip(sequences, starts, strict=True)):
            first_of_context.setdefault(tuple(sequence[:start]), i)
        firsts = sorted(first_of_context.values())
        rest = sorted(set(range(len(sequences))) - set(firsts))
        results = self._run(firsts, sequences, starts, read_cache=True)
        results.update(self._run(rest, sequences, starts, read_cache=True))
        again = [i for i in range(len(sequences)) if not results[i][1]]
        results.update(self._run(again, sequences, starts, read_cache=False))
        return [results[i][0] for i in range(len(sequences))]

    def _score_colocate(self, sequences: list[list[int]], starts: list[int]) -> list[float]:
        """Score on this process's engine; with tensor parallelism, the group's requests run together (as TRL does)."""
        generation = self.vllm_generation
        sleep_mode = generation is not None and getattr(generation, "enable_sleep_mode", False)
        if sleep_mode:
            if getattr(generation, "_llm_weights_sleeping", False):
                generation.sync_weights()  # level-2 sleep dropped the weights: push the current ones back
            self.llm.wake_up(tags=["kv_cache"])
        try:
            tp_size = getattr(generation, "tensor_parallel_size", 1) if generation is not None else 1
            if tp_size == 1:
                return self._generate(sequences, starts)
            group = generation.tp_group
            gathered = [None] * tp_size
            torch.distributed.all_gather_object(gathered, (sequences, starts), group=group)
            values = self._generate([q for seqs, _ in gathered for q in seqs], [t for _, ts in gathered for t in ts])
            offset = sum(len(seqs) for seqs, _ in gathered[: torch.distributed.get_rank(group=group)])
            return values[offset : offset + len(sequences)]
        finally:
            if sleep_mode:
                self.llm.sleep(level=2)
                generation._llm_weights_sleeping = True

    # -----------------------------------------------------------------------------------------------------------
    # Server

    def _score_server(self, sequences: list[list[int]], starts: list[int]) -> list[float]:
        from accelerate.utils import broadcast_object_list, gather_object

        distributed = self.accelerator is not None and self.accelerator.num_processes > 1
        per_process = gather_object([(sequences, starts)]) if distributed else [(sequences, starts)]
        results = [None]
        if self.accelerator is None or self.accelerator.is_main_process:
            all_sequences = [seq for seqs, _ in per_process for seq in seqs]
            all_starts = [start for _, process_starts in per_process for start in process_starts]
            flat = []
            if all_sequences:
                out = self.client.get_sequence_logprobs(all_sequences, all_starts, top_logprobs=0, temperature=1.0)
                flat = [self._sum_actual(row) for row in out["actual_logprobs"]]
            results = [flat]
        if distributed:
            broadcast_object_list(results, from_process=0)
        offset = sum(len(seqs) for seqs, _ in per_process[: self.accelerator.process_index]) if distributed else 0
        return results[0][offset : offset + len(sequences)]

    @staticmethod
    def _sum_actual(row) -> float:
        """Sum TRL's `actual_logprobs` rows (`[[lp], [lp], ...]`, -inf when vLLM omitted the token)."""
        total = 0.0
        for position in row:
            value = float(position[0] if isinstance(position, (list, tuple)) else position)
            if not math.isfinite(value):
                return math.nan
            total += value
        return total
