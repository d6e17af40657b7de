"""`benchmarks/learning_cpu.py` options: `--pool`, the table over the seeds of separate runs, checked against values
worked out by hand (Wilson bounds, paired t intervals, Fisher exact tails); and the bf16 default."""

import json
import math
from pathlib import Path

import pytest

from .benchmark_scripts import load_benchmark


SETTINGS = {
    "quick": False, "stage": "all", "variant": "filtered", "warm_dir": None, "inputs": [], "seed": 0, "threads": 2,
    "max_turns": 3, "max_tokens_per_turn": 40, "eval_episodes": 48, "sft_episodes": 128, "sft_epochs": 2,
    "sft_lr": 5e-5, "grpo_steps": 6, "grpo_prompts": 4, "grpo_generations": 4, "grpo_lr": 1e-5, "sft_batch_size": 8,
    "mi_num_samples": 16, "mi_every": 2, "bf16": True, "figures": "docs/figures", "out": None, "pool": None,
}  # fmt: skip


@pytest.fixture(scope="module")
def benchmark():
    return load_benchmark("learning_cpu")


def write(folder: Path, seed: int, wins: dict, **settings) -> str:
    path = folder / f"s{seed}_{len(list(folder.iterdir()))}.json"
    evals = {name: {"success": w / 48, "episodes": 48} for name, w in wins.items()}
    path.write_text(json.dumps({"settings": {**SETTINGS, "seed": seed, **settings}, "eval": evals, "logs": {}}))
    return str(path)


def runs(folder: Path) -> list[str]:
    return [
        write(folder, 0, {"base": 0, "warm_start": 8, "grpo_unfiltered": 3, "grpo_filtered": 2}),
        write(folder, 1, {"base": 0, "warm_start": 5, "grpo_unfiltered": 8, "grpo_filtered": 7}),
        write(folder, 2, {"base": 0, "warm_start": 5, "grpo_unfiltered": 3, "grpo_filtered": 3}),
    ]


def test_fisher_one_sided_matches_hand_worked_hypergeometric_tails(benchmark):
    # 4 of 48 against 0 of 48: all 4 successes fall in the first row, C(48,4)/C(96,4) = 48*47*46*45/(96*95*94*93)
    assert benchmark.fisher_one_sided(4, 48, 0, 48) == pytest.approx(48 * 47 * 46 * 45 / (96 * 95 * 94 * 93))
    assert benchmark.fisher_one_sided(4, 48, 0, 48) == pytest.approx(0.05857, abs=1e-5)
    # 2 of 4 against 0 of 4: C(2,2) C(6,2) / C(8,4) = 15/70
    assert benchmark.fisher_one_sided(2, 4, 0, 4) == pytest.approx(15 / 70)
    # 1 of 2 against 1 of 2: P(X >= 1) = (C(2,1) C(2,1) + C(2,2) C(2,0)) / C(4,2) = 5/6
    assert benchmark.fisher_one_sided(1, 2, 1, 2) == pytest.approx(5 / 6)
    # fewer wins than the baseline: still a tail, above one half
    assert benchmark.fisher_one_sided(0, 4, 2, 4) == 1.0


