"""Rewards: the GSM8K checker, VADER, the classifier reward, and the reward registry (entry points included)."""

from __future__ import annotations

import math
import sys
import textwrap

import numpy as np
import pytest
import torch

from cory_env.rewards import (
    ENTRY_POINT_GROUP,
    CheckedReward,
    RewardFunctionError,
    RewardNotFoundError,
    available_rewards,
    get_reward,
    register,
    score_responses,
    unregister,
)
from cory_env.rewards.classifier import ClassifierReward, NoPositiveLabelError
from cory_env.rewards.gsm8k import canonical_number, extract_numbers, gsm8k_reward, is_correct, last_number
from cory_env.rewards.sentiment import vader_sentiment
from tests.support.distributions import declare_distribution

# ------------------------------------------------------------------ GSM8K checker


@pytest.mark.parametrize(
    "response, answer",
    [
        ("5 + 4 = 9.", "9"),
        ("The total is 1,000 apples", "1000"),
        ("She pays $18.", "18"),
        ("It costs $1,250.50 in all", "1250.5"),
        ("The change is 2.50 dollars", "2.5"),
        ("so 18.0", "18"),
        ("The temperature drops to -3 degrees.", "-3"),
        ("#### 18", "18"),
        ("3 + 15 = 18\n#### 18\nQuestion: Tom has 4 apples", "18"),
        ("#### $1,000 and 7 more words", "1000"),
        ("The answer is 72.\nQuestion: A farmer has 30 cows. How many legs?", "72"),
        ("10 - 7 = 3", "3"),
        ("5-3 is the answer 2", "2"),
        ("That is 50%.", "50"),
        ("0.5 of them: .5", "0.5"),
    ],
)
def test_gsm8k_checker_accepts(response, answer):
    assert is_correct(response, answer)
    assert gsm8k_reward(["q"], [response], answer=[answer]) == [1.0]


@pytest.mark.parametrize(
    "response, answer",
    [
        ("9 is wrong, the answer is 10", "9"),  # the LAST number counts
        ("5-3", "-3"),  # subtraction, not a negative number
        ("It is 3", "-3"),
        ("1, 2, 3", "123"),  # commas between numbers are not thousands separators
        ("no number at all", "0"),
        ("", "5"),
        ("2.51", "2.5"),
        ("#### 17\nbut then 18", "18"),  # the #### answer wins
    ],
)
def test_gsm8k_checker_rejects(response, answer):
    assert not is_correct(response, answer)
    assert gsm8k_reward(["q"], [response], answer=[answer]) == [0.0]


def test_number_extraction():
    numbers = extract_numbers("-3 and 5-3, $18. 1,000,000 2.50 -$4 (3)-2")
    assert numbers == ["-3", "5", "3", "18", "1000000", "2.5", "-4", "3", "2"]
    assert last_number("no digits") is None
    assert last_number("first 1 then 2.\nQuestion: 3 cats") == "2"
    assert canonical_number(" $1,000.00 ") == "1000"
    assert canonical_number("-0") == "0"
    assert canonical_number("100") == "100"  # not 1E+2
    with pytest.raises(ValueError, match="not a number"):
        canonical_number("seven")


def test_gsm8k_reward_is_batched_and_needs_answers():
    scores = gsm8k_reward(["a", "b", "c"], ["= 4", "= 5", "#### 6"], answer=["4", "4", "6"])
    assert scores == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="metadata\\['answer'\\]"):
        gsm8k_reward(["q"], ["4"])
    with pytest.raises(ValueError, match="answers"):
        gsm8k_reward(["q", "r"], ["4", "5"], answer=["4"])


# ------------------------------------------------------------------------- VADER


def test_vader_orders_sentiment_and_is_bounded():
    scores = get_reward("vader")(["The film was"] * 3, [" wonderful and moving", " a film", " awful and boring"])
    assert scores[0] > scores[1] > scores[2]
    assert all(-1 <= s <= 1 for s in scores)
    assert scores == vader_sentiment(["The film was"] * 3, [" wonderful and moving", " a film", " awful and boring"])


# -------------------------------------------------------------------- classifier


WORDS = "[PAD] [UNK] [CLS] [SEP] [MASK] the movie was good bad great awful film is not very i liked it".split()


def save_tiny_classifier(folder, id2label, seed=0, max_positions=32):
    """A randomly initialised DistilBERT sentiment classifier (the architecture of distilbert-imdb)."""
    from transformers import BertTokenizer, DistilBertConfig, DistilBertForSequenceClassification

    torch.manual_seed(seed)
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(WORDS)})  # vocab_file= builds a 5-token vocab
    config = DistilBertConfig(
        vocab_size=len(WORDS),
        dim=16,
        n_layers=1,
        n_heads=2,
        hidden_dim=32,
        max_position_embeddings=max_positions,
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
        pad_token_id=0,
    )
    DistilBertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory):
    return save_tiny_classifier(tmp_path_factory.mktemp("clf"), {0: "NEGATIVE", 1: "POSITIVE"})


