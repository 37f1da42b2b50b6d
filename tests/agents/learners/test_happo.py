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

    # The last agent's update is PPO's with its advantages weighted by that factor, exactly.
    last = order[-1]
    learned = weights(trainer.learners[last])
    trainer.learners[last].load_state_dict(states[last])
    factor = torch.ones(config.batch_size)
    for name in order[:-1]:
        factor = factor * torch.exp(trainer.learners[name].response_logprobs(episode.episodes[name]) - before[name])
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


@pytest.mark.parametrize("num_agents", [2, 3])
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
