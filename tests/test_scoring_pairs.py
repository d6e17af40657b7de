"""Turn boundaries, reasoning extraction and pair sampling (no model involved)."""

from collections import Counter

import pytest
import torch

from trl_ragen2.collapse.scoring import (
    LocalRollouts,
    PairBuilder,
    RowInfo,
    ThinkTagExtractor,
    chains_to_score,
    completion_lengths,
    expand_columns,
    negatives_matrix,
    sample_first_turn,
    sample_trajectory,
    scope_generator,
    select_negatives,
    turn_spans,
    unique_contexts,
)


@pytest.mark.parametrize(
    ("text", "reasoning"),
    [
        ("<think> plan A </think> <answer>Up</answer>", " plan A "),
        (" plan A </think> <answer>Up</answer>", " plan A "),  # generation primed with <think>: no opening tag
        ("<think> cut off mid-thought", " cut off mid-thought"),  # truncated before </think>
        ("no tags at all", "no tags at all"),  # the whole turn is the reasoning
        ("pre <think>one</think> <think>two</think>", "one"),  # first block only
        ("<think></think><answer>Up</answer>", ""),
    ],
)
def test_think_tag_extraction(text, reasoning):
    assert ThinkTagExtractor()(text) == reasoning


def test_extractor_rejects_empty_tags():
    with pytest.raises(ValueError, match="non-empty"):
        ThinkTagExtractor(open_tag="")


PAD = 0


def test_turn_spans_from_rollout_rows_tool_mask_and_single_turn():
    completion_ids = torch.tensor([[5, 6, 7, 8, 9, PAD], [5, 6, 7, 8, PAD, PAD], [5, 6, 7, PAD, PAD, PAD]])
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]])
    rows = [{"turn_spans": [(0, 2), [3, 9]]}, {}, {}]  # row 0: rollout spans (the second is clipped to the length)
    assert turn_spans(rows, completion_ids, completion_mask, pad_token_id=PAD) == [
        [(0, 2), (3, 5)],
        [(0, 4)],
        [(0, 3)],
    ]
    # TRL tool rollouts: runs of 1s in tool_mask are assistant turns; tool_mask is right-padded with 1s
    tool_mask = torch.tensor([[1, 0, 0, 1, 1, 1], [1, 1, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]])
    assert turn_spans(None, completion_ids, completion_mask, tool_mask, PAD) == [
        [(0, 1), (3, 5)],
        [(0, 2), (3, 4)],
        [(1, 3)],
    ]


def test_truncated_rows_fall_back_to_the_non_pad_length():
    # mask_truncated_completions zeroes the whole mask of a row that never emitted EOS
    completion_ids = torch.tensor([[5, 6, 7, PAD], [5, PAD, PAD, PAD]])
    completion_mask = torch.tensor([[0, 0, 0, 0], [1, 1, 0, 0]])
    assert completion_lengths(completion_ids, completion_mask, PAD) == [3, 2]
    assert turn_spans(None, completion_ids, completion_mask, None, PAD) == [[(0, 3)], [(0, 2)]]


def test_malformed_turn_spans_are_reported():
    ids, mask = torch.ones(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="pairs"):
        turn_spans([{"turn_spans": [(0, 1, 2)]}], ids, mask)
    with pytest.raises(ValueError, match="negative start"):
        turn_spans([{"turn_spans": [(-1, 2)]}], ids, mask)


