"""MI proxies on hand-built matrices whose answers are worked out independently in each test."""

import math

import pytest
import torch

from trl_ragen2.collapse.mi import (
    COMPRESSED_REASONING,
    DIVERSE_REASONING,
    EMA_KEYS,
    LOW_ENTROPY_COLLAPSE,
    TEMPLATE_COLLAPSE,
    MIZScoreEMA,
    mi_metric_keys,
    mi_metrics,
    reasoning_regime,
)


def lme(values):
    """log-mean-exp, written out."""
    return math.log(sum(math.exp(v) for v in values) / len(values))


def pstd(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


# Two chains, two prompts. Chain 0 (1 token) prefers its own prompt 0; chain 1 (2 tokens) prefers its own prompt 1.
LOGP = [[-1.0, -3.0], [-4.0, -2.0]]
LENGTHS = [1, 2]
TARGET = [0, 1]


def test_every_key_on_a_two_by_two_matrix():
    m = mi_metrics(torch.tensor(LOGP), torch.tensor(LENGTHS), torch.tensor(TARGET), ks=(2,))
    matched = [-1.0 / 1, -2.0 / 2]
    marginal_ragen = [lme([-1.0, -3.0]), lme([-4.0 / 2, -2.0 / 2])]
    marginal_seq = [lme([-1.0, -3.0]), lme([-4.0, -2.0])]
    mi = sum(matched) / 2 - sum(marginal_ragen) / 2
    mi_seq = ((-1.0 - marginal_seq[0]) + (-2.0 - marginal_seq[1])) / 2
    expected = {
        "retrieval_acc": 1.0,  # both chains rank their own prompt first
        "retrieval_chance": 0.5,
        "retrieval_above_chance": 0.5,
        "recall@2": 1.0,
        "recall@2_chance": 1.0,  # 2 of 2 columns always contain the target
        "matched": sum(matched) / 2,
        "marginal": sum(marginal_ragen) / 2,
        "mi_est": mi,
        "cond_entropy": -sum(matched) / 2,
        "marginal_entropy": -sum(marginal_ragen) / 2,
        "marginal_std": pstd(marginal_ragen),
        "mi_zscore": mi / (pstd(marginal_ragen) + 1e-3),
        "matched_seq": (-1.0 - 2.0) / 2,
        "marginal_seq": sum(marginal_seq) / 2,
        "mi_seq_est": mi_seq,
        "cond_entropy_seq": 1.5,
        "marginal_entropy_seq": -sum(marginal_seq) / 2,
        "marginal_std_seq": pstd(marginal_seq),
        "mi_zscore_seq": mi_seq / (pstd(marginal_seq) + 1e-3),
        "mi_upper_bound": math.log(2),
        "num_chains": 2.0,
        "num_columns": 2.0,
    }
    assert set(m) == set(expected)
    for key, value in expected.items():
        assert m[key] == pytest.approx(value, abs=1e-12), key
    # the entropy identity MI = H(Z) - H(Z|X) holds exactly in both normalisations
    assert m["mi_est"] == pytest.approx(m["marginal_entropy"] - m["cond_entropy"], abs=1e-12)
    assert m["mi_seq_est"] == pytest.approx(m["marginal_entropy_seq"] - m["cond_entropy_seq"], abs=1e-12)


def test_paper_marginal_is_eq1_and_never_below_ragen():
    paper = mi_metrics(torch.tensor(LOGP), torch.tensor(LENGTHS), torch.tensor(TARGET), marginal="paper")
    ragen = mi_metrics(torch.tensor(LOGP), torch.tensor(LENGTHS), torch.tensor(TARGET), marginal="ragen")
    marginal_paper = [lme([-1.0, -3.0]) / 1, lme([-4.0, -2.0]) / 2]  # (LME of sums) / |Z|
    assert paper["marginal"] == pytest.approx(sum(marginal_paper) / 2, abs=1e-12)
    assert paper["marginal_std"] == pytest.approx(pstd(marginal_paper), abs=1e-12)
    assert ragen["marginal"] <= paper["marginal"]  # Jensen: LME of means <= LME of sums / |Z|
    assert ragen["mi_est"] >= paper["mi_est"]
    for key in (
        "mi_seq_est",
        "marginal_seq",
        "retrieval_acc",
    ):  # sequence-level and retrieval keys do not depend on it
        assert ragen[key] == paper[key]


def test_identical_columns_give_zero_mi_and_chance_retrieval():
    # a chain scored the same under every prompt carries no information about its prompt
    logp = torch.tensor([[-5.0, -5.0, -5.0, -5.0], [-7.0, -7.0, -7.0, -7.0]])
    m = mi_metrics(logp, torch.tensor([3, 4]), torch.tensor([1, 2]), ks=(2, 4, 8))
    assert m["mi_est"] == pytest.approx(0.0, abs=1e-12)
    assert m["mi_seq_est"] == pytest.approx(0.0, abs=1e-12)
    assert m["retrieval_acc"] == pytest.approx(0.25)  # four-way tie: 1/4 in expectation, exactly chance
    assert m["retrieval_chance"] == pytest.approx(0.25)
    assert m["retrieval_above_chance"] == pytest.approx(0.0)
    assert m["recall@2"] == pytest.approx(0.5) and m["recall@2_chance"] == pytest.approx(0.5)
    assert m["recall@8"] == 1.0  # k capped at M = 4


def test_ties_and_same_columns():
    logp = torch.tensor(
        [
            [-1.0, -1.0, -3.0, -4.0],  # own column 0 tied with column 1 at the top -> 1/2
            [-1.0, -1.0, -3.0, -4.0],  # own column 0, column 1 is the same prompt -> both correct -> 1
            [-2.0, -1.0, -1.0, -1.0],  # own column 0 below three others -> 0 at k=1, 0 at k=2, 1 at k=4
            [-1.0, -1.0, -1.0, -5.0],  # own column 0 in a 3-way tie -> 1/3; top-2 misses with C(2,2)/C(3,2)
        ]
    )
    same = torch.zeros(4, 4, dtype=torch.bool)
    same[1, 1] = True
    m = mi_metrics(logp, torch.ones(4), torch.zeros(4, dtype=torch.long), same, ks=(2, 4))
    assert m["retrieval_acc"] == pytest.approx((0.5 + 1.0 + 0.0 + 1 / 3) / 4)
    assert m["retrieval_chance"] == pytest.approx((1 / 4 + 2 / 4 + 1 / 4 + 1 / 4) / 4)
    assert m["recall@2"] == pytest.approx((1.0 + 1.0 + 0.0 + (1 - 1 / 3)) / 4)
    # chance@2 with c correct of 4 columns: 1 - C(4-c, 2)/C(4, 2)
    assert m["recall@2_chance"] == pytest.approx((0.5 + (1 - 1 / 6) + 0.5 + 0.5) / 4)
    assert m["recall@4"] == 1.0


def test_single_column():
    m = mi_metrics(torch.tensor([[-3.0], [-2.0]]), torch.tensor([3, 1]), torch.tensor([0, 0]))
    assert m["retrieval_acc"] == 1.0 and m["retrieval_chance"] == 1.0
    assert m["mi_est"] == pytest.approx(0.0) and m["mi_seq_est"] == pytest.approx(0.0)
    assert m["mi_upper_bound"] == 0.0
    assert m["recall@8"] == 1.0


def test_neg_inf_off_target_is_a_zero_probability():
    m = mi_metrics(torch.tensor([[-1.0, -math.inf]]), torch.tensor([1]), torch.tensor([0]))
    assert m["mi_seq_est"] == pytest.approx(math.log(2))  # the own column holds all the mass
    assert m["retrieval_acc"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"logp": torch.zeros(3)}, "logp must be a 2-D"),
        ({"logp": torch.zeros(0, 2), "lengths": torch.ones(0), "target": torch.zeros(0, dtype=torch.long)}, "empty"),
        ({"logp": torch.tensor([[float("nan"), 0.0], [0.0, 0.0]])}, "NaN"),
        ({"logp": torch.tensor([[float("inf"), 0.0], [0.0, 0.0]])}, r"\+inf"),
        ({"logp": torch.tensor([[-math.inf, 0.0], [0.0, 0.0]])}, "own-prompt score"),
        ({"lengths": torch.tensor([1, 0])}, "lengths must be > 0"),
        ({"lengths": torch.ones(3)}, r"lengths must have shape \(2,\)"),
        ({"target": torch.tensor([0, 2])}, r"target must be in \[0, 2\)"),
        ({"target": torch.tensor([0.0, 1.0])}, "integer column indices"),
        ({"same": torch.zeros(2, 3, dtype=torch.bool)}, "same must have the shape"),
        ({"same": torch.zeros(2, 2)}, "same must be a bool"),
    ],
)
def test_invalid_input_names_the_argument(kwargs, message):
    args = {"logp": torch.zeros(2, 2), "lengths": torch.ones(2), "target": torch.tensor([0, 1]), "same": None}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        mi_metrics(args["logp"], args["lengths"], args["target"], args["same"])


