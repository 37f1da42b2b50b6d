"""Chains that play several rounds (``rounds=R``), private prompt fields and per-turn rewards.

Mostly over the toy word tokenizer (15 words: a template's other words become ``<unk>``, so texts
are compared through ``info["context"]``, the rendered string, or through token ids); the
private-field tests decode the real (embedded) tokenizer's ids.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test, state_test

import cory_env
from cory_env import CollectiveRewardWrapper, PromptTooLongError, RoleExchangeWrapper
from cory_env.context import PlayedTurn
from cory_env.errors import UsageError
from cory_env.prompts import Prompt, PromptList
from cory_env.rewards import RewardFunctionError
from cory_env.tasks.signal import (
    LATER_SENDER_TEMPLATE,
    PRIVATE_FIELDS,
    RECEIVER_TEMPLATE,
    SENDER_TEMPLATE,
    signal_prompts,
)
from cory_env.tasks.toy import TOY_PROMPTS, fraction_good, toy_tokenizer


@functools.cache
def toy():
    return toy_tokenizer()


def tid(word: str) -> int:
    """A toy word's token id."""
    i = toy().convert_tokens_to_ids(word)
    assert i > 2, word  # a real word, not a special token
    return i


EOS = 1


def toy_kwargs(N=2, R=None, B=None, **kwargs):
    """The arguments of a toy chain of ``N`` agents playing ``R`` rounds (``R=None``: the argument left out)."""
    kwargs.setdefault("tokenizer", toy())
    kwargs.setdefault("prompts", TOY_PROMPTS)
    kwargs.setdefault("reward_fn", fraction_good)
    kwargs.setdefault("max_new_tokens", (1, 3))
    kwargs.setdefault("context_length", 40)
    if R is not None:
        kwargs["rounds"] = R
    return dict(num_agents=N, num_conversations=B, **kwargs)


def make(N=2, R=None, B=None, **kwargs):
    """A toy chain (AEC, with order enforcing): :func:`toy_kwargs`."""
    return cory_env.env(**toy_kwargs(N, R, B, **kwargs))


def toy_policy(seed=0):
    """Random toy words (never EOS: turns run to their limit), seeded."""
    rng = np.random.default_rng(seed)

    def act(agent, obs):
        shape = obs["input_ids"].shape[:-1]
        return rng.integers(3, 18, size=shape) if shape else int(rng.integers(3, 18))

    return act


def play(env, policy, seed=0, options=None, on_step=None):
    """Play one episode: ``{agent: [rewards last() gave it]}``, and what each saw at its final step."""
    env.reset(seed=seed, options=options)
    got, finals = {}, {}
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        got.setdefault(agent, []).append(reward)
        if term or trunc:
            finals[agent] = (reward, info)
            env.step(None)
        else:
            env.step(policy(agent, obs))
        if on_step is not None:
            on_step(env)
    return got, finals


def words_policy(env, words):
    """Each turn says one chosen toy word, then EOS: ``words[(position, round)]`` (0-based)."""
    base = env.unwrapped

    def act(agent, obs):
        token = tid(words[(base.possible_agents.index(agent), base.round)]) if obs["past_length"][0] == 0 else EOS
        shape = obs["input_ids"].shape[:-1]
        return np.full(shape, token) if shape else token

    return act


def visible_ids(ids, mask):
    return [int(i) for i, m in zip(ids, mask) if m]