def test_pair_builder_contexts_and_reasoning(tiny_tokenizer):
    builder = PairBuilder(tiny_tokenizer)
    think = tiny_tokenizer("<think>", add_special_tokens=False)["input_ids"]
    prompt = tiny_tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert builder.context(prompt) == prompt + think  # RAGEN's X ends with a literal <think>
    assert builder.context(prompt + think) == prompt + think  # already primed: unchanged
    turn = tiny_tokenizer("<think> go left </think><answer>Left</answer><|im_end|>", add_special_tokens=False)
    assert tiny_tokenizer.decode(builder.reasoning(turn["input_ids"])) == " go left "
    empty = tiny_tokenizer("<think>  </think><answer>Left</answer>", add_special_tokens=False)["input_ids"]
    assert builder.reasoning(empty) == []  # whitespace-only reasoning is dropped
    plain = PairBuilder(tiny_tokenizer, extractor=str.upper)  # any callable; no open_tag -> contexts untouched
    assert plain.context(prompt) == prompt
    assert tiny_tokenizer.decode(plain.reasoning(tiny_tokenizer("abc")["input_ids"])) == "ABC"


def test_local_rollouts_unpad_both_sides(tiny_tokenizer):
    batch = {
        "prompt_ids": torch.tensor([[PAD, PAD, 11, 12], [21, 22, 23, 24]]),  # left-padded
        "prompt_mask": torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]),
        "completion_ids": torch.tensor([[31, 32, PAD], [41, 42, 43]]),  # right-padded
        "completion_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
    }
    local = LocalRollouts.from_batch(batch, None, PAD)
    assert local.prompts == [[11, 12], [21, 22, 23, 24]]
    assert local.completions == [[31, 32], [41, 42, 43]]
    assert local.infos() == [RowInfo((11, 12), 1), RowInfo((21, 22, 23, 24), 1)]
    with pytest.raises(ValueError, match="rows has 1 entries"):
        LocalRollouts.from_batch(batch, [{}], PAD)
    with pytest.raises(ValueError, match="lacks"):
        LocalRollouts.from_batch({"prompt_ids": batch["prompt_ids"]}, None, PAD)


def infos(num_prompts=4, group=4, turns=3):
    return [RowInfo((100 + p,), turns) for p in range(num_prompts) for _ in range(group)]


def test_first_turn_sampling_is_without_replacement_and_seeded():
    rows = infos()
    draws, prompts, without_turns = sample_first_turn(rows, 10, scope_generator(0, 1, "first_turn"))
    assert len({d.row for d in draws}) == 10 and without_turns == 0
    assert prompts == [(100,), (101,), (102,), (103,)]  # the distinct prompts of the batch are the columns
    assert all(prompts[d.column] == rows[d.row].prompt and d.turn == 0 for d in draws)
    again, _, _ = sample_first_turn(rows, 10, scope_generator(0, 1, "first_turn"))
    assert again == draws  # every process draws the same pairs
    other, _, _ = sample_first_turn(rows, 10, scope_generator(0, 6, "first_turn"))
    assert other != draws
    capped, _, _ = sample_first_turn(rows, 100, scope_generator(0, 1, "first_turn"))
    assert sorted(d.row for d in capped) == list(range(16))


def test_rows_without_turns_are_dropped():
    rows = [RowInfo((1,), 0), RowInfo((2,), 2)]
    draws, _, without_turns = sample_first_turn(rows, 2, scope_generator(0, 1, "first_turn"))
    assert [d.row for d in draws] == [1] and without_turns == 1
    draws, without_turns = sample_trajectory(rows, 50, scope_generator(0, 1, "trajectory"))
    assert without_turns + len(draws) == 50 and all(d.row == 1 for d in draws)


def test_trajectory_sampling_is_row_then_turn_uniform():
    rows = [RowInfo((1,), 1), RowInfo((2,), 4)]  # trajectory-uniform: each row 1/2, then its turns uniformly
    draws, _ = sample_trajectory(rows, 4000, scope_generator(3, 1, "trajectory"))
    counts = Counter((d.row, d.turn) for d in draws)
    assert counts[(0, 0)] / 4000 == pytest.approx(0.5, abs=0.04)
    for turn in range(4):
        assert counts[(1, turn)] / 4000 == pytest.approx(0.125, abs=0.03)
    assert [d.index for d in draws] == list(range(4000))