def test_invalid_options():
    with pytest.raises(ValueError, match="marginal must be one of"):
        mi_metrics(torch.zeros(1, 1), torch.ones(1), torch.zeros(1, dtype=torch.long), marginal="mean")
    with pytest.raises(ValueError, match="ks must be positive"):
        mi_metrics(torch.zeros(1, 1), torch.ones(1), torch.zeros(1, dtype=torch.long), ks=(0,))


def test_zscore_ema_follows_the_recursion_and_round_trips():
    ema = MIZScoreEMA(alpha=0.9)
    first = ema.update({"marginal_std": 2.0, "marginal_std_seq": 10.0, "mi_est": 1.0, "mi_seq_est": 4.0})
    assert first["marginal_std_ema"] == 2.0  # initialised with the first sigma
    assert first["mi_zscore_ema"] == pytest.approx(1.0 / (2.0 + 1e-3))
    second = ema.update({"marginal_std": 1.0, "marginal_std_seq": 20.0, "mi_est": 0.5, "mi_seq_est": 2.0})
    assert second["marginal_std_ema"] == pytest.approx(0.9 * 2.0 + 0.1 * 1.0)
    assert second["marginal_std_ema_seq"] == pytest.approx(0.9 * 10.0 + 0.1 * 20.0)
    assert second["mi_zscore_ema_seq"] == pytest.approx(2.0 / (11.0 + 1e-3))
    skipped = ema.update({"marginal_std": math.nan, "marginal_std_seq": math.nan, "mi_est": math.nan, "mi_seq_est": 0})
    assert all(math.isnan(v) for v in skipped.values())
    restored = MIZScoreEMA(alpha=0.9)
    restored.load_state_dict(ema.state_dict())
    assert restored.sigma == pytest.approx(1.9) and restored.sigma_seq == pytest.approx(11.0)
    with pytest.raises(ValueError, match="alpha"):
        MIZScoreEMA(alpha=1.0)
    with pytest.raises(ValueError, match="missing"):
        restored.load_state_dict({"sigma": 1.0})


