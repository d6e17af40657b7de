"""The CPU presets keep a real model's training step within a few GB (`recipes/configs/*_cpu.yaml`).

Without gradient checkpointing, TRL's loss forward keeps every layer's activations for the backward pass: on CPU
(SDPA's math path under a padding mask stores the attention probabilities) SmolLM2-135M keeps about 1.7 MB per
token, so the presets' 8 rollouts x 5 turns (about 10k tokens) needed 18 GB. With checkpointing only each layer's
input is kept (30 x 576 floats per token). The slow tier measures the peak on the real model.
"""

from pathlib import Path

import pytest
import yaml


CONFIGS = Path(__file__).resolve().parent.parent / "recipes" / "configs"


@pytest.mark.parametrize("name", ["agent_cpu.yaml", "webshop_cpu.yaml"])
def test_cpu_presets_train_with_gradient_checkpointing(name):
    preset = yaml.safe_load((CONFIGS / name).read_text())
    assert preset["use_cpu"] is True and preset["gradient_checkpointing"] is True


def test_checkpointing_keeps_a_fraction_of_the_activations(tiny_model):
    """What the preset buys, measured on the tiny model: bytes saved for backward in one training forward."""
    import torch

    def saved_bytes(checkpointing: bool) -> int:
        total = 0

        def pack(tensor):
            nonlocal total
            total += tensor.numel() * tensor.element_size()
            return tensor

        if checkpointing:
            tiny_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            tiny_model.gradient_checkpointing_disable()
        tiny_model.train()
        ids = torch.randint(3, 100, (4, 96))
        mask = torch.ones_like(ids)
        mask[0, :10] = 0  # left padding, as in TRL's batches
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            tiny_model.model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state.sum().backward()
        tiny_model.zero_grad(set_to_none=True)
        return total

    assert saved_bytes(checkpointing=True) < 0.5 * saved_bytes(checkpointing=False)
