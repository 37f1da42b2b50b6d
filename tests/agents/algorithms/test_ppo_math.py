"""PPO math against hand-computed cases: GAE, whitening, losses, KL penalty, KL controllers."""

from __future__ import annotations

import math

import pytest
import torch

from cory_agents.algorithms.advantages import explained_variance, gae, gae_over_turns, whiten
from cory_agents.algorithms.kl import AdaptiveKLController, FixedKLController, kl_per_token, token_rewards
from cory_agents.algorithms.losses import policy_loss, value_loss

D = torch.float64


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=D)


# ---------------------------------------------------------------- GAE


def test_gae_single_row_by_hand():
    # gamma=1, lam=0.95, V after the last token = 0:
    # t=2: delta = 1.0 + 0 - 0.4 = 0.6              A2 = 0.6
    # t=1: delta = -0.2 + 0.4 - 0.2 = 0.0           A1 = 0.0 + 0.95 * 0.6 = 0.57
    # t=0: delta = 0.1 + 0.2 - 0.5 = -0.2           A0 = -0.2 + 0.95 * 0.57 = 0.3415
    rewards, values = t([[0.1, -0.2, 1.0]]), t([[0.5, 0.2, 0.4]])
    adv, ret = gae(rewards, values, torch.ones(1, 3), gamma=1.0, lam=0.95)
    torch.testing.assert_close(adv, t([[0.3415, 0.57, 0.6]]))
    torch.testing.assert_close(ret, t([[0.8415, 0.77, 1.0]]))


def test_gae_batch_of_different_lengths_by_hand():
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    rewards = t([[0.1, -0.2, 1.0], [2.0, 0.0, 0.0]])
    values = t([[0.5, 0.2, 0.4], [0.5, 0.0, 0.0]])
    adv, ret = gae(rewards, values, mask)
    # Row 1 has one real token: A = 2.0 + 0 - 0.5 = 1.5, R = 2.0; padding gets 0.
    torch.testing.assert_close(adv, t([[0.3415, 0.57, 0.6], [1.5, 0.0, 0.0]]))
    torch.testing.assert_close(ret, t([[0.8415, 0.77, 1.0], [2.0, 0.0, 0.0]]))


