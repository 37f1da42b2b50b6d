"""Teams: chains of N agents, each possibly its own model with its own tokenizer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from pettingzoo.test import api_test, seed_test, state_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
from cory_env import CollectiveRewardWrapper, PromptTooLongError, RoleExchangeWrapper, chain_roles, env
from cory_env.templates import render
from tests.support import ROOT
from tests.support.envs import length_reward
from tests.support.golden import assert_same_run, responses
from tests.support.runs import rise_over_seeds
from tests.support.toy import fraction_good, toy_tokenizer

TOY_PROMPTS = ["the movie was", "the plot is", "acting is very"]


def chain(make_env, n, B=None, **kw):
    return make_env(B, num_agents=n, **kw)


def play(e, act=None):
    """Play one episode (random tokens unless ``act(agent, obs)``); the last info of each agent."""
    finals = {}
    for agent in e.agent_iter():
        obs, _, term, trunc, info = e.last()
        if term or trunc:
            finals[agent] = info
            e.step(None)
        else:
            e.step(act(agent, obs) if act else e.action_space(agent).sample())
    return finals


# ---------------------------------------------------------------------------- the environment


@pytest.mark.parametrize("B", [None, 3])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_chains_pass_pettingzoos_tests(make_env, n, B):
    e = chain(make_env, n, B)
    assert e.possible_agents == list(chain_roles(n))
    api_test(e, num_cycles=100)
    seed_test(lambda: chain(make_env, n, B), num_cycles=50)
    state_test(chain(make_env, n, B), turn_based_aec_to_parallel(chain(make_env, n, B)), num_cycles=30)


def test_agent_names_and_roles_follow_the_chain(make_env):
    assert chain_roles(2) == ("pioneer", "observer") and chain_roles(1) == ("pioneer",)
    e = chain(make_env, 4, 2)
    e.reset(seed=0)
    seen = []
    for agent in e.agent_iter():
        obs, _, term, _, info = e.last()
        if not term and agent not in seen:
            seen.append(agent)
            assert int(obs["role"][0]) == e.possible_agents.index(agent)
        e.step(None if term else e.action_space(agent).sample())
    assert seen == ["pioneer", "observer_1", "observer_2", "observer_3"]


def test_each_agent_answers_with_the_earlier_answers_its_template_names(make_env):
    templates = ["{query}", "{query} A1:{response}", "{query} A1:{response_1} A2:{response_2}", "{query}|{responses}"]
    e = chain(make_env, 4, 3, templates=templates, context_length=96)
    e.reset(seed=1)
    finals = play(e)
    answers = [finals[r]["response"] for r in e.possible_agents]
    for b, q in enumerate(finals["pioneer"]["query"]):
        earlier = [a[b] for a in answers]
        assert finals["observer_1"]["context"][b] == f"{q} A1:{earlier[0]}"
        assert finals["observer_2"]["context"][b] == f"{q} A1:{earlier[0]} A2:{earlier[1]}"
        assert finals["observer_3"]["context"][b] == f"{q}|" + "\n".join(earlier[:3])


def test_the_default_chain_improves_the_previous_answer_and_no_transfer_gives_the_query_alone(make_env):
    e = chain(make_env, 3, 2)
    e.reset(seed=0)
    finals = play(e)
    for b, q in enumerate(finals["pioneer"]["query"]):
        previous = finals["observer_1"]["response"][b]
        assert finals["observer_2"]["context"][b] == render(e.unwrapped.observer_template, q, previous)
    e = chain(make_env, 3, 2, knowledge_transfer=False)
    e.reset(seed=0)
    finals = play(e)
    assert finals["observer_2"]["context"] == finals["pioneer"]["context"] == finals["pioneer"]["query"]


@pytest.mark.parametrize(
    "templates, message",
    [
        (
            ["{query}", "{query}{response_2}", "{query}"],
            r"\{response_2\}, the answer of agent 2, which does not exist before agent 2",
        ),
        (["{query}", "{query}{response}", "{query}{response_3}"], r"agent 3, which does not exist before agent 3"),
        (["{query}{response}", "{query}", "{query}"], r"unknown field \{response\}"),
        (["{query}", "{query}{answer}", "{query}"], r"unknown field \{answer\}"),
        (["{query}", "{query}"], "one template per agent"),
    ],
)
def test_a_template_that_names_an_answer_not_there_yet_fails_at_once(make_env, templates, message):
    with pytest.raises(ValueError, match=message):
        chain(make_env, 3, 2, templates=templates)


def test_a_later_agents_prompt_that_cannot_fit_fails_before_the_first_episode(make_env):
    # Each later agent's prompt holds every earlier answer: at 5 tokens each, the fourth needs room for 15.
    e = chain(make_env, 4, 2, templates=["{query}"] + ["{query}{responses}"] * 3, context_length=24)
    with pytest.raises(PromptTooLongError, match="observer_3's prompt with 20 tokens of responses"):
        e.unwrapped.check_prompts()
    with pytest.raises(PromptTooLongError, match="observer_3's prompt"):
        e.reset(seed=0)  # the worst case is checked at reset, before any token is generated


def test_the_collective_reward_sums_means_or_weights_all_n(make_env):
    for aggregate, weights in [
        ("sum", None),
        ("mean", None),
        ("sum", {"pioneer": 1.0, "observer_1": 0.0, "observer_2": 2.0}),
    ]:
        e = CollectiveRewardWrapper(chain(make_env, 3, 4), aggregate=aggregate, weights=weights)
        e.reset(seed=3)
        finals = play(e)
        own = {r: np.asarray(finals[r]["task_reward"]) for r in finals}
        w = weights or dict.fromkeys(own, 1.0)
        expected = sum(w[r] * own[r] for r in own) / (sum(w.values()) if aggregate == "mean" else 1.0)
        for r in own:
            np.testing.assert_allclose(finals[r]["reward"], expected)
        assert len(set(own)) == 3


def test_role_exchange_rotates_n_learners_through_the_positions(make_env):
    e = RoleExchangeWrapper(chain(make_env, 3, 2), period=2)
    assert e.possible_agents == ["llm_0", "llm_1", "llm_2"]
    schedule = []
    for _ in range(7):
        e.reset()
        schedule.append(
            [learner for learner, _ in sorted(e.roles.items(), key=lambda kv: e.env.possible_agents.index(kv[1]))]
        )
        finals = play(e)
        assert {learner: info["role"] for learner, info in finals.items()} == e.roles
    rotations = [["llm_0", "llm_1", "llm_2"], ["llm_1", "llm_2", "llm_0"], ["llm_2", "llm_0", "llm_1"]]
    assert schedule == [rotations[(i // 2) % 3] for i in range(7)]
    never = RoleExchangeWrapper(chain(make_env, 3, 2), period=None)
    never.reset()
    assert list(never.roles) == ["llm_0", "llm_1", "llm_2"]


# ---------------------------------------------------------------------------- a team of two tokenizers


def test_a_two_model_team_tokenizes_each_context_with_its_own_tokenizer(make_env, gpt2_tokenizer):
    toy = toy_tokenizer()
    e = env(
        tokenizer=[toy, gpt2_tokenizer],
        prompts=TOY_PROMPTS,
        reward_fn=length_reward,
        num_conversations=3,
        max_new_tokens=4,
        context_length=48,
    )
    raw = e.unwrapped
    assert raw.heterogeneous and raw.tokenizers == [toy, gpt2_tokenizer]
    assert e.action_space("pioneer").nvec[0] == len(toy) and e.action_space("observer").nvec[0] == len(gpt2_tokenizer)
    e.reset(seed=0)
    seen = {}
    for agent in e.agent_iter():
        obs, _, term, _, info = e.last()
        if not term and agent not in seen:  # the whole prompt at the first step of the turn
            seen[agent] = [row[m == 1].tolist() for row, m in zip(obs["input_ids"], obs["attention_mask"])]
        e.step(None if term else e.action_space(agent).sample())
        if term:
            seen[agent + "_context"] = info["context"]
    for agent, tokenizer in [("pioneer", toy), ("observer", gpt2_tokenizer)]:
        assert seen[agent] == tokenizer(seen[agent + "_context"])["input_ids"], agent
    assert seen["observer"] != toy(seen["observer_context"])["input_ids"]
    e.reset(seed=0)
    with pytest.raises(ValueError, match=f"valid ids are 0..{len(toy) - 1}"):
        e.step(np.full(3, len(toy), dtype=np.int64))  # a GPT-2 id is not one of the pioneer's


def test_a_rotating_two_model_team_keeps_each_learners_tokens_wherever_it_sits(gpt2_tokenizer):
    toy = toy_tokenizer()
    e = RoleExchangeWrapper(
        env(
            tokenizer=[toy, gpt2_tokenizer],
            prompts=TOY_PROMPTS,
            reward_fn=length_reward,
            num_conversations=2,
            max_new_tokens=3,
            context_length=48,
        ),
        period=1,
    )
    assert e.action_space("llm_0").nvec[0] == len(toy) and e.action_space("llm_1").nvec[0] == len(gpt2_tokenizer)
    api_test(e, num_cycles=60)
    for _ in range(3):
        episode = e.episodes  # the API test has played some already
        e.reset()
        finals = play(e)
        pioneer = next(learner for learner, role in e.roles.items() if role == "pioneer")
        assert pioneer == ("llm_0", "llm_1")[episode % 2]
        for learner, tokenizer in [("llm_0", toy), ("llm_1", gpt2_tokenizer)]:
            raw = e.unwrapped
            assert raw.speaker(e.roles[learner]).tokenizer is tokenizer
            ids = tokenizer(finals[learner]["context"])["input_ids"]
            assert all(max(row) < len(tokenizer) for row in ids)


def test_a_team_list_of_the_wrong_length_is_refused(gpt2_tokenizer):
    with pytest.raises(ValueError, match="tokenizer lists 2 values for a chain of 3 agents"):
        env(tokenizer=[toy_tokenizer(), gpt2_tokenizer], prompts=TOY_PROMPTS, reward_fn=length_reward, num_agents=3)


# ---------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer GPT-2 with the real GPT-2 tokenizer files: a second model and tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from tests.support.toy import gpt2_tokenizer

    tokenizer = gpt2_tokenizer()
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=64,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    folder = tmp_path_factory.mktemp("tiny_gpt2")
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def team_config(model: Path, out: Path, **kw) -> TrainConfig:
    defaults = dict(
        model=str(model),
        iterations=4,
        batch_size=8,
        mini_batch_size=4,
        ppo_epochs=2,
        lr=1e-2,
        kl_coef=0.05,
        min_new_tokens=3,
        max_new_tokens=6,
        out=str(out),
        report_to="none",
        checkpoint_every=2,
        context_length=48,
        role_exchange_period=1,
    )
    return TrainConfig(**{**defaults, **kw})


def test_a_chain_of_two_trains_as_before_chains_existed(tmp_path):
    """CORY (also with LoRA, and with one minibatch per epoch) and PPO at N = 2 against the metrics and
    samples cory-env wrote at 12ce942."""
    subprocess.run(
        [sys.executable, "-m", "tests.support.chain_of_two", str(tmp_path)],
        cwd=ROOT,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
    )
    golden = ROOT / "tests" / "data" / "chain_of_two"
    for name in ("cory", "cory_lora", "ppo", "cory_one_minibatch"):
        # Written on another machine: the tokens exactly, float metrics within a bound (tests/support/golden.py).
        assert responses(tmp_path / f"{name}_samples.jsonl") == responses(golden / f"{name}_samples.jsonl"), name
        now, before = (pd.read_csv(d / f"{name}_metrics.csv") for d in (tmp_path, golden))
        assert_same_run(now, before, name)


@pytest.mark.parametrize("n", [3, 4])
def test_a_chain_of_n_trains_rotates_and_resumes_exactly(toy_model, tmp_path, n):
    config = team_config(toy_model, tmp_path / "whole", num_agents=n)
    Trainer(config, prompts=TOY_PROMPTS, reward_fn=fraction_good).train(progress=False)
    metrics = pd.read_csv(tmp_path / "whole" / "metrics.csv")
    roles = metrics[[f"llm_{i}/role" for i in range(n)]].to_numpy()
    assert roles.tolist() == [[(i - r) % n for i in range(n)] for r in range(4)]  # llm_i at position i - r
    assert sorted(p.name for p in (tmp_path / "whole" / "model").iterdir()) == [f"llm_{i}" for i in range(n)]
    # Stopped after the checkpoint at iteration 2, then resumed: the same run.
    half = team_config(toy_model, tmp_path / "halves", num_agents=n, iterations=2)
    Trainer(half, prompts=TOY_PROMPTS, reward_fn=fraction_good).train(progress=False)
    resumed = team_config(toy_model, tmp_path / "halves", num_agents=n, resume=True)
    Trainer(resumed, prompts=TOY_PROMPTS, reward_fn=fraction_good).train(progress=False)
    again = pd.read_csv(tmp_path / "halves" / "metrics.csv")
    timing = ["tokens_per_s", "seconds"]
    pd.testing.assert_frame_equal(again.drop(columns=timing), metrics.drop(columns=timing))


def test_a_chain_of_three_raises_every_learners_reward(toy_model, tmp_path):
    def train(seed, folder):
        config = team_config(
            toy_model,
            folder,
            num_agents=3,
            iterations=14,
            batch_size=16,
            mini_batch_size=8,
            ppo_epochs=4,
            kl_coef=0.0,
            role_exchange_period=2,
            checkpoint_every=100,
            save_model=False,
            seed=seed,
        )
        Trainer(config, prompts=TOY_PROMPTS, reward_fn=fraction_good).train(progress=False)

    rises = rise_over_seeds(train, tmp_path, ["llm_0", "llm_1", "llm_2"])
    assert all(rise > 0.1 for rise in rises.values()), rises


def test_a_two_model_team_trains_exports_and_resumes(toy_model, tiny_gpt2, tmp_path):
    from transformers import AutoTokenizer

    models = f"{toy_model},{tiny_gpt2}"
    whole = team_config(toy_model, tmp_path / "whole", models=models)
    trainer = Trainer(whole, prompts=TOY_PROMPTS, reward_fn=fraction_good)
    assert trainer.config.num_agents == 2  # it follows --models
    assert trainer.learners["llm_0"].model is not trainer.learners["llm_1"].model
    trainer.train(progress=False)
    for learner, vocab in [("llm_0", len(toy_tokenizer())), ("llm_1", 50257)]:
        assert len(AutoTokenizer.from_pretrained(tmp_path / "whole" / "model" / learner)) == vocab
    metrics = pd.read_csv(tmp_path / "whole" / "metrics.csv")
    assert metrics["llm_0/role"].tolist() == [0, 1, 0, 1]
    half = team_config(toy_model, tmp_path / "halves", models=models, iterations=2)
    Trainer(half, prompts=TOY_PROMPTS, reward_fn=fraction_good).train(progress=False)
    resumed = team_config(toy_model, tmp_path / "halves", models=models, resume=True)
    Trainer(resumed, prompts=TOY_PROMPTS, reward_fn=fraction_good).train(progress=False)
    timing = ["tokens_per_s", "seconds"]
    again = pd.read_csv(tmp_path / "halves" / "metrics.csv").drop(columns=timing)
    pd.testing.assert_frame_equal(again, metrics.drop(columns=timing))


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(num_agents=3, models="a,b"), r"--models lists 2 model\(s\) \(a, b\) for --num-agents 3"),
        (dict(algo="ppo", num_agents=3), "--algo ppo trains one agent"),
        (dict(algo="ppo", models="a,b"), "--algo ppo trains one agent, but --models lists 2"),
        (dict(num_agents=0), "--num-agents must be at least 1"),
        (
            dict(num_agents=3, templates='["{query}", "{query}{response}"]'),
            r"--templates lists 2 template\(s\) for a chain of 3",
        ),
        (dict(templates="{query}"), "--templates must be a JSON list"),
    ],
)
def test_bad_team_settings_fail_when_the_config_is_made(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**settings)


def test_a_context_longer_than_a_models_window_fails_before_the_first_episode(toy_model, tiny_gpt2, tmp_path):
    config = team_config(toy_model, tmp_path, models=f"{toy_model},{tiny_gpt2}", context_length=96)
    with pytest.raises(ValueError, match="--context-length 96 does not fit llm_1's model.*window is 64"):
        Trainer(config, prompts=TOY_PROMPTS, reward_fn=fraction_good)
    assert not (tmp_path / "metrics.csv").exists()


def test_a_template_naming_a_missing_answer_fails_before_the_first_episode(toy_model, tmp_path):
    config = team_config(toy_model, tmp_path, num_agents=3, templates='["{query}", "{query}{response_2}", "{query}"]')
    with pytest.raises(ValueError, match=r"\{response_2\}, the answer of agent 2"):
        Trainer(config, prompts=TOY_PROMPTS, reward_fn=fraction_good)


@pytest.mark.ci
def test_the_embedded_model_and_a_tiny_gpt2_train_as_a_team(tiny_gpt2, tmp_path):
    """The real embedded model (SmolLM2-135M, its tokenizer) as llm_0 and a tiny GPT-2 (GPT-2's) as llm_1."""
    config = TrainConfig(
        models=f"smollm2-135m,{tiny_gpt2}",
        iterations=2,
        batch_size=4,
        max_new_tokens=6,
        min_new_tokens=6,
        context_length=64,
        out=str(tmp_path),
        report_to="none",
        save_model=False,
        role_exchange_period=1,
    )
    trainer = Trainer(config)
    assert [len(t) for t in trainer.game.unwrapped.tokenizers] == [49152, 50257]
    trainer.train(progress=False)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics["llm_0/role"].tolist() == [0, 1]
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert {s["learner"] for s in samples} == {"llm_0", "llm_1"} and all(
        isinstance(s["response"], str) for s in samples
    )
    assert np.isfinite(metrics[["llm_0/kl", "llm_1/kl"]].to_numpy()).all()


def test_each_learner_of_a_team_is_evaluated_alone_in_its_own_tokens(toy_model, tiny_gpt2, tmp_path):
    """A three-agent team of two models: evaluation loads every learner and lets each answer alone."""
    from cory_agents.evaluation.held_out import EvalConfig, evaluate

    config = team_config(
        toy_model,
        tmp_path,
        models=f"{toy_model},{tiny_gpt2},{toy_model}",
        iterations=1,
        lr=3e-2,
        context_length=64,
        max_new_tokens=4,
        min_new_tokens=4,
        reward="tests.support.toy:long_words",
        prompt_source="rotten_tomatoes",
        save_model=False,
    )
    Trainer(config).train(progress=False)
    result = evaluate(EvalConfig(checkpoint=str(tmp_path), num_prompts=4, batch_size=4), progress=False, write=False)
    assert result["learners"].keys() == {"llm_0", "llm_1", "llm_2"}
    for name, m in result["learners"].items():
        assert m["answers"] == 4 and np.isfinite(m["task_reward_mean"]) and m["kl"] > 1e-4, name


def test_the_reward_benchmark_gives_cory_the_team_and_ppo_the_first_model():
    from cory_agents.evaluation.reward_benchmark import for_algo

    train = TrainConfig(models="a,b,c")
    assert for_algo(train, "cory") == {"algo": "cory"}
    ppo = TrainConfig(**{**vars(train), **for_algo(train, "ppo")})
    assert ppo.learner_names() == ["pioneer"] and ppo.agent_models() == {"pioneer": "a"}
    # A team's templates, one per agent: the PPO baseline keeps the pioneer's.
    templated = TrainConfig(num_agents=3, templates='["P: {query}", "{query}{response}", "{query}{responses}"]')
    ppo = TrainConfig(**{**vars(templated), **for_algo(templated, "ppo")})
    assert ppo.template_list() == ["P: {query}"]


def test_the_command_line_trains_a_chain_of_three_on_its_own_devices(toy_model, tmp_path, capsys):
    from cory_agents.cli.train import main

    main(
        [
            "--model",
            str(toy_model),
            "--num-agents",
            "3",
            "--learner-devices",
            "cpu,cpu,cpu",
            "--iterations",
            "2",
            "--batch-size",
            "4",
            "--max-new-tokens",
            "3",
            "--min-new-tokens",
            "3",
            "--context-length",
            "48",
            "--task-file",
            str(_prompt_file(tmp_path)),
            "--reward",
            "tests.support.toy:fraction_good",
            "--report-to",
            "none",
            "--role-exchange-period",
            "1",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    printed = capsys.readouterr().out
    for learner in ("llm_0", "llm_1", "llm_2"):
        assert f"{learner}: task reward" in printed and (tmp_path / "run" / "model" / learner).is_dir()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["num_agents"] == 3


def _prompt_file(folder: Path) -> Path:
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"query": q}) + "\n" for q in TOY_PROMPTS))
    return path


