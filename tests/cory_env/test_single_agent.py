"""The single-agent Gymnasium view of one role (cory_env.RoleEnv)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import cory_env
from cory_env import CollectiveRewardWrapper, RoleEnv, RoleExchangeWrapper
from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer

GOOD, BAD, EOS = 6, 7, 1  # toy token ids


@pytest.fixture(scope="module")
def toy_kwargs():
    return dict(
        tokenizer=toy_tokenizer(),
        prompts=TOY_PROMPTS,
        reward_fn=fraction_good,
        max_new_tokens=4,
        context_length=32,
        observer_template="{query} {response} {query}",
    )


def echo_policy(obs):
    """A tiny fixed policy that depends on what it sees: a word chosen by the newest token."""
    return 3 + int(obs["input_ids"][-1]) % 5


CASES = [("pioneer", None), ("pioneer", echo_policy), ("observer", echo_policy)]


@pytest.mark.parametrize("collective", [False, True])
@pytest.mark.parametrize("role,other", CASES)
def test_passes_gymnasium_env_checker(toy_kwargs, role, other, collective):
    check_env(RoleEnv(role, other, collective_reward=collective, **toy_kwargs), skip_render_check=True)
    # Made through its id, the checker also tries every render mode.
    made = gymnasium.make(
        cory_env.ROLE_ENV_ID, role=role, other_policy=other, collective_reward=collective, **toy_kwargs
    )
    check_env(made.unwrapped, skip_render_check=False)


@pytest.mark.parametrize("role,other", CASES)
def test_gymnasium_make(toy_kwargs, role, other):
    e = gymnasium.make(cory_env.ROLE_ENV_ID, role=role, other_policy=other, **toy_kwargs)
    assert e.spec.id == "cory/PioneerObserverRole-v0"
    assert e.action_space == gymnasium.spaces.Discrete(18)
    assert e.observation_space == e.unwrapped.aec.observation_space(role)
    obs, info = e.reset(seed=0)
    assert obs["role"][0] == (0 if role == "pioneer" else 1)
    steps, done = 0, False
    while not done:
        obs, reward, terminated, truncated, info = e.step(GOOD)
        steps += 1
        assert not truncated
        done = terminated
    assert steps == 4 and reward == 1.0 and info["response"] == "good good good good"
    assert info["task_reward"] == 1.0 and info["reward"] == 1.0
    assert ("other_response" in info) == (other is not None)


def test_make_vec(toy_kwargs):
    venv = gymnasium.make_vec(cory_env.ROLE_ENV_ID, num_envs=2, vectorization_mode="sync", role="pioneer", **toy_kwargs)
    obs, _ = venv.reset(seed=0)
    assert obs["input_ids"].shape == (2, 32)
    obs, rewards, terminated, truncated, _ = venv.step(np.array([GOOD, BAD]))
    assert rewards.shape == (2,)
    venv.close()


def play(e, tokens, seed):
    obs, info = e.reset(seed=seed)
    for t, token in enumerate(tokens):
        obs, reward, terminated, truncated, info = e.step(token)
        if terminated:
            return t + 1, reward, info
    raise AssertionError("the episode did not end")


def test_terminates_at_the_stop_token(toy_kwargs):
    e = RoleEnv("pioneer", **toy_kwargs)
    steps, reward, info = play(e, [GOOD, BAD, EOS, GOOD], seed=0)
    assert steps == 3 and info["response"] == "good bad" and reward == 0.5 and info["response_length"] == 3
    with pytest.raises(RuntimeError, match="call reset"):
        e.step(GOOD)


@pytest.mark.parametrize("collective", [False, True])
def test_rewards_and_responses_match_the_aec_game(toy_kwargs, collective):
    """The observer's view, played with a fixed pioneer, is exactly the AEC episode."""
    pioneer_tokens, observer_tokens = [GOOD, BAD, 4, 5], [GOOD, GOOD, BAD, 3]
    other = iter([])
    role_env = RoleEnv("observer", lambda obs: next(other), collective_reward=collective, **toy_kwargs)
    aec = cory_env.env(**toy_kwargs)
    if collective:
        aec = CollectiveRewardWrapper(aec)
    for seed in range(3):
        other = iter(pioneer_tokens)
        _, reward, info = play(role_env, observer_tokens, seed)

        aec.reset(seed=seed)
        for token in pioneer_tokens + observer_tokens:
            aec.step(token)
        aec_info = aec.infos["observer"]
        assert reward == aec.rewards["observer"] == pytest.approx(0.5 + (0.25 if collective else 0.0))
        assert info["response"] == aec_info["response"] == "good good bad the"
        assert info["query"] == aec_info["query"]
        assert info["other_response"] == aec.infos["pioneer"]["response"] == "good bad movie was"
        assert info["task_reward"] == 0.5 and info["other_task_reward"] == 0.25


