"""MAPPO (agents/learners/mappo.py): GAE from the shared critic checked by hand (one round and across an agent's
turns, with and without value normalisation), the critic's inputs (the learner's name, the private fields, then
the agent's own tokens), its epochs over every role's rows shuffled together, its explained variance per role,
the critic owned and saved by the trainer, and learning for real at toy scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cory_agents.algorithms.advantages import gae_over_turns
from cory_agents.learners.mappo import MAPPO
from cory_agents.learners.team import TeamEpisode
from cory_agents.training.trainer import Trainer
from cory_env import Prompt
from cory_env import env as make_env
from cory_env.errors import UsageError
from tests.support.runs import PROMPTS, team_rises, toy_config
from tests.support.toy import fraction_good, gpt2_tokenizer

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
    trainer = mappo(toy_model, tmp_path, rounds=rounds, value_norm=False)
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
    team_learner.fit = lambda batch: fitted.append(batch) or {}
    team_learner.learn(team)
    assert sorted(seen) == sorted(team.episodes)
    (_, _, _, targets, _), rows = fitted[0], len(team.episodes[team.order[0]].input_ids)
    for k, name in enumerate(team.order):
        rewards, mask, advantages, turns = seen[name]
        assert turns == rounds
        expected_advantages, expected_returns = by_hand(rewards, mask, turns)
        torch.testing.assert_close(advantages, expected_advantages, rtol=0, atol=1e-5)
        own = targets[k * rows : (k + 1) * rows, : mask.shape[1]]  # the critic's targets: every member's rows
        torch.testing.assert_close(own, expected_returns, rtol=0, atol=1e-5)


def test_value_normalisation_gae_reads_denormalised_values_and_the_critic_learns_normalised_targets(
    toy_model, tmp_path
):
    trainer = mappo(toy_model, tmp_path)
    team_learner = trainer.team
    with torch.no_grad():  # the head's output C is a normalised value: before any update V = 0 + 0.1 C
        team_learner.critic.v_head.weight.zero_()
        team_learner.critic.v_head.bias.fill_(C)
    team = trainer.team_episode(trainer.rollout())
    seen, fitted = {}, []
    generator = torch.Generator().manual_seed(0)
    for name, member in team_learner.members.items():

        def learn(episode, advantages, name=name):
            mask = episode.attention_mask[:, -episode.response_width :].float()
            rewards = torch.rand(mask.shape, generator=generator) * mask
            seen[name] = (rewards, mask, advantages(rewards, mask))
            return {}

        member.learn = learn
    team_learner.fit = lambda batch: fitted.append(batch) or {}
    team_learner.learn(team)
    returns = []
    for name in team.order:
        rewards, mask, advantages = seen[name]
        v = 0.1 * C * mask  # denormalised with the fresh statistics: mean 0, variance floor 1e-2
        by_hand_advantages = gae_over_turns(rewards, v, mask, 1, GAMMA, LAM)[0]
        torch.testing.assert_close(advantages, by_hand_advantages, rtol=0, atol=1e-5)
        returns.append(((advantages + v) * mask, mask))
    real = torch.cat([g[m.bool()] for g, m in returns]).double()
    mean, var = team_learner.value_norm.mean_var()  # one update: the batch's own moments
    assert mean == pytest.approx(float(real.mean()), abs=1e-6) and var == pytest.approx(
        float(real.var(False)), abs=1e-6
    )
    (_, _, old, targets, _), rows = fitted[0], len(team.episodes[team.order[0]].input_ids)
    for k, (g, m) in enumerate(returns):
        own = targets[k * rows : (k + 1) * rows, : m.shape[1]]
        torch.testing.assert_close(own, ((g - mean) / var**0.5 * m).float(), rtol=0, atol=1e-5)
        torch.testing.assert_close(old[k * rows : (k + 1) * rows, : m.shape[1]], C * m, rtol=0, atol=1e-6)


def test_the_critics_epochs_shuffle_every_roles_rows_together_and_its_explained_variance_is_per_role(
    toy_model, tmp_path
):
    trainer = mappo(toy_model, tmp_path, critic_epochs=3)
    team = trainer.team_episode(trainer.rollout())
    rows = len(team.episodes[team.order[0]].input_ids)
    minibatches, values, fit, pooled = [], trainer.team.values, trainer.team.fit, []

    def spy(ids, attn, T, grad):
        if grad:
            minibatches.append(ids)
        return values(ids, attn, T, grad)

    trainer.team.values = spy
    trainer.team.fit = lambda batch: pooled.append(batch[0]) or fit(batch)
    stats = trainer.team.learn(team)
    size = trainer.config.learner_config().mini_batch(rows)
    assert len(minibatches) == 3 * 2 * rows // size  # epochs x (both members' rows / minibatch)
    blocks = [pooled[0][:rows], pooled[0][rows:]]  # the first member's rows, then the second's

    def members_in(batch):
        return {k for row in batch for k, block in enumerate(blocks) if (block == row).all(dim=1).any()}

    assert all(members_in(batch) for batch in minibatches)
    assert any(members_in(batch) == {0, 1} for batch in minibatches)  # a minibatch holds rows of both roles
    for name in team.order:
        role = team.roles[name]
        assert stats["critic"][f"explained_variance_{role}"] == stats[name]["critic_explained_variance"]


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
    ids, mask = trainer.team.critic_inputs(observer, private, "llm_1")
    identity = trainer.team.identity["llm_1"]
    line = tokenizer("learner: llm_1\n", add_special_tokens=False)["input_ids"]
    assert identity[: len(line)] == line and identity != trainer.team.identity["llm_0"]  # told apart
    T = observer.response_width
    for b in range(4):
        own = observer.input_ids[b][observer.attention_mask[b].bool()].tolist()  # prompt then answer
        assert ids[b][mask[b].bool()].tolist() == identity + private[b] + own
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
    assert fresh.team.value_norm.state_dict() == trainer.team.value_norm.state_dict()
    assert trainer.team.value_norm.debiasing > 0  # the statistics were updated, and saved
    team = trainer.team.state_dict()
    team["critic"].pop("v_head.weight")
    with pytest.raises(KeyError, match=r"checkpoint lacks 1 trainable weights.*v_head\.weight"):
        fresh.team.load_state_dict(team)


def test_the_learners_line_is_the_tokenizers_and_told_apart_where_the_vocabulary_lacks_the_names(toy_model, tmp_path):
    trainer = mappo(toy_model, tmp_path)
    gpt2 = gpt2_tokenizer()
    team = trainer.team
    team.tokenizer = gpt2  # a BPE vocabulary writes each name: the lines themselves
    assert team.identities() == {
        n: gpt2(f"learner: {n}\n", add_special_tokens=False)["input_ids"] for n in team.members
    }
    team.tokenizer = trainer.tokenizer  # the toy's words lack them: each line gets a token of its own
    toy = team.identities()
    assert len({tuple(ids) for ids in toy.values()}) == 2
    assert not set(ids[-1] for ids in toy.values()) & set(trainer.tokenizer.all_special_ids)


def test_critic_epochs_below_one_are_refused(toy_model, tmp_path):
    with pytest.raises(UsageError, match=r"--critic-epochs must be at least 1"):
        toy_config(toy_model, tmp_path, algo="cory", learner="mappo", critic_epochs=0)


def test_mappo_raises_both_learners_reward(toy_model, tmp_path):
    rises = team_rises(toy_model, tmp_path, "mappo", 2)
    assert all(rise > 0.1 for rise in rises.values()), rises