def reference_gae(rewards, values, lengths, gamma, lam):
    """An independent per-row python loop over the real tokens only."""
    B, T = len(rewards), len(rewards[0])
    adv = [[0.0] * T for _ in range(B)]
    for b in range(B):
        running = 0.0
        for i in reversed(range(lengths[b])):
            next_value = values[b][i + 1] if i + 1 < lengths[b] else 0.0
            running = rewards[b][i] + gamma * next_value - values[b][i] + gamma * lam * running
            adv[b][i] = running
    ret = [[adv[b][i] + (values[b][i] if i < lengths[b] else 0.0) for i in range(T)] for b in range(B)]
    return t(adv), t(ret)


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.8)])
def test_gae_matches_loop_and_padding_does_not_leak(gamma, lam):
    g = torch.Generator().manual_seed(0)
    lengths = [5, 2, 4, 1]
    mask = torch.tensor([[1] * n + [0] * (5 - n) for n in lengths])
    rewards = torch.randn(4, 5, generator=g, dtype=D)
    values = torch.randn(4, 5, generator=g, dtype=D)
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    exp_adv, exp_ret = reference_gae(rewards.tolist(), values.tolist(), lengths, gamma, lam)
    torch.testing.assert_close(adv, exp_adv)
    torch.testing.assert_close(ret, exp_ret)

    pad = mask == 0
    adv2, ret2 = gae(rewards.masked_fill(pad, 100.0), values.masked_fill(pad, -50.0), mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(adv2, adv)
    torch.testing.assert_close(ret2, ret)
    assert (adv[pad] == 0).all() and (ret[pad] == 0).all()


def test_gae_over_turns_by_hand():
    # One conversation, two turns of the agent: turn 0 has 2 tokens, turn 1 one (then padding).
    # gamma=1, lam=0.5; the trajectory is the agent's 3 tokens: values 0.5, 0.2 | 0.4, rewards 0, 0.1 | 1.0.
    # t=2 (turn 1): delta = 1.0 + 0 - 0.4 = 0.6                      A = 0.6
    # t=1 (end of turn 0): delta = 0.1 + 0.4 - 0.2 = 0.3 (bootstraps from turn 1's first token)
    #                       A = 0.3 + 0.5 * 0.6 = 0.6
    # t=0: delta = 0 + 0.2 - 0.5 = -0.3                               A = -0.3 + 0.5 * 0.6 = 0.0
    rewards, values = t([[0.0, 0.1], [1.0, 0.0]]), t([[0.5, 0.2], [0.4, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    adv, ret = gae_over_turns(rewards, values, mask, turns=2, gamma=1.0, lam=0.5)
    torch.testing.assert_close(adv, t([[0.0, 0.6], [0.6, 0.0]]))
    torch.testing.assert_close(ret, t([[0.5, 0.8], [1.0, 0.0]]))
    # Each turn alone (the one-turn GAE) would not bootstrap: turn 0's last token would see V = 0.
    alone, _ = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    assert alone[0, 1] != adv[0, 1]


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.8)])
def test_gae_over_turns_is_gae_of_each_conversations_concatenated_turns(gamma, lam):
    g = torch.Generator().manual_seed(1)
    turns, B, T = 3, 4, 5
    lengths = torch.randint(1, T + 1, (turns * B,), generator=g).tolist()
    mask = torch.tensor([[1] * n + [0] * (T - n) for n in lengths])
    rewards = torch.randn(turns * B, T, generator=g, dtype=D)
    values = torch.randn(turns * B, T, generator=g, dtype=D)
    adv, ret = gae_over_turns(rewards, values, mask, turns, gamma=gamma, lam=lam)
    for b in range(B):  # the real tokens of conversation b's turns, in order, as one row of the one-turn GAE
        rows = [r * B + b for r in range(turns)]
        real = [(row, i) for row in rows for i in range(lengths[row])]
        r = t([[rewards[row, i].item() for row, i in real]])
        v = t([[values[row, i].item() for row, i in real]])
        exp_adv, exp_ret = reference_gae(r.tolist(), v.tolist(), [len(real)], gamma, lam)
        torch.testing.assert_close(t([[adv[row, i].item() for row, i in real]]), exp_adv)
        torch.testing.assert_close(t([[ret[row, i].item() for row, i in real]]), exp_ret)
    assert (adv[mask == 0] == 0).all() and (ret[mask == 0] == 0).all()
    one, one_ret = gae_over_turns(rewards[:B], values[:B], mask[:B], 1, gamma=gamma, lam=lam)
    two, two_ret = gae(rewards[:B], values[:B], mask[:B], gamma=gamma, lam=lam)
    torch.testing.assert_close(one, two)
    torch.testing.assert_close(one_ret, two_ret)


# ---------------------------------------------------------------- whitening


def test_whiten_by_hand():
    # [1, 2, 3]: mean 2, unbiased var 1 -> [-1, 0, 1]; the padded 99 is ignored and zeroed.
    x, mask = t([[1.0, 2.0, 3.0, 99.0]]), torch.tensor([[1, 1, 1, 0]])
    torch.testing.assert_close(whiten(x, mask), t([[-1.0, 0.0, 1.0, 0.0]]), atol=1e-6, rtol=0)
    # shift_mean=False keeps the mean: (x - 2) / 1 + 2.
    torch.testing.assert_close(whiten(x, mask, shift_mean=False), t([[1.0, 2.0, 3.0, 0.0]]), atol=1e-6, rtol=0)


def test_whiten_uses_masked_tokens_only():
    g = torch.Generator().manual_seed(1)
    x = 3.0 + 5.0 * torch.randn(3, 6, generator=g, dtype=D)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]])
    w = whiten(x, mask)
    real = w[mask == 1]
    assert abs(real.mean().item()) < 1e-6
    assert abs(real.std(correction=1).item() - 1.0) < 1e-6
    assert (w[mask == 0] == 0).all()
    torch.testing.assert_close(whiten(x.masked_fill(mask == 0, 1e6), mask), w)


def test_whiten_needs_two_tokens():
    with pytest.raises(ValueError):
        whiten(t([[1.0, 2.0]]), torch.tensor([[1, 0]]))