def same(a, b):
    """Deep equality of infos, transcripts and observations (numpy arrays and scalars inside)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
        return np.shape(a) == np.shape(b) and np.array_equal(a, b)
    return type(a) is type(b) and a == b


CHAINS = [(N, R) for N in (2, 3) for R in (1, 2, 3)]


# ---------------------------------------------------------------------------------------- PettingZoo's tests
@pytest.mark.parametrize("N,R", CHAINS)
def test_api(N, R):
    api_test(make(N, R), num_cycles=60)


@pytest.mark.parametrize("turn_rewards", [False, True])
@pytest.mark.parametrize("B", [None, 2])
def test_api_batched_and_turn_rewards(B, turn_rewards):
    api_test(make(3, 2, B, turn_rewards=turn_rewards), num_cycles=60)


@pytest.mark.parametrize("N,R", CHAINS)
def test_parallel_api(N, R):
    par = cory_env.parallel_env(**toy_kwargs(N, R))
    parallel_api_test(par, num_cycles=60)
    assert par.possible_agents == list(cory_env.chain_roles(N))


@pytest.mark.parametrize("N,R", CHAINS)
def test_seed(N, R):
    seed_test(lambda: make(N, R), num_cycles=60)


@pytest.mark.parametrize("N,R", CHAINS)
def test_state(N, R):
    state_test(make(N, R), cory_env.parallel_env(**toy_kwargs(N, R)), num_cycles=20)


WRAPS = {
    "collective": CollectiveRewardWrapper,
    "role_exchange": lambda e: RoleExchangeWrapper(e, period=1),
    "role_exchange(collective)": lambda e: RoleExchangeWrapper(CollectiveRewardWrapper(e), period=1),
}


@pytest.mark.parametrize("turn_rewards", [False, True])
@pytest.mark.parametrize("wrap", WRAPS)
def test_wrappers_api_and_seed(wrap, turn_rewards):
    api_test(WRAPS[wrap](make(2, 2, turn_rewards=turn_rewards)), num_cycles=60)
    seed_test(lambda: WRAPS[wrap](make(2, 2, turn_rewards=turn_rewards)), num_cycles=40)
    parallel_api_test(cory_env.to_parallel(WRAPS[wrap](make(3, 2, turn_rewards=turn_rewards))), num_cycles=40)


# ---------------------------------------------------------------------------------------- turn order, rounds
def test_agent_iter_goes_round_by_round():
    env = make(2, 2, max_new_tokens=2)
    env.reset(seed=0)
    order = []
    for agent in env.agent_iter():
        _, _, term, _, _ = env.last()
        order.append((agent, env.unwrapped.round, term))
        env.step(None if term else tid("good"))
    pio, obs = "pioneer", "observer"
    assert order == [
        *[(pio, 0, False)] * 2,
        *[(obs, 0, False)] * 2,
        *[(pio, 1, False)] * 2,
        *[(obs, 1, False)] * 2,
        (pio, 1, True),
        (obs, 1, True),
    ]
    assert [(k, r) for k, r, _ in env.unwrapped.history] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert [t.round for t in env.unwrapped.played_turns("observer")] == [0, 1]


def test_a_chain_of_three_over_three_rounds_takes_turns_in_chain_order():
    env = make(3, 3, max_new_tokens=1)
    env.reset(seed=1)
    turns = []
    for agent in env.agent_iter():
        _, _, term, _, _ = env.last()
        if not term:
            turns.append((agent, env.unwrapped.round))
        env.step(None if term else tid("ok"))
    roles = ["pioneer", "observer_1", "observer_2"]
    assert turns == [(a, r) for r in range(3) for a in roles]
    assert [t.position for t in env.unwrapped.played_turns("observer_1")] == [1, 1, 1]


# A chain of two over two rounds whose templates name earlier turns in every way.
ROUND_TEMPLATES = [
    ["{query}", "{query} {response_2_1} {round}"],
    ["{query} {response}", "{query} {response_1_1} {response_2_1} {response_1_2} {response_1} {response} {round}"],
]
WORDS = {(0, 0): "good", (1, 0): "bad", (0, 1): "great", (1, 1): "fine"}


def expected_contexts(q, words):
    g, b, gr = words[(0, 0)], words[(1, 0)], words[(0, 1)]
    return {
        ("pioneer", 0): q,
        ("observer", 0): f"{q} {g}",
        ("pioneer", 1): f"{q} {b} 2",
        ("observer", 1): f"{q} {g} {b} {gr} {gr} {gr} 2",
    }


def test_each_turn_starts_a_fresh_context_and_infos_name_the_round():
    env = make(2, 2, 2, prompts=["the movie was"], templates=ROUND_TEMPLATES, max_new_tokens=2)
    base = env.unwrapped
    env.reset(seed=0)
    policy = words_policy(env, WORDS)
    starts = []
    for agent in env.agent_iter():
        obs, _, term, _, info = env.last()
        if term:
            env.step(None)
            continue
        if obs["past_length"][0] == 0:
            text = expected_contexts("the movie was", WORDS)[(agent, base.round)]
            width = len(toy()(text)["input_ids"])
            assert obs["num_new_tokens"][0] == width and obs["attention_mask"][:, :-width].sum() == 0
            starts.append((agent, base.round))
            if base.round == 1:  # the infos still hold the agent's first-round turn
                assert (
                    info["round"] == 0
                    and info["context"] == [expected_contexts("the movie was", WORDS)[(agent, 0)]] * 2
                )
        env.step(policy(agent, obs))
        if base.turn_ended == agent:
            assert env.infos[agent]["round"] == base.played_turns(agent)[-1].round
    assert starts == [("pioneer", 0), ("observer", 0), ("pioneer", 1), ("observer", 1)]


def test_templates_of_later_rounds_render_the_earlier_turns():
    env = make(2, 2, prompts=["the movie was"], templates=ROUND_TEMPLATES, max_new_tokens=2)
    play(env, words_policy(env, WORDS))
    base = env.unwrapped
    expected = expected_contexts("the movie was", WORDS)
    transcript = base.last_transcript
    for role in ("pioneer", "observer"):
        turns = transcript[role]["turns"]
        assert [t["round"] for t in turns] == [0, 1]
        for r, (turn, played) in enumerate(zip(turns, base.played_turns(role))):
            k = base.possible_agents.index(role)
            assert turn["context"] == expected[(role, r)]
            assert turn["response"] == WORDS[(k, r)]
            # The prompt the agent was given, as tokens, then its response (the word, then EOS).
            assert isinstance(played, PlayedTurn) and (played.round, played.position) == (r, k)
            T = played.response_width
            ids, mask = played.input_ids[0], played.attention_mask[0]
            assert visible_ids(ids[:-T], mask[:-T]) == toy()(expected[(role, r)])["input_ids"]
            assert visible_ids(ids[-T:], mask[-T:]) == [tid(WORDS[(k, r)]), EOS]
            assert played.response_length.tolist() == [2]
    assert [(k, r, a) for k, r, a in base.history] == [(k, r, [WORDS[(k, r)]]) for r in range(2) for k in range(2)]


def test_responses_is_every_earlier_turn_and_response_the_one_just_before():
    env = make(
        3,
        2,
        prompts=["the plot is"],
        templates=["{query}", "{query} {response}", "{query} {responses}"],
        max_new_tokens=2,
    )
    words = {(0, 0): "good", (1, 0): "bad", (2, 0): "great", (0, 1): "fine", (1, 1): "awful", (2, 1): "ok"}
    play(env, words_policy(env, words))
    t = env.unwrapped.last_transcript
    assert [x["context"] for x in t["observer_1"]["turns"]] == ["the plot is good", "the plot is fine"]
    assert [x["context"] for x in t["observer_2"]["turns"]] == [
        "the plot is good\nbad",
        "the plot is good\nbad\ngreat\nfine\nawful",
    ]
    assert [x["context"] for x in t["pioneer"]["turns"]] == ["the plot is", "the plot is"]  # one template: kept


def test_default_later_template_is_the_observer_template_at_every_position():
    env = make(
        2,
        2,
        prompts=["the movie was"],
        pioneer_template="{query}",
        observer_template="{query} {response}",
        max_new_tokens=2,
    )
    play(env, words_policy(env, WORDS))
    t = env.unwrapped.last_transcript
    assert t["pioneer"]["turns"][1]["context"] == "the movie was bad"  # the observer's last answer
    env = make(
        2,
        2,
        prompts=["the movie was"],
        later_templates=["{query} {response_2} {round}", "{query} {response}"],
        observer_template="{query} {response}",
        max_new_tokens=2,
    )
    play(env, words_policy(env, WORDS))
    assert env.unwrapped.last_transcript["pioneer"]["turns"][1]["context"] == "the movie was bad 2"


def test_a_replay_renders_the_given_turns_into_later_rounds():
    env = make(2, 2, prompts=TOY_PROMPTS, templates=ROUND_TEMPLATES, max_new_tokens=2)
    play(env, words_policy(env, WORDS), seed=3)
    base = env.unwrapped
    q = base.queries[0]
    given = {(0, 0): "ok", (1, 0): "awful", (0, 1): "not", (1, 1): "very"}
    rep = copy.copy(base)
    rep.reset(options={"answers": ["ok", "awful"]})  # the first round given
    assert rep.queries == [q] and rep.agents == ["pioneer", "observer"]
    assert rep.agent_selection == "pioneer" and rep.round == 1
    obs = rep.observe("pioneer")
    assert visible_ids(obs["input_ids"], obs["attention_mask"]) == toy()(f"{q} awful 2")["input_ids"]
    assert rep.observe("observer")["attention_mask"].sum() == 0  # not its turn yet
    policy = words_policy(rep, given)
    for agent in rep.agent_iter():
        obs, _, term, _, _ = rep.last()
        rep.step(None if term else policy(agent, obs))
    t = rep.last_transcript
    assert [x["context"] for x in t["observer"]["turns"]] == [expected_contexts(q, given)[("observer", 1)]]
    assert [x["round"] for x in t["pioneer"]["turns"]] == [1]
    assert [(k, r) for k, r, _ in rep.history] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert base.last_transcript["observer"]["turns"][1]["context"] == expected_contexts(q, WORDS)[("observer", 1)]

    # Three turns given: only the observer's second turn is played.
    rep.reset(options={"answers": [["good"], ["bad"], ["great"]]})
    assert rep.agents == ["observer"] and rep.agent_selection == "observer" and rep.round == 1
    obs = rep.observe("observer")
    assert (
        visible_ids(obs["input_ids"], obs["attention_mask"])
        == toy()(expected_contexts(q, WORDS)[("observer", 1)])["input_ids"]
    )


@pytest.mark.parametrize(
    "templates, field",
    [
        ([["{query}", "{query} {response_2_2}"], "{query} {response}"], "response_2_2"),  # pioneer, round 2
        ([["{query} {response_2}", "{query}"], "{query} {response}"], "response_2"),  # pioneer, round 1
        ([["{query}", "{query} {response_1_2}"], "{query} {response}"], "response_1_2"),  # its own turn
        ([["{query}", "{query}"], ["{query} {response_1_2}", "{query}"]], "response_1_2"),  # observer, round 1
        ([["{query}", "{query}"], ["{query}", "{query} {response_2_2}"]], "response_2_2"),  # observer's own turn
        (["{query}", "{query} {response_1_3}"], "response_1_3"),  # a round after the last
        ([["{query} {round}", "{query} {response_2}"], "{query} {response_2}"], "response_2"),  # observer, round 1
    ],
)
def test_a_template_naming_a_turn_not_yet_played_fails_when_made(templates, field):
    with pytest.raises(UsageError, match=field):
        make(2, 2, templates=templates)


def test_a_template_naming_a_turn_not_yet_played_fails_without_templates():
    with pytest.raises(UsageError, match="response_2"):
        make(2, 2, pioneer_template="{query} {response_2}")
    with pytest.raises(UsageError, match="response_2_2"):
        make(2, 2, later_templates=["{query} {response_2_2}", "{query} {response}"])
    make(2, 2, later_templates=["{query} {response_2_1} {round}", "{query} {response_1_2}"])  # all played


@pytest.mark.parametrize("field", ["response_3", "response_3_1"])
def test_a_template_naming_an_agent_past_the_chain_fails_when_made(field):
    with pytest.raises(UsageError, match=field):
        make(2, 2, templates=[["{query}", "{query} {" + field + "}"], "{query} {response}"])


# ---------------------------------------------------------------------------------------- private fields
@pytest.fixture(scope="module")
def real_tok():
    from cory_env.models import load_tokenizer

    return load_tokenizer()


SECRETS = ("zebra", "walrus", "penguin")
DECOYS = "red, blue, green"
SECRET_ROWS = [Prompt("colour", {"secret": s, "words": DECOYS}) for s in SECRETS]
RECEIVER = 'Your partner knows a secret {query}: one of {words}. Your partner says: "{response}" The secret {query} is'


def secret_env(tokenizer, R=2, **kwargs):
    kwargs.setdefault("templates", [[SENDER_TEMPLATE] + [LATER_SENDER_TEMPLATE] * (R - 1), RECEIVER])
    kwargs.setdefault("private_fields", {"secret": [0]})
    return cory_env.env(
        tokenizer=tokenizer,
        prompts=PromptList(SECRET_ROWS),
        reward_fn=fraction_good,
        num_conversations=3,
        max_new_tokens=3,
        context_length=96,
        rounds=R,
        **kwargs,
    )


def decoded_rows(tokenizer, ids, mask):
    return [tokenizer.decode(visible_ids(i, m)) for i, m in zip(ids, mask)]


@pytest.mark.parametrize("R", [1, 2])
def test_only_the_sender_ever_sees_the_private_field(real_tok, R):
    env = secret_env(real_tok, R)
    base = env.unwrapped
    safe = real_tok(" ok maybe the so")["input_ids"]  # answers that never spell a secret
    rng = np.random.default_rng(0)
    checked = {"pioneer": 0, "observer": 0}
    for episode in range(4):
        env.reset(seed=episode)
        secrets = [p.metadata["secret"] for p in base.prompts]
        for agent in env.agent_iter():
            obs, _, term, _, info = env.last()
            texts = decoded_rows(real_tok, obs["input_ids"], obs["attention_mask"])
            if agent == "observer":
                assert not any(s in text for text in texts for s in SECRETS), texts
                assert not any(s in c for c in info.get("context", []) for s in SECRETS)
                if not term:
                    assert all(DECOYS in text for text in texts)  # a public field reaches it
            elif obs["past_length"][0] == 0 and not term:  # the sender's prompt: its row's secret
                assert all(s in text for s, text in zip(secrets, texts)), texts
            state = env.state()
            for b, s in enumerate(secrets):
                rows = [real_tok.decode([int(i) for i in row if i >= 0]) for row in state[b]]
                assert s in rows[0] and not any(x in rows[1] for x in SECRETS)
            checked[agent] += 1
            env.step(None if term else rng.choice(safe, size=3))
        t = base.last_transcript["observer"]
        contexts = [c for turn in t.get("turns", [t]) for c in turn["context"]]
        assert len(contexts) == 3 * R and not any(s in c for c in contexts for s in SECRETS)
        for played in base.played_turns("observer"):
            texts = decoded_rows(real_tok, played.input_ids, played.attention_mask)
            assert not any(s in text for text in texts for s in SECRETS)
        for played in base.played_turns("pioneer"):
            texts = decoded_rows(real_tok, played.input_ids, played.attention_mask)
            assert all(s in text for s, text in zip(secrets, texts))
    assert checked["observer"] > 10 and checked["pioneer"] > 10


def test_under_role_exchange_whoever_sits_at_position_1_never_sees_the_secret(real_tok):
    env = RoleExchangeWrapper(secret_env(real_tok, 2), period=1)
    safe = real_tok(" ok maybe")["input_ids"]
    seen_as_observer = set()
    for episode in range(2):
        env.reset(seed=episode)
        for learner in env.agent_iter():
            obs, _, term, _, _ = env.last()
            if env.roles[learner] == "observer":
                seen_as_observer.add(learner)
                texts = decoded_rows(real_tok, obs["input_ids"], obs["attention_mask"])
                assert not any(s in text for text in texts for s in SECRETS)
            env.step(None if term else np.full(3, safe[0]))
    assert seen_as_observer == {"llm_0", "llm_1"}


@pytest.mark.parametrize("collective", [False, True])
def test_the_signalling_game_scores_each_rounds_guess(real_tok, collective):
    """The built-in ``signal`` reward (a registered, checked reward) is told each turn's round and position."""
    from cory_env.rewards.registry import get_reward

    prompts = signal_prompts(None, num_secrets=3)
    words = ["red", "blue", "green"]
    env = cory_env.env(
        tokenizer=real_tok,
        prompts=prompts,
        reward_fn=get_reward("signal"),
        num_conversations=4,
        max_new_tokens=4,
        context_length=96,
        rounds=2,
        templates=[[SENDER_TEMPLATE, LATER_SENDER_TEMPLATE], RECEIVER_TEMPLATE],
        private_fields=PRIVATE_FIELDS,
        turn_rewards=True,
    )
    if collective:
        env = CollectiveRewardWrapper(env)
    base = env.unwrapped

    def word(w):
        return real_tok(" " + w)["input_ids"][0]

    def act(agent, obs):
        if obs["past_length"][0] > 0:
            return np.full(4, real_tok.eos_token_id)
        secrets = [p.metadata["secret"] for p in base.prompts]
        if agent == "pioneer":  # it would say the secret; the receiver must not see it anyway
            return np.array([word("ok")] * 4)
        if base.round == 0:  # a wrong guess, then the right one
            return np.array([word(words[(words.index(s) + 1) % 3]) for s in secrets])
        return np.array([word(s) for s in secrets])

    got, _ = play(env, act, seed=5)
    receiver = base.played_turns("observer")
    assert [t.task_reward.tolist() for t in receiver] == [[0.0] * 4, [1.0] * 4]
    assert [t.task_reward.tolist() for t in base.played_turns("pioneer")] == [[0.0] * 4] * 2
    for turn in base.last_transcript["observer"]["turns"]:
        assert not any(f"is {s}." in c for c, s in zip(turn["context"], (p.metadata["secret"] for p in base.prompts)))
    if collective:
        assert [t.reward.tolist() for t in base.played_turns("pioneer")] == [[0.0] * 4, [1.0] * 4]
        assert sum(got["pioneer"]) == sum(got["observer"]) == 1.0
    else:
        assert sum(got["pioneer"]) == 0.0 and sum(got["observer"]) == 1.0


