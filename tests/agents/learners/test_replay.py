"""Replays (agents/learners/replay.py): the episode played again with answers given or held, its random numbers
reused; difference rewards exact where an answer changes nothing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from cory_agents.learners.difference import DifferenceRewards
from cory_agents.learners.replay import KEEP, replay
from cory_agents.learners.team import TeamEpisode
from cory_agents.training.trainer import Trainer
from tests.support.runs import PROMPTS, toy_config
from tests.support.toy import fraction_good


def played(toy_model, tmp_path, **kw) -> tuple[Trainer, TeamEpisode]:
    config = toy_config(toy_model, tmp_path, algo="cory", batch_size=8, **kw)
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
    return trainer, trainer.team_episode(trainer.rollout())


def responses(episode) -> np.ndarray:
    """Each row's response tokens, zero after its end."""
    T = episode.response_width
    return (episode.input_ids[:, -T:] * episode.attention_mask[:, -T:]).numpy()


def test_a_turn_played_again_with_the_episodes_random_numbers_is_the_episodes_turn(toy_model, tmp_path):
    trainer, team = played(toy_model, tmp_path)
    pioneer, observer = team.order
    common = replay(team, trainer.learners, {0: KEEP})
    assert list(common.episodes) == [observer]  # the held pioneer is given as text: no turn of its own
    np.testing.assert_array_equal(responses(common.episodes[observer]), responses(team.episodes[observer]))
    np.testing.assert_array_equal(common.episodes[observer].task_rewards, team.episodes[observer].task_rewards)
    fresh = replay(team, trainer.learners, {0: KEEP}, common_random_numbers=False)
    assert not np.array_equal(responses(fresh.episodes[observer]), responses(team.episodes[observer]))


def test_common_random_numbers_leave_the_generators_where_the_episode_left_them_fresh_ones_advance(toy_model, tmp_path):
    trainer, team = played(toy_model, tmp_path)
    pioneer, observer = team.order
    before = {n: learner.sampling_generator.get_state() for n, learner in trainer.learners.items()}
    replay(team, trainer.learners, {0: [""] * 8})
    for name, learner in trainer.learners.items():
        assert torch.equal(learner.sampling_generator.get_state(), before[name])
    first, second = (
        replay(team, trainer.learners, {0: [""] * 8}, common_random_numbers=False).episodes[observer] for _ in range(2)
    )
    assert not torch.equal(trainer.learners[observer].sampling_generator.get_state(), before[observer])
    assert not np.array_equal(responses(first), responses(second))  # two fresh samples


def test_a_later_answer_is_held_token_for_token_while_an_earlier_one_is_played_again(toy_model, tmp_path):
    trainer, team = played(toy_model, tmp_path, num_agents=3)
    first, middle, last = team.order
    out = replay(team, trainer.learners, {0: [""] * 8, 2: KEEP}, common_random_numbers=False)
    assert sorted(out.episodes) == sorted([middle, last])
    held = out.episodes[last]
    np.testing.assert_array_equal(responses(held), responses(team.episodes[last]))
    # ... read in the new conversation: its prompt holds the middle agent's replayed answer, not the played one.
    assert out.infos[last]["context"] != team.env.last_transcript[team.roles[last]]["context"]
    assert not np.array_equal(responses(out.episodes[middle]), responses(team.episodes[middle]))
    # and scored there: the same answer, the same score (the toy reward reads the answer alone)
    np.testing.assert_array_equal(held.task_rewards, team.episodes[last].task_rewards)


def test_a_later_turn_given_as_text_is_spoken_as_given(toy_model, tmp_path):
    trainer, team = played(toy_model, tmp_path)
    pioneer, observer = team.order
    out = replay(team, trainer.learners, {1: ["good good"] * 8})
    assert sorted(out.episodes) == sorted([pioneer, observer])
    assert [r.strip() for r in out.infos[observer]["response"]] == ["good good"] * 8
    np.testing.assert_array_equal(out.episodes[observer].task_rewards, np.ones(8))  # the toy's "good" fraction


def test_bad_replays_are_refused_with_what_to_give(toy_model, tmp_path):
    trainer, team = played(toy_model, tmp_path)
    with pytest.raises(ValueError, match=r"keyed by turn, 0 to 1"):
        replay(team, trainer.learners, {2: KEEP})
    with pytest.raises(ValueError, match="must be 8 strings"):
        replay(team, trainer.learners, {0: ["x"]})
    with pytest.raises(ValueError, match="every turn is given"):
        replay(team, trainer.learners, {0: KEEP, 1: KEEP})
    unrecorded = dataclasses.replace(team, sampling_states={})
    with pytest.raises(ValueError, match="common_random_numbers=False"):
        replay(unrecorded, trainer.learners, {0: KEEP})


def test_where_no_later_prompt_reads_an_answer_its_difference_reward_is_its_own_reward(toy_model, tmp_path):
    """``--no-knowledge-transfer``: the observer never reads the pioneer, so with common random numbers the
    pioneer's counterfactual is the episode itself and ``D = r^p`` exactly; fresh samples add noise."""
    trainer, team = played(toy_model, tmp_path, learner="difference", no_knowledge_transfer=True)
    pioneer, observer = team.order
    later = team.episodes[observer].task_rewards
    exact = DifferenceRewards(trainer.learners).replay_without(team, 0)
    np.testing.assert_array_equal(exact, later)
    noisy = DifferenceRewards(trainer.learners, common_random_numbers=False).replay_without(team, 0)
    assert not np.array_equal(noisy, later)
    averaged = DifferenceRewards(trainer.learners, replays=3).replay_without(team, 0)
    assert averaged.shape == later.shape and not np.array_equal(averaged, later)  # two fresh replays in it


def test_over_two_rounds_the_later_turns_replay_with_their_own_random_numbers(toy_model, tmp_path):
    """Common random numbers in round 2: each turn after the held first one is played again from the generator state
    its own turn started with, so the whole episode comes back, token for token."""
    trainer, team = played(toy_model, tmp_path, rounds=2)
    assert all(len(states) == 2 for states in team.sampling_states.values())  # one per turn
    out = replay(team, trainer.learners, {0: KEEP})
    for name in team.order:
        again, real = out.episodes[name], team.episodes[name]
        if name == team.order[0]:  # the held pioneer's first turn is given: only its second is replayed
            T = real.response_width
            np.testing.assert_array_equal(
                responses(again),
                (real.input_ids[8:, -T:] * real.attention_mask[8:, -T:]).numpy()[:, : again.response_width],
            )
        else:
            np.testing.assert_array_equal(responses(again), responses(real))
