"""The permutation test and bootstrap intervals of `trl_ragen2.collapse.mi_uncertainty` on matrices with known
answers."""

import math

import pytest
import torch

from trl_ragen2.collapse.mi import mi_metrics
from trl_ragen2.collapse.mi_uncertainty import (
    chain_terms,
    cluster_ids,
    correct_columns,
    mi_uncertainty,
    retrieval_permutation_test,
    small_sample_factor,
    student_t_quantile,
    uncertainty_keys,
    wilson_interval,
)


def noisy_matrix(seed, chains_per_prompt=8, prompts=8, signal=0.15, depends_on_input=True):
    """Synthetic scores: per-token log-probability `base_n + noise_nm (+ signal on the own column)`, times the length.

    Chains are i.i.d. given their prompt and the prompts are exchangeable, so every proxy is a mean of i.i.d.
    per-chain terms whose population value a very large draw gives.
    """
    g = torch.Generator().manual_seed(seed)
    num_chains = chains_per_prompt * prompts
    target = torch.arange(num_chains) // chains_per_prompt
    lengths = torch.randint(10, 31, (num_chains,), generator=g).double()
    base = -2 + 0.3 * torch.randn(num_chains, 1, generator=g, dtype=torch.float64)
    per_token = base + 0.2 * torch.randn(num_chains, prompts, generator=g, dtype=torch.float64)
    if depends_on_input:
        per_token[torch.arange(num_chains), target] += signal
    return per_token * lengths[:, None], lengths, target


def test_chain_terms_average_to_mi_metrics_on_ties_duplicates_and_minus_inf():
    g = torch.Generator().manual_seed(0)
    logp = torch.randint(-6, 0, (12, 5), generator=g).double()  # integer scores: many exact ties
    logp[0, 3] = -math.inf
    target = torch.tensor([0, 1, 2, 4, 0, 1, 2, 4, 0, 1, 2, 3])
    same = torch.zeros(12, 5, dtype=torch.bool)
    same[:, 1] |= target == 2  # columns 1 and 2 hold one context
    same[:, 2] |= target == 1
    lengths = torch.arange(1, 13).double()
    for marginal in ("ragen", "paper"):
        expected = mi_metrics(logp, lengths, target, same, ks=(2, 3), marginal=marginal)
        terms = chain_terms(logp, lengths, target, same, ks=(2, 3), marginal=marginal)
        for key, hits in terms.hits.items():
            assert hits.mean().item() == pytest.approx(expected[key], abs=1e-12)
        assert (terms.hits["retrieval_acc"] - terms.chance).mean().item() == pytest.approx(
            expected["retrieval_above_chance"], abs=1e-12
        )
        assert (terms.matched - terms.marginal).mean().item() == pytest.approx(expected["mi_est"], abs=1e-12)
        assert (terms.matched_seq - terms.marginal_seq).mean().item() == pytest.approx(expected["mi_seq_est"])
        assert terms.marginal.std(unbiased=False).item() == pytest.approx(expected["marginal_std"], abs=1e-12)


def test_a_perfectly_diagonal_matrix_gets_the_smallest_p_value():
    # 8 prompts x 8 chains; each chain scores 0 under its own prompt and -10 elsewhere: retrieval is perfect, and a
    # shuffle of 64 labels keeps every chain in its own group with probability (8!)^8 / 64! ~ 1e-49.
    target = torch.arange(64) // 8
    logp = torch.full((64, 8), -10.0, dtype=torch.float64)
    logp[torch.arange(64), target] = 0.0
    pvalue, null_high = retrieval_permutation_test(logp, target, num_permutations=199, seed=0)
    assert pvalue == 1 / 200
    assert 1 / 8 <= null_high < 0.35  # shuffled labels retrieve about chance, 1/8


def test_identical_columns_give_p_one_and_chance_as_the_null_quantile():
    # Every column scores a chain alike: the shuffled accuracies all equal the observed one (chance, 1/8).
    target = torch.arange(64) // 8
    logp = torch.randn(64, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64).repeat(1, 8)
    pvalue, null_high = retrieval_permutation_test(logp, target, num_permutations=99, seed=0)
    assert pvalue == 1.0
    assert null_high == pytest.approx(1 / 8)