def test_a_source_that_is_not_a_list_is_checked_as_drawn(real_tok):
    class Rows:
        def __len__(self):
            return 2

        def sample(self, rng, n):
            return [Prompt("colour", {"words": DECOYS})] * n

    with pytest.raises(UsageError, match="secret"):  # no row fields are known: {secret} must be declared
        cory_env.env(tokenizer=real_tok, prompts=Rows(), templates=[SENDER_TEMPLATE, RECEIVER], context_length=96)
    env = cory_env.env(
        tokenizer=real_tok,
        prompts=Rows(),
        templates=[SENDER_TEMPLATE, RECEIVER],
        private_fields={"secret": [0]},
        prompt_fields=["words"],
        context_length=96,
    )
    with pytest.raises(UsageError, match=r"no field 'secret'"):
        env.reset(seed=0)


def test_a_template_elsewhere_naming_the_private_field_fails_when_made(real_tok):
    with pytest.raises(UsageError, match=r"private.*position\(s\) 0"):
        secret_env(real_tok, 2, templates=[SENDER_TEMPLATE, RECEIVER + " {secret}"])
    with pytest.raises(UsageError, match="secret"):  # in the second round only
        secret_env(real_tok, 2, templates=[SENDER_TEMPLATE, [RECEIVER, RECEIVER + " {secret}"]])
    with pytest.raises(UsageError, match="secret"):
        secret_env(
            real_tok,
            2,
            templates=None,
            pioneer_template=SENDER_TEMPLATE,
            observer_template=RECEIVER,
            later_templates=[LATER_SENDER_TEMPLATE, RECEIVER + " {secret}"],
        )
    for spelled in ("{secret!r}", "{secret:>9}", "{secret[0]}", "{secret.upper}"):  # no other spelling gets it
        with pytest.raises(UsageError, match="secret"):
            secret_env(real_tok, 2, templates=[SENDER_TEMPLATE, RECEIVER + " " + spelled])
    # Visible where it is listed.
    env = secret_env(
        real_tok, 2, templates=[SENDER_TEMPLATE, RECEIVER + " {secret}"], private_fields={"secret": [0, 1]}
    )
    env.reset(seed=0)


