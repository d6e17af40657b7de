"""GAE over model tokens, reward placement, whitening and the clipped value loss, against naive reference loops."""

import math

import pytest
import torch

from trl_ragen2.ppo.gae import (
    clipped_value_loss,
    explained_variance,
    kl_reward_penalty,
    last_model_token,
    masked_gae,
    masked_moments,
    moments_to_mean_var,
    place_rewards,
    turn_end_positions,
    whiten,
)


def reference_gae(rewards, values, mask, gamma, lam):
    """Textbook GAE, written per row: collect the model tokens, run the recursion on that list, scatter back."""
    advantages = torch.zeros_like(rewards)
    returns = torch.zeros_like(rewards)
    for row in range(rewards.size(0)):
        positions = [t for t in range(rewards.size(1)) if mask[row, t]]
        r = [float(rewards[row, t]) for t in positions]
        v = [float(values[row, t]) for t in positions]
        running = 0.0
        for k in reversed(range(len(positions))):
            next_value = v[k + 1] if k + 1 < len(positions) else 0.0
            delta = r[k] + gamma * next_value - v[k]
            running = delta + gamma * lam * running
            advantages[row, positions[k]] = running
            returns[row, positions[k]] = running + v[k]
    return advantages, returns


def multi_turn_batch():
    """Two rows of width 10.

    Row 0: turn 1 = tokens 0-2, feedback 3-5 (masked), turn 2 = tokens 6-7, then right padding 8-9.
    Row 1: one turn of 4 tokens, padding after. Rewards sit on model tokens; values are arbitrary, and deliberately
    nonzero on masked positions, which must be ignored.
    """
    mask = torch.tensor(
        [[1, 1, 1, 0, 0, 0, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]],
        dtype=torch.float32,
    )
    rewards = torch.zeros(2, 10)
    rewards[0, 2], rewards[0, 7], rewards[1, 3] = 0.5, 1.0, -1.0
    values = torch.linspace(-1.0, 2.0, 20).view(2, 10)
    return rewards, values, mask


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.9, 1.0), (1.0, 0.8), (0.99, 0.95), (0.5, 0.0), (0.0, 0.7)])
def test_gae_matches_the_reference_over_model_tokens(gamma, lam):
    rewards, values, mask = multi_turn_batch()
    advantages, returns = masked_gae(rewards, values, mask, gamma=gamma, lam=lam)
    expected_advantages, expected_returns = reference_gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(advantages, expected_advantages, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(returns, expected_returns, atol=1e-5, rtol=1e-5)
    assert torch.all(advantages[mask == 0] == 0) and torch.all(returns[mask == 0] == 0)


def test_feedback_tokens_pass_on_no_discount():
    # gamma = 0.5: the turn-1 token before the feedback block sees the turn-2 value discounted once, not 4 times.
    mask = torch.tensor([[1, 0, 0, 0, 1]], dtype=torch.float32)
    values = torch.tensor([[0.0, 9.0, 9.0, 9.0, 2.0]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    advantages, returns = masked_gae(rewards, values, mask, gamma=0.5, lam=1.0)
    # last token: A = 1 - 2 = -1; first: delta = 0 + 0.5 * 2 - 0 = 1, A = 1 + 0.5 * (-1) = 0.5
    torch.testing.assert_close(advantages, torch.tensor([[0.5, 0.0, 0.0, 0.0, -1.0]]))
    torch.testing.assert_close(returns, torch.tensor([[0.5, 0.0, 0.0, 0.0, 1.0]]))


def test_gamma_lambda_one_is_reward_to_go_minus_value():
    rewards, values, mask = multi_turn_batch()
    advantages, returns = masked_gae(rewards, values, mask)
    # row 0, first token: all of the row's rewards (0.5 + 1.0) minus its value
    assert advantages[0, 0].item() == pytest.approx(1.5 - values[0, 0].item())
    assert returns[0, 0].item() == pytest.approx(1.5)
    assert returns[0, 6].item() == pytest.approx(1.0)  # after the turn-1 reward has been paid
    assert returns[1, 0].item() == pytest.approx(-1.0)
    assert returns[0, 0].item() == 1.5, "return targets are exact: no value is added back and subtracted"


def test_rows_without_model_tokens_get_nothing():
    mask = torch.zeros(1, 4)
    advantages, returns = masked_gae(torch.ones(1, 4), torch.ones(1, 4), mask, gamma=0.9, lam=0.9)
    assert advantages.abs().sum() == 0 and returns.abs().sum() == 0
    assert last_model_token(mask).tolist() == [-1]
    assert place_rewards(mask, torch.tensor([3.0])).abs().sum() == 0


def test_trajectory_return_goes_on_the_last_model_token():
    _, _, mask = multi_turn_batch()
    rewards = place_rewards(mask, torch.tensor([2.0, -0.5]))
    expected = torch.zeros(2, 10)
    expected[0, 7], expected[1, 3] = 2.0, -0.5  # row 0 ends at 7: positions 8-9 are padding
    torch.testing.assert_close(rewards, expected)


def test_nan_returns_place_no_reward():
    _, _, mask = multi_turn_batch()
    rewards = place_rewards(mask, torch.tensor([float("nan"), 1.0]))
    assert rewards[0].abs().sum() == 0 and rewards[1, 3] == 1.0


def test_turn_rewards_at_turn_ends_and_the_remainder_at_the_end():
    _, _, mask = multi_turn_batch()
    # Row 0: turn spans (0, 6) -- model tokens 0-2 plus the feedback block -- and (6, 10).
    spans = [[(0, 6), (6, 10)], None]
    turn_rewards = [[0.25, 0.5], None]
    rewards = place_rewards(mask, torch.tensor([1.0, -0.5]), spans, turn_rewards)
    expected = torch.zeros(2, 10)
    expected[0, 2] = 0.25  # end of turn 1 is its last *model* token, not the span end
    expected[0, 7] = 0.5 + (1.0 - 0.75)  # turn 2 reward + the part of the return no turn paid (e.g. a penalty)
    expected[1, 3] = -0.5
    torch.testing.assert_close(rewards, expected)
    assert rewards.sum(dim=1).tolist() == pytest.approx([1.0, -0.5])  # the objective is unchanged


def test_turn_truncated_away_pays_its_reward_at_the_end():
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    assert turn_end_positions(mask[0], [(0, 2), (3, 9)]) == [1, None]
    rewards = place_rewards(mask, torch.tensor([1.0]), [[(0, 2), (3, 9)]], [[0.4, 0.6]])
    torch.testing.assert_close(rewards, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))


def test_mismatched_turns_raise_a_clear_error():
    mask = torch.ones(1, 3)
    with pytest.raises(ValueError, match="2 turn_spans but 1 turn_rewards"):
        place_rewards(mask, torch.tensor([1.0]), [[(0, 1), (1, 3)]], [[1.0]])


def test_kl_in_reward_with_turns_matches_the_reference():
    rewards, values, mask = multi_turn_batch()
    logps = -torch.rand(2, 10, generator=torch.Generator().manual_seed(0))
    ref_logps = -torch.rand(2, 10, generator=torch.Generator().manual_seed(1))
    beta = 0.1
    token_rewards = place_rewards(mask, torch.tensor([1.0, 0.0]), [[(0, 3), (3, 10)], None], [[0.5, 0.5], None])
    token_rewards = token_rewards + kl_reward_penalty(logps, ref_logps, mask, beta)
    # naive: every model token pays -beta * (logp - ref_logp); masked tokens pay nothing
    for row in range(2):
        for t in range(10):
            penalty = -beta * float(logps[row, t] - ref_logps[row, t]) if mask[row, t] else 0.0
            turn_reward = {(0, 2): 0.5, (0, 7): 0.5}.get((row, t), 0.0)
            assert float(token_rewards[row, t]) == pytest.approx(penalty + turn_reward, abs=1e-6)
    advantages, returns = masked_gae(token_rewards, values, mask, gamma=0.95, lam=0.9)
    expected_advantages, expected_returns = reference_gae(token_rewards, values, mask, 0.95, 0.9)
    torch.testing.assert_close(advantages, expected_advantages, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(returns, expected_returns, atol=1e-5, rtol=1e-5)


def test_whitening_uses_model_tokens_only():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 5.0, -7.0, -7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    mean, variance = moments_to_mean_var(masked_moments(x, mask))
    kept = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    assert mean == pytest.approx(3.0) and variance == pytest.approx(kept.var().item())  # unbiased
    white = whiten(x, mask, mean, variance)
    assert white[mask.bool()].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert white[mask.bool()].std().item() == pytest.approx(1.0, abs=1e-4)
    assert torch.all(white[mask == 0] == 0)


def test_moments_sum_across_processes():
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(3))
    mask = (torch.rand(6, 5, generator=torch.Generator().manual_seed(4)) > 0.3).float()
    split = masked_moments(x[:2], mask[:2]) + masked_moments(x[2:], mask[2:])  # two "processes", summed
    mean, variance = moments_to_mean_var(split)
    assert mean == pytest.approx(x[mask.bool()].mean().item(), abs=1e-6)
    assert variance == pytest.approx(x[mask.bool()].var().item(), abs=1e-6)
    assert all(math.isnan(v) for v in moments_to_mean_var(masked_moments(x, torch.zeros_like(mask))))


def test_clipped_value_loss():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0, -1.0, 5.0]])
    new = torch.tensor([[0.1, 2.0, 0.5, 9.0]])
    loss, clipped = clipped_value_loss(new, old, returns, mask, cliprange_value=0.2)
    # token 0 moves less than 0.2: both terms are (0.1 - 1)^2. Tokens 1 and 2 move past the range, V_clip = 0.2:
    # (0.2 - 1)^2 = 0.64 < (2 - 1)^2 = 1 and (0.2 + 1)^2 = 1.44 < (0.5 + 1)^2 = 2.25, so the unclipped term wins.
    torch.testing.assert_close(loss, 0.5 * torch.tensor([[0.81, 1.0, 2.25, 0.0]]))
    assert clipped.tolist() == [[0.0, 0.0, 0.0, 0.0]]
    # moving away from the return: the unclipped error is the larger one and keeps its gradient
    new = torch.tensor([[-0.5, 0.0, 0.0, 0.0]], requires_grad=True)
    loss, clipped = clipped_value_loss(new, old, returns, mask, cliprange_value=0.2)
    assert loss[0, 0].item() == pytest.approx(0.5 * 2.25) and clipped[0, 0] == 0.0
    new = torch.tensor([[0.5, 0.0, 0.0, 0.0]], requires_grad=True)
    old_far = torch.tensor([[2.0, 0.0, 0.0, 0.0]])
    loss, clipped = clipped_value_loss(new, old_far, returns, mask, cliprange_value=0.2)
    # V_clip = 2.0 - 0.2 = 1.8: (1.8 - 1)^2 = 0.64 > (0.5 - 1)^2 = 0.25 -> clipped, no gradient through V
    assert loss[0, 0].item() == pytest.approx(0.5 * 0.64) and clipped[0, 0] == 1.0
    loss[0, 0].backward()
    assert new.grad[0, 0] == 0.0
    unclipped, none_clipped = clipped_value_loss(new.detach(), old_far, returns, mask, cliprange_value=None)
    assert unclipped[0, 0].item() == pytest.approx(0.5 * 0.25) and none_clipped.sum() == 0


def test_explained_variance():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    returns = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.zeros_like(returns), returns, mask) == pytest.approx(0.0)
    assert math.isnan(explained_variance(returns, torch.ones_like(returns), mask))  # constant target
    rounded = torch.tensor([[-0.5, -0.49999997, -0.5, 0.0]])  # constant up to float32 rounding
    assert math.isnan(explained_variance(torch.zeros_like(rounded), rounded, mask))


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="one \\(B, T\\) shape"):
        masked_gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="returns \\(B,\\)"):
        place_rewards(torch.ones(2, 3), torch.zeros(3))