def test_unique_contexts_and_column_expansion():
    contexts, index = unique_contexts([[1, 2], [3], [1, 2], [4]])
    assert contexts == [[1, 2], [3], [4]] and index == [0, 1, 0, 2]
    scores = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])  # two chains x three distinct contexts
    logp, target, same = expand_columns(scores, own_column=[2, 1], column_context=index)
    assert logp.tolist() == [[-1.0, -2.0, -1.0, -3.0], [-4.0, -5.0, -4.0, -6.0]]
    assert target.tolist() == [2, 1]
    assert same.tolist() == [[True, False, True, False], [False, True, False, False]]


def test_negatives_random_and_similar():
    contexts = [[1, 2, 3], [1, 2, 4], [7, 8, 9], [1, 2, 3, 5]]
    random = select_negatives([0, 2], contexts, 2, "random", seed=0, keys=[10, 11])
    assert all(len(negs) == 2 and own not in negs for own, negs in zip([0, 2], random, strict=True))
    assert random == select_negatives([0, 2], contexts, 2, "random", seed=0, keys=[10, 11])  # keyed, reproducible
    similar = select_negatives([0], contexts, 2, "similar", seed=0, keys=[0])
    assert similar == [[3, 1]]  # Jaccard 3/4 and 2/4, far above context 2 (0)
    capped = select_negatives([0], contexts, 10, "random", seed=0, keys=[0])
    assert sorted(capped[0]) == [1, 2, 3]
    scores = torch.tensor([[-1.0, -2.0, -3.0, -4.0]])
    logp, target = negatives_matrix(scores, [0], similar)
    assert logp.tolist() == [[-1.0, -4.0, -2.0]] and target.tolist() == [0]
    with pytest.raises(ValueError, match="negative sampling"):
        select_negatives([0], contexts, 1, "hard", seed=0, keys=[0])


def test_chains_to_score_is_a_uniform_subset():
    keys = [3, 7, 8, 12, 20, 31]
    assert chains_to_score(keys, None, torch.Generator()) == set(keys)
    assert chains_to_score(keys, 6, torch.Generator()) == set(keys)
    counts, subsets = Counter(), Counter()
    trials = 3000
    for seed in range(trials):
        chosen = chains_to_score(keys, 3, torch.Generator().manual_seed(seed))
        assert len(chosen) == 3 and chosen <= set(keys)
        counts.update(chosen)
        subsets[frozenset(chosen)] += 1
    # every key is in half the subsets (binomial sd sqrt(3000 / 4) = 27), and all 20 subsets occur about equally
    assert all(abs(counts[key] - trials / 2) < 4 * 27 for key in keys)
    assert len(subsets) == 20 and max(subsets.values()) < 2 * trials / 20


def test_proxies_over_every_subset_of_chains_average_to_the_full_batch():
    """Retrieval-Acc, MI-Est, H(Z|X) and H(Z) are means over chains of terms of the chain's whole row, so over all
    equally likely subsets of rows (every column kept) they average to the full matrix's values."""
    import itertools

    from trl_ragen2.collapse.mi import mi_metrics

    generator = torch.Generator().manual_seed(0)
    logp = -torch.rand(6, 6, generator=generator, dtype=torch.float64) * 20  # (chains, columns)
    lengths = torch.tensor([3.0, 5, 4, 7, 2, 6], dtype=torch.float64)
    target = torch.tensor([0, 1, 2, 3, 4, 5])
    full = mi_metrics(logp, lengths, target)
    subsets = [list(rows) for rows in itertools.combinations(range(6), 3)]
    for key in ("retrieval_acc", "mi_est", "mi_seq_est", "cond_entropy", "marginal_entropy", "retrieval_chance"):
        average = sum(mi_metrics(logp[rows], lengths[rows], target[rows])[key] for rows in subsets) / len(subsets)
        assert average == pytest.approx(full[key], abs=1e-12), key
