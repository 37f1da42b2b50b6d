"""The pioneer/observer AEC environment: API compliance, episode mechanics, bad input."""

from __future__ import annotations

import math
import re

import numpy as np
import pettingzoo
import pytest
from pettingzoo.test import api_test, seed_test, state_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

import cory_env
from cory_env import PromptTooLongError, RewardFunctionError
from cory_env.templates import GSM8K_OBSERVER, GSM8K_PIONEER, SENTIMENT_OBSERVER, render
from tests.support.envs import FORMS, PROMPTS, length_reward, play, random_policy


@pytest.mark.parametrize("B", FORMS)
def test_api(make_env, B):
    api_test(make_env(B), num_cycles=200)


@pytest.mark.parametrize("B", FORMS)
def test_seed(make_env, B):
    seed_test(lambda: make_env(B), num_cycles=100)


def test_registered_in_pettingzoo(gpt2_tokenizer):
    e = pettingzoo.make(
        "aec", cory_env.ENV_ID, tokenizer=gpt2_tokenizer, prompts=PROMPTS, reward_fn=length_reward, num_conversations=2
    )
    assert isinstance(e.unwrapped, cory_env.PioneerObserverEnv)
    assert e.unwrapped.num_conversations == 2


@pytest.mark.parametrize("B", FORMS)
def test_turns_run_to_max_new_tokens_then_episode_ends(make_env, gpt2_tokenizer, B):
    env = make_env(B, max_new_tokens=4, stop_token_ids=[gpt2_tokenizer.eos_token_id])
    env.reset(seed=0)
    order = []
    token = 11  # ","
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        order.append((agent, term))
        env.step(None if term else (token if B is None else np.full(B, token)))
    assert order == [("pioneer", False)] * 4 + [("observer", False)] * 4 + [("pioneer", True), ("observer", True)]
    assert env.agents == []


def test_stop_token_ends_a_conversations_turn_and_later_tokens_are_ignored(make_env, gpt2_tokenizer):
    eos = gpt2_tokenizer.eos_token_id
    env = make_env(3, max_new_tokens=5)
    raw = env.unwrapped
    env.reset(seed=1)
    steps = [[11, eos, 11], [eos, 13, 11], [11, 11, 11], [11, 11, 11], [11, 11, 11]]
    for tokens in steps:
        assert env.agent_selection == "pioneer"
        env.step(np.array(tokens))
    info = env.infos["pioneer"]
    assert list(info["response_length"]) == [2, 1, 5]  # the stop token counts, ignored tokens do not
    assert info["response"] == [",", "", ",,,,,"]
    # Ignored tokens are masked out of the pioneer's final context.
    obs = raw.observe("pioneer")
    assert obs["attention_mask"][1, -4:].tolist() == [0, 0, 0, 0]
    assert obs["attention_mask"][2, -5:].tolist() == [1] * 5


def test_turn_ends_early_when_all_conversations_stopped(make_env, gpt2_tokenizer):
    eos = gpt2_tokenizer.eos_token_id
    env = make_env(2, max_new_tokens=5)
    env.reset(seed=0)
    env.step(np.array([eos, 11]))
    env.step(np.array([11, eos]))
    assert env.agent_selection == "observer"


@pytest.mark.parametrize("B", FORMS)
def test_observation_supports_a_kv_cache(make_env, B):
    env = make_env(B, max_new_tokens=4)
    raw = env.unwrapped
    env.reset(seed=3)
    rows = lambda a: np.atleast_2d(a)  # noqa: E731
    before = raw.observe("observer")
    assert before["num_new_tokens"][0] == 0 and rows(before["attention_mask"]).sum() == 0
    obs = raw.observe("pioneer")
    width = max(len(raw.tokenizer(q)["input_ids"]) for q in raw.queries)
    assert obs["past_length"][0] == 0 and obs["num_new_tokens"][0] == width
    assert rows(obs["attention_mask"])[:, :-width].sum() == 0  # left padded
    assert obs["role"][0] == 0
    actions = [21, 22, 23]
    for t, token in enumerate(actions):
        env.step(token if B is None else np.full(B, token))
        obs = raw.observe("pioneer")
        assert obs["past_length"][0] == width + t and obs["num_new_tokens"][0] == 1
        assert (rows(obs["input_ids"])[:, -1] == token).all()
        assert (rows(obs["input_ids"])[:, -(t + 1) :] == actions[: t + 1]).all()
    with pytest.raises(ValueError):
        obs["input_ids"][..., 0] = 5  # observations are read-only views
    for space_obs, agent in ((obs, "pioneer"),):
        assert raw.observation_space(agent).contains(space_obs)


