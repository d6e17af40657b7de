"""Generation backends of the rollout: the trainer path's padding for collective generation, sampling overrides."""

from types import SimpleNamespace

from transformers import GenerationConfig

from trl_ragen2.agents.generation import TrainerGeneration, generation_overrides


def fake_trainer(use_vllm):
    calls = []

    def generate(batch, images, multimodal_fields, group_size, has_tool_images=False):
        limit = trainer.vllm_generation.max_completion_length if use_vllm else trainer.generation_config.max_new_tokens
        calls.append({"rows": [list(ids) for ids in batch], "group_size": group_size, "limit": limit})
        return [[len(ids), 2] for ids in batch], ([[-0.5, -0.1] for _ in batch] if use_vllm else None)

    trainer = SimpleNamespace(
        use_vllm=use_vllm,
        vllm_generation=SimpleNamespace(max_completion_length=512, temperature=1.0),
        generation_config=GenerationConfig(max_new_tokens=512, temperature=1.0),
        generation_kwargs={"max_new_tokens": 512, "temperature": 1.0},
        processing_class=SimpleNamespace(encode=lambda text, add_special_tokens=False: [7, 7]),
        _generate_single_turn=generate,
    )
    return trainer, calls


def test_vllm_batches_are_padded_to_the_largest_process_and_sliced_back():
    trainer, calls = fake_trainer(use_vllm=True)
    replies, logprobs = TrainerGeneration(trainer)([[1, 2, 3], [4]], 40, group_size=4, pad_to=5)
    (call,) = calls
    # vLLM server mode slices results evenly across processes, so every process sends the same number of rows
    assert len(call["rows"]) == 5 and call["rows"][2:] == [[1, 2, 3]] * 3
    assert call["group_size"] == 1, "padding breaks the contiguous groups server mode deduplicates"
    assert call["limit"] == 40
    assert replies == [[3, 2], [1, 2]] and logprobs == [[-0.5, -0.1], [-0.5, -0.1]]
    assert trainer.vllm_generation.max_completion_length == 512, "the override is undone after the call"


def test_first_turn_keeps_the_group_size_when_no_padding_is_needed():
    trainer, calls = fake_trainer(use_vllm=True)
    TrainerGeneration(trainer, temperature=0.5)([[1]] * 4, 16, group_size=4, pad_to=4)
    assert calls[0]["group_size"] == 4 and len(calls[0]["rows"]) == 4


def test_a_process_without_active_episodes_still_generates_one_placeholder_row():
    trainer, calls = fake_trainer(use_vllm=False)
    replies, logprobs = TrainerGeneration(trainer)([], 16, pad_to=3)
    assert len(calls[0]["rows"]) == 1, "ZeRO-3 / FSDP collectives need every process to run generate"
    assert replies == [] and logprobs is None


def test_generation_overrides_restore_transformers_settings():
    trainer, _ = fake_trainer(use_vllm=False)
    with generation_overrides(trainer, max_new_tokens=8, temperature=0.5, top_p=None):
        assert trainer.generation_config.max_new_tokens == 8 and trainer.generation_kwargs["temperature"] == 0.5
    assert trainer.generation_config.max_new_tokens == 512 and trainer.generation_config.temperature == 1.0
    assert trainer.generation_kwargs == {"max_new_tokens": 512, "temperature": 1.0}
