"""An update over a chat game of several rounds with the carried context (the embedded architecture at tiny
width, its real chat template): each minibatch holds whole conversations, and its padding-free pass runs an
agent's earlier turn once, inside its later turn's context, not once more on a row of its own."""

from __future__ import annotations

import pytest
import torch

import cory_env
from cory_agents.acting.actor import LMActor
from cory_agents.learners.base import Episode
from cory_agents.learners.ppo import PPOConfig, PPOLearner
from cory_agents.learners.value_model import CausalLMWithValueHead
from cory_agents.speed import padding_free
from cory_agents.training.chat_settings import task_chat_form
from cory_agents.training.config import TrainConfig, resolve
from cory_env.chat_prompts import ChatForm
from cory_env.models import hugging_face_model, load_causal_lm, load_tokenizer
from cory_env.tasks import get_task
from cory_env.tiny_model import ensure_tiny_model

FORM = ChatForm(system=["Continue the review.", "Improve your partner's review."])
B = 4  # conversations


def zero(queries, responses, **_):
    return [0.0] * len(responses)


@pytest.fixture(scope="module")
def carried() -> tuple[str, Episode]:
    """The observer's episode of a 2-round chat game whose later turn carried its earlier one."""
    path = str(ensure_tiny_model())
    model, tokenizer = load_causal_lm(path).eval(), load_tokenizer(path)
    game = cory_env.raw_env(
        tokenizer=tokenizer, prompts=["The film was", "A long day of"], reward_fn=zero, chat=FORM, rounds=2,
        num_conversations=B, max_new_tokens=5, context_length=256,
    )  # fmt: skip
    game.reset(seed=0)
    actor = LMActor(model, generator=torch.Generator().manual_seed(1))
    for agent in game.agent_iter():
        observation, _, done, _, _ = game.last()
        game.step(None if done else actor.step(agent, observation).tokens.numpy())
    turns = game.played_turns("observer")
    return path, Episode.from_turns(turns, {})


def packed_widths(model: torch.nn.Module) -> list[int]:
    """The width of each packed row the model's decoder stack runs from now on."""
    widths: list[int] = []
    backbone = hugging_face_model(model).base_model
    backbone.register_forward_pre_hook(
        lambda m, args, kwargs: widths.append(kwargs["input_ids"].shape[1]) if "packed" in kwargs else None,
        with_kwargs=True,
    )
    return widths


def test_a_minibatch_runs_a_carried_contexts_earlier_turn_once(carried):
    path, ep = carried
    assert ep.turns == 2
    real = ep.attention_mask.sum(-1)
    first, later = real[:B], real[B:]
    reference = load_causal_lm(path).requires_grad_(False)
    torch.manual_seed(0)
    policy = CausalLMWithValueHead(load_causal_lm(path))
    assert padding_free.enable(policy)
    learner = PPOLearner(policy, reference, PPOConfig(mini_batch_size=2, ppo_epochs=2), seed=3)
    widths = packed_widths(policy)
    learner.learn(ep)
    scoring, training = widths[0], widths[1:]
    assert len(training) == 2 * B  # 2 epochs of B minibatches, each one conversation's two turns
    # Each earlier turn is in its later turn's context but for the end of its answer (the stop token, which the
    # carried context masks): one pass runs the later turn's tokens and at most that one more.
    assert sorted(training[:B]) == sorted(training[B:])  # the same conversations in each epoch
    assert int(later.sum()) <= sum(training[:B]) <= int(later.sum()) + B
    assert scoring <= int(later.sum()) + B < int(real.sum())  # the scoring pass, all rows at once, as well
    assert int(first.min()) > 10  # so the saving is not a few tokens


@pytest.mark.parametrize(("rounds", "mini_batch_size", "logged"), [(2, 16, False), (3, 16, True), (3, 24, False)])
def test_a_minibatch_size_the_rounds_do_not_divide_is_named_in_one_line(rounds, mini_batch_size, logged, caplog):
    config = resolve(
        TrainConfig(task="signal", chat=True, rounds=rounds, batch_size=48, mini_batch_size=mini_batch_size)
    )
    with caplog.at_level("INFO", logger="cory_agents.training.chat_settings"):
        assert task_chat_form(config, get_task("signal").in_chat_form()).carry
    named = [r.getMessage() for r in caplog.records if "--mini-batch-size" in r.getMessage()]
    assert len(named) == logged
    assert not logged or f"--mini-batch-size {mini_batch_size} is not a multiple of --rounds {rounds}" in named[0]