def test_explained_variance_by_hand():
    # returns [1, 2, 3, 5] (unbiased var 35/12), errors [0, 0, 0, 1] (var 1/4): 1 - 3/35; the padding is ignored.
    values, returns = t([[1.0, 2.0, 3.0, 4.0, 7.0]]), t([[1.0, 2.0, 3.0, 5.0, -9.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    torch.testing.assert_close(explained_variance(values, returns, mask), t(1 - 3 / 35), atol=1e-6, rtol=0)
    assert explained_variance(returns, returns, mask) == 1.0  # perfect predictions
    assert explained_variance(torch.full_like(returns, 2.75), returns, mask) == 0.0  # the returns' mean


# ---------------------------------------------------------------- PPO losses


def test_policy_loss_by_hand():
    # (ratio, advantage) -> loss term, with clip_range 0.2:
    # (1.1, +2): inside the range          -> -2.2          unclipped
    # (1.5, +2): max(-3.0, -2 * 1.2 = -2.4) -> -2.4          clipped
    # (1.5, -2): max(3.0, 2 * 1.2 = 2.4)    -> 3.0           unclipped
    # (0.5, -2): max(1.0, 2 * 0.8 = 1.6)    -> 1.6           clipped
    # (0.5, +2): max(-1.0, -2 * 0.8 = -1.6) -> -1.0          unclipped
    # a 6th, padded token (ratio 3, A = 100) must not count.
    ratios = [1.1, 1.5, 1.5, 0.5, 0.5, 3.0]
    old = t([[0.3, -1.0, -2.0, -0.5, -3.0, -1.0]])
    logprobs = (old + t([[math.log(r) for r in ratios]])).requires_grad_()
    adv = t([[2.0, 2.0, -2.0, -2.0, 2.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    loss, stats = policy_loss(logprobs, old, adv, mask, clip_range=0.2)
    assert loss.item() == pytest.approx((-2.2 - 2.4 + 3.0 + 1.6 - 1.0) / 5)
    assert stats["clipfrac"].item() == pytest.approx(2 / 5)
    assert stats["ratio_mean"].item() == pytest.approx((1.1 + 1.5 + 1.5 + 0.5 + 0.5) / 5)
    assert stats["approx_kl"].item() == pytest.approx(0.5 * sum(math.log(r) ** 2 for r in ratios[:5]) / 5)
    # Gradient flows only through unclipped real tokens: d(-A * ratio)/d logp = -A * ratio / 5.
    loss.backward()
    expected_grad = [-2.0 * 1.1 / 5, 0.0, 2.0 * 1.5 / 5, 0.0, -2.0 * 0.5 / 5, 0.0]
    torch.testing.assert_close(logprobs.grad, t([expected_grad]))


def test_policy_loss_on_policy_is_minus_mean_advantage():
    logprobs, adv = t([[-1.0, -2.0, -0.5]]), t([[1.0, -3.0, 0.5]])
    loss, stats = policy_loss(logprobs, logprobs.clone(), adv, torch.ones(1, 3))
    assert loss.item() == pytest.approx(-(1.0 - 3.0 + 0.5) / 3)
    assert stats["clipfrac"].item() == 0 and stats["approx_kl"].item() == 0
    assert stats["ratio_mean"].item() == pytest.approx(1.0)


def test_value_loss_by_hand():
    # clip_range_value 0.2:
    # v=0.5, old=0.0, R=1.0: (0.5-1)^2 = 0.25 vs (0.2-1)^2 = 0.64   -> 0.64 clipped
    # v=0.5, old=0.0, R=0.0: 0.25 vs 0.2^2 = 0.04                    -> 0.25 unclipped
    # v=1.1, old=1.0, R=2.0: inside the range, both 0.81             -> 0.81 not clipped
    # padded token (v=9, old=0, R=-9) must not count.
    values = t([[0.5, 0.5, 1.1, 9.0]])
    old_values, returns = t([[0.0, 0.0, 1.0, 0.0]]), t([[1.0, 0.0, 2.0, -9.0]])
    loss, stats = value_loss(values, old_values, returns, torch.tensor([[1, 1, 1, 0]]), clip_range_value=0.2)
    assert loss.item() == pytest.approx(0.5 * (0.64 + 0.25 + 0.81) / 3)
    assert stats["vf_clipfrac"].item() == pytest.approx(1 / 3)


# ---------------------------------------------------------------- KL penalty


def test_sampled_token_estimators():
    logp, ref = t([[-1.0, -2.0]]), t([[-1.5, -1.0]])
    torch.testing.assert_close(kl_per_token(logp, ref, "k1"), t([[0.5, -1.0]]))
    torch.testing.assert_close(kl_per_token(logp, ref, "abs"), t([[0.5, 1.0]]))
    torch.testing.assert_close(kl_per_token(logp, ref, "mse"), t([[0.125, 0.5]]))


def test_full_kl_by_hand():
    # p = softmax([0, 0]) = (1/2, 1/2), q = softmax([ln 3, 0]) = (3/4, 1/4):
    # KL(p || q) = 1/2 ln(2/3) + 1/2 ln(2) = 1/2 ln(4/3)   (KL(q || p) = 0.1308..., not this)
    logits = t([[[0.0, 0.0]]])
    ref_logits = t([[[math.log(3.0), 0.0]]])
    kl = kl_per_token(None, None, "full", logits=logits, ref_logits=ref_logits)
    assert kl.shape == (1, 1)
    assert kl.item() == pytest.approx(0.5 * math.log(4 / 3))


def test_full_kl_of_identical_logits_is_zero():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(2))
    kl = kl_per_token(None, None, "full", logits=logits, ref_logits=logits.clone())
    torch.testing.assert_close(kl, torch.zeros(2, 3), atol=1e-6, rtol=0)


def test_kl_errors():
    x = t([[0.0]])
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_per_token(x, x, "k9")
    with pytest.raises(ValueError, match="logits"):
        kl_per_token(x, x, "full", logits=None, ref_logits=torch.zeros(1, 1, 2))


def test_token_rewards_at_last_real_token():
    kl = t([[1.0, 2.0, 3.0, 4.0], [1.0, -1.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    rewards = token_rewards(t([1.0, -2.0]), kl, mask, kl_coef=0.1)
    expected = t([[-0.1, -0.2, -0.3, -0.4 + 1.0], [-0.1, 0.1 - 2.0, 0.0, 0.0]])
    torch.testing.assert_close(rewards, expected)


def test_token_rewards_rejects_empty_response():
    with pytest.raises(ValueError):
        token_rewards(t([1.0]), t([[0.0, 0.0]]), torch.tensor([[0, 0]]), kl_coef=0.1)


# ---------------------------------------------------------------- KL controllers


def test_adaptive_controller_one_update():
    ctl = AdaptiveKLController(0.4, target=6.0, horizon=10000)
    ctl.update(current_kl=12.0, n_steps=256)  # error 1.0 is clipped to 0.2
    assert ctl.value == pytest.approx(0.4 * (1 + 0.2 * 256 / 10000))
    ctl = AdaptiveKLController(0.4, target=6.0, horizon=10000)
    ctl.update(current_kl=0.0, n_steps=256)  # error -1.0 is clipped to -0.2
    assert ctl.value == pytest.approx(0.4 * (1 - 0.2 * 256 / 10000))
    ctl = AdaptiveKLController(0.4, target=6.0, horizon=10000)
    ctl.update(current_kl=6.6, n_steps=256)  # error 0.1, inside the clip
    assert ctl.value == pytest.approx(0.4 * (1 + 0.1 * 256 / 10000))


def test_fixed_controller_does_not_move():
    ctl = FixedKLController(0.3)
    ctl.update(current_kl=100.0, n_steps=256)
    assert ctl.value == 0.3


def test_controller_state_dict_round_trip():
    ctl = AdaptiveKLController(0.4, target=6.0, horizon=10000)
    for kl in (12.0, 3.0, 7.0):
        ctl.update(kl, n_steps=256)
    restored = AdaptiveKLController(0.4, target=6.0, horizon=10000)
    restored.load_state_dict(ctl.state_dict())
    assert restored.value == ctl.value != 0.4
    ctl.update(9.0, 256), restored.update(9.0, 256)
    assert restored.value == ctl.value

    fixed = FixedKLController(0.1)
    fixed.load_state_dict(FixedKLController(0.25).state_dict())
    assert fixed.value == 0.25
