"""HAPPO (agents/learners/happo.py): the factor by hand, the weighted PPO update, the order, learning
for real at toy scale in chains of two and three."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from cory_agents.learners.happo import HAPPO
from cory_agents.learners.team import TeamEpisode
from cory_agents.training.trainer import Trainer
from cory_env.errors import NonFiniteUpdateError
from tests.support.runs import PROMPTS, team_rises, toy_config
from tests.support.toy import fraction_good


def played(trainer: Trainer) -> TeamEpisode:
    return trainer.team_episode(trainer.rollout())


def weights(learner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.model.named_parameters()}


@pytest.mark.parametrize("num_agents, clip", [(2, None), (3, None), (3, 2.0)])
def test_each_later_agent_learns_from_the_advantage_times_the_earlier_agents_ratios(
    toy_model, tmp_path, num_agents, clip
):
    config = toy_config(
        toy_model, tmp_path, algo="cory", learner="happo", num_agents=num_agents, lr=1e-2, happo_factor_clip=clip
    )
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    team = trainer.team
    assert isinstance(team, HAPPO) and team.members is trainer.learners and team.factor_clip == clip
    episode = played(trainer)
    order_draw = torch.Generator().manual_seed(0)
    order_draw.set_state(team.generator.get_state())
    order = [list(episode.episodes)[i] for i in torch.randperm(num_agents, generator=order_draw).tolist()]
    before = {n: trainer.learners[n].response_logprobs(episode.episodes[n]) for n in order}
    states = {n: trainer.learners[n].state_dict() for n in order}

    stats = team.learn(episode)

    # By hand: M of the m-th agent = prod over the agents before it of pi_new(y|x) / pi_old(y|x), per conversation;
    # with --happo-factor-clip c, the agent learns with M clipped to [1/c, c] (the product itself runs unclipped).
    factor = torch.ones(config.batch_size, dtype=torch.float64)
    clipped = []
    for position, name in enumerate(order):
        weight = factor if clip is None else factor.clamp(1 / clip, clip)
        assert stats[name]["update_position"] == position
        assert stats[name]["happo_factor_mean"] == pytest.approx(float(weight.mean()), rel=1e-5)
        assert stats[name]["happo_factor_max"] == pytest.approx(float(weight.max()), rel=1e-5)
        if clip is None:
            assert "happo_factor_clipped" not in stats[name]
        else:
            clipped.append(stats[name]["happo_factor_clipped"])
            assert clipped[-1] == float((weight != factor).double().mean())
        after = trainer.learners[name].response_logprobs(episode.episodes[name])
        factor = factor * torch.exp((after - before[name]).double())
    assert not torch.allclose(factor, torch.ones_like(factor))  # the agents did change their answers' odds
    if clip is not None:  # the clip changed some weights, and no agent's weight lies outside it
        assert clipped[0] == 0.0 and max(clipped) > 0
        assert all(1 / clip <= stats[n]["happo_factor_max"] <= clip for n in order)

    # The last agent's update is PPO's with its advantages weighted by that factor, exactly: M as HAPPO computes
    # it, one exp of the summed log-ratios (a float32 product of exps differs from it in the last bits).
    last = order[-1]
    learned = weights(trainer.learners[last])
    trainer.learners[last].load_state_dict(states[last])
    log_factor = torch.zeros(config.batch_size, dtype=torch.float64)
    for name in order[:-1]:
        log_factor += (trainer.learners[name].response_logprobs(episode.episodes[name]) - before[name]).double()
    factor = torch.exp(log_factor)
    if clip is not None:
        factor = factor.clamp(1 / clip, clip)
    trainer.learners[last].learn(episode.episodes[last], advantage_weights=factor)
    again = weights(trainer.learners[last])
    assert all(torch.equal(learned[n], again[n]) for n in learned)


def test_advantage_weights_multiply_the_advantages(toy_model, tmp_path):
    config = toy_config(toy_model, tmp_path, algo="ppo", lr=1e-2)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    episode = played(trainer).episodes["pioneer"]
    learner = trainer.learners["pioneer"]
    start = learner.state_dict()
    plain = learner.learn(episode)
    plain_weights = weights(learner)
    learner.load_state_dict(start)
    ones = learner.learn(episode, advantage_weights=np.ones(config.batch_size))
    assert all(torch.equal(plain_weights[n], p) for n, p in weights(learner).items())
    assert ones == plain
    # Zero weights: no policy gradient (the loss is exactly 0), only the value head's.
    learner.load_state_dict(start)
    zeros = learner.learn(episode, advantage_weights=torch.zeros(config.batch_size))
    assert zeros["policy_loss"] == 0.0 and zeros["clipfrac"] == 0.0
    # Doubling every advantage doubles the first minibatch's policy loss (the same batch and order).
    learner.load_state_dict(start)
    learner.config.ppo_epochs, learner.config.mini_batch_size = 1, config.batch_size
    once = learner.learn(episode)
    learner.load_state_dict(start)
    twice = learner.learn(episode, advantage_weights=torch.full((config.batch_size,), 2.0))
    assert twice["policy_loss"] == pytest.approx(2 * once["policy_loss"], rel=1e-5)


def test_the_order_is_drawn_each_iteration_and_checkpointed(toy_model, tmp_path):
    # The exact resume after SIGKILL: tests/agents/training/test_training.py (parametrised with happo).
    config = toy_config(toy_model, tmp_path, algo="cory", learner="happo", num_agents=3, iterations=6)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    trainer.train(progress=False)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    positions = metrics[[f"llm_{i}/update_position" for i in range(3)]].to_numpy()
    assert all(sorted(row) == [0, 1, 2] for row in positions)
    assert len({tuple(row) for row in positions}) > 1  # not one fixed order
    assert trainer.state_dict()["team"]["generator"].equal(trainer.team.generator.get_state())


@pytest.mark.parametrize("num_agents", [2, pytest.param(3, marks=pytest.mark.ci)])
def test_happo_raises_every_learners_reward(toy_model, tmp_path, num_agents):
    rises = team_rises(toy_model, tmp_path, "happo", num_agents)
    assert all(rise > 0.1 for rise in rises.values()), rises


def test_response_logprobs_are_each_answers_log_likelihood(toy_model, tmp_path):
    config = toy_config(toy_model, tmp_path, algo="ppo")
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    episode = played(trainer).episodes["pioneer"]
    learner = trainer.learners["pioneer"]
    # By hand, one conversation at a time, without its padding: sum_t log p(y_t | x, y_<t).
    T = episode.response_width
    for b in range(config.batch_size):
        real = episode.attention_mask[b].bool()
        ids = episode.input_ids[b][real].unsqueeze(0)
        length = int(episode.attention_mask[b, -T:].sum())
        with torch.no_grad():
            logits = learner.model.lm(input_ids=ids).logits[0].float()
        prompt = ids.shape[1] - length
        logprobs = torch.log_softmax(logits[prompt - 1 : -1], dim=-1)
        expected = logprobs.gather(1, ids[0, prompt:, None]).sum()
        assert float(learner.response_logprobs(episode)[b]) == pytest.approx(float(expected), abs=1e-4)


def test_the_factor_clip_is_happos_flag_and_a_bad_one_is_refused():
    from cory_agents.cli.train import parse_config

    assert parse_config(["--learner", "happo", "--happo-factor-clip", "2"]).learner_config().happo_factor_clip == 2.0
    assert parse_config(["--learner", "happo"]).learner_config().happo_factor_clip is None  # unclipped, as HARL
    with pytest.raises(ValueError, match="--happo-factor-clip is a setting of --learner happo, not of --learner ppo"):
        parse_config(["--happo-factor-clip", "2"])
    for bad in ("0.5", "0", "-2", "inf", "nan"):
        with pytest.raises(ValueError, match=f"c must be a finite number of at least 1 .*got {bad}"):
            parse_config(["--learner", "happo", "--happo-factor-clip", bad])
    with pytest.raises(ValueError, match="--happo-factor-clip"):
        HAPPO({}, factor_clip=0.9)


def test_a_clipped_weight_is_exact_however_far_log_m_lies_outside_the_clip():
    # log M of 100 is e^100 > float32's largest number: clipped in log space, the weight is exactly c.
    happo = HAPPO({}, factor_clip=2.0)
    log_factor = torch.tensor([100.0, -100.0, 1000.0, -1000.0, 0.25, -0.25, 0.0], dtype=torch.float64)
    weight = happo.weights(log_factor)
    assert weight.tolist() == [2.0, 0.5, 2.0, 0.5, float(np.exp(0.25)), float(np.exp(-0.25)), 1.0]
    assert weight.to(torch.float32).isfinite().all()  # as the member weights its float32 advantages
    assert HAPPO({}).weights(torch.tensor([0.5], dtype=torch.float64)).tolist() == [float(np.exp(0.5))]


def shifted_after_learning(monkeypatch, team: HAPPO, shifts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Make each member's answers ``shifts[name]`` (a log-ratio per conversation) likelier once it has learned: its
    real response log-probabilities, plus the shift after its update. Returns the advantage weights each member
    learned with, as its ``learn`` received them."""
    received: dict[str, torch.Tensor] = {}
    for name, member in team.members.items():
        learn, logprobs, learned = member.learn, member.response_logprobs, []

        def learn_(episode, advantage_weights=None, name=name, learn=learn, learned=learned):
            received[name] = advantage_weights
            stats = learn(episode, advantage_weights=advantage_weights)
            learned.append(True)
            return stats

        def logprobs_(episode, name=name, logprobs=logprobs, learned=learned):
            return logprobs(episode) + (shifts[name].to(torch.float32) if learned else 0)

        monkeypatch.setattr(member, "learn", learn_)
        monkeypatch.setattr(member, "response_logprobs", logprobs_)
    return received