@pytest.mark.parametrize("knowledge_transfer", [True, False])
def test_knowledge_transfer_sets_the_observer_context(make_env, knowledge_transfer):
    env = make_env(3, knowledge_transfer=knowledge_transfer)
    finals = play(env, random_policy(env))
    pio, obs = finals["pioneer"][1], finals["observer"][1]
    for q, r, ctx in zip(pio["query"], pio["response"], obs["context"]):
        expected = render(SENTIMENT_OBSERVER, q, r) if knowledge_transfer else q
        assert ctx == expected
    # And the observer's tokens are exactly that text, tokenized.
    raw = env.unwrapped
    first = raw.tokenizer(obs["context"][0])["input_ids"]
    mask = raw._turns["observer"].mask[0, : raw.context_length].astype(bool)
    assert raw._turns["observer"].tokens[0, : raw.context_length][mask].tolist() == first


def test_gsm8k_templates(make_env):
    env = make_env(2, pioneer_template=GSM8K_PIONEER, observer_template=GSM8K_OBSERVER, context_length=160)
    finals = play(env, random_policy(env))
    pio, obs = finals["pioneer"][1], finals["observer"][1]
    assert pio["context"][0].startswith("Question: Shawn has five toys.")
    assert pio["context"][0].endswith(f"Question: {pio['query'][0]} Answer:")
    assert obs["context"][0].endswith(f"Question: {pio['query'][0]} Reference: {pio['response'][0]} Answer:")


def test_user_template_callable(make_env):
    env = make_env(None, observer_template=lambda q, r: f"Improve: {q}{r}\nBetter: {q}")
    finals = play(env, random_policy(env))
    pio = finals["pioneer"][1]
    assert finals["observer"][1]["context"] == f"Improve: {pio['query']}{pio['response']}\nBetter: {pio['query']}"


@pytest.mark.parametrize("B", FORMS)
def test_task_rewards_score_the_decoded_responses(make_env, B):
    env = make_env(B)
    finals = play(env, random_policy(env))
    for reward, info in finals.values():
        expected = length_reward(None, [info["response"]] if B is None else info["response"])
        assert np.allclose(np.atleast_1d(info["task_reward"]), expected)
        assert np.allclose(np.atleast_1d(info["reward"]), expected)  # no wrapper: own task reward
        assert math.isclose(reward, float(np.mean(expected)))  # scalar PettingZoo reward: the batch mean


def test_metadata_reaches_the_reward_function(make_env):
    seen = {}

    def reward(queries, responses, answer):
        seen["answer"] = answer
        return [float(a == q) for q, a in zip(queries, answer)]

    prompts = [cory_env.Prompt("two", {"answer": "two"}), cory_env.Prompt("three", {"answer": "three"})]
    env = make_env(4, prompts=prompts, reward_fn=reward)
    finals = play(env, random_policy(env))
    assert seen["answer"] == finals["pioneer"][1]["query"]
    assert finals["pioneer"][0] == 1.0


def test_render_ansi(make_env):
    env = make_env(2, render_mode="ansi")
    play(env, random_policy(env))
    text = env.unwrapped.render()
    assert "pioneer" in text and "observer" in text and "task reward" in text


def test_max_new_tokens_is_sampled_per_episode(make_env):
    env = make_env(None, max_new_tokens=(2, 9))
    seen = set()
    for seed in range(30):
        env.reset(seed=seed)
        seen.add(env.unwrapped.max_new_tokens)
    assert seen <= set(range(2, 10)) and len(seen) > 3


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "action, error, match",
    [
        (3.0, TypeError, "integer"),
        ("7", TypeError, "integer"),
        (True, TypeError, "integer"),
        (-1, ValueError, "out of range"),
        (50257, ValueError, r"out of range.*0\.\.50256"),
        (None, ValueError, "must be a token id"),
        ([1, 2], ValueError, "shape"),
    ],
)
def test_bad_token_ids_single(make_env, action, error, match):
    env = make_env(None)
    env.reset(seed=0)
    with pytest.raises(error, match=match):
        env.step(action)


def test_bad_token_ids_batched(make_env):
    env = make_env(3)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"token id 99999 for conversation 2 is out of range"):
        env.step(np.array([1, 2, 99999]))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        env.step(np.array([1, 2]))
    with pytest.raises(TypeError, match="integer"):
        env.step(np.array([1.0, 2.0, 3.0]))
    env.step(np.array([1, 2, 3], dtype=np.int32))  # any integer dtype is fine