def test_zscore_keys_feed_the_ema():
    m = mi_metrics(torch.tensor(LOGP), torch.tensor(LENGTHS), torch.tensor(TARGET))
    out = MIZScoreEMA().update(m)
    assert out["mi_zscore_ema"] == pytest.approx(m["mi_zscore"])  # first update: EMA sigma == batch sigma
    assert out["mi_zscore_ema_seq"] == pytest.approx(m["mi_zscore_seq"])


@pytest.mark.parametrize(
    ("mi", "entropy", "regime"),
    [
        (0.3, 2.0, DIVERSE_REASONING),
        (0.0, 2.0, TEMPLATE_COLLAPSE),
        (0.3, 0.1, COMPRESSED_REASONING),
        (0.0, 0.1, LOW_ENTROPY_COLLAPSE),
    ],
)
def test_reasoning_regimes(mi, entropy, regime):
    assert reasoning_regime(mi, entropy) == regime


def test_regime_thresholds_are_overridable():
    assert reasoning_regime(1.0, 2.0, mi_threshold=1.5) == TEMPLATE_COLLAPSE
    assert reasoning_regime(1.0, 2.0, entropy_threshold=3.0) == COMPRESSED_REASONING
    with pytest.raises(ValueError, match="mi must be a number"):
        reasoning_regime(math.nan, 1.0)


@pytest.mark.parametrize("ks", [(2, 4, 8), (1, 3), (2, 2, 5), ()])
def test_mi_metric_keys_are_what_mi_metrics_and_the_ema_return(ks):
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-2.0, -1.0, -3.0], [-3.0, -2.0, -1.5]])
    metrics = mi_metrics(logp, torch.tensor([2.0, 3.0, 4.0]), torch.arange(3), ks=ks)
    assert tuple(metrics) == mi_metric_keys(ks)
    assert tuple(MIZScoreEMA().update(metrics)) == EMA_KEYS
    assert tuple(MIZScoreEMA().update({**metrics, "marginal_std": math.nan})) == EMA_KEYS  # a scope that failed