@pytest.mark.parametrize("R", [1, 2])
def test_without_knowledge_transfer_the_pioneers_template_may_not_name_a_private_field(real_tok, R):
    with pytest.raises(UsageError, match="secret"):
        secret_env(real_tok, R, templates=None, pioneer_template=SENDER_TEMPLATE, knowledge_transfer=False)
    # With the field visible to every position, every agent is prompted with it.
    env = secret_env(
        real_tok,
        R,
        templates=None,
        pioneer_template=SENDER_TEMPLATE,
        knowledge_transfer=False,
        private_fields={"secret": [0, 1]},
    )
    _, finals = play(env, lambda a, o: np.full(3, 11))
    assert all(
        s in c for s, c in zip((p.metadata["secret"] for p in env.unwrapped.prompts), finals["observer"][1]["context"])
    )


def test_a_row_without_a_named_field_fails_naming_the_row_and_the_field(real_tok):
    rows = [*SECRET_ROWS[:2], Prompt("colour", {"words": DECOYS})]
    with pytest.raises(UsageError, match=r"prompt row 2 .*no field 'secret'"):
        cory_env.env(
            tokenizer=real_tok,
            prompts=rows,
            templates=[SENDER_TEMPLATE, RECEIVER],
            private_fields={"secret": [0]},
            context_length=96,
        )
    rows = [Prompt("colour", {"words": DECOYS}), *SECRET_ROWS]
    with pytest.raises(UsageError, match=r"prompt row 0 .*no field 'secret'"):  # a declared field, not private
        cory_env.env(
            tokenizer=real_tok,
            prompts=rows,
            templates=[SENDER_TEMPLATE, RECEIVER],
            prompt_fields=["secret", "words"],
            context_length=96,
        )
    with pytest.raises(UsageError, match="words"):  # a field no row has and none declared
        cory_env.env(tokenizer=real_tok, prompts=["colour"], templates=["{query}", RECEIVER], context_length=96)