@pytest.mark.parametrize("B", [None, 3])
def test_the_global_state_is_every_roles_observation_masked(make_env, B):
    state_test(make_env(B), turn_based_aec_to_parallel(make_env(B)), num_cycles=50)  # PettingZoo's own checks
    env = make_env(B, max_new_tokens=3)
    with pytest.raises(AssertionError, match="reset"):  # PettingZoo's order enforcing
        env.state()
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.state()
    env.reset(seed=0)
    seen_rows = set()
    for _agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else env.action_space(_agent).sample())
        state = env.state()
        assert env.state_space.contains(state) and state.shape[-2:] == (2, env.unwrapped.context_length)
        for i, role in enumerate(env.possible_agents):
            obs = env.unwrapped.observe(role)
            row = state[..., i, :]
            assert np.array_equal(row, np.where(obs["attention_mask"] == 1, obs["input_ids"], -1))
            seen_rows.add((role, bool((row >= 0).any())))
    assert seen_rows == {("pioneer", True), ("observer", False), ("observer", True)}  # empty before its turn


def test_action_for_a_finished_agent_and_step_after_the_end(make_env):
    env = make_env(None, max_new_tokens=2)
    env.reset(seed=0)
    for _ in range(4):
        env.step(11)
    assert env.terminations["pioneer"]
    with pytest.raises(ValueError, match="terminated.*only valid action is None.*reset"):
        env.step(11)
    env.step(None)
    env.step(None)
    assert env.agents == []
    for stepped in (env, env.unwrapped):  # PettingZoo's order enforcing would only warn
        with pytest.raises(RuntimeError, match="episode is over.*reset"):
            stepped.step(11)


def test_prompt_longer_than_the_context(make_env):
    long_prompt = "word " * 80
    env = make_env(None, prompts=[long_prompt], context_length=64)
    with pytest.raises(
        PromptTooLongError, match="pioneer's prompt has .* tokens.*context_length=64.*Raise context_length"
    ):
        env.reset(seed=0)
    # The observer's prompt holds the query twice: caught at reset, not mid-episode.
    env = make_env(None, prompts=["word " * 25], context_length=64, max_new_tokens=4)
    with pytest.raises(PromptTooLongError, match="observer's prompt"):
        env.reset(seed=0)


def test_every_prompt_of_a_list_is_checked_at_once(make_env):
    prompts = ["short one", "word " * 26, "word " * 30, "also short"]
    env = make_env(None, prompts=prompts, context_length=64, max_new_tokens=(2, 4))
    # The observer's worst case: its template holds the query twice, then up to 4 + 4 tokens of responses.
    expected = r"2 of 4 prompts .* observer's prompt .*query 'word word.*Raise context_length to \d+"
    with pytest.raises(PromptTooLongError, match=expected) as err:
        env.unwrapped.check_prompts()
    needed = int(re.search(r"Raise context_length to (\d+)", str(err.value)).group(1))
    make_env(None, prompts=prompts, context_length=needed, max_new_tokens=(2, 4)).unwrapped.check_prompts()  # enough
    with pytest.raises(PromptTooLongError):
        make_env(None, prompts=prompts, context_length=needed - 1, max_new_tokens=(2, 4)).unwrapped.check_prompts()
    make_env(None, prompts=prompts[:1] + prompts[3:], context_length=64).unwrapped.check_prompts()  # all fit


def test_context_longer_than_the_model_window(gpt2_tokenizer):
    gpt2_tokenizer_window = gpt2_tokenizer.model_max_length
    gpt2_tokenizer.model_max_length = 128
    try:
        with pytest.raises(ValueError, match="model_max_length=128"):
            cory_env.env(tokenizer=gpt2_tokenizer, prompts=PROMPTS, reward_fn=length_reward, context_length=256)
    finally:
        gpt2_tokenizer.model_max_length = gpt2_tokenizer_window


def test_empty_prompt_source(make_env):
    with pytest.raises(ValueError, match="prompt source is empty"):
        make_env(None, prompts=[])
    with pytest.raises(TypeError, match="not a single string"):
        make_env(None, prompts="The movie")


def raising_reward(queries, responses, **_):
    raise KeyError("label")


def nan_reward(queries, responses, **_):
    return [float("nan")] + [0.0] * (len(responses) - 1)


def inf_reward(queries, responses, **_):
    return [0.0] * (len(responses) - 1) + [float("inf")]


def short_reward(queries, responses, **_):
    return [0.0] * (len(responses) - 1)


