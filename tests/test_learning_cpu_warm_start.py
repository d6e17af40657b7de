"""`benchmarks/learning_cpu.py`'s warm start: the solver's moves against a brute-force search over move sequences,
its reasoning text worked out by hand, and the padding-free fine-tuning step against transformers' own loss on the
padded batch."""

import copy
import itertools
from types import SimpleNamespace

import pytest
import torch

from trl_ragen2_envs.frozen_lake import FrozenLakeEnv, FrozenLakeMap

from .benchmark_scripts import load_benchmark


OFFSETS = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}


@pytest.fixture(scope="module")
def benchmark():
    return load_benchmark("learning_cpu")


def walk(lake: FrozenLakeMap, moves) -> tuple[int, int] | None:
    """Where `moves` lead (a move off the edge stays put); None once a hole is entered."""
    row, col = lake.start
    for move in moves:
        dr, dc = OFFSETS[move]
        row, col = min(max(row + dr, 0), lake.size - 1), min(max(col + dc, 0), lake.size - 1)
        if (row, col) in lake.holes:
            return None
    return row, col


def fewest_moves(lake: FrozenLakeMap, limit: int = 8) -> int | None:
    """The fewest moves from start to goal, by trying every move sequence of each length in turn."""
    for length in range(1, limit + 1):
        if any(walk(lake, moves) == lake.goal for moves in itertools.product(OFFSETS, repeat=length)):
            return length
    return None


def test_solver_moves_take_a_shortest_hole_free_path_on_random_lakes(benchmark):
    env = FrozenLakeEnv()
    checked = 0
    for seed in range(40):
        env.reset(seed=seed)
        lake = env.lake
        fewest = fewest_moves(lake)
        if fewest is None:  # longer than the brute force reaches
            continue
        moves = benchmark.solver_moves(lake, lake.start, max_moves=100)
        assert len(moves) == fewest, (seed, lake.to_rows(), moves)
        assert walk(lake, moves) == lake.goal
        assert all(walk(lake, moves[:k]) is not None for k in range(len(moves)))
        # the first k moves are the start of the same path
        assert benchmark.solver_moves(lake, lake.start, max_moves=2) == moves[:2]
        checked += 1
    assert checked >= 35


def test_solver_moves_go_vertical_first_where_both_are_shortest_and_detour_round_holes(benchmark):
    open_lake = FrozenLakeMap.from_rows(["SFFF", "FFFF", "FFGF", "FFFF"])
    assert benchmark.solver_moves(open_lake, open_lake.start, 10) == ["Down", "Down", "Right", "Right"]
    # (1, 0) is a hole: Right first; then Down is shortest again
    blocked = FrozenLakeMap.from_rows(["SFFF", "HFFF", "FFGF", "FFFF"])
    assert benchmark.solver_moves(blocked, blocked.start, 10) == ["Right", "Down", "Down", "Right"]
    # the only way round the wall of holes is a detour through column 3
    detour = FrozenLakeMap.from_rows(["SFFF", "HHHF", "GFFF", "FFFF"])
    assert benchmark.solver_moves(detour, detour.start, 10) == ["Right"] * 3 + ["Down"] * 2 + ["Left"] * 3
    assert benchmark.solver_moves(detour, detour.goal, 10) == []


def test_comparison_and_position_replies_state_the_compared_coordinates(benchmark):
    env = FrozenLakeEnv()
    env.load_map(FrozenLakeMap.from_rows(["FFFS", "FFFF", "FFHF", "FGFF"]))  # player (0, 3), goal (3, 1)
    episode = SimpleNamespace(env=env)
    # Down to (1, 3), Down to (2, 3); then Left would be (2, 2), a hole, so the path turns at row 3
    assert benchmark.comparison_reply(episode, 2) == (
        "Row 0 to 3: down. Column 3 to 1: left.</think><answer>Down || Down</answer>"
    )
    assert benchmark.position_reply(episode, 3) == (
        "I am at (0, 3), the goal is at (3, 1).</think><answer>Down || Down || Down</answer>"
    )
    env.step("Down"), env.step("Down"), env.step("Down")
    assert benchmark.comparison_reply(episode, 2) == (
        "Row 3 to 3: same. Column 3 to 1: left.</think><answer>Left || Left</answer>"
    )


def test_warm_start_step_equals_the_padded_batch_loss_and_its_adamw_step(benchmark, tiny_tokenizer):
    from trl_ragen2.models.tiny import make_tiny_model

    config = benchmark.rollout_config(SimpleNamespace(max_turns=3, max_tokens_per_turn=40))
    episodes = benchmark.play(None, tiny_tokenizer, benchmark.specs("train", 3), config,
                              policy=lambda episode: benchmark.comparison_reply(episode, 2))  # fmt: skip
    assert len({len(e.prompt_ids) + len(e.completion_ids) for e in episodes}) > 1  # the reference pads
    model = make_tiny_model(tiny_tokenizer, seed=0)
    reference = copy.deepcopy(model)

    # reference: transformers' loss on the right-padded batch, labels -100 outside the assistant tokens
    rows = [e.prompt_ids + e.completion_ids for e in episodes]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), tiny_tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
    for r, (ids, episode) in enumerate(zip(rows, episodes, strict=True)):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        attention_mask[r, : len(ids)] = 1
        mask = torch.tensor([0] * len(episode.prompt_ids) + episode.env_mask, dtype=torch.bool)
        labels[r, : len(ids)] = torch.where(mask, torch.tensor(ids), -100)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3, weight_decay=0.0)
    reference.train()
    expected = reference(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    expected.backward()
    optimizer.step()

    losses = benchmark.warm_start(model, episodes, epochs=1, lr=1e-3, batch_size=len(episodes), seed=0)
    assert losses == [pytest.approx(expected.item(), rel=1e-5)]
    for (name, trained), (_, wanted) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        torch.testing.assert_close(trained, wanted, rtol=1e-5, atol=1e-6, msg=name)