def test_pool_prints_per_seed_and_pooled_successes_paired_intervals_and_p_values(benchmark, tmp_path, capsys):
    evals = benchmark.report_pool(benchmark.pool(runs(tmp_path)))
    table = capsys.readouterr().out
    # warm start: 18 of 144. Wilson by hand: centre (0.125 + 1.96^2/288) / (1 + 1.96^2/144) = 0.13474, half-width
    # 1.96 sqrt(0.125 * 0.875/144 + 1.96^2/(4 * 144^2)) / 1.02668 = 0.05419. Paired against a base of 0 on every seed:
    # (8, 5, 5)/48, mean 0.125, sd sqrt(3)/48, standard error 1/48, t(0.975, 2) = 4.303, half-width 0.090.
    # Against itself: no difference. Fisher: 0 of 144 against 18 of 144 leaves the whole tail C(144,18)/C(288,18).
    p = math.prod((144 - i) / (288 - i) for i in range(18))
    assert f"| warm_start | 8 / 5 / 5 | 18 of 144: 0.125 [0.081, 0.189] | +0.125 ± 0.090 | – | {p:.2g} |" in table
    assert p < 1e-5
    # unfiltered - warm start per seed: (-5, +3, -2)/48; mean -4/144 = -0.028; squared deviations sum to 98/3 (in
    # 1/48^2), so sd 7/(48 sqrt 3), standard error 7/144 and half-width 4.303 x 7/144 = 0.209
    assert "| grpo_unfiltered | 3 / 8 / 3 | 14 of 144: 0.097 [0.059, 0.157] | +0.097 ± " in table
    assert "| -0.028 ± 0.209 |" in table
    # no success in 144: the Wilson upper bound is 1.96^2 / (144 + 1.96^2) = 0.026
    assert "| base | 0 / 0 / 0 | 0 of 144: 0.000 [0.000, 0.026] | – | -0.125 ± 0.090 | – |" in table
    assert evals["grpo_filtered"]["wins"] == 12 and evals["grpo_filtered"]["episodes"] == 144
    # filtered - unfiltered per seed: (2-3, 7-8, 3-3) = (-1, -1, 0) successes; mean -2/144 = -0.014; squared
    # deviations from -2/3 sum to 2/3 (in 1/48^2), so sd 1/(48 sqrt 3), standard error 1/144, half-width 4.303/144
    assert (
        "filtered − unfiltered, paired by seed: -1 / -1 / +0 successes, -0.014 ± 0.030 [95% t]; filtered ahead "
        "on 0 of 3 seeds" in table
    )


def test_pool_refuses_mixed_pipelines_partial_runs_and_repeated_seeds(benchmark, tmp_path):
    first = write(tmp_path, 0, {"base": 0, "warm_start": 4, "grpo_unfiltered": 3, "grpo_filtered": 3})
    other_lr = write(tmp_path, 1, {"base": 0, "warm_start": 4, "grpo_unfiltered": 3, "grpo_filtered": 3}, sft_lr=1e-4)
    with pytest.raises(SystemExit, match=r"different pipeline \(\['sft_lr'\]\)"):
        benchmark.pool([first, other_lr])
    warm_only = write(tmp_path, 1, {"base": 0, "warm_start": 4}, stage="warm")
    with pytest.raises(SystemExit, match=r"no evaluation of \['grpo_unfiltered', 'grpo_filtered'\]"):
        benchmark.pool([first, warm_only])
    again = write(tmp_path, 0, {"base": 1, "warm_start": 4, "grpo_unfiltered": 3, "grpo_filtered": 3})
    with pytest.raises(SystemExit, match="seed 0 is in more than one file"):
        benchmark.pool([first, again])
    # rollouts and evaluations through vLLM are another pipeline than through transformers' generate
    through_vllm = write(tmp_path, 1, {"base": 0, "warm_start": 4, "grpo_unfiltered": 3, "grpo_filtered": 3},
                         generation="vllm")  # fmt: skip
    with pytest.raises(SystemExit, match=r"different pipeline \(\['generation'\]\)"):
        benchmark.pool([write(tmp_path, 0, {"base": 0, "warm_start": 4, "grpo_unfiltered": 3, "grpo_filtered": 3},
                              generation="hf"), through_vllm])  # fmt: skip
    launched_otherwise = write(tmp_path, 1, {"base": 0, "warm_start": 5, "grpo_unfiltered": 3, "grpo_filtered": 3},
                               threads=1, out="s1.json", figures="elsewhere")  # fmt: skip
    assert sorted(benchmark.pool([first, launched_otherwise])["seeds"]) == [0, 1]


@pytest.mark.parametrize("native", [True, False])
def test_bf16_defaults_to_what_the_cpu_computes_natively_and_the_flags_override_it(benchmark, monkeypatch, native):
    monkeypatch.setattr(benchmark, "cpu_has_native_bf16", lambda: native)
    assert benchmark.parse_args([]).bf16 is native  # emulated bf16 (AVX2 only) is slower than float32
    assert benchmark.parse_args(["--bf16"]).bf16 is True
    assert benchmark.parse_args(["--no-bf16"]).bf16 is False
