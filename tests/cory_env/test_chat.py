"""Chat form: conversations through the real chat templates of five families, the carried context, bad input.

The templates are the published ones (tests/data/chat_templates/), set on small tokenizers
(tests/support/chat_templates.py); the environments here play token ids chosen by the test, no model.
"""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test

import cory_env
from cory_env import PromptTooLongError
from cory_env.chat import ChatTemplate
from cory_env.chat_prompts import ChatForm, ChatPrompts
from cory_env.context import encode, starts_turn
from cory_env.errors import UsageError
from cory_env.models import load_tokenizer
from cory_env.prompts import Prompt
from cory_env.tasks import get_task
from cory_env.tasks.signal import PRIVATE_FIELDS, signal_prompts
from tests.support.chat_templates import FAMILIES, family_tokenizer

FORM = ChatForm(system=["Answer the question.", "Improve your partner's answer."])


def zero(queries, responses, **_):
    return [0.0] * len(responses)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_renders_the_view_as_its_own_template_does_and_ends_a_turn_at_its_token(family):
    tokenizer = family_tokenizer(family)
    template = ChatTemplate(tokenizer)
    end = tokenizer.convert_tokens_to_ids(FAMILIES[family]["end"])
    assert template.end_of_turn_ids[0] == end and tokenizer.eos_token_id in template.end_of_turn_ids
    chat = ChatPrompts(["pioneer", "observer"], FORM, rounds=2)
    view = chat.messages(0, Prompt("Name a colour."), [(0, 0, "Red."), (1, 0, "Blue.")])
    assert [m["role"] for m in view] == ["system", "user", "assistant", "user"]
    assert view[-1]["content"] == "observer: Blue."
    text = template.render(view)
    expected = tokenizer.apply_chat_template(template.fitted(view), tokenize=False, add_generation_prompt=True)
    assert text == expected
    for content in ("Answer the question.", "Name a colour.", "Red.", "observer: Blue."):
        assert content in text


def test_gemma_joins_consecutive_user_messages_and_folds_the_system_message_itself():
    template = ChatTemplate(family_tokenizer("gemma3"))
    assert template.system and not template.consecutive
    chat = ChatPrompts(["pioneer", "observer"], FORM)
    view = chat.messages(1, Prompt("Name a colour."), [(0, 0, "Red.")])  # system, user, user
    text = template.render(view)
    assert "<start_of_turn>user\nImprove your partner's answer.\n\nName a colour.\n\npioneer: Red.<end_of_turn>" in text
    assert text.count("<start_of_turn>user") == 1


def test_a_template_without_a_system_role_gets_the_system_text_in_the_first_user_message():
    tokenizer = family_tokenizer("gemma3")
    tokenizer.chat_template = (  # Gemma 2's refusal of a system message, then plain turns
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    )
    template = ChatTemplate(tokenizer)
    assert not template.system
    text = template.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert text == "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_a_template_that_raises_on_a_role_is_named_in_one_line():
    tokenizer = family_tokenizer("smollm2")
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ raise_exception('no assistant turns') }}"
        "{% endif %}{{ m['content'] }}{% endfor %}"
    )
    with pytest.raises(
        UsageError,
        match=r"chat template of agent 1 .*raises on a conversation of user -> "
        r"assistant: TemplateError: no assistant turns",
    ) as error:
        ChatTemplate(tokenizer, "agent 1 (pioneer)")
    assert "\n" not in str(error.value)


def test_chat_form_without_a_chat_template_names_the_fix():
    tokenizer = family_tokenizer("smollm2")
    tokenizer.chat_template = None
    with pytest.raises(UsageError, match=r"the tokenizer of agent 1 \(pioneer\) has none: use a chat"):
        cory_env.raw_env(tokenizer=tokenizer, prompts=["Hi"], reward_fn=zero, chat=True)


def test_a_message_row_with_an_unknown_role_or_without_a_user_message_is_refused():
    with pytest.raises(UsageError, match="message 1 has the role 'bot'; a prompt row's roles are system, user"):
        Prompt.from_messages([{"role": "user", "content": "Hi"}, {"role": "bot", "content": "Yo"}])
    with pytest.raises(UsageError, match="no user message"):
        Prompt.from_messages([{"role": "system", "content": "Be brief."}])
    row = Prompt.from_messages([{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}])
    assert row.query == "Hi"


