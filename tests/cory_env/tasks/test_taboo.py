"""Taboo (cory_env.tasks.taboo): the rule as declared, its cards, and the describer's message read through the
turn keyword ``earlier``; the game played in chat form on the embedded tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

import cory_env
from cory_env.errors import UsageError
from cory_env.rewards import get_reward
from cory_env.tasks import get_task
from cory_env.tasks.taboo import WORDS, forbidden, guessed, taboo_prompts, taboo_reward


def test_a_message_breaks_the_taboo_when_a_word_begins_with_the_secret_or_a_taboo_word():
    assert forbidden("It is a fruit", "apple", "fruit, red, tree, pie")
    assert forbidden("Apples grow here", "apple", "fruit, red, tree, pie")  # the secret itself, any form
    assert forbidden("very FRUITY", "apple", ["fruit"])
    assert not forbidden("It grows on a branch; pineapple-like", "apple", "fruit, red, tree, pie")  # 'pineapple'
    assert not forbidden("", "apple", "fruit")


def test_the_guess_is_the_first_choice_the_answer_names():
    assert guessed("A dog, no, a cat", "cat, dog, sun, moon") == "dog"
    assert guessed("Sunny", "cat, dog, sun, moon") is None  # whole words only
    assert guessed("banana", ["apple"]) is None
    assert guessed("I think baby") == "baby"  # without a list: any of the game's words


def test_the_reward_needs_a_clean_message_and_the_secret_named():
    card = dict(secret=["apple"] * 4, taboo=["fruit, red, tree, pie"] * 4, choices=["dog, apple, sun, king"] * 4)
    earlier = [["It grows on a branch."], ["A red one."], ["It grows on a branch."], ["It grows on a branch."]]
    answers = ["Apple.", "Apple.", "The dog, or an apple", "sun"]
    assert taboo_reward(["word"] * 4, answers, position=1, earlier=earlier, **card) == [1.0, 0.0, 0.0, 0.0]
    assert taboo_reward(["word"] * 4, answers, position=0, earlier=earlier, **card) == [0.0] * 4
    # Two rounds: every describer message so far must be clean (the describer's turns are the even ones).
    two = [["It grows on a branch.", "dog", "A pie!"]]
    assert taboo_reward(["word"], ["apple"], position=1, earlier=two, **{k: v[:1] for k, v in card.items()}) == [0.0]


def test_every_card_holds_its_secret_among_k_choices_the_same_in_every_run():
    rows = taboo_prompts(taboo_choices=4).prompts
    assert [p.metadata["secret"] for p in rows] == list(WORDS)
    for p in rows:
        choices = [w.strip() for w in p.metadata["choices"].split(",")]
        assert len(set(choices)) == 4 and p.metadata["secret"] in choices
        assert p.metadata["taboo"] == ", ".join(WORDS[p.metadata["secret"]])
    assert [p.metadata for p in taboo_prompts(taboo_choices=4, seed=7).prompts] == [p.metadata for p in rows]
    assert all(len(p.metadata["choices"].split(",")) == 30 for p in taboo_prompts(taboo_choices=0).prompts)
    for bad in (1, 31, True):
        with pytest.raises(UsageError, match="--taboo-choices must be 0 .* or between 2 and 30"):
            taboo_prompts(taboo_choices=bad)


def test_the_game_in_chat_form_shows_the_card_to_the_describer_alone_and_scores_the_guess():
    task = get_task("taboo")
    assert task.chat_by_default
    game = cory_env.raw_env(
        prompts=task.prompts(None), reward_fn=get_reward("taboo"), chat=task.chat, private_fields=task.private_fields,
        prompt_fields=task.prompt_fields, num_conversations=30, max_new_tokens=4, context_length=256,
    )  # fmt: skip
    game.reset(seed=0)
    tokenizer = game.tokenizer
    said = {"pioneer": "It grows.", "observer": None}
    for agent in game.agent_iter():
        observation, _, done, _, _ = game.last()
        if done:
            game.step(None)
            continue
        if game._turns[agent].t == 0:
            texts = tokenizer.batch_decode(np.where(observation["attention_mask"] == 1, observation["input_ids"], 0))
            for text, prompt in zip(texts, game.prompts):
                secret = prompt.metadata["secret"]
                assert (f"The secret word is {secret}." in text) == (agent == "pioneer")
                assert f"one of: {prompt.metadata['choices']}." in text
            # The guesser answers the secret of each card: the message was clean, so each scores.
            words = [said[agent]] * 30 if agent == "pioneer" else [p.metadata["secret"] for p in game.prompts]
            plan = [tokenizer.encode(w) + game.speaker(agent).stop_token_ids[:1].tolist() for w in words]
        step = game._turns[agent].t
        game.step(np.array([row[min(step, len(row) - 1)] for row in plan]))
    assert list(game.last_transcript["observer"]["task_reward"]) == [1.0] * 30