def test_a_private_field_at_a_position_past_the_chain_is_refused():
    for positions in ([2], [-1], [0, 3], [True], 0, "0"):
        with pytest.raises(UsageError, match="private_fields"):
            make(2, 2, private_fields={"secret": positions})
    with pytest.raises(UsageError, match="private_fields"):
        make(2, 2, private_fields={"query": [0]})  # a chain field
    make(3, 2, private_fields={"secret": [2]})  # position 2 exists in a chain of three


# ---------------------------------------------------------------------------------------- rewards
def recording_reward(calls):
    def reward(queries, responses, *, round, position, **_):
        calls.append((round, position, len(responses)))
        return [fraction_good(queries, [r])[0] + position + 10 * round for r in responses]

    return reward


@pytest.mark.parametrize("turn_rewards", [True, False])
def test_a_reward_naming_round_and_position_is_called_once_per_turn(turn_rewards):
    calls = []
    env = make(3, 2, 2, reward_fn=recording_reward(calls), turn_rewards=turn_rewards)
    for seed in range(2):
        calls.clear()
        play(env, toy_policy(seed), seed=seed)
        assert calls == [(r, k, 2) for r in range(2) for k in range(3)]
        for role in env.possible_agents:
            for t in env.unwrapped.played_turns(role):
                assert np.all(t.task_reward >= t.position + 10 * t.round)  # scored as that turn
                assert np.all(t.task_reward <= t.position + 10 * t.round + 1)


def test_a_reward_not_naming_them_is_called_as_before():
    seen = []

    def reward(queries, responses, **kwargs):
        seen.append(set(kwargs))
        return [0.5] * len(responses)

    def strict(queries, responses):  # no **kwargs: any keyword would break it
        return [0.25] * len(responses)

    play(make(2, 2, reward_fn=reward, turn_rewards=True), toy_policy())
    assert seen == [set()] * 4
    _, finals = play(make(2, 2, reward_fn=strict), toy_policy())
    assert finals["observer"][0] == 0.5  # two turns of 0.25


@pytest.mark.parametrize("B", [None, 2])
def test_turn_rewards_arrive_at_each_turns_end_and_add_up(B):
    calls = []
    env = make(3, 2, B, reward_fn=recording_reward(calls), turn_rewards=True)
    base = env.unwrapped
    per_step = {a: 0.0 for a in env.possible_agents}

    def on_step(e):
        ended = base.turn_ended
        for agent, r in e.rewards.items():
            if agent == ended:
                assert r == pytest.approx(float(np.mean(base.played_turns(agent)[-1].task_reward)))
            else:
                assert r == 0.0  # only the agent whose turn ended gets something
            per_step[agent] += r

    for seed in range(2):
        per_step = {a: 0.0 for a in env.possible_agents}
        got, finals = play(env, toy_policy(seed), seed=seed, on_step=on_step)
        for agent in env.possible_agents:
            played = base.played_turns(agent)
            assert [(t.round, t.position) for t in played] == [
                (0, env.possible_agents.index(agent)),
                (1, env.possible_agents.index(agent)),
            ]
            for t in played:
                assert np.array_equal(t.reward, t.task_reward)
            total = sum(float(np.mean(t.reward)) for t in played)
            assert sum(got[agent]) == pytest.approx(total)  # what last() gave it over the episode
            assert per_step[agent] == pytest.approx(total)
            assert total >= 10  # its second-round turn counted
            turns = base.last_transcript[agent]["turns"]
            assert [np.mean(x["reward"]) for x in turns] == pytest.approx(
                [float(np.mean(t.task_reward)) for t in played]
            )
            assert np.mean(base.last_transcript[agent]["reward"]) == pytest.approx(total)