QUERIES = ["the movie", "i liked", "the film is", "not", "very", "it was"]
RESPONSES = [" was good", " it", " not very good", " bad", " awful film", " great great great"]


def _logits(folder, texts):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return torch.cat([model(**tok([t], return_tensors="pt")).logits for t in texts]).numpy()


def test_classifier_reward_is_the_positive_logit_of_query_plus_response(tiny_classifier):
    reward = get_reward(str(tiny_classifier), device="cpu")
    scores = reward(QUERIES, RESPONSES)
    assert isinstance(scores, list) and len(scores) == len(QUERIES)
    logits = _logits(tiny_classifier, [q + r for q, r in zip(QUERIES, RESPONSES)])
    np.testing.assert_allclose(scores, logits[:, 1], atol=1e-5)
    assert not np.allclose(scores, logits[:, 0], atol=1e-3)  # the NEGATIVE logit would differ
    assert reward.fn.positive_label == "POSITIVE" and "classifier" in reward.name


def test_classifier_reward_finds_positive_by_name_not_position(tmp_path):
    folder = save_tiny_classifier(tmp_path / "swapped", {0: "POSITIVE", 1: "NEGATIVE"})
    scores = ClassifierReward(folder, device="cpu")(QUERIES, RESPONSES)
    np.testing.assert_allclose(scores, _logits(folder, [q + r for q, r in zip(QUERIES, RESPONSES)])[:, 0], atol=1e-5)


def test_classifier_reward_batches_in_chunks_like_one_by_one(tiny_classifier):
    chunked = ClassifierReward(tiny_classifier, device="cpu", batch_size=4)(QUERIES, RESPONSES)  # chunks of 4 and 2
    one = ClassifierReward(tiny_classifier, device="cpu", batch_size=1)
    single = [one([q], [r])[0] for q, r in zip(QUERIES, RESPONSES)]
    np.testing.assert_allclose(chunked, single, atol=1e-5)


def test_classifier_reward_truncates_to_the_model_length(tiny_classifier):
    reward = ClassifierReward(tiny_classifier, device="cpu")
    assert reward.max_length == 32  # the tokenizer has no limit; the model has 32 positions
    long = " good" * 200
    score = reward(["the movie was"], [long])
    truncated = reward.tokenizer.decode(reward.tokenizer("the movie was" + long)["input_ids"][1:31])
    assert math.isclose(score[0], reward([truncated], [""])[0], abs_tol=1e-5)


def test_classifier_without_positive_label_needs_one_named(tmp_path):
    folder = save_tiny_classifier(tmp_path / "three", {0: "joy", 1: "anger", 2: "fear"})
    with pytest.raises(NoPositiveLabelError, match="positive_label"):
        ClassifierReward(folder, device="cpu")
    assert ClassifierReward(folder, device="cpu", positive_label="JOY").positive_index == 0
    with pytest.raises(NoPositiveLabelError, match="'anger'"):
        ClassifierReward(folder, device="cpu", positive_label="surprise")


# ---------------------------------------------------------------------- registry


def test_builtins_are_registered():
    assert {"vader", "gsm8k"} <= set(available_rewards())
    assert get_reward("gsm8k")(["q"], ["#### 4"], answer=["4"]) == [1.0]


def test_register_and_decorator(monkeypatch):
    @register("test_exclaim")
    def exclaim(queries, responses, **_):
        return [r.count("!") for r in responses]

    try:
        assert exclaim(["q"], ["!!"]) == [2]  # the decorator returns the function itself
        reward = get_reward("test_exclaim")
        assert isinstance(reward, CheckedReward) and reward.name == "test_exclaim"
        assert reward(["q", "q"], ["a!", "!!!"]) == [1.0, 3.0]
        assert "test_exclaim" in available_rewards()
        with pytest.raises(ValueError, match="already registered"):
            register("test_exclaim", lambda q, r, **_: [0.0] * len(r))
        register("test_exclaim", lambda q, r, **_: [0.0] * len(r), replace=True)
        assert get_reward("test_exclaim")(["q"], ["!"]) == [0.0]
    finally:
        unregister("test_exclaim")
    with pytest.raises(ValueError, match="':'"):
        register("pkg:fn", exclaim)
    with pytest.raises(TypeError, match="callable"):
        register("test_not_callable", 3)


