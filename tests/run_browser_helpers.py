"""A real tiny-model run with the sample log and the MI diagnostics at every step, and the filter's own choices.

`tiny_run(folder, tokenizer)` trains the SNR-filtered trainer for `STEPS` steps with real sampling (a reward that
depends on the completion's length, so groups differ in variance and the filter drops some) and records, per step,
the kept groups as the trainer decided them (`FilteredGeneration.keep_groups` right after `_filter_batch`), to be
compared with what the sample log and the page say. It also writes a completion that carries HTML and a script,
so the page's escaping is tested on the real run's file.
"""

from __future__ import annotations

from datasets import Dataset

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.models.tiny import make_tiny_model
from trl_ragen2.runs.tracking import MetricsJSONLCallback

from .scripted import tiny_trainer_args


STEPS = 2
PROMPTS = ["P0: count", "P1: push", "P2: <b>bold</b>", "P3: walk"]
INJECTED = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def length_reward(completions, **kwargs):
    return [float(len(c) % 3) for c in completions]


def record_filter_choices(trainer, field: str) -> dict[int, list[bool]]:
    """`{step: the filter's choice}` as the trainer makes it: `field` of its filtered generation (`keep_groups` or
    `keep_rows`), recorded after each `_filter_batch`."""
    choices: dict[int, list[bool]] = {}
    filter_batch = trainer._filter_batch

    def recording_filter(batch):
        result = filter_batch(batch)
        choices[trainer.state.global_step + 1] = getattr(trainer.filtered_generation, field).tolist()
        return result

    trainer._filter_batch = recording_filter
    return choices


def tiny_run(folder, tokenizer) -> tuple[SNRFilteredGRPOTrainer, dict[int, list[bool]]]:
    """Train; returns the trainer and `{step: kept flag per group}` as the filter decided."""

    args = tiny_trainer_args(
        folder,
        SNRFilteredGRPOConfig,
        max_steps=STEPS,
        reward_variance_top_p=0.6,
        mi_every_n_steps=1,
        mi_num_permutations=0,
        mi_num_bootstrap=0,
        sample_log_groups=3,  # fewer than the 4 groups: the log picks across the variance ranking
        sample_log_every_n_steps=1,
    )
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tokenizer, seed=0),
        reward_funcs=length_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS * STEPS}),
        processing_class=tokenizer,
        callbacks=[MetricsJSONLCallback()],
    )
    kept = record_filter_choices(trainer, "keep_groups")
    decode = tokenizer.decode

    def decode_with_markup(*a, **k):  # every decoded text carries markup and a script
        out = decode(*a, **k)
        return [text + INJECTED for text in out] if isinstance(out, list) else out + INJECTED

    tokenizer.decode = decode_with_markup
    try:
        trainer.train()
    finally:
        del tokenizer.decode
    return trainer, kept
