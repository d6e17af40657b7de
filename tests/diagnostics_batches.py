"""Hand-built TRL-shaped GRPO batches for the MI diagnostics' tests."""

import torch


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def build_batch(tokenizer, rollouts):
    """A TRL-shaped batch from `(user text, [model turn, env text, model turn, ...])`; env text gets tool_mask 0."""
    pad = tokenizer.pad_token_id
    prompts, completions, tools = [], [], []
    for user, segments in rollouts:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False
        )
        prompts.append(encode(tokenizer, text))
        ids, tool = [], []
        for i, text in enumerate(segments):
            segment = encode(tokenizer, text)
            ids += segment
            tool += [1 - i % 2] * len(segment)  # even segments are model turns
        completions.append(ids)
        tools.append(tool)
    lp, lc = max(map(len, prompts)), max(map(len, completions))
    batch = {
        "prompt_ids": torch.tensor([[pad] * (lp - len(p)) + p for p in prompts]),
        "prompt_mask": torch.tensor([[0] * (lp - len(p)) + [1] * len(p) for p in prompts]),
        "completion_ids": torch.tensor([c + [pad] * (lc - len(c)) for c in completions]),
        "completion_mask": torch.tensor([[1] * len(c) + [0] * (lc - len(c)) for c in completions]),
        "tool_mask": torch.tensor([t + [1] * (lc - len(t)) for t in tools]),
    }
    return batch, prompts, completions


ENV = "<|im_end|>\n<|im_start|>user\nReward: 0<|im_end|>\n<|im_start|>assistant\n"
ROLLOUTS = [
    (
        "go to the goal",
        ["<think> the goal is up </think><answer>Up</answer>", ENV, "<think> now left </think><answer>Left</answer>"],
    ),
    ("go to the goal", ["<think> maybe down </think><answer>Down</answer>"]),
    (
        "push the box",
        ["<think></think><answer>Right</answer>", ENV, "<think> box is right </think><answer>Right</answer>"],
    ),
    ("push the box", ["<think> box is left </think><answer>Left</answer>"]),
]