def test_pioneer_with_observer_waits_for_the_observer(toy_kwargs):
    """The pioneer's reward comes after the observer's turn: collective includes the observer's answer."""
    e = RoleEnv("pioneer", lambda obs: GOOD, collective_reward=True, **toy_kwargs)
    steps, reward, info = play(e, [BAD, BAD, BAD, BAD], seed=0)
    assert steps == 4 and info["task_reward"] == 0.0 and info["other_task_reward"] == 1.0 and reward == 1.0


def test_wraps_an_existing_aec_env(toy_kwargs):
    aec = CollectiveRewardWrapper(cory_env.env(**toy_kwargs))
    e = RoleEnv("observer", lambda obs: GOOD, env=aec)
    _, reward, info = play(e, [BAD, EOS], seed=0)
    assert reward == 1.0 and info["task_reward"] == 0.0  # collective: the pioneer's 1.0 plus 0.0


def test_seeded_resets_are_reproducible(toy_kwargs):
    e = RoleEnv("observer", echo_policy, **toy_kwargs)

    def first_observation(seed):
        obs, info = e.reset(seed=seed)
        return e.aec.unwrapped.queries[0], info["other_response"], obs

    runs = [first_observation(seed) for seed in (7, 7, *range(10))]
    assert runs[0][:2] == runs[1][:2]
    assert all(np.array_equal(runs[0][2][k], runs[1][2][k]) for k in runs[0][2])
    assert len({query for query, _, _ in runs}) > 1  # the seed picks the prompt


def test_bad_input(toy_kwargs):
    with pytest.raises(ValueError, match="role must be one of"):
        RoleEnv("critic", **toy_kwargs)
    with pytest.raises(ValueError, match="needs other_policy"):
        RoleEnv("observer", **toy_kwargs)
    with pytest.raises(TypeError, match="callable"):
        RoleEnv("observer", other_policy=3, **toy_kwargs)
    with pytest.raises(ValueError, match="single form"):
        RoleEnv("pioneer", num_conversations=2, **toy_kwargs)
    with pytest.raises(TypeError, match="sets with_observer itself"):
        RoleEnv("pioneer", with_observer=True, **toy_kwargs)
    with pytest.raises(ValueError, match="other_policy must play it"):
        RoleEnv("pioneer", env=cory_env.env(**toy_kwargs))
    with pytest.raises(ValueError, match="has no observer"):
        RoleEnv("pioneer", echo_policy, env=cory_env.env(with_observer=False, **toy_kwargs))
    with pytest.raises(ValueError, match="RoleExchangeWrapper"):
        RoleEnv("pioneer", echo_policy, env=RoleExchangeWrapper(cory_env.env(**toy_kwargs)))
    with pytest.raises(TypeError, match="not both"):
        RoleEnv("pioneer", env=cory_env.env(with_observer=False, **toy_kwargs), max_new_tokens=3)
    with pytest.raises(ValueError, match="render_mode=None"):
        RoleEnv("pioneer", render_mode="rgb_array", **toy_kwargs)
    e = RoleEnv("pioneer", **toy_kwargs)
    with pytest.raises(RuntimeError, match="call reset"):
        e.step(GOOD)
    e.reset(seed=0)
    with pytest.raises(ValueError, match="out of range"):
        e.step(18)


def test_an_sb3_model_as_other_policy_gets_a_hint(toy_kwargs):
    class Model:  # what an SB3 algorithm looks like to RoleEnv: predict(), not callable
        def predict(self, obs):
            return GOOD, None

    with pytest.raises(TypeError, match="model.predict"):
        RoleEnv("observer", Model(), **toy_kwargs)


