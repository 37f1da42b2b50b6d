"""MAPPO (agents/learners/mappo.py): GAE from the shared critic checked by hand (one round and across an agent's
turns), the critic's inputs (private fields, then the agent's own tokens), the critic owned and saved by the
trainer, and learning for real at toy scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cory_agents.learners.mappo import MAPPO
from cory_agents.learners.team import TeamEpisode
from cory_agents.training.trainer import Trainer
from cory_env import Prompt
from cory_env import env as make_env
from tests.support.runs import PROMPTS, team_rises, toy_config
from tests.support.toy import fraction_good

C, GAMMA, LAM = 0.3, 0.9, 0.8  # the critic's constant value, and the discounts, for the hand computation


def mappo(toy_model, tmp_path, **kw) -> Trainer:
    config = toy_config(toy_model, tmp_path, algo="cory", learner="mappo", batch_size=8, gamma=GAMMA, lam=LAM, **kw)
    return Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)


def by_hand(rewards: torch.Tensor, mask: torch.Tensor, turns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE with V = C at every real token and 0 after an agent's last: each conversation's real tokens of all its
    turns, in order, as one trajectory (rows turn-major)."""
    rows, T = rewards.shape
    B = rows // turns
    advantages = torch.zeros(rows, T)
    for b in range(B):
        tokens = [(r * B + b, t) for r in range(turns) for t in range(T) if mask[r * B + b, t]]
        following = 0.0
        for k in reversed(range(len(tokens))):
            row, t = tokens[k]
            next_value = C if k + 1 < len(tokens) else 0.0
            delta = float(rewards[row, t]) + GAMMA * next_value - C
            following = delta + GAMMA * LAM * following
            advantages[row, t] = following
    return advantages, (advantages + C) * mask


@pytest.mark.parametrize("rounds", [1, 2])
def test_each_member_learns_from_gae_of_the_shared_critic(toy_model, tmp_path, rounds):
    trainer = mappo(toy_model, tmp_path, rounds=rounds)
    team_learner = trainer.team
    assert isinstance(team_learner, MAPPO)
    with torch.no_grad():  # V = C everywhere: GAE by hand
        team_learner.critic.v_head.weight.zero_()
        team_learner.critic.v_head.bias.fill_(C)
    team = trainer.team_episode(trainer.rollout())
    seen, fitted = {}, []
    generator = torch.Generator().manual_seed(0)
    for name, member in team_learner.members.items():

        def learn(episode, advantages, name=name):
            T = episode.response_width
            mask = episode.attention_mask[:, -T:].float()
            rewards = torch.rand(mask.shape, generator=generator) * mask  # any per-token rewards
            seen[name] = (rewards, mask, advantages(rewards, mask), episode.turns)
            return {}

        member.learn = learn
    team_learner.fit = lambda batches: fitted.extend(batches) or {}
    team_learner.learn(team)
    assert sorted(seen) == sorted(team.episodes)
    for k, name in enumerate(team.order):
        rewards, mask, advantages, turns = seen[name]
        assert turns == rounds
        expected_advantages, expected_returns = by_hand(rewards, mask, turns)
        torch.testing.assert_close(advantages, expected_advantages, rtol=0, atol=1e-5)
        torch.testing.assert_close(fitted[k][3], expected_returns, rtol=0, atol=1e-5)  # the critic's targets


def test_the_critic_reads_the_private_fields_then_the_agents_own_prompt_and_answer(toy_model, tmp_path):
    trainer = mappo(toy_model, tmp_path)
    game = make_env(
        tokenizer=trainer.tokenizer,
        prompts=[Prompt("the movie was", {"secret": "good"}), Prompt("the plot is", {"secret": "bad"})],
        pioneer_template="{query} {secret}",
        observer_template="{query} {response}",
        private_fields={"secret": [0]},
        num_conversations=4,
        max_new_tokens=4,
        context_length=32,
    )
    game.reset(seed=0)
    finals = {}
    learner_at = dict(zip(game.possible_agents, ["llm_0", "llm_1"]))
    for role in game.agent_iter():
        observation, _, done, truncated, info = game.last()
        name = learner_at[role]
        if done or truncated:
            finals[name] = (trainer._episode(observation, info), info)
            game.step(None)
        else:
            game.step(trainer.learners[name].act(name, observation))
    team = TeamEpisode({n: e for n, (e, _) in finals.items()}, {n: i["role"] for n, (_, i) in finals.items()}, game)
    private = trainer.team.private_information(team)
    tokenizer = trainer.tokenizer
    assert private == [
        tokenizer(f"secret: {p.metadata['secret']}\n", add_special_tokens=False)["input_ids"] for p in game.prompts
    ]
    observer = team.episodes["llm_1"]
    ids, mask = trainer.team.critic_inputs(observer, private)
    T = observer.response_width
    for b in range(4):
        own = observer.input_ids[b][observer.attention_mask[b].bool()].tolist()  # prompt then answer
        assert ids[b][mask[b].bool()].tolist() == private[b] + own
        assert ids[b, -T:].tolist() == observer.input_ids[b, -T:].tolist()  # the answer in the last T columns


def test_the_critic_fits_its_targets_and_the_members_value_heads_stay(toy_model, tmp_path):
    trainer = mappo(toy_model, tmp_path)
    team = trainer.team_episode(trainer.rollout())
    heads = {n: m.model.v_head.weight.detach().clone() for n, m in trainer.learners.items()}
    lms = {n: next(m.model.lm.parameters()).detach().clone() for n, m in trainer.learners.items()}
    stats = trainer.team.learn(team)
    for name, member in trainer.learners.items():
        assert torch.equal(member.model.v_head.weight, heads[name])  # the shared critic replaces it
        assert not torch.equal(next(member.model.lm.parameters()), lms[name])
        assert np.isfinite(stats[name]["critic_explained_variance"])
    first = stats["critic"]["value_loss"]
    for _ in range(3):  # the same episode again: the critic's loss on it falls
        stats = trainer.team.learn(team)
    assert stats["critic"]["value_loss"] < first


def test_the_trainer_saves_the_critic_and_its_optimizer_and_loads_them_exactly(toy_model, tmp_path):
    trainer = mappo(toy_model, tmp_path / "a", iterations=1)
    trainer.train(progress=False)
    assert set(trainer.team_run.modules) == {"critic"} and trainer.team_run.modules["critic"] is trainer.team.critic
    state = trainer.state_dict()
    fresh = mappo(toy_model, tmp_path / "b", iterations=1)
    before = {n: p.clone() for n, p in fresh.team.critic.named_parameters()}
    fresh.load_state_dict(state)
    changed = False
    for name, p in fresh.team.critic.named_parameters():
        assert torch.equal(p, dict(trainer.team.critic.named_parameters())[name]), name
        changed |= not torch.equal(p, before[name])
    assert changed  # training moved the critic
    assert repr(fresh.team.steps.state_dict()) == repr(trainer.team.steps.state_dict())
    team = trainer.team.state_dict()
    team["critic"].pop("v_head.weight")
    with pytest.raises(KeyError, match=r"checkpoint lacks 1 trainable weights.*v_head\.weight"):
        fresh.team.load_state_dict(team)


def test_mappo_raises_both_learners_reward(toy_model, tmp_path):
    rises = team_rises(toy_model, tmp_path, "mappo", 2)
    assert all(rise > 0.1 for rise in rises.values()), rises