@pytest.mark.parametrize("B", [None, 2])
def test_without_turn_rewards_the_episode_end_brings_the_sum_of_the_agents_turns(B):
    calls = []
    env = make(2, 3, B, reward_fn=recording_reward(calls))
    base = env.unwrapped

    def on_step(e):
        if not base.episode_over:
            assert all(r == 0.0 for r in e.rewards.values())

    got, finals = play(env, toy_policy(1), on_step=on_step)
    for agent in env.possible_agents:
        played = base.played_turns(agent)
        assert len(played) == 3
        total = np.sum([t.task_reward for t in played], axis=0)
        reward, info = finals[agent]
        assert reward == pytest.approx(float(total.mean())) and sum(got[agent]) == pytest.approx(reward)
        assert np.allclose(np.atleast_1d(info["reward"]), total)
        assert np.allclose([t.reward for t in played[:-1]], 0) and np.allclose(played[-1].reward, total)
        turns = base.last_transcript[agent]["turns"]
        assert [x["round"] for x in turns] == [0, 1, 2]
        assert np.allclose(np.atleast_1d(turns[-1]["reward"]), total)
        assert np.allclose(np.atleast_1d(base.last_transcript[agent]["reward"]), total)
        assert [np.mean(x["task_reward"]) for x in turns] == pytest.approx(
            [float(np.mean(t.task_reward)) for t in played]
        )


@pytest.mark.parametrize("wrap", ["collective", "role_exchange(collective)"])
def test_collective_turn_rewards_give_every_agent_the_rounds_sum_at_its_end(wrap):
    calls = []
    env = WRAPS[wrap](make(3, 2, 2, reward_fn=recording_reward(calls), turn_rewards=True))
    base = env.unwrapped
    roles = base.possible_agents
    seen = []

    def on_step(e):
        ended = base.turn_ended
        rewards = {getattr(e, "roles", {a: a for a in roles}).get(a, a): r for a, r in e.rewards.items()}
        if ended == roles[-1]:  # the round is over
            round_sum = sum(float(np.mean(base.played_turns(r)[-1].task_reward)) for r in roles)
            assert rewards == pytest.approx({r: round_sum for r in roles})
            seen.append(base.played_turns(roles[-1])[-1].round)
        else:
            assert all(v == 0.0 for v in rewards.values())

    for seed in range(2):
        seen.clear()
        got, _ = play(env, toy_policy(seed), seed=seed, on_step=on_step)
        assert seen == [0, 1]
        sums = [np.sum([base.played_turns(r)[i].task_reward for r in roles], axis=0) for i in range(2)]
        for role in roles:
            played = base.played_turns(role)
            for i in range(2):
                assert np.allclose(played[i].reward, sums[i])
            assert np.allclose(np.atleast_1d(base.last_transcript[role]["reward"]), sums[0] + sums[1])
        for rewards in got.values():
            assert sum(rewards) == pytest.approx(float(np.mean(sums[0] + sums[1])))


@pytest.mark.parametrize("turn_rewards", [False, True])
@pytest.mark.parametrize("collective", [False, True])
def test_the_parallel_api_delivers_the_same_rewards(turn_rewards, collective):
    calls = []
    aec = make(3, 2, 2, reward_fn=recording_reward(calls), turn_rewards=turn_rewards, max_new_tokens=2)
    par = cory_env.to_parallel(CollectiveRewardWrapper(aec) if collective else aec)
    par.reset(seed=2)
    rng = np.random.default_rng(2)
    totals = dict.fromkeys(par.possible_agents, 0.0)
    steps_with_reward = 0
    while par.agents:
        _, rewards, _, _, _ = par.step({a: rng.integers(3, 18, size=2) for a in par.agents})
        steps_with_reward += any(rewards.values())
        for agent, r in rewards.items():
            totals[agent] += r
    base = par.unwrapped
    for agent in par.possible_agents:
        assert totals[agent] == pytest.approx(sum(float(np.mean(t.reward)) for t in base.played_turns(agent)))
    task = {a: sum(float(np.mean(t.task_reward)) for t in base.played_turns(a)) for a in par.possible_agents}
    assert totals == pytest.approx({a: sum(task.values()) for a in task} if collective else task)
    assert steps_with_reward == (1 if not turn_rewards else 2 if collective else 6)


def test_collective_reward_without_turn_rewards_is_the_sum_over_agents_and_turns():
    calls = []
    env = CollectiveRewardWrapper(make(2, 2, 2, reward_fn=recording_reward(calls)))
    base = env.unwrapped
    got, finals = play(env, toy_policy(4))
    total = np.sum([t.task_reward for r in base.possible_agents for t in base.played_turns(r)], axis=0)
    for role in base.possible_agents:
        reward, info = finals[role]
        assert reward == pytest.approx(float(total.mean())) and sum(got[role]) == pytest.approx(reward)
        assert np.allclose(info["reward"], total)
        own = np.sum([t.task_reward for t in base.played_turns(role)], axis=0)
        assert not np.allclose(own, total)


@pytest.mark.parametrize("turn_rewards", [True, False])
def test_a_reward_returning_the_wrong_number_of_scores_is_refused(turn_rewards):
    def bad(queries, responses, *, round, position, **_):  # one too many, in the observer's second turn only
        return [0.0] * (len(responses) + (round == 1 and position == 1))

    env = make(2, 2, 2, reward_fn=bad, turn_rewards=turn_rewards, max_new_tokens=2)
    env.reset(seed=0)
    steps = 0
    with pytest.raises(RewardFunctionError, match="2 responses"):
        for _agent in env.agent_iter():
            env.step(np.full(2, tid("good")))
            steps += 1
    assert steps == 7 and env.unwrapped.round == 1  # it ended the last turn, and nothing before
    with pytest.raises(RewardFunctionError):
        play(make(2, 2, reward_fn=lambda q, r, **_: [0.0] * 3), toy_policy())


# ---------------------------------------------------------------------------------------- one round
@pytest.mark.parametrize(
    "N,B,kwargs", [(2, None, {}), (3, 2, {}), (2, 2, {"turn_rewards": True}), (2, None, {"numeric_infos": True})]
)
def test_one_round_given_or_left_out_is_the_same_game(N, B, kwargs):
    envs = [make(N, None, B, **kwargs), make(N, 1, B, **kwargs)]
    records = []
    for env in envs:
        policy = toy_policy(7)
        record = []
        for seed in (3, 4):
            env.reset(seed=seed)
            for agent in env.agent_iter():
                obs, reward, term, trunc, info = env.last()
                record.append((agent, copy.deepcopy(obs), reward, term, trunc, copy.deepcopy(info)))
                env.step(None if term else policy(agent, obs))
            record.append(env.unwrapped.last_transcript)
            record.append([(k, r, a) for k, r, a in env.unwrapped.history])
        records.append(record)
    assert len(records[0]) == len(records[1]) >= 10
    for a, b in zip(*records):
        assert same(a, b), (a, b)
    t = envs[1].unwrapped.last_transcript
    assert all("turns" not in x and "round" not in x for x in t.values())
    assert envs[1].unwrapped.rounds == envs[0].unwrapped.rounds == 1


