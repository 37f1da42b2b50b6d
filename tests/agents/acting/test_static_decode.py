"""The static-cache decode step (agents/acting/static_decode.py): the eager actor's transcript, token for token,
with a static cache and with the compiled step; one turn at a time; a cache too short is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cory_agents.acting.actor import LMActor
from cory_env import env
from cory_env.models import load_causal_lm, load_tokenizer
from tests.support.transcripts import CONTEXT, PROMPTS, TURN, play


@pytest.fixture(scope="module")
def toy(toy_model):
    return load_causal_lm(str(toy_model)).eval(), load_tokenizer(str(toy_model))


@pytest.mark.parametrize("do_sample", [False, True])
def test_a_static_cache_gives_the_eager_actors_tokens(toy, do_sample):
    model, tokenizer = toy
    runs = []
    for cache_length in (None, CONTEXT):
        generator = torch.Generator().manual_seed(3)
        actor = LMActor(model, do_sample=do_sample, generator=generator, cache_length=cache_length, compile=False)
        runs.append(play(model, tokenizer, actor))
    (eager_texts, eager_ids), (static_texts, static_ids) = runs
    assert static_texts == eager_texts
    for a, b in zip(eager_ids, static_ids):
        np.testing.assert_array_equal(a, b)


def test_the_static_steps_logits_are_the_eager_steps_to_rounding(toy):
    model, tokenizer = toy
    eager, static = LMActor(model), LMActor(model, cache_length=CONTEXT, compile=False)
    game = env(tokenizer=tokenizer, prompts=PROMPTS, num_conversations=4, max_new_tokens=TURN, context_length=CONTEXT)
    game.reset(seed=1)
    for _ in range(TURN):
        observation = game.observe(game.agent_selection)
        a = eager.next_token_logits("pioneer", observation)
        b = static.next_token_logits("pioneer", observation)
        torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
        game.step(a.argmax(-1).numpy())
        if game.agent_selection != "pioneer":
            break


@pytest.mark.ci  # the compiled step of every model family: tests/agents/training/test_supported_models.py
def test_the_compiled_step_gives_the_eager_actors_tokens(toy):
    model, tokenizer = toy
    torch._dynamo.reset()
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    eager = play(model, tokenizer, LMActor(model, do_sample=False))
    compiled_actor = LMActor(model, do_sample=False, cache_length=CONTEXT)
    compiled = play(model, tokenizer, compiled_actor)
    assert compiled[0] == eager[0]
    again = play(model, tokenizer, compiled_actor, seed=2)  # another episode, other turn lengths
    assert again[0] == play(model, tokenizer, LMActor(model, do_sample=False), seed=2)[0]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 1  # compiled once, at the first step


@pytest.mark.ci  # compiles: the compiled decode is tested in CI's slow step (test_supported_models.py)
def test_each_turn_caches_what_it_needs_in_a_bucket_and_compiles_once_per_bucket(toy):
    """With the turn limit known, a turn's cache is the smallest bucket holding its prompt and answer (64 here, in a
    window of 160): the same tokens as the eager actor, one compiled graph per cache length met."""
    model, tokenizer = toy

    def episode(actor: LMActor, seed: int) -> list[str]:
        game = env(
            tokenizer=tokenizer, prompts=PROMPTS, num_conversations=4, max_new_tokens=TURN, context_length=160
        )  # fmt: skip
        game.reset(seed=seed)
        for agent in game.agent_iter():
            observation, _, done, _, info = game.last()
            game.step(None if done else actor.act(agent, observation))
        return info["response"]

    torch._dynamo.reset()
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    bucketed = LMActor(model, do_sample=False, cache_length=160, max_new_tokens=TURN)
    for seed in (0, 1):
        assert episode(bucketed, seed) == episode(LMActor(model, do_sample=False), seed)
    assert bucketed.static.limit == 64 and set(bucketed.static.slots) == {64}
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 1


def test_one_turn_at_a_time_and_a_cache_that_fits(toy):
    model, tokenizer = toy
    game = env(tokenizer=tokenizer, prompts=PROMPTS, num_conversations=4, max_new_tokens=TURN, context_length=CONTEXT)
    game.reset(seed=0)
    actor = LMActor(model, cache_length=CONTEXT, compile=False)
    observation = game.observe("pioneer")
    game.step(actor.act("pioneer", observation))
    with pytest.raises(RuntimeError, match="one turn at a time"):
        actor.act("observer", game.observe("pioneer"))
    short = LMActor(model, cache_length=2, compile=False)
    with pytest.raises(ValueError, match=r"past its static cache's 2 .*the run.s --context-length"):
        short.act("pioneer", observation)


@pytest.mark.parametrize(
    "extra",
    [
        [],
        pytest.param(["--models", "{model},{other}"], marks=pytest.mark.ci),
        pytest.param(["--models", "{model},{wider}"], marks=pytest.mark.ci),
        pytest.param(["--no-padding-free"], marks=pytest.mark.ci),
        ["--rounds", "2"],
        pytest.param(["--learner", "difference"], marks=pytest.mark.ci),
    ],
    ids=["cory", "two-models", "two-architectures", "padded", "two-rounds", "difference-replays"],
)
def test_cory_train_compile_samples_what_the_eager_run_samples(toy_model, tmp_path, extra):
    """Three iterations of cory-train with --compile: the eager run's responses, word for word (the toy model's
    logits agree to rounding), and the same losses to float rounding."""
    import json

    import pandas as pd

    from cory_agents.cli import train as cory_train
    from tests.support.commands import toy_args
    from tests.support.toy import save_tiny_llama, toy_tokenizer

    common = ["--algo", "cory", "--iterations", "3", "--role-exchange-period", "1", "--samples-per-iteration", "8"]
    other = save_tiny_llama(tmp_path / "other", toy_tokenizer(), seed=1)  # a team of two different models
    wider = save_tiny_llama(tmp_path / "wider", toy_tokenizer(), seed=2, hidden_size=48)  # of two architectures
    extra = [flag.format(model=toy_model, other=other, wider=wider) for flag in extra]
    graphs = 0
    for name, flags in (("eager", []), ("compiled", ["--compile"])):
        torch._dynamo.reset()
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        cory_train.main(toy_args(toy_model, tmp_path / name, *common, *extra, *flags))
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before
    # Compiled at the first decode step, once per acting model at most, whatever the turns' lengths.
    assert 1 <= graphs <= 2
    samples = {
        name: [json.loads(line)["response"] for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
        for name in ("eager", "compiled")
    }
    assert samples["compiled"] == samples["eager"] and samples["eager"]
    eager, compiled = (pd.read_csv(tmp_path / n / "metrics.csv") for n in ("eager", "compiled"))
    for column in ("llm_0/task_reward_mean", "llm_1/kl", "llm_0/policy_loss"):
        np.testing.assert_allclose(compiled[column], eager[column], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--lora", "true"], "--compile with --lora"),
    ],
)
def test_what_compile_cannot_do_is_refused(run, toy_model, tmp_path, flags, error):
    from cory_agents.cli import train as cory_train
    from tests.support.commands import the_error, toy_args

    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--compile", *flags))
    assert code == 2
    assert the_error(err, "cory-train").startswith(error)