def test_rows_of_messages_are_played_in_chat_form_as_trl_plays_a_conversational_dataset():
    rows = [[{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Review the film."}]]
    tokenizer = load_tokenizer()
    game = cory_env.raw_env(tokenizer=tokenizer, prompts=rows, reward_fn=zero, chat=None, max_new_tokens=2)
    assert game.chat == ChatForm()
    game.reset(seed=0)
    observation = game.observe("pioneer")
    context = tokenizer.decode(observation["input_ids"][observation["attention_mask"] == 1])
    assert context == (
        "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nReview the film.<|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(UsageError, match="rows are messages"):
        cory_env.raw_env(tokenizer=tokenizer, prompts=rows, reward_fn=zero, chat=False)
    with pytest.raises(UsageError, match="templates set the raw form's string prompts"):
        cory_env.raw_env(tokenizer=tokenizer, prompts=rows, reward_fn=zero, templates=["{query}", "{query}"])
    with pytest.raises(UsageError, match="knowledge_transfer=False set the raw form's string prompts"):
        cory_env.raw_env(tokenizer=tokenizer, prompts=rows, reward_fn=zero, knowledge_transfer=False)


def test_a_private_field_reaches_only_its_positions_messages():
    prompts = signal_prompts(None)
    with pytest.raises(UsageError, match=r"names \{secret\}, a private field that only position\(s\) 0 may see"):
        ChatPrompts(
            ["pioneer", "observer"], ChatForm(opening="{secret}?"), prompt_source=prompts, private_fields=PRIVATE_FIELDS
        )
    with pytest.raises(UsageError, match="position 1's messages"):
        ChatPrompts(
            ["pioneer", "observer"],
            ChatForm(system=["{secret}", "{secret}"]),
            prompt_source=prompts,
            private_fields=PRIVATE_FIELDS,
        )
    task = get_task("signal")
    game = cory_env.raw_env(
        prompts=prompts,
        reward_fn=zero,
        chat=task.chat,
        private_fields=PRIVATE_FIELDS,
        rounds=2,
        num_conversations=4,
        max_new_tokens=3,
        context_length=256,
    )
    tokenizer, rng = game.tokenizer, np.random.default_rng(0)
    game.reset(seed=1)
    for agent in game.agent_iter():
        observation, _, done, _, _ = game.last()
        if agent == "observer" and not done:
            seen = tokenizer.batch_decode(np.where(observation["attention_mask"] == 1, observation["input_ids"], 0))
            for text, prompt in zip(seen, game.prompts):
                assert "The secret colour is one of: red, blue, green, yellow." in text
                assert f"colour is {prompt.metadata['secret']}." not in text
        game.step(None if done else rng.integers(100, 5000, size=4))
    views = game.last_transcript["observer"]["messages"]
    assert all("secret colour is" not in m["content"] or "one of" in m["content"] for v in views for m in v)


def played(family: str, words: list[str], rounds: int = 3, B: int = 3):
    """Play a chat game of ``family`` whose every answer is ``words`` then the end-of-turn token; at each turn's
    start, return (carried?, the window's real tokens decoded, the text of the agent's view)."""
    tokenizer = family_tokenizer(family)
    game = cory_env.raw_env(
        tokenizer=tokenizer,
        prompts=["Name a colour.", "Name a fruit."],
        reward_fn=zero,
        chat=FORM,
        rounds=rounds,
        num_conversations=B,
        max_new_tokens=len(words) + 2,
        context_length=512,
    )
    answer = [*(i for w in words for i in encode(tokenizer, [w], False)[0]), game.speaker("pioneer").stop_token_ids[0]]
    starts = []
    game.reset(seed=0)
    for agent in game.agent_iter():
        observation, _, done, _, _ = game.last()
        if done:
            game.step(None)
            continue
        turn = game._turns[agent]
        if starts_turn(observation):
            ids = observation["input_ids"][0][observation["attention_mask"][0] == 1]  # the first conversation's
            starts.append((int(observation["past_length"][0]) > 0, tokenizer.decode(ids), turn.prompt_texts[0]))
        game.step(np.full(B, answer[min(turn.t, len(answer) - 1)]))
    return starts, game


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_an_agents_later_turns_carry_its_earlier_ones_in_every_family(family):
    starts, game = played(family, ["Red", "."])
    assert [carried for carried, _, _ in starts] == [False, False, True, True, True, True]
    for _, window, text in starts:  # the tokens say what the template renders, each later turn included
        assert window == text
    view = game.last_transcript["observer"]["messages"][0]  # its view of the last turn, and its answer
    assert [m["role"] for m in view] == ["system", "user", *["user", "assistant"] * 3]
    assert view[-2] == {"role": "user", "content": "pioneer: Red."} and view[-1] == {
        "role": "assistant",
        "content": "Red.",
    }


@pytest.mark.parametrize("family", ["llama3", "gemma3"])
def test_a_template_that_trims_answers_renders_the_turn_afresh(family):
    starts, _ = played(family, [" Red", ". "])  # the template writes "Red.", not the answer's " Red. "
    assert [carried for carried, _, _ in starts] == [False] * 6
    for _, window, text in starts:
        assert window == text


def test_the_environment_passes_pettingzoos_api_tests_in_chat_form():
    kwargs = dict(prompts=["Name a colour."], reward_fn=zero, chat=FORM, rounds=2, max_new_tokens=3, context_length=192)
    api_test(cory_env.env(**kwargs), num_cycles=40)
    api_test(cory_env.env(num_conversations=2, **kwargs), num_cycles=40)
    parallel_api_test(cory_env.parallel_env(**kwargs), num_cycles=40)


def test_a_conversation_longer_than_the_context_names_the_length_it_needs():
    game = cory_env.raw_env(
        prompts=["Name a colour."], reward_fn=zero, chat=FORM, rounds=3, max_new_tokens=8, context_length=96
    )
    with pytest.raises(PromptTooLongError, match=r"Raise context_length to \d+") as error:
        game.check_prompts()
    needed = int(str(error.value).split("Raise context_length to ")[1].split(" ")[0])
    cory_env.raw_env(
        prompts=["Name a colour."], reward_fn=zero, chat=FORM, rounds=3, max_new_tokens=8, context_length=needed
    ).check_prompts()
    with pytest.raises(PromptTooLongError, match="Raise context_length"):
        cory_env.raw_env(
            prompts=["Name a colour."], reward_fn=zero, chat=FORM, rounds=3, max_new_tokens=8, context_length=needed - 1
        ).check_prompts()


def test_a_team_of_different_models_renders_each_view_with_its_own_template_wherever_it_sits():
    chatml, llama = family_tokenizer("smollm2"), family_tokenizer("llama3")
    game = cory_env.raw_env(
        tokenizer=[chatml, llama], prompts=["Name a colour."], reward_fn=zero, chat=FORM, max_new_tokens=2,
        context_length=192,
    )  # fmt: skip
    for seating, (first, second) in (([0, 1], (chatml, llama)), ([1, 0], (llama, chatml))):
        game.reset(seed=0, options={"seating": seating})
        seen = {}
        for agent in game.agent_iter():
            observation, _, done, _, _ = game.last()
            if not done and starts_turn(observation):
                seen[agent] = game.speaker(agent).tokenizer.decode(
                    observation["input_ids"][observation["attention_mask"] == 1]
                )
            game.step(None if done else game.speaker(agent).stop_token_ids[0])
        for agent, tokenizer in (("pioneer", first), ("observer", second)):
            assert ("<|eot_id|>" in seen[agent]) == (tokenizer is llama)
            assert ("<|im_end|>" in seen[agent]) == (tokenizer is chatml)
        assert game.speaker("observer").stop_token_ids[0] == second.convert_tokens_to_ids(
            "<|eot_id|>" if second is llama else "<|im_end|>"
        )


def test_a_chain_shorter_or_longer_than_the_form_plays_its_positions():
    alone = ChatPrompts(["pioneer"], FORM)  # PPO: the pioneer alone takes the first system message
    assert alone.systems == ["Answer the question."] and alone.names == ["pioneer"]
    three = ChatPrompts(["pioneer", "observer_1", "observer_2"], ChatForm(system=["A", "B"], names=["p", "o"]))
    assert three.systems == ["A", "B", "B"] and three.names == ["p", "o", "observer_2"]