# ---------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("rounds", [0, -1, 1.5, True, False, "2", 2.0])
def test_rounds_must_be_a_positive_int(rounds):
    with pytest.raises(UsageError, match="rounds"):
        make(2, rounds)


def test_rounds_may_be_a_numpy_int():
    env = make(2, np.int64(2), max_new_tokens=1)
    assert env.unwrapped.rounds == 2
    got, _ = play(env, toy_policy())
    assert len(env.unwrapped.history) == 4


CONTEXT_CHAIN = dict(prompts=["the movie was"], templates=["{query}", "{query} {responses}"], max_new_tokens=2)


def test_a_context_too_short_for_the_later_rounds_is_refused_at_reset_and_by_check_prompts():
    # The observer's turn in round r holds its 3 query tokens, 2r - 1 earlier answers of up to 2 tokens, and its 2:
    # 7 tokens in round 1, 11 in round 2, 15 in round 3.
    for L in range(5, 20):
        one, three = make(2, 1, context_length=L, **CONTEXT_CHAIN), make(2, 3, context_length=L, **CONTEXT_CHAIN)
        for env, need in ((one, 7), (three, 15)):
            if L >= need:
                env.unwrapped.check_prompts()
                _, finals = play(env, lambda a, o: tid("good"))  # the longest answers fit
                assert finals["observer"][1]["response_length"] == 2
                continue
            with pytest.raises(PromptTooLongError) as at_reset:
                env.reset(seed=0)
            with pytest.raises(PromptTooLongError, match="Raise context_length to") as checked:
                env.unwrapped.check_prompts()
            if env is three and L >= 11:  # only the last round's turn does not fit
                assert "observer (round 3)" in str(at_reset.value) and "up to 10 tokens" in str(at_reset.value)
                assert "Raise context_length to 15" in str(checked.value)


def test_check_prompts_names_the_context_length_that_holds_every_turn():
    env = make(2, 3, context_length=8, **CONTEXT_CHAIN)
    with pytest.raises(PromptTooLongError, match="Raise context_length to 15"):
        env.unwrapped.check_prompts()


def test_check_prompts_checks_every_row_for_every_turn():
    rows = ["the movie", "the movie was very very very good"]  # 2 and 7 tokens
    templates = ["{query}", ["{query} {response_1}", "{query} {response_1}", "{query} {responses}"]]
    # Round 3's observer holds 5 earlier answers: 2 + 12 and 7 + 12 tokens; rounds 1-2 need at most 7 + 4.
    env = make(2, 3, prompts=rows, templates=templates, max_new_tokens=2, context_length=16)
    with pytest.raises(PromptTooLongError, match=r"1 of 2 prompts .*observer \(round 3\).*Raise context_length to 19"):
        env.unwrapped.check_prompts()
    env.unwrapped.check_prompts(["the movie"])
    env.unwrapped.check_prompts(["the movie", "the movie was very"])  # 4 + 12 tokens fit
    with pytest.raises(PromptTooLongError, match="Raise context_length to 17"):
        env.unwrapped.check_prompts(["the movie was very very"])
    make(
        2, 2, prompts=rows, templates=[templates[0], templates[1][:2]], max_new_tokens=2, context_length=16
    ).unwrapped.check_prompts()


@pytest.mark.parametrize("count", [4, 5])  # 0 given answers replays every turn (test_pioneer_observer.py)
def test_given_answers_must_leave_a_turn_to_play(count):
    env = make(2, 2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="answers"):
        env.unwrapped.reset(options={"answers": ["good"] * count})


def test_given_answers_are_checked():
    env = make(3, 2, 2)
    with pytest.raises(RuntimeError, match="play one first"):
        env.unwrapped.reset(options={"answers": [["good", "bad"]]})
    play(env, toy_policy())
    base = copy.copy(env.unwrapped)
    with pytest.raises(ValueError, match="round 2"):
        base.reset(options={"answers": [["a", "b"]] * 3 + [["a"]]})
    base.reset(options={"answers": [["a", "b"]] * 5})  # the last turn left
    assert base.agents == ["observer_2"] and base.round == 1
    for wrap in (CollectiveRewardWrapper, lambda e: RoleExchangeWrapper(e, period=1)):
        with pytest.raises(ValueError, match="raw environment"):
            wrap(make(3, 2, 2)).reset(options={"answers": [["a", "b"]]})


def test_render_shows_every_turn():
    env = make(2, 2, prompts=["the movie was"], templates=ROUND_TEMPLATES, max_new_tokens=2, render_mode="ansi")
    play(env, words_policy(env, WORDS))
    text = env.render()
    for (k, r), word in WORDS.items():
        assert f"{env.possible_agents[k]:8s} round {r + 1}: {word!r}" in text