def update_order(team: HAPPO, names: list[str]) -> list[str]:
    """The order ``team.learn`` is about to draw."""
    draw = torch.Generator().manual_seed(0)
    draw.set_state(team.generator.get_state())
    return [names[i] for i in torch.randperm(len(names), generator=draw).tolist()]


def test_ratios_that_overflow_and_underflow_float32_give_the_clipped_true_weight(toy_model, tmp_path, monkeypatch):
    # Three agents. On conversation 0 the first agent's answer becomes e^100 times likelier (overflows float32)
    # and the second's e^-110 times (underflows to 0): a float32 product of ratios is inf * 0 = NaN there. The
    # true M of the last agent is about e^-10, clipped to 1/c. On conversation 1, e^100 and e^-100: the true M is
    # about 1, inside the clip (a product that overflowed first would have been clipped to c instead).
    config = toy_config(
        toy_model, tmp_path, algo="cory", learner="happo", num_agents=3, batch_size=4, mini_batch_size=2,
        ppo_epochs=1, lr=1e-4, happo_factor_clip=2.0,
    )  # fmt: skip
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    team, episode = trainer.team, played(trainer)
    first, second, last = update_order(team, list(episode.episodes))
    before = {n: team.members[n].response_logprobs(episode.episodes[n]) for n in (first, second)}
    shifts = {
        first: torch.tensor([100.0, 100.0, 0.0, 0.0]),
        second: torch.tensor([-110.0, -100.0, 0.0, 0.0]),
        last: torch.zeros(4),
    }
    received = shifted_after_learning(monkeypatch, team, shifts)

    stats = team.learn(episode)

    assert received[first] is None  # the first learns with weight 1
    assert received[second][:2].tolist() == [2.0, 2.0]  # e^100, clipped to c exactly
    weight = received[last]
    assert weight.isfinite().all() and weight[0] == 0.5  # about e^-10, clipped to 1/c exactly
    # By hand: log M = the sum of the earlier agents' log-ratios (after their update, shifted, less before).
    log_m = sum((team.members[n].response_logprobs(episode.episodes[n]) - before[n]).double() for n in (first, second))
    assert -11 < log_m[0] < -9 and abs(log_m[1]) < np.log(2)  # conversation 1: inside the clip
    assert weight[1] == torch.exp(log_m[1])
    assert stats[last]["happo_factor_clipped"] == 0.25 and stats[second]["happo_factor_clipped"] == 0.5
    assert stats[last]["happo_factor_max"] <= 2.0 and np.isfinite(stats[last]["happo_factor_mean"])
    assert all(p.isfinite().all() for member in team.members.values() for p in member.model.parameters())


