"""`trl-ragen2 diagnose` for any model, checkpoint or saved rollouts: load, roll out, cross-score, report.

[`diagnose`] is the function behind the command. For each model (a checkpoint folder, a PEFT adapter folder, a Hub
id, or a run's folder of `checkpoint-*`, expanded in step order) it

1. loads the policy and its tokenizer ([`resolve_models`] says what is not a model, and why);
2. gets rollouts: N prompts x G samples of one of the library's environments (RAGEN's multi-turn loop,
   `trl_ragen2.agents.rollout`, seeds 0..N-1) or of a JSONL file of prompts, generated with vLLM where it is installed
   (its CPU build included) and the model loads in it, otherwise with transformers; or the rows of a saved-rollouts
   file, which are only scored;
3. scores them with the library's scorers through `trl_ragen2.collapse.diagnose` (`engine="auto"`: transformers
   without vLLM; with vLLM, the trainer's measured per-scope choice, `collapse.scoring.engine_choice`, made over the
   first two models of a series);
4. compares consecutive models on the same prompts (paired intervals), runs the trainers' collapse detector over
   the series ([`collapse_alarm`]), and writes what was asked into `out` only:
   `diagnosis.json`, `diagnosis.html` (the page of `trl_ragen2.browser.diagnose_page`), `rollouts-<name>.jsonl`.

```python
from trl_ragen2.diagnose import diagnose

result = diagnose(["outputs/run/checkpoint-100"], task="sokoban", num_prompts=8, group_size=8)
print(result.diagnoses[0].regime, result.diagnoses[0].action)
```
"""

from __future__ import annotations

import gc
import importlib.util
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .collapse.diagnose import Diagnosis, diagnose_rollouts, paired_differences
from .collapse.diagnostics import MIDiagnosticsConfig
from .collapse.mi import DEFAULT_ENTROPY_THRESHOLD, DEFAULT_MI_THRESHOLD
from .collapse.rollout_file import RolloutFileError, RolloutRow, parse_row, read_rollouts, write_rollouts


logger = logging.getLogger(__name__)

ENGINES = ("auto", "transformers", "vllm")
THINK_PREFIX = "<think>"


class ModelPathError(ValueError):
    """A model argument that names no model; the message says what was found and what to pass."""


@dataclass
class DiagnoseResult:
    diagnoses: list[Diagnosis]
    comparisons: list[dict] = field(default_factory=list)  # {"before", "after", "differences": {key: (d, lo, hi)}}
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    collapse_alarm: str | None = None  # the first model of a series at which the collapse detector fires

    def to_json(self, with_matrix: bool = False) -> dict:
        return {
            "diagnoses": [d.to_json(with_matrix) for d in self.diagnoses],
            "comparisons": [
                {
                    **c,
                    "differences": {
                        k: dict(zip(("diff", "low", "high"), v, strict=True)) for k, v in c["differences"].items()
                    },
                }
                for c in self.comparisons
            ],
            "collapse_alarm": self.collapse_alarm,
            "notes": self.notes,
        }


# ---------------------------------------------------------------------------------------------------------------
# Models


def _checkpoint_step(path: Path) -> int:
    match = re.fullmatch(r"checkpoint-(\d+)", path.name)
    return int(match.group(1)) if match else -1