def test_p_values_are_calibrated_when_reasoning_ignores_the_input():
    # Under the null hypothesis a level-0.1 test rejects 10% of the time: count rejections over 300 matrices.
    rejections = 0
    for seed in range(300):
        logp, _, target = noisy_matrix(seed, chains_per_prompt=4, depends_on_input=False)
        pvalue, _ = retrieval_permutation_test(logp, target, num_permutations=99, seed=seed)
        rejections += pvalue <= 0.1
    # binomial(300, 0.1): mean 30, sd 5.2; the band is about +-3 sd
    assert 14 <= rejections <= 46
    # and with a real signal the test rejects nearly always
    detected = sum(
        retrieval_permutation_test(*noisy_matrix(seed, signal=0.3)[::2], num_permutations=99, seed=seed)[0] <= 0.1
        for seed in range(20)
    )
    assert detected >= 19


def test_trajectory_matrices_shuffle_whole_correct_sets():
    # Columns 0 and 1 hold one context (rows 0 and 1 are two draws of it): their correct sets are {0, 1}.
    logp = torch.tensor([[0.0, 0.0, -9.0], [0.0, 0.0, -9.0], [-9.0, -9.0, 0.0]], dtype=torch.float64)
    target = torch.tensor([0, 1, 2])
    same = torch.tensor([[1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool)
    clusters = cluster_ids(correct_columns(3, target, same)).tolist()
    assert clusters[0] == clusters[1] != clusters[2]  # the two draws of one context form one cluster
    pvalue, _ = retrieval_permutation_test(logp, target, same, num_permutations=500, seed=0)
    # 2 of the 6 orders of 3 rows leave every row a correct set it retrieves: p ~ (1 + 500/3) / 501
    assert pvalue == pytest.approx(1 / 3, abs=0.07)


def test_results_depend_only_on_the_matrix_and_the_seed():
    logp, lengths, target = noisy_matrix(3)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = mi_uncertainty(logp, lengths, target, seed=5, num_permutations=50, num_bootstrap=50)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is left alone
    torch.manual_seed(999)  # another global state: no effect
    assert mi_uncertainty(logp, lengths, target, seed=5, num_permutations=50, num_bootstrap=50) == first
    other = mi_uncertainty(logp, lengths, target, seed=6, num_permutations=50, num_bootstrap=50)
    assert other["mi_est_ci_low"] != first["mi_est_ci_low"]
    assert set(first) == set(uncertainty_keys())


def test_intervals_contain_the_estimate_and_collapse_for_one_cluster():
    logp, lengths, target = noisy_matrix(4)
    metrics = mi_metrics(logp, lengths, target)
    intervals = mi_uncertainty(logp, lengths, target, seed=0, num_permutations=10, num_bootstrap=200)
    for key in ("retrieval_acc", "recall@2", "mi_est", "mi_zscore", "mi_seq_est", "cond_entropy"):
        assert intervals[f"{key}_ci_low"] <= metrics[key] <= intervals[f"{key}_ci_high"], key
        assert intervals[f"{key}_ci_low"] < intervals[f"{key}_ci_high"], key
    assert intervals["recall@8_ci_low"] == intervals["recall@8_ci_high"] == 1.0  # 8 columns: always a hit
    one_prompt = mi_uncertainty(logp[:8], lengths[:8], torch.zeros(8, dtype=torch.long), seed=0, num_bootstrap=50)
    assert one_prompt["mi_est_ci_low"] == pytest.approx(one_prompt["mi_est_ci_high"])  # one cluster: a point


def test_mi_zscore_ema_interval_folds_each_resample_into_the_ema():
    logp, lengths, target = noisy_matrix(5)
    metrics = mi_metrics(logp, lengths, target)
    # a huge earlier sigma dominates the EMA: the interval is that of mi_est / (0.9 * 100 + 0.1 * sigma + eps)
    state = dict(ema_alpha=0.9, ema_sigma=100.0, ema_sigma_seq=100.0)
    out = mi_uncertainty(logp, lengths, target, seed=0, num_bootstrap=400, **state)
    point = metrics["mi_est"] / (0.9 * 100 + 0.1 * metrics["marginal_std"] + 1e-3)
    assert out["mi_zscore_ema_ci_low"] < point < out["mi_zscore_ema_ci_high"]
    assert out["mi_zscore_ema_ci_high"] - out["mi_zscore_ema_ci_low"] == pytest.approx(
        (out["mi_est_ci_high"] - out["mi_est_ci_low"]) / 90, rel=0.1
    )


def test_cheap_mode_matrices_have_no_label_test_but_intervals():
    logp, lengths, _ = noisy_matrix(6)
    out = mi_uncertainty(logp[:, :3], lengths, torch.zeros(64, dtype=torch.long), shared_columns=False, seed=0)
    assert math.isnan(out["retrieval_pvalue"]) and math.isnan(out["retrieval_null_high"])
    assert out["mi_est_ci_low"] < out["mi_est_ci_high"]


def test_student_t_quantiles_and_the_widening_factor():
    # exact t quantiles (q = 0.975): dof 1: 12.706, 2: 4.303, 3: 3.182, 7: 2.365, 30: 2.042
    for dof, exact in [(1, 12.706), (2, 4.303), (3, 3.182), (7, 2.365), (30, 2.042)]:
        assert student_t_quantile(0.975, dof) == pytest.approx(exact, rel=0.008)
    assert small_sample_factor(8, 0.95) == pytest.approx(math.sqrt(8 / 7) * 2.365 / 1.96, rel=0.002)
    assert small_sample_factor(1, 0.95) == 1.0
    assert small_sample_factor(10_000, 0.95) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("prompts", [8, 32])
def test_interval_coverage_on_a_generator_with_known_truth(prompts):
    """Over 300 batches the 95% intervals contain the population value about 95% of the time."""
    chains_per_prompt = 64 // prompts
    big, big_lengths, big_target = noisy_matrix(
        10_000 + prompts, chains_per_prompt=200_000 // prompts, prompts=prompts
    )
    truth = mi_metrics(big, big_lengths, big_target)  # population values (Monte Carlo error ~1e-3)
    keys = ("retrieval_acc", "recall@2", "mi_est", "mi_zscore", "mi_seq_est", "cond_entropy")
    covered = dict.fromkeys(keys, 0)
    plain = dict.fromkeys(keys, 0)
    batches = 300
    for seed in range(batches):
        logp, lengths, target = noisy_matrix(seed, chains_per_prompt=chains_per_prompt, prompts=prompts)
        out = mi_uncertainty(logp, lengths, target, seed=seed, num_permutations=1, num_bootstrap=500)
        for key in keys:
            covered[key] += out[f"{key}_ci_low"] <= truth[key] <= out[f"{key}_ci_high"]
        if prompts == 8:
            from trl_ragen2.collapse.mi_uncertainty import bootstrap_intervals

            terms = chain_terms(logp, lengths, target)
            narrow = bootstrap_intervals(terms, target, num_resamples=500, seed=seed + 1, widen=False)
            for key in keys:
                plain[key] += narrow[key][0] <= truth[key] <= narrow[key][1]
    rates = {key: count / batches for key, count in covered.items()}
    # binomial(300, 0.95): sd 1.3%; allow 3 sd below and above the nominal level
    assert all(0.91 <= rate <= 0.99 for rate in rates.values()), rates
    if prompts == 8:  # the plain percentile interval undercovers with 8 clusters, which is why it is widened
        assert sum(plain.values()) / (batches * len(keys)) < 0.93


def test_a_few_chains_that_all_miss_still_get_a_wide_retrieval_interval():
    # Wilson at 0 of 4 (z = 1.959964): [0, z^2 / (4 + z^2)] = [0, 0.489891]; at 2 of 4: [0.150039, 0.849961]
    assert wilson_interval(0.0, 4, 0.95) == pytest.approx((0.0, 0.489891), abs=1e-6)
    assert wilson_interval(0.5, 4, 0.95) == pytest.approx((0.150039, 0.849961), abs=1e-6)
    # four trajectory chains (each its own cluster) under 16 columns, each scored highest under another column
    logp = torch.zeros(4, 16, dtype=torch.float64)
    logp[:, 15] = 5.0
    target = torch.arange(4)
    out = mi_uncertainty(logp, torch.full((4,), 10.0), target, num_permutations=10, num_bootstrap=200)
    # every resample is 0, so the bootstrap alone would give the point [0, 0]
    assert out["retrieval_acc_ci_low"] == 0.0 and out["retrieval_acc_ci_high"] == pytest.approx(0.489891, abs=1e-6)
    # above chance (1/16): the same interval, shifted
    assert out["retrieval_above_chance_ci_high"] == pytest.approx(0.489891 - 1 / 16, abs=1e-6)