def test_in_a_two_model_team_the_small_vocabulary_learner_learns(toy_model, tiny_gpt2, tmp_path):
    """The toy Llama (19 tokens) learns its reward beside a tiny GPT-2 (50257 tokens): the team's
    collective reward and its rotation do not get in its way. (The GPT-2 learner's reward, one word
    among 50257 tokens, is not asserted: it needs far more iterations than a test has.)"""
    config = team_config(
        toy_model,
        tmp_path,
        models=f"{toy_model},{tiny_gpt2}",
        iterations=14,
        batch_size=16,
        mini_batch_size=8,
        ppo_epochs=4,
        kl_coef=0.0,
        role_exchange_period=2,
        checkpoint_every=100,
        save_model=False,
    )
    Trainer(config, prompts=TOY_PROMPTS, reward_fn=fraction_good).train(progress=False)
    curve = pd.read_csv(tmp_path / "metrics.csv")["llm_0/task_reward_mean"].to_numpy()
    assert curve[-3:].mean() > curve[:3].mean() + 0.1, curve


def test_agents_of_the_same_model_share_one_lora_base_and_each_model_has_its_own_reference(
    toy_model, tiny_gpt2, tmp_path
):
    config = team_config(
        toy_model,
        tmp_path,
        models=f"{toy_model},{tiny_gpt2},{toy_model}",
        lora=True,
        iterations=2,
        context_length=64,
        checkpoint_every=100,
    )
    trainer = Trainer(config, prompts=TOY_PROMPTS, reward_fn=fraction_good)
    policies, learners = trainer.policies, trainer.learners
    assert policies["llm_0"].peft_model is policies["llm_2"].peft_model  # one frozen base, two adapters
    assert policies["llm_1"].peft_model is not policies["llm_0"].peft_model
    references = {n: learner.reference for n, learner in learners.items()}
    assert references["llm_0"].peft_model is references["llm_2"].peft_model is policies["llm_0"].peft_model
    assert references["llm_1"].peft_model is policies["llm_1"].peft_model
    trainer.train(progress=False)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert np.isfinite(metrics[[f"llm_{i}/kl" for i in range(3)]].to_numpy()).all()
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["llm_0", "llm_1", "llm_2"]


def test_the_teams_report_reads_each_positions_reward_whoever_sits_there():
    from studies.teams_report import by_position

    df = pd.DataFrame(
        {
            "iteration": [0, 1],
            "llm_0/role": [0, 1],
            "llm_1/role": [1, 0],
            "llm_0/task_reward_mean": [0.1, 0.2],
            "llm_1/task_reward_mean": [0.3, 0.4],
        }
    )
    table = by_position(df)
    assert table[0].tolist() == [0.1, 0.4] and table[1].tolist() == [0.3, 0.2]


def test_a_context_beyond_a_rotary_models_window_is_a_warning(toy_model, tmp_path, caplog):
    """Llama's rotary positions run on past its trained window (256 here): the run is allowed, and told."""
    config = team_config(toy_model, tmp_path, num_agents=3, context_length=300, iterations=1)
    with caplog.at_level("WARNING", logger="cory_agents"):
        Trainer(config, prompts=TOY_PROMPTS, reward_fn=fraction_good)
    # Once per model, naming every learner of it.
    assert caplog.text.count("--context-length 300 is beyond llm_0, llm_1, llm_2's model") == 1