@pytest.mark.parametrize(
    "fn, match",
    [
        (raising_reward, r"raising_reward raised KeyError"),
        (nan_reward, r"nan_reward returned nan for item 0"),
        (inf_reward, r"inf_reward returned inf for item 2"),
        (short_reward, r"short_reward returned 2 value\(s\) for 3 responses"),
        (lambda q, r, **_: 1.0, r"returned a scalar"),
    ],
)
def test_bad_reward_function(make_env, fn, match):
    env = make_env(3, reward_fn=fn, max_new_tokens=1)
    env.reset(seed=0)
    with pytest.raises(RewardFunctionError, match=match):
        env.step(np.array([11, 11, 11]))


def test_bad_arguments(make_env):
    with pytest.raises(ValueError, match="num_conversations"):
        make_env(0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        make_env(None, max_new_tokens=(5, 2))
    with pytest.raises(ValueError, match="unknown field"):
        make_env(None, observer_template="{query} {answer}")
    with pytest.raises(ValueError, match="pioneer_template"):
        make_env(None, pioneer_template="{query}{response}")
    with pytest.raises(ValueError, match="no room"):
        make_env(None, context_length=8, max_new_tokens=8)
    with pytest.raises(ValueError, match="render_mode"):
        make_env(None, render_mode="rgb_array")


@pytest.mark.parametrize("B", FORMS)
def test_pioneer_alone(make_env, B):
    """with_observer=False: the single-agent PPO baseline's game."""
    api_test(make_env(B, with_observer=False), num_cycles=100)
    env = make_env(B, with_observer=False, max_new_tokens=3)
    finals = play(env, random_policy(env))
    assert list(finals) == ["pioneer"]
    reward, info = finals["pioneer"]
    assert np.allclose(np.atleast_1d(info["reward"]), np.atleast_1d(info["task_reward"]))


NUMERIC_KEYS = {"role": np.integer, "response_length": np.integer, "task_reward": np.floating, "reward": np.floating}


@pytest.mark.parametrize("wrap", ["plain", "collective"])
@pytest.mark.parametrize("B", FORMS)
def test_numeric_infos_have_fixed_keys_and_shapes_from_reset_on(make_env, B, wrap):
    """numeric_infos=True: what TorchRL's PettingZooWrapper needs (one info spec, built at reset)."""
    api_test(make_env(B, numeric_infos=True), num_cycles=100)
    env = make_env(B, numeric_infos=True)
    if wrap == "collective":
        env = cory_env.CollectiveRewardWrapper(env)
    shape = () if B is None else (B,)

    def check(infos):
        for agent, info in infos.items():
            assert set(info) == set(NUMERIC_KEYS), (agent, info)
            for key, kind in NUMERIC_KEYS.items():
                assert np.issubdtype(np.asarray(info[key]).dtype, kind), (agent, key, info[key])
                assert np.shape(info[key]) == (() if key == "role" else shape), (agent, key)
            assert info["role"] == cory_env.pioneer_observer.ROLES.index(agent)

    env.reset(seed=1)
    check(env.infos)
    assert all(np.all(np.asarray(v) == 0) for i in env.infos.values() for k, v in i.items() if k != "role")
    finals = {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        check(env.infos)
        if term:
            finals[agent] = (reward, dict(info))
            env.step(None)
        else:
            env.step(env.action_space(agent).sample())
    transcript = env.unwrapped.last_transcript
    for agent, (reward, info) in finals.items():
        assert info["response_length"] is not None and np.all(np.asarray(info["response_length"]) >= 1)
        for key in ("response_length", "task_reward", "reward"):
            np.testing.assert_allclose(info[key], transcript[agent][key])
        assert reward == pytest.approx(float(np.mean(info["reward"])))
        assert isinstance(transcript[agent]["response"], str if B is None else list)
    if wrap == "collective":
        total = sum(np.asarray(transcript[a]["task_reward"]) for a in transcript)
        for agent in transcript:
            np.testing.assert_allclose(finals[agent][1]["reward"], total)


@pytest.mark.parametrize("B", FORMS)
def test_last_transcript_is_the_default_final_infos_and_survives_reset(make_env, B):
    env = make_env(B)
    assert env.unwrapped.last_transcript is None
    finals = play(env, random_policy(env), seed=3)

    def assert_same(transcript, finals):
        assert set(transcript) == set(finals)
        for agent, info in finals.items():
            assert set(transcript[agent]) == set(info)
            for key, value in info.items():
                assert np.all(np.asarray(transcript[agent][key]) == np.asarray(value)), (agent, key)

    assert_same(env.unwrapped.last_transcript, {a: info for a, (_, info) in finals.items()})
    transcript = env.unwrapped.last_transcript
    env.reset(seed=4)  # a client that resets at once (TorchRL) still finds the finished episode's texts
    env.step(env.action_space("pioneer").sample())
    assert_same(env.unwrapped.last_transcript, transcript)
    # A copy: changing it changes nothing in the environment.
    env.unwrapped.last_transcript["pioneer"]["response"] = "changed"
    assert env.unwrapped.last_transcript["pioneer"]["response"] != "changed"


def test_numeric_infos_must_be_a_bool(make_env):
    with pytest.raises(TypeError, match="numeric_infos must be True or False"):
        make_env(None, numeric_infos="yes")


@pytest.mark.parametrize("B", FORMS)
def test_a_replay_with_given_answers_plays_only_the_later_positions(make_env, B):
    templates = ["{query}", "{query} | {response}", "{query} | {response_1} | {response_2}"]
    env = make_env(B, num_agents=3, templates=templates)
    played = play(env, random_policy(env), seed=4)
    raw = env.unwrapped
    queries, limit, state = played["pioneer"][1]["query"], raw.max_new_tokens, raw.np_random.bit_generator.state
    pioneer = played["pioneer"][1]["response"]
    blank = "" if B is None else [""] * B
    env.reset(options={"answers": [pioneer, blank]})
    assert env.agents == ["observer_2"] and env.agent_selection == "observer_2"
    finals = play_on(env)
    assert list(finals) == ["observer_2"]
    info = finals["observer_2"]
    assert info["query"] == queries and raw.max_new_tokens == limit
    # Its prompt is rendered from the given answers, in order: the pioneer's kept, the observer's blank.
    one = B is None
    contexts, answers, queries = ([x] if one else x for x in (info["context"], pioneer, queries))
    assert contexts == [f"{q} | {a} | " for q, a in zip(queries, answers)]
    assert np.all(np.atleast_1d(info["reward"]) == np.atleast_1d(info["task_reward"]))
    assert raw.np_random.bit_generator.state == state  # nothing drawn
    raw.render_mode = "ansi"
    assert "(given)" in raw.render()
    # The next plain reset draws a new episode, every agent playing.
    env.reset()
    assert env.agents == ["pioneer", "observer_1", "observer_2"]


def play_on(env):
    """Play the episode ``env`` was reset to; return each agent's final info."""
    finals = {}
    for agent in env.agent_iter():
        _, _, term, trunc, info = env.last()
        if term or trunc:
            finals[agent] = info
            env.step(None)
        else:
            env.step(env.action_space(agent).sample())
    return finals


def test_a_replay_on_a_copy_leaves_the_played_episode_and_the_wrappers_refuse_replays(make_env):
    import copy

    env = make_env(2)
    played = play(env, random_policy(env))
    raw = env.unwrapped
    before = (raw.last_transcript, dict(raw.responses), dict(raw.task_rewards), raw.np_random.bit_generator.state)
    replay = copy.copy(raw)
    replay.reset(options={"answers": [["", ""]]})
    assert play_on(replay)["observer"]["context"] == [
        render(SENTIMENT_OBSERVER, q, "") for q in played["pioneer"][1]["query"]
    ]
    after = (raw.last_transcript, dict(raw.responses), dict(raw.task_rewards), raw.np_random.bit_generator.state)
    assert repr(after) == repr(before)
    for wrapped in (cory_env.CollectiveRewardWrapper(make_env(2)), cory_env.RoleExchangeWrapper(make_env(2))):
        play(wrapped, random_policy(wrapped))
        with pytest.raises(ValueError, match=r"copy.copy\(env.unwrapped\)"):
            wrapped.reset(options={"answers": [["", ""]]})


def test_bad_replay_answers(make_env):
    env = make_env(2)
    with pytest.raises(RuntimeError, match="play one first"):
        env.reset(options={"answers": [["a", "b"]]})
    play(env, random_policy(env))
    for answers, match in [
        ([["a", "b"], ["c", "d"]], r"0 <= k < 2"),
        ("ab", r"list of the answers"),
        ([["a"]], r"must be 2 strings"),
        ([["a", 3]], r"must be 2 strings"),
        ([3], r"must be 2 strings"),
    ]:
        with pytest.raises(ValueError, match=match):
            env.reset(options={"answers": answers})


def test_a_replay_with_no_answer_given_plays_every_turn_of_the_same_queries(make_env):
    env = make_env(2)
    play(env, random_policy(env))
    queries, limit, rng = list(env.queries), env.max_new_tokens, env.np_random.bit_generator.state
    env.reset(options={"answers": []})
    assert env.agents == env.possible_agents and env.queries == queries and env.max_new_tokens == limit
    assert env.np_random.bit_generator.state == rng  # nothing drawn
    env.reset()  # a new episode draws again
    assert env.np_random.bit_generator.state != rng
