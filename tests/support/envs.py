"""Small environments over GPT-2's tokenizer (no model): the prompts and reward the ``make_env``
fixture (tests/conftest.py) gives them, the two forms, and a way to play one episode."""

from __future__ import annotations

PROMPTS = ["The movie was", "I really liked the", "This film is a", "Worst", "An honest"]
FORMS = [None, 3]  # single form, batched form with 3 conversations


def length_reward(queries, responses, **_):
    """A deterministic toy reward: characters in the response / 10."""
    return [len(r) / 10 for r in responses]


def play(env, policy, seed=0):
    """Play one episode; return the (agent, reward, info) each agent saw at its final step."""
    env.reset(seed=seed)
    finals = {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            finals[agent] = (reward, info)
            env.step(None)
        else:
            env.step(policy(agent, obs))
    return finals


def random_policy(env):
    return lambda agent, obs: env.action_space(agent).sample()