@pytest.mark.integration
def test_registered_role_env_defaults_to_the_paper_ppo_baseline(embedded_tokenizer):
    """No arguments: the pioneer alone on the embedded sentiment task (the paper's single-agent PPO)."""
    e = gymnasium.make(cory_env.ROLE_ENV_ID, max_new_tokens=2)
    obs, _ = e.reset(seed=0)
    raw = e.unwrapped.aec.unwrapped
    assert raw.possible_agents == ["pioneer"] and raw.reward_fn.__name__ == "vader_sentiment"
    assert e.action_space == gymnasium.spaces.Discrete(len(embedded_tokenizer))
    _, _, terminated, _, _ = e.step(embedded_tokenizer.eos_token_id)
    assert terminated


@pytest.fixture(scope="module")
def chain_kwargs(toy_kwargs):
    return {**toy_kwargs, "num_agents": 3, "context_length": 48}


def always(token):
    return lambda obs: token


@pytest.mark.parametrize("collective", [False, True])
@pytest.mark.parametrize("role", ["pioneer", "observer_1", "observer_2"])
def test_any_position_of_a_chain_passes_gymnasium_env_checker(chain_kwargs, role, collective):
    check_env(RoleEnv(role, echo_policy, collective_reward=collective, **chain_kwargs), skip_render_check=True)


def test_a_middle_position_of_a_chain_sees_the_earlier_answer_and_earns_the_collective_reward(chain_kwargs):
    others = {"pioneer": always(BAD), "observer_2": always(GOOD)}
    e = gymnasium.make(
        cory_env.ROLE_ENV_ID, role="observer_1", other_policy=others, collective_reward=True, **chain_kwargs
    )
    obs, info = e.reset(seed=0)
    assert obs["role"][0] == 1
    assert info["other_responses"] == {"pioneer": "bad bad bad bad"}  # it answered before this turn
    steps, reward, info = play(e, [GOOD] * 4, seed=0)
    assert steps == 4
    assert info["response"] == "good good good good" and info["task_reward"] == 1.0
    assert info["other_responses"] == {"pioneer": "bad bad bad bad", "observer_2": "good good good good"}
    assert info["other_task_rewards"] == {"pioneer": 0.0, "observer_2": 1.0}
    assert reward == pytest.approx(0.0 + 1.0 + 1.0)  # the collective reward: the chain's sum
    assert "bad bad bad bad" in info["context"]  # its prompt holds the pioneer's answer
    alone = RoleEnv("observer_1", others, **chain_kwargs)
    assert play(alone, [GOOD] * 4, seed=0)[1] == 1.0  # its own task reward


def test_bad_input_for_a_chain(chain_kwargs, toy_kwargs):
    with pytest.raises(ValueError, match="num_agents=N"):
        RoleEnv("observer_1", echo_policy, **toy_kwargs)
    with pytest.raises(ValueError, match=r"role must be one of \['pioneer', 'observer_1', 'observer_2'\]"):
        RoleEnv("observer", echo_policy, **chain_kwargs)
    with pytest.raises(ValueError, match="'observer_2' needs other_policy.*chain's other agents"):
        RoleEnv("observer_2", **chain_kwargs)
    with pytest.raises(
        ValueError, match="has observer_1 and observer_2 besides the pioneer, so other_policy must play them"
    ):
        RoleEnv("pioneer", **chain_kwargs)
    with pytest.raises(ValueError, match=r"each other agent.*\['pioneer', 'observer_2'\]"):
        RoleEnv("observer_1", {"pioneer": echo_policy}, **chain_kwargs)
    with pytest.raises(TypeError, match=r"other_policy\['observer_2'\] must be a callable"):
        RoleEnv("observer_1", {"pioneer": echo_policy, "observer_2": 5}, **chain_kwargs)
    with pytest.raises(ValueError, match=r"one of the environment's agents \['pioneer', 'observer_1', 'observer_2'\]"):
        RoleEnv("observer", echo_policy, env=cory_env.env(**chain_kwargs))
    with pytest.raises(ValueError, match="RoleExchangeWrapper"):  # a learner's name is no fixed position
        RoleEnv("llm_0", echo_policy, env=RoleExchangeWrapper(cory_env.env(**chain_kwargs)))
    with pytest.raises(TypeError, match=r"other_policy\['pioneer'\] must be a callable"):
        RoleEnv("observer", {"pioneer": 3}, **toy_kwargs)
    with pytest.raises(ValueError, match="no 'seating' option"):
        RoleEnv("observer_1", echo_policy, **chain_kwargs).reset(options={"seating": [1, 0, 2]})
    # num_agents=None is the default chain of two, as for the AEC environment.
    assert RoleEnv("observer", echo_policy, num_agents=None, **toy_kwargs).others == ("pioneer",)