def resolve_models(specs: Sequence[str]) -> list[tuple[str, str, str]]:
    """`[(name, path or Hub id, kind)]`, kind `"model"`, `"adapter"` or `"hub"`; a run folder gives its checkpoints.

    Raises `ModelPathError` for a folder that holds no model, a file, or a path that does not exist.
    """
    from .models.loader import resolve_local_model

    out = []
    for spec in specs:
        path = Path(resolve_local_model(spec))
        if path.is_dir():
            if (path / "config.json").is_file():
                out.append((path.name, str(path), "model"))
            elif (path / "adapter_config.json").is_file():
                out.append((path.name, str(path), "adapter"))
            else:
                checkpoints = sorted((p for p in path.glob("checkpoint-*") if p.is_dir()), key=_checkpoint_step)
                if not checkpoints:
                    raise ModelPathError(
                        f"{path}: not a model: it has no config.json (a transformers checkpoint), no "
                        "adapter_config.json (a PEFT adapter) and no checkpoint-* folders; pass a folder saved with "
                        "save_pretrained, a run's output_dir, or a Hub id"
                    )
                out += resolve_models([str(p) for p in checkpoints])
        elif path.exists():
            raise ModelPathError(f"{path}: a file, not a model folder; pass the folder that holds config.json")
        elif re.fullmatch(r"[\w.-]+/[\w.-]+", spec) and not spec.startswith((".", "/")):
            out.append((spec, spec, "hub"))
        else:
            raise ModelPathError(f"{spec}: no such folder, and not a Hub id (owner/name); check the path")
    return out


def load_policy(path: str, kind: str, tokenizer_path: str | None = None, dtype: str = "float32"):
    """`(model, tokenizer, context length)`; a PEFT adapter is merged into its base model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        if kind == "adapter":
            from peft import AutoPeftModelForCausalLM

            model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).merge_and_unload()
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except (OSError, ValueError) as error:
        raise ModelPathError(f"{path}: could not be loaded as a causal LM ({error})") from error
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path or path)
    except (OSError, ValueError) as error:
        raise ModelPathError(
            f"{path}: no tokenizer could be loaded ({error}); pass --tokenizer with the folder or Hub id of the "
            "policy's tokenizer"
        ) from error
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    context = getattr(model.config, "max_position_embeddings", None)
    return model.eval(), tokenizer, context


def start_vllm(path: str, context: int | None, seed: int, dtype: str = "float32"):
    """An in-process `vllm.LLM` on `path`, in the dtype the transformers copy has (so both engines score alike)."""
    import vllm

    max_len = min(context or 4096, 4096)
    return vllm.LLM(path, dtype=dtype, max_model_len=max_len, seed=seed, enforce_eager=True)


# ---------------------------------------------------------------------------------------------------------------
# Rollouts


def read_prompts(path: str, num_prompts: int | None) -> list:
    """The `prompt` of each JSONL row (text or chat messages), streamed, at most `num_prompts`."""
    prompts = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if num_prompts is not None and len(prompts) >= num_prompts:
                break
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise RolloutFileError(f"{path} line {number}: not JSON ({error.msg}); one object per line") from None
            # a prompt row is a rollout row without its completion: the same checks, with a placeholder
            prompts.append(parse_row({"completion": "-", **record}, f"{path} line {number}").prompt)
    if len({json.dumps(p, sort_keys=True) for p in prompts}) < 2:
        raise RolloutFileError(f"{path}: {len(prompts)} prompt(s); give at least 2 distinct prompts")
    return prompts


def prompt_rows(prompts: list, tokenizer, generate, group_size: int, max_new_tokens: int) -> list[RolloutRow]:
    """G samples of each prompt (text: a user message; messages: as given), rendered and primed with `<think>`."""
    texts = []
    for prompt in prompts:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        texts.append(rendered + THINK_PREFIX)
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    expanded = [i for i in range(len(texts)) for _ in range(group_size)]
    replies, chunk = [], 64
    for start in tqdm(range(0, len(expanded), chunk), desc="generating", unit="batch", leave=False):
        part, _ = generate([ids[i] for i in expanded[start : start + chunk]], max_new_tokens)
        replies += part
    return [
        RolloutRow(texts[i], [("assistant", tokenizer.decode(reply, skip_special_tokens=True))], f"prompt-{i}")
        for i, reply in zip(expanded, replies, strict=True)
    ]


def env_rows(task: str, tokenizer, generate, num_prompts: int, group_size: int, max_new_tokens: int, max_turns: int):
    """RAGEN's protocol on environment `task`: seeds 0..N-1, G episodes each, the turns as assistant pieces."""
    from .agents.rollout import EpisodeSpec, RolloutConfig, RolloutEngine

    config = RolloutConfig(max_turns=max_turns, max_tokens_per_turn=max_new_tokens)
    engine = RolloutEngine(tokenizer, config, show_progress=True)
    specs = [EpisodeSpec(env=task, seed=seed) for seed in range(num_prompts) for _ in range(group_size)]
    episodes = engine.run(specs, generate, group_size=group_size)
    rows = []
    for episode in episodes:
        pieces, end = [], 0
        for start, stop in episode.turn_spans:
            if start > end:  # the environment's feedback between two turns
                pieces.append(("user", tokenizer.decode(episode.completion_ids[end:start])))
            pieces.append(("assistant", tokenizer.decode(episode.completion_ids[start:stop])))
            end = stop
        prompt = tokenizer.decode(episode.prompt_ids)
        rows.append(RolloutRow(prompt, pieces, f"{task}-seed{episode.spec.seed}", episode.total_return))
    return rows