def test_an_unclipped_weight_past_float32_stops_the_update_and_names_the_clip(toy_model, tmp_path, monkeypatch):
    # Unclipped (as HARL), a weight e^100 is no float32 number: the second agent's loss is not finite, and its
    # update stops before its optimizer step with the flag that bounds M in the message.
    config = toy_config(
        toy_model, tmp_path, algo="cory", learner="happo", batch_size=4, mini_batch_size=2, ppo_epochs=1, lr=1e-3
    )
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    team, episode = trainer.team, played(trainer)
    first, second = update_order(team, list(episode.episodes))
    shifted_after_learning(monkeypatch, team, {first: torch.tensor([100.0, 0, 0, 0]), second: torch.zeros(4)})
    untouched = {n: p.detach().clone() for n, p in team.members[second].model.named_parameters()}

    with pytest.raises(NonFiniteUpdateError) as raised:
        team.learn(episode)

    error = raised.value
    assert (error.learner, error.iteration) == (second, 1)
    message = str(error)
    assert "\n" not in message and message.startswith(f"{second}'s update in iteration 1 was stopped")
    assert "|log M| up to 100" in message and "--happo-factor-clip (e.g. 10)" in message
    assert all(torch.equal(p, untouched[n]) for n, p in team.members[second].model.named_parameters())
    assert not team.members[second].optimizer.state_dict()["state"]
    assert team.members[first].updates == 1 and team.members[second].updates == 0


def test_over_two_rounds_an_agents_action_is_all_its_turns(toy_model, tmp_path, monkeypatch):
    """--rounds 2: the later agent's weight is exp of the earlier agent's log-ratio summed over both its turns, on
    every row (turn) of the conversation."""
    config = toy_config(toy_model, tmp_path, algo="cory", learner="happo", rounds=2, batch_size=8)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    episode = played(trainer)
    order = update_order(trainer.team, list(episode.episodes))
    first, later = order
    assert episode.episodes[first].turns == 2
    before = trainer.learners[first].response_logprobs(episode.episodes[first])  # (2 * 8,) turn-major
    received = {}
    learn = trainer.learners[later].learn

    def spy(ep, advantage_weights=None):
        received["weights"] = advantage_weights
        return learn(ep, advantage_weights=advantage_weights)

    monkeypatch.setattr(trainer.learners[later], "learn", spy)
    trainer.team.learn(episode)
    change = (trainer.learners[first].response_logprobs(episode.episodes[first]) - before).double()
    by_conversation = torch.exp(change[:8] + change[8:])  # both turns of conversation b
    # HAPPO sums the turns' float32 log-probabilities before the difference, this test after: float32 rounding apart.
    torch.testing.assert_close(received["weights"], torch.cat([by_conversation, by_conversation]), rtol=2e-5, atol=0)
    assert not torch.allclose(by_conversation, torch.ones(8, dtype=torch.float64))