def test_each_conversation_keeps_its_own_answers_across_rounds():
    env = make(2, 2, 2, prompts=["the movie was"], templates=ROUND_TEMPLATES, max_new_tokens=3)
    base = env.unwrapped
    env.reset(seed=0)
    # Round 1: the pioneer says "good" in both conversations; the observer stops at once in conversation 0
    # and says "bad bad" in conversation 1 (its turn runs to the limit there).
    script = {
        ("pioneer", 0): [[tid("good")] * 2, [EOS] * 2],
        ("observer", 0): [[EOS, tid("bad")], [tid("ok"), tid("bad")], [tid("ok"), tid("bad")]],
        ("pioneer", 1): [[tid("great"), tid("fine")], [EOS, EOS]],
        ("observer", 1): [[EOS, EOS]],
    }
    step_in_turn = 0
    for agent in env.agent_iter():
        obs, _, term, _, _ = env.last()
        if term:
            env.step(None)
            continue
        step_in_turn = 0 if obs["past_length"][0] == 0 else step_in_turn + 1
        env.step(np.array(script[(agent, base.round)][step_in_turn]))
    observer = base.played_turns("observer")
    assert observer[0].response_length.tolist() == [1, 3] and observer[1].response_length.tolist() == [1, 1]
    t = base.last_transcript
    assert [x["response"] for x in t["observer"]["turns"]] == [["", "bad bad bad"], ["", ""]]
    assert t["pioneer"]["turns"][1]["context"] == ["the movie was  2", "the movie was bad bad bad 2"]
    assert t["observer"]["turns"][1]["context"] == [
        "the movie was good  great great great 2",
        "the movie was good bad bad bad fine fine fine 2",
    ]
    # The ignored tokens of the conversation that stopped are masked out of what was played.
    first = observer[0]
    T = first.response_width
    assert T == 3 and first.attention_mask[0, -T:].tolist() == [1, 0, 0]
    assert first.input_ids[1, -T:].tolist() == [tid("bad")] * 3


def test_without_knowledge_transfer_every_turn_sees_the_query_alone():
    env = make(3, 2, prompts=["the plot is"], knowledge_transfer=False, max_new_tokens=2)
    play(env, toy_policy(5))
    t = env.unwrapped.last_transcript
    assert [x["context"] for role in env.possible_agents for x in t[role]["turns"]] == ["the plot is"] * 6


def test_a_round_field_in_a_chain_of_one_round():
    env = make(2, 1, prompts=["the movie was"], templates=["{query} {round}", "{query} {round} {response}"])
    _, finals = play(env, words_policy(env, {(0, 0): "good", (1, 0): "bad"}))
    assert finals["pioneer"][1]["context"] == "the movie was 1"
    assert finals["observer"][1]["context"] == "the movie was 1 good"


def test_bad_template_and_field_arguments_are_refused():
    with pytest.raises(UsageError, match=r"templates\[0\] must be .* one template per round \(2\)"):
        make(2, 2, templates=[["{query}"], "{query} {response}"])
    with pytest.raises(UsageError, match=r"templates\[1\] must be .* one template per round \(2\)"):
        make(2, 2, templates=["{query}", ["{query} {response}"] * 3])
    with pytest.raises(UsageError, match="later_templates must be a list with one template per agent"):
        make(2, 2, later_templates=["{query} {response}"])
    with pytest.raises(UsageError, match="later_templates"):
        make(2, 2, later_templates="{query} {response}")
    with pytest.raises(UsageError, match="must contain the field {query}"):
        make(2, 2, later_templates=["{response}", "{query} {response}"])
    with pytest.raises(UsageError, match="unknown field {secret}"):  # not a field of the rows
        make(2, 2, templates=["{query} {secret}", "{query}"])
    with pytest.raises(UsageError, match="private_fields"):
        make(2, 2, private_fields={"not a name": [0]})
    with pytest.raises(UsageError, match="private_fields"):
        make(2, 2, private_fields=["secret"])
    with pytest.raises(UsageError, match="prompt_fields"):
        make(2, 2, prompt_fields="secret")
    with pytest.raises(TypeError, match="turn_rewards"):
        make(2, 2, turn_rewards=1)


def test_a_reward_naming_one_of_the_turn_keywords_gets_both():
    seen = []

    def reward(queries, responses, *, position, **rest):
        seen.append((rest["round"], position))
        return [0.0] * len(responses)

    play(make(2, 2, reward_fn=reward, max_new_tokens=1), toy_policy())
    assert seen == [(0, 0), (0, 1), (1, 0), (1, 1)]
    calls = []

    def weighted(weight, queries, responses, *, round, position, **_):
        calls.append((round, position))
        return [weight] * len(responses)

    _, finals = play(make(2, 1, reward_fn=functools.partial(weighted, 0.5), turn_rewards=True), toy_policy())
    assert calls == [(0, 0), (0, 1)] and finals["observer"][0] == 0.5  # a partial is looked through


def test_a_reward_naming_only_the_position_gets_only_the_position():
    seen = []

    def reward(queries, responses, position):  # no **kwargs: a round keyword would not bind
        seen.append(position)
        return [0.0] * len(responses)

    play(make(2, 2, reward_fn=reward, max_new_tokens=1), toy_policy())
    assert seen == [0, 1, 0, 1]


def test_a_prompt_column_named_like_a_chain_field_goes_to_the_reward_not_the_template():
    seen = []

    def reward(queries, responses, *, response, position, **_):  # both are the prompt rows' columns here
        seen.append((response, position))
        return [0.0] * len(responses)

    rows = [Prompt(q, {"response": "column", "position": "e4"}) for q in TOY_PROMPTS]
    env = make(2, 2, prompts=rows, reward_fn=reward, templates=["{query}", "{query} {response}"], max_new_tokens=1)
    play(env, toy_policy())
    assert seen == [(["column"], ["e4"])] * 4  # the rows' values (one list entry a conversation), as before
    contexts = [t["context"] for t in env.unwrapped.last_transcript["observer"]["turns"]]
    assert all("column" not in c for c in contexts)  # {response} is the previous turn's answer


def test_prompt_fields_may_not_be_named_like_a_chain_field():
    with pytest.raises(UsageError, match=r"prompt_fields \['response_2'\] name the chain's own template fields"):
        make(2, 1, prompt_fields=["response_2"])
    with pytest.raises(UsageError, match="cannot be a prompt field's name"):
        make(2, 1, private_fields={"round": [0]})


def test_role_env_refuses_a_game_of_rounds():
    from cory_env.single_agent import RoleEnv

    with pytest.raises(ValueError, match="RoleEnv plays one turn of its role"):
        RoleEnv(env=make(1, 2))
    with pytest.raises(ValueError, match="RoleEnv plays one turn of its role"):
        RoleEnv(env=make(1, 1, turn_rewards=True))