def test_module_function_form():
    reward = get_reward("tests.support.toy:fraction_good")
    assert reward(["q", "q"], ["good good", "good bad"]) == [1.0, 0.5]
    with pytest.raises(RewardNotFoundError, match="cannot import the module 'tests.nope'"):
        get_reward("tests.nope:f")
    with pytest.raises(RewardNotFoundError, match="fraction_good"):  # lists what the module has
        get_reward("tests.support.toy:fraction_bad")


def test_unknown_name_offline_names_the_alternatives(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RewardNotFoundError) as err:
        get_reward("no-such-org/no-such-classifier")
    message = str(err.value)
    for part in ("vader", "gsm8k", "module:function", "cory_env.rewards", "HF_HUB_OFFLINE", "hf download"):
        assert part in message


@pytest.mark.parametrize(
    "bad, problem",
    [
        (lambda q, r, **_: 1 / 0, "raised ZeroDivisionError"),
        (lambda q, r, **_: [1.0], "returned 1 value"),
        (lambda q, r, **_: [1.0, float("nan")], "item 1"),
    ],
)
def test_broken_rewards_fail_naming_the_reward_and_item(bad, problem):
    register("test_broken", bad)
    try:
        with pytest.raises(RewardFunctionError) as err:
            get_reward("test_broken")(["q0", "q1"], ["r0", "r1"])
        assert "test_broken" in str(err.value) and problem in str(err.value)
    finally:
        unregister("test_broken")


def one_argument(texts):
    return [1.0] * len(texts)


@pytest.mark.parametrize(
    "fn, metadata, problem",
    [
        (one_argument, None, "cannot be called as fn(queries, responses): too many positional arguments"),
        (lambda q, r: [1.0] * len(r), {"answer": ["1", "2"]}, "unexpected keyword argument 'answer'"),
        (lambda q, r, **_: len(None), None, "raised TypeError: object of type 'NoneType' has no len()"),
    ],
)
def test_a_reward_that_cannot_take_the_call_is_told_the_signature(fn, metadata, problem):
    with pytest.raises(RewardFunctionError) as err:
        score_responses(fn, ["q0", "q1"], ["r0", "r1"], metadata)
    assert problem in str(err.value)
    # The hint only where the signature is the problem, not for a TypeError inside the function.
    assert ("(queries, responses, **metadata) -> list[float]" in str(err.value)) == ("raised" not in problem)


def test_checked_reward_errors_are_not_wrapped_twice_by_the_environment(make_env):
    register("test_nan", lambda q, r, **_: [float("inf")] * len(r))
    try:
        game = make_env(num_conversations=2, reward_fn=get_reward("test_nan"), with_observer=False)
        game.reset(seed=0)
        with pytest.raises(RewardFunctionError) as err:
            for _agent in game.agent_iter():
                _, _, term, trunc, _ = game.last()
                game.step(None if term or trunc else np.zeros(2, dtype=np.int64))
        assert str(err.value).startswith("reward function test_nan returned inf for item 0")
    finally:
        unregister("test_nan")


def test_entry_point_of_an_installed_distribution_is_found(tmp_path, monkeypatch):
    """A real (tiny) distribution on sys.path declares a reward; importlib.metadata finds it."""
    (tmp_path / "my_rewards_pkg.py").write_text(
        textwrap.dedent(
            """
            LOADED = True

            def word_count(queries, responses, **_):
                return [float(len(r.split())) for r in responses]
            """
        )
    )
    rewards = {"word_count": "my_rewards_pkg:word_count", "broken": "my_rewards_pkg:missing"}
    declare_distribution(tmp_path, "my-rewards-pkg", {ENTRY_POINT_GROUP: rewards})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_rewards_pkg", raising=False)

    assert {"word_count", "broken"} <= set(available_rewards())
    assert "my_rewards_pkg" not in sys.modules  # listing does not import (entry points load lazily)
    reward = get_reward("word_count")
    assert reward(["q", "q"], ["one two three", "four"]) == [3.0, 1.0]
    assert "my_rewards_pkg" in sys.modules
    with pytest.raises(RewardNotFoundError, match="my-rewards-pkg.*cannot be loaded"):
        get_reward("broken")


def test_registered_names_win_over_entry_points(tmp_path, monkeypatch):
    declare_distribution(tmp_path, "shadow", {ENTRY_POINT_GROUP: {"vader": "nowhere:nothing"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_reward("vader").fn is vader_sentiment


def test_get_reward_wraps_callables_and_rejects_empty_names():
    reward = get_reward(lambda q, r, **_: [0.5] * len(r))
    assert reward(["q"], ["r"]) == [0.5]
    assert get_reward(reward) is reward
    with pytest.raises(RewardNotFoundError, match="non-empty"):
        get_reward("")