def collapse_alarm(diagnoses: Sequence[Diagnosis]) -> str | None:
    """The first model of a series at which `CollapseDetector` (the trainers' alarm) fires on the first-turn scope:
    MI-ZScore and retrieval above chance at most half their peak (significantly), entropy still up. The series is
    short, so it may fire from the second model on, at the first diagnosis that meets the condition."""
    from .collapse.detector import first_alarm
    from .runs.keys import mi_key

    records = [
        {"step": index, **{mi_key("first_turn", key): value for key, value in d.scopes["first_turn"].metrics.items()}}
        for index, d in enumerate(diagnoses, start=1)
    ]
    fired = first_alarm(records, scope="first_turn", warmup=1, patience=1) if len(records) > 1 else None
    return diagnoses[fired - 1].name if fired else None


# ---------------------------------------------------------------------------------------------------------------
# The command's function


def diagnose(
    models: Sequence[str] = (),
    *,
    task: str | None = None,
    prompts: str | None = None,
    rollouts: str | None = None,
    num_prompts: int = 8,
    group_size: int = 8,
    max_new_tokens: int = 128,
    max_turns: int = 5,
    engine: str = "auto",
    tokenizer: str | None = None,
    num_samples: int | None = None,
    mi_threshold: float = DEFAULT_MI_THRESHOLD,
    entropy_threshold: float = DEFAULT_ENTROPY_THRESHOLD,
    num_bootstrap: int = 1000,
    num_permutations: int = 1000,
    seed: int = 0,
    out: str | os.PathLike | None = None,
    html: bool = False,
    save_rollouts: bool = False,
    dtype: str = "float32",
) -> DiagnoseResult:
    """Diagnose each model (or the saved rollouts, scored by the one model given); see the module docstring.

    Exactly one of `task` (an environment name of `trl_ragen2_envs`), `prompts` (a JSONL file of prompts) or
    `rollouts` (a saved-rollouts JSONL file, `trl_ragen2.collapse.rollout_file`) gives the rollouts. Files are written
    into `out` only, and only when asked (`html`, `save_rollouts`; `diagnosis.json` whenever `out` is given).
    """
    if sum(x is not None for x in (task, prompts, rollouts)) != 1:
        raise ValueError(
            "give exactly one of a task (--env), a prompts file (--prompts) or saved rollouts (--rollouts)"
        )
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}; choose one of {ENGINES}")
    if (html or save_rollouts) and out is None:
        raise ValueError("--html and --save-rollouts write files: give the folder with --out")
    if not models:
        raise ValueError("give a model (a checkpoint folder, a PEFT adapter folder or a Hub id) to roll out or score")
    if group_size < 1 or num_prompts < 2:
        raise ValueError(f"need at least 2 prompts and 1 sample each, got {num_prompts} x {group_size}")
    saved = list(read_rollouts(rollouts)) if rollouts is not None else None  # checked before any model loads
    prompt_list = read_prompts(prompts, num_prompts) if prompts is not None else None
    entries = resolve_models(models)
    if saved is not None and len(entries) > 1:
        raise ValueError(f"saved rollouts are scored by one model; got {len(entries)} ({[e[0] for e in entries]})")
    has_vllm = importlib.util.find_spec("vllm") is not None
    if engine == "vllm" and not has_vllm:
        raise ImportError('--engine vllm, but vLLM is not installed: pip install "trl-ragen2[vllm]"')
    from .collapse.scoring.engine_choice import TRANSFORMERS, VLLM, EngineSelector
    from .collapse.scoring.transformers_scorer import TransformersCrossScorer
    from .collapse.scoring.vllm_scorer import VLLMCrossScorer

    result, selector = DiagnoseResult([]), EngineSelector()
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
    for name, path, kind in tqdm(entries, desc="models", unit="model", disable=len(entries) == 1):
        model, tok, context = load_policy(path, kind, tokenizer, dtype)
        llm = None
        if has_vllm and engine != "transformers" and kind != "adapter":
            try:
                llm = start_vllm(path, context, seed, dtype)
            except Exception as error:  # auto falls back; --engine vllm must not
                if engine == "vllm":
                    raise
                result.notes.append(f"{name}: vLLM could not start ({error!r:.200}); transformers used instead")
        if llm is not None:
            from .agents.generation import EngineGeneration

            generate = EngineGeneration(llm, temperature=1.0, seed=seed)
        else:
            from .agents.generation import ModelGeneration

            torch.manual_seed(seed)
            generate = ModelGeneration(model, tok, temperature=1.0, batch_size=64)
        if saved is not None:
            rows = saved
        elif prompt_list is not None:
            rows = prompt_rows(prompt_list, tok, generate, group_size, max_new_tokens)
        else:
            rows = env_rows(task, tok, generate, num_prompts, group_size, max_new_tokens, max_turns)
        hf_scorer = TransformersCrossScorer(model, show_progress=True)
        if llm is None or engine == "transformers":
            scorer = hf_scorer
        elif engine == "vllm":
            scorer = VLLMCrossScorer(llm=llm)
        else:
            scorer = {TRANSFORMERS: hf_scorer, VLLM: VLLMCrossScorer(llm=llm)}
        source = rollouts or "rollouts"
        config = MIDiagnosticsConfig(
            num_samples=num_samples or len(rows), num_bootstrap=num_bootstrap, num_permutations=num_permutations,
            trajectory_chains=None, seed=seed,  # outside training, every chain of both scopes is scored
        )  # fmt: skip
        diagnosis = diagnose_rollouts(
            rows, tok, scorer, name=name, config=config, max_length=context, mi_threshold=mi_threshold,
            entropy_threshold=entropy_threshold, engines=selector, source=source,
        )  # fmt: skip
        result.diagnoses.append(diagnosis)
        if save_rollouts and saved is None:
            result.files.append(write_rollouts(Path(out) / f"rollouts-{name.replace('/', '--')}.jsonl", rows))
        del model, llm, generate, scorer, hf_scorer
        gc.collect()
    for before, after in zip(result.diagnoses, result.diagnoses[1:], strict=False):
        differences = paired_differences(before, after, num_resamples=max(num_bootstrap, 1), seed=seed)
        result.comparisons.append({"before": before.name, "after": after.name, "differences": differences})
    result.collapse_alarm = collapse_alarm(result.diagnoses)
    if out is not None:
        path = Path(out) / "diagnosis.json"
        path.write_text(json.dumps(result.to_json(with_matrix=True), indent=1, allow_nan=True))
        result.files.append(str(path))
        if html:
            from .browser.diagnose_page import render_diagnosis

            page = Path(out) / "diagnosis.html"
            page.write_text(render_diagnosis(result.diagnoses, result.comparisons), encoding="utf-8")
            result.files.append(str(page))
    return result
