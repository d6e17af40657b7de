"""Text template metrics on hand-computed cases, and BLEU against NLTK's implementation."""

import math
import random

import pytest

from trl_ragen2.collapse.text_metrics import bleu, cross_prompt_overlap, distinct_n, self_bleu, text_template_metrics


def words(text):
    return text.split()


def test_bleu_of_a_worked_example():
    # hypothesis "the cat sat on the mat" vs "the cat is on the mat": clipped matches 5/6 unigrams, 3/5 bigrams
    # (the cat, on the, the mat), 1/4 trigrams (on the mat), 0/3 4-grams (smoothed to 0.1/3); equal lengths, so
    # no brevity penalty: BLEU = (5/6 * 3/5 * 1/4 * 0.1/3) ** (1/4)
    expected = (5 / 6 * 3 / 5 * 1 / 4 * 0.1 / 3) ** 0.25
    assert bleu(words("the cat sat on the mat"), [words("the cat is on the mat")]) == pytest.approx(expected)
    assert expected == pytest.approx(0.2541, abs=1e-4)


def test_bleu_clips_by_the_best_reference_and_penalises_short_chains():
    # "the the the" against "the cat" and "the the dog": the best reference allows "the" twice -> 2/3 unigrams;
    # bigram "the the" (x2) is matched once by the second reference -> 1/2; no trigram match (0.1/1), no 4-gram
    # (0.1/1: a chain shorter than n gets denominator 1). Closest reference length: 2 and 3 are both 1 away from
    # 3 -> 3 (exact), no penalty.
    expected = (2 / 3 * 1 / 2 * 0.1 * 0.1) ** 0.25
    assert bleu(words("the the the"), [words("the cat"), words("the the dog")]) == pytest.approx(expected)
    # a 2-token chain against a 4-token reference: brevity penalty exp(1 - 4/2)
    short = bleu(words("a b"), [words("a b c d")])
    assert short == pytest.approx(math.exp(1 - 2) * (1 * 1 * 0.1 * 0.1) ** 0.25)
    assert bleu(words("x y"), [words("a b")]) == 0.0  # no unigram in common
    assert bleu(words("a b c d e"), [words("a b c d e")]) == pytest.approx(1.0)


def test_distinct_n_and_cross_prompt_overlap_by_hand():
    chains = [words("a b a b"), words("a b c")]
    assert distinct_n(chains, 1) == pytest.approx(3 / 7)  # {a, b, c} of 7 tokens
    assert distinct_n(chains, 2) == pytest.approx(3 / 5)  # {ab, ba, bc} of ab ba ab | ab bc
    assert math.isnan(distinct_n([words("a")], 2))
    # trigrams: x1 {abc, bcd}, y {bcd, cde}, x2 {zzz}: shared with another prompt 1/2, 1/2, 0
    overlap = cross_prompt_overlap([words("a b c d"), words("b c d e"), words("z z z")], ["x", "y", "x"])
    assert overlap == pytest.approx((1 / 2 + 1 / 2 + 0) / 3)
    assert math.isnan(cross_prompt_overlap([words("a b c")], ["x"]))  # one prompt: nothing to share with


def test_self_bleu_within_and_across_prompts_on_extreme_batches():
    template = words("first look at the grid then move the box up")
    # every prompt gets the same text: self-BLEU 1 within and across, every trigram shared
    same = text_template_metrics([template] * 6, ["p", "p", "q", "q", "r", "r"])
    assert same["self_bleu_within"] == pytest.approx(1.0) and same["self_bleu_across"] == pytest.approx(1.0)
    assert same["cross_prompt_overlap"] == 1.0
    assert same["distinct_1"] == pytest.approx(9 / 60)  # 9 distinct words ("the" twice) of 6 x 10
    # each prompt has its own vocabulary: within 1, across 0, nothing shared
    specific = text_template_metrics(
        [words("a b c d e"), words("a b c d e"), words("f g h i j"), words("f g h i j")], ["p", "p", "q", "q"]
    )
    assert specific["self_bleu_within"] == pytest.approx(1.0)
    assert specific["self_bleu_across"] == 0.0 and specific["cross_prompt_overlap"] == 0.0
    # groups of one chain have no within-group reference; empty chains are dropped
    lone = text_template_metrics([words("a b"), [], words("a c")], ["p", "q", "r"])
    assert math.isnan(lone["self_bleu_within"]) and lone["num_chains"] == 2


def random_batch(seed, prompts=5, per_prompt=4, vocab=8):
    rng = random.Random(seed)
    chains, groups = [], []
    for p in range(prompts):
        for _ in range(per_prompt):
            chains.append([rng.randrange(vocab) for _ in range(rng.randint(1, 12))])
            groups.append(p)
    return chains, groups


@pytest.mark.parametrize("seed", range(5))
def test_bleu_and_self_bleu_match_nltk(seed):
    nltk_bleu = pytest.importorskip("nltk.translate.bleu_score")
    smoothing = nltk_bleu.SmoothingFunction().method1

    def reference(hypothesis, references):
        return nltk_bleu.sentence_bleu(references, hypothesis, smoothing_function=smoothing)

    chains, groups = random_batch(seed)
    for within in (True, False):
        scores = []
        for i, (chain, group) in enumerate(zip(chains, groups, strict=True)):
            refs = [
                c for j, (c, g) in enumerate(zip(chains, groups, strict=True)) if j != i and (g == group) == within
            ]
            scores.append(reference(chain, refs))
            assert bleu(chain, refs) == pytest.approx(scores[-1], abs=1e-12)
        assert self_bleu(chains, groups, within=within) == pytest.approx(sum(scores) / len(scores), abs=1e-12)
