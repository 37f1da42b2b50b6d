"""The KV cache carried across an agent's turns in chat form: each carried turn's logits are a fresh prefill's of the
same context (the embedded architecture at tiny width, its real chat template), with the eager cache, the static
cache and the compiled step; an actor that serves two agents prefills afresh where the other's turn took its cache."""

from __future__ import annotations

import pytest
import torch

import cory_env
from cory_agents.acting.actor import LMActor, generate_positions
from cory_env.chat_prompts import ChatForm
from cory_env.context import starts_turn
from cory_env.models import load_causal_lm, load_tokenizer
from cory_env.tiny_model import ensure_tiny_model

FORM = ChatForm(system=["Continue the review.", "Improve your partner's review."])


@pytest.fixture(scope="module")
def tiny():
    path = ensure_tiny_model()
    return load_causal_lm(str(path)).eval(), load_tokenizer(str(path))


def zero(queries, responses, **_):
    return [0.0] * len(responses)


def carried_gaps(model, tokenizer, actors: dict[str, LMActor], rounds: int = 3) -> list[float]:
    """Play a chat game of ``rounds`` with ``actors`` (by agent); at every carried turn's start, the largest gap
    between the actor's next-token logits and those of a fresh forward over the whole context."""
    game = cory_env.raw_env(
        tokenizer=tokenizer, prompts=["The film was", "A long day of"], reward_fn=zero, chat=FORM, rounds=rounds,
        num_conversations=3, max_new_tokens=5, context_length=256,
    )  # fmt: skip
    game.reset(seed=0)
    gaps = []
    for agent in game.agent_iter():
        observation, _, done, _, _ = game.last()
        if done:
            game.step(None)
            continue
        out = actors[agent].step(agent, observation)
        if starts_turn(observation) and observation["past_length"][0] > 0:
            ids, mask = torch.tensor(observation["input_ids"]), torch.tensor(observation["attention_mask"])
            with torch.no_grad():
                fresh = model(input_ids=ids, attention_mask=mask, position_ids=generate_positions(mask)).logits[:, -1]
            gaps.append(float((fresh.float() - out.logits).abs().max()))
        game.step(out.tokens.numpy())
    return gaps


@pytest.mark.parametrize("static", ["eager", "static", pytest.param("compiled", marks=pytest.mark.ci)])
def test_a_carried_turns_logits_are_a_fresh_prefills(tiny, static):
    model, tokenizer = tiny
    options = {"eager": {}, "static": dict(cache_length=256, max_new_tokens=5, compile=False)}.get(
        static, dict(cache_length=256, max_new_tokens=5)
    )
    actors = {a: LMActor(model, generator=torch.Generator().manual_seed(1), **options) for a in ("pioneer", "observer")}
    gaps = carried_gaps(model, tokenizer, actors)
    assert len(gaps) == 4  # both agents' turns in rounds 2 and 3
    assert max(gaps) < 1e-4


def test_an_actor_of_two_agents_prefills_afresh_where_the_others_turn_reset_its_static_cache(tiny):
    model, tokenizer = tiny
    actor = LMActor(
        model, generator=torch.Generator().manual_seed(1), cache_length=256, max_new_tokens=5, compile=False
    )
    gaps = carried_gaps(model, tokenizer, {"pioneer": actor, "observer": actor})
    assert len(gaps) == 4 and max(gaps) < 1e-4


def test_a_carried_turn_that_outgrows_its_static_cache_prefills_only_its_new_columns(tiny):
    """A later turn longer than its earlier turn's cache bucket moves the earlier turn into a larger cache (a copy
    of its keys and values) instead of prefilling the whole context again."""
    model, tokenizer = tiny
    actors = {
        a: LMActor(model, generator=torch.Generator().manual_seed(1), cache_length=256, max_new_tokens=5, compile=False)
        for a in ("pioneer", "observer")
    }
    game = cory_env.raw_env(
        tokenizer=tokenizer, prompts=["The film was", "A long day of"], reward_fn=zero, chat=FORM, rounds=4,
        num_conversations=3, max_new_tokens=5, context_length=256,
    )  # fmt: skip
    game.reset(seed=0)
    widths: list[int] = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    grown, gaps = 0, []
    try:
        for agent in game.agent_iter():
            observation, _, done, _, _ = game.last()
            if done:
                game.step(None)
                continue
            static, carried = actors[agent].static, starts_turn(observation) and observation["past_length"][0] > 0
            before, widths[:] = static.limit, []
            out = actors[agent].step(agent, observation)
            if carried:
                assert widths == [observation["num_new_tokens"][0]]  # the new columns only
                grown += static.limit > before
                ids, mask = torch.tensor(observation["input_ids"]), torch.tensor(observation["attention_mask"])
                with torch.no_grad():
                    fresh = model(input_ids=ids, attention_mask=mask, position_ids=generate_positions(mask)).logits
                gaps.append(float((fresh[:, -1].float() - out.logits).abs().max()))
            game.step(out.tokens.numpy())
    finally:
        hook.remove()
    assert len(gaps) == 6 and grown  # some carried turn outgrew its bucket
    assert max(gaps) < 1e-4
