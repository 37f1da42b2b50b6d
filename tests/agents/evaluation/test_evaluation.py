"""Evaluation: the metrics against hand-computed values, and evaluate() on a tiny model's checkpoint."""

from __future__ import annotations

import itertools
import json
import math
import os
import runpy
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cory_agents.evaluation.held_out import (
    EvalConfig,
    distinct_n,
    evaluate,
    evaluate_learners,
    format_result,
    held_out_prompts,
    mean_pass_at_k,
    pass_at_k,
    repetition_rate,
    summarize,
    task_prompts,
)
from cory_agents.learners.ppo import Episode
from cory_agents.training.config import TrainConfig
from cory_agents.training.trainer import Trainer
from cory_env import env
from cory_env.prompts import PromptList
from tests.support import ROOT
from tests.support.toy import fraction_good, toy_tokenizer

REWARD = "tests.support.toy:fraction_good"


# ------------------------------------------------------------------ distinct-n, repetition


def test_distinct_n_by_hand():
    responses = [[1, 2, 3], [1, 2, 4]]
    assert distinct_n(responses, 1) == pytest.approx(4 / 6)  # {1, 2, 3, 4} of 6 unigrams
    assert distinct_n(responses, 2) == pytest.approx(3 / 4)  # (1,2) twice, (2,3), (2,4)
    assert distinct_n(responses, 3) == pytest.approx(2 / 2)
    assert distinct_n([[7, 7, 7, 7]], 1) == pytest.approx(1 / 4)  # a collapsed answer
    assert math.isnan(distinct_n([[1], [2]], 2))  # no bigram at all
    with pytest.raises(ValueError, match="n must be at least 1"):
        distinct_n(responses, 0)


def test_repetition_rate_is_seq_rep_n_by_hand():
    assert repetition_rate([[5, 5, 5], [1, 2, 3]], n=2) == pytest.approx((1 - 1 / 2 + 0) / 2)
    assert repetition_rate([[5, 5, 5], [1, 2, 3]], n=1) == pytest.approx((1 - 1 / 3 + 0) / 2)
    # "marvelous marvelous splendid marvelous marvelous splendid": bigrams mm ms sm mm ms, 3 distinct of 5
    assert repetition_rate([[9, 9, 4, 9, 9, 4]], n=2) == pytest.approx(1 - 3 / 5)
    # too short for a bigram: left out of the mean, not counted as 0
    assert repetition_rate([[1], [2, 2, 2, 2]], n=2) == pytest.approx(1 - 1 / 3)
    assert math.isnan(repetition_rate([[1], []], n=2))


# ------------------------------------------------------------------ pass@k


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The definition: the share of k-subsets of n answers (c correct) holding a correct one."""
    answers = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(answers, k))
    return Fraction(sum(any(s) for s in subsets), len(subsets))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_pass_at_k_is_the_definition(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_force_pass_at_k(n, c, k)), abs=1e-12), (n, c, k)


def test_pass_at_k_equals_the_binomial_formula_and_is_stable_for_large_n():
    for n, c, k in [(10, 3, 1), (10, 3, 5), (20, 1, 10), (200, 7, 100), (1000, 2, 10)]:
        exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    # pass@1 is the share of correct answers
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


def test_pass_at_k_edge_cases():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 0, 5) == 0.0  # c = 0
    assert pass_at_k(5, 5, 1) == 1.0 and pass_at_k(5, 5, 5) == 1.0  # c = n
    assert pass_at_k(5, 1, 5) == 1.0  # k = n: any correct answer is among the k
    assert pass_at_k(5, 4, 2) == 1.0  # n - c < k
    assert pass_at_k(4, 1, 2) == 0.5
    with pytest.raises(ValueError, match=r"k=6 must lie in \[1, n=5\]"):
        pass_at_k(5, 1, 6)
    with pytest.raises(ValueError, match="k=0"):
        pass_at_k(5, 1, 0)
    with pytest.raises(ValueError, match="c=6"):
        pass_at_k(5, 6, 1)
    with pytest.raises(TypeError, match="integer"):
        pass_at_k(5, 1.5, 1)


def test_mean_pass_at_k_averages_over_questions():
    correct = np.array([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=bool)
    assert mean_pass_at_k(correct, 1) == pytest.approx((1 / 4 + 0 + 1) / 3)
    assert mean_pass_at_k(correct, 2) == pytest.approx((1 / 2 + 0 + 1) / 3)
    assert mean_pass_at_k(correct, 4) == pytest.approx((1 + 0 + 1) / 3)


def test_summarize_by_hand():
    records = [  # 2 prompts x 2 answers, in a row per prompt
        dict(query="a", response="x", response_ids=[1, 2], response_length=3, task_reward=1.0, kl=0.5),
        dict(query="a", response="y", response_ids=[1, 3], response_length=2, task_reward=0.0, kl=1.5),
        dict(query="b", response="z", response_ids=[4, 4, 4], response_length=2, task_reward=0.0, kl=1.0),
        dict(query="b", response="w", response_ids=[5], response_length=1, task_reward=0.0, kl=1.0),
    ]
    s = summarize(records, samples_per_prompt=2, kl_coef=0.2, pass_threshold=1.0)
    assert s["task_reward_mean"] == pytest.approx(0.25)
    assert s["kl"] == pytest.approx(1.0)
    assert s["combined_reward"] == pytest.approx(0.25 - 0.2 * 1.0)
    assert s["distinct_1"] == pytest.approx(5 / 8)  # {1,2,3,4,5} of 8 tokens
    assert s["distinct_2"] == pytest.approx(3 / 4)  # (1,2) (1,3) (4,4) (4,4)
    assert s["repetition_rate"] == pytest.approx((0 + 0 + 1 / 2) / 3)  # [5] has no bigram
    assert s["response_length"] == pytest.approx(2.0)
    assert s["pass@1"] == pytest.approx((1 / 2 + 0) / 2)
    assert s["pass@2"] == pytest.approx((1 + 0) / 2)
    assert "pass@1" not in summarize(records, samples_per_prompt=2, kl_coef=0.2)  # no threshold: no pass@k


def test_held_out_prompts_are_distinct_and_seeded():
    source = PromptList([f"prompt {i}" for i in range(50)])
    a, b = held_out_prompts(source, 20, seed=3), held_out_prompts(source, 20, seed=3)
    assert [p.query for p in a] == [p.query for p in b]
    assert len({p.query for p in a}) == 20
    assert [p.query for p in held_out_prompts(source, 20, seed=4)] != [p.query for p in a]
    assert sorted(p.query for p in held_out_prompts(PromptList(["x", "y", "y"]), 10)) == ["x", "y"]  # all there is


def test_sentiment_test_split_is_held_out():
    tokenizer = toy_tokenizer()
    train, _ = task_prompts("sentiment", tokenizer, split="train", source="rotten_tomatoes")
    test, template = task_prompts("sentiment", tokenizer, split="test", source="rotten_tomatoes")
    assert template == "{query}"
    assert not set(train.texts) & set(test.texts) and len(test.texts) > 100


# ------------------------------------------------------------------ evaluate() on a tiny model


@pytest.fixture(scope="module")
def trained(toy_model, tmp_path_factory):
    """A CORY run of one iteration (lr high enough to move away from the reference), and its Trainer."""
    out = tmp_path_factory.mktemp("run")
    config = TrainConfig(
        model=str(toy_model),
        algo="cory",
        iterations=1,
        batch_size=8,
        mini_batch_size=4,
        ppo_epochs=2,
        lr=3e-2,
        min_new_tokens=3,
        max_new_tokens=5,
        context_length=48,
        out=str(out),
        report_to="none",
        reward=REWARD,
        prompt_source="rotten_tomatoes",
    )
    trainer = Trainer(config)
    trainer.train(progress=False)
    return out, trainer


def small(**kw) -> EvalConfig:
    return EvalConfig(**{"num_prompts": 6, "samples_per_prompt": 2, "batch_size": 5, **kw})


def test_evaluate_a_checkpoint(trained):
    out, _ = trained
    result = evaluate(small(checkpoint=str(out), pass_threshold=0.2), progress=False)
    assert result["path"] == str(out / "evaluation.json")
    saved = json.loads((out / "evaluation.json").read_text())
    assert saved["learners"].keys() == {"llm_0", "llm_1"}
    assert saved["policy"]["iterations_trained"] == 1 and saved["reward"] == REWARD
    assert saved["num_prompts"] == 6 and saved["max_new_tokens"] == 5 and saved["split"] == "test"
    for m in saved["learners"].values():
        for key in ("task_reward_mean", "kl", "combined_reward", "distinct_1", "distinct_2", "repetition_rate"):
            assert math.isfinite(m[key]), key
        assert m["kl"] > 1e-4  # trained away from the reference
        assert m["answers"] == 12 and 0 <= m["pass@1"] <= m["pass@2"] <= 1
        assert m["combined_reward"] == pytest.approx(m["task_reward_mean"] - m["kl_coef"] * m["kl"])
    table = format_result(result)
    assert "llm_0" in table and "distinct-2" in table and "pass@2" in table
    only = evaluate(
        small(checkpoint=str(out / "checkpoints"), learners="llm_1", out=str(out / "one.json")), progress=False
    )
    assert only["learners"].keys() == {"llm_1"}
    assert "pass@1" not in only["learners"]["llm_1"]  # sentiment: no pass@k unless a threshold is given


@pytest.mark.parametrize("learner", ["grpo", "rloo"])
def test_evaluate_a_critic_free_learners_checkpoint(toy_model, tmp_path, learner):
    """Evaluation loads any LM learner's weights (no value head here) and measures its KL."""
    config = TrainConfig(
        model=str(toy_model),
        algo="cory",
        learner=learner,
        group_size=2,
        iterations=1,
        batch_size=4,
        mini_batch_size=4,
        ppo_epochs=2,
        lr=3e-2,
        min_new_tokens=3,
        max_new_tokens=5,
        context_length=48,
        out=str(tmp_path),
        report_to="none",
        reward=REWARD,
        prompt_source="rotten_tomatoes",
    )
    Trainer(config).train(progress=False)
    result = evaluate(small(checkpoint=str(tmp_path)), progress=False, write=False)
    assert result["learners"].keys() == {"llm_0", "llm_1"}
    for m in result["learners"].values():
        assert math.isfinite(m["task_reward_mean"]) and m["kl"] > 1e-4  # trained away from the reference


def test_a_loaded_checkpoint_answers_exactly_as_the_trained_policy(trained):
    out, trainer = trained
    loaded = evaluate(small(checkpoint=str(out)), progress=False, write=False)["learners"]
    prompts_source, _ = task_prompts(
        "sentiment", trainer.game.unwrapped.tokenizer, split="test", source="rotten_tomatoes"
    )
    in_memory = evaluate_learners(
        trainer.learners,
        trainer.game.unwrapped.tokenizer,
        held_out_prompts(prompts_source, 6, 0),
        fraction_good,
        samples_per_prompt=2,
        max_new_tokens=5,
        context_length=48,
        batch_size=5,
        seed=0,
        progress=False,
    )
    for name in ("llm_0", "llm_1"):
        for key in ("task_reward_mean", "kl", "distinct_1", "distinct_2", "combined_reward"):
            assert loaded[name][key] == pytest.approx(in_memory[name][key], rel=1e-5, abs=1e-7), (name, key)
        assert [e["response"] for e in loaded[name]["examples"]] == [e["response"] for e in in_memory[name]["examples"]]


def test_a_lora_checkpoint_loads_each_learners_adapter(toy_model, tmp_path):
    config = TrainConfig(
        model=str(toy_model),
        algo="cory",
        iterations=1,
        batch_size=4,
        mini_batch_size=4,
        ppo_epochs=2,
        lr=3e-2,
        min_new_tokens=3,
        max_new_tokens=4,
        context_length=48,
        out=str(tmp_path),
        report_to="none",
        lora=True,
        lora_target_modules="q_proj,v_proj,lm_head",
        reward=REWARD,
        prompt_source="rotten_tomatoes",
    )
    trainer = Trainer(config)
    trainer.train(progress=False)
    loaded = evaluate(small(checkpoint=str(tmp_path), num_prompts=3), progress=False, write=False)["learners"]
    source, _ = task_prompts("sentiment", trainer.game.unwrapped.tokenizer, split="test", source="rotten_tomatoes")
    in_memory = evaluate_learners(
        trainer.learners,
        trainer.game.unwrapped.tokenizer,
        held_out_prompts(source, 3, 0),
        fraction_good,
        samples_per_prompt=2,
        max_new_tokens=4,
        context_length=48,
        batch_size=5,
        seed=0,
        progress=False,
    )
    assert loaded["llm_0"]["kl"] != pytest.approx(loaded["llm_1"]["kl"])  # two different adapters
    for name in ("llm_0", "llm_1"):
        assert loaded[name]["kl"] > 1e-4
        assert loaded[name]["kl"] == pytest.approx(in_memory[name]["kl"], rel=1e-5), name


def test_kl_to_reference_is_the_summed_kl_of_each_answer(trained):
    """Independent of the learner's batched, left-padded scoring: one unpadded sequence at a time."""
    _, trainer = trained
    learner = trainer.learners["llm_0"]
    game = env(
        tokenizer=trainer.game.unwrapped.tokenizer,
        prompts=["the movie was", "acting is very good"],
        reward_fn=fraction_good,
        num_conversations=4,
        max_new_tokens=5,
        context_length=48,
        with_observer=False,
    )
    game.reset(seed=1)
    for agent in game.agent_iter():
        obs, _, term, trunc, info = game.last()
        if term or trunc:
            episode = Episode.from_final_step(obs, info)
            game.step(None)
        else:
            game.step(learner.act(agent, obs))
    kl = learner.kl_to_reference(episode)
    T = episode.response_width
    for b in range(4):
        real = episode.attention_mask[b].bool()
        ids = episode.input_ids[b][real].unsqueeze(0)
        n_response = int(episode.attention_mask[b, -T:].sum())
        with torch.no_grad():
            p = F.log_softmax(learner.model.lm(input_ids=ids).logits[0, -n_response - 1 : -1].float(), -1)
            q = F.log_softmax(learner.reference(input_ids=ids).logits[0, -n_response - 1 : -1].float(), -1)
        expected = float((p.exp() * (p - q)).sum())
        assert kl[b] == pytest.approx(expected, rel=1e-4, abs=1e-6), b
    assert (kl > 0).all()


def test_a_model_evaluated_as_it_is_has_no_kl(toy_model, tmp_path):
    config = small(model=str(toy_model), reward=REWARD, prompt_source="rotten_tomatoes", out=str(tmp_path / "m.json"))
    result = evaluate(config, progress=False)
    (metrics,) = result["learners"].values()
    assert abs(metrics["kl"]) < 1e-6 and metrics["combined_reward"] == pytest.approx(metrics["task_reward_mean"])
    assert (tmp_path / "m.json").exists()


def test_bad_input_is_explained(trained, tmp_path):
    out, _ = trained
    with pytest.raises(ValueError, match="exactly one of --checkpoint"):
        EvalConfig()
    with pytest.raises(ValueError, match="exactly one of --checkpoint"):
        EvalConfig(checkpoint="a", model="b")
    with pytest.raises(ValueError, match="--samples-per-prompt must be at least 1"):
        EvalConfig(model="m", samples_per_prompt=0)
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*--model"):
        evaluate(small(checkpoint=str(tmp_path)), progress=False)
    with pytest.raises(ValueError, match="learners are llm_0, llm_1"):
        evaluate(small(checkpoint=str(out), learners="pioneer"), progress=False, write=False)
    with pytest.raises(ValueError, match="unknown task 'poetry'|poetry"):
        evaluate(small(checkpoint=str(out), task="poetry"), progress=False, write=False)


def test_cli(trained, tmp_path):
    out, _ = trained
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "evaluate.py"),
            "--checkpoint",
            str(out),
            "--num-prompts",
            "3",
            "--samples-per-prompt",
            "2",
            "--out",
            str(tmp_path / "e.json"),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| llm_0" in result.stdout and "distinct-1" in result.stdout
    assert json.loads((tmp_path / "e.json").read_text())["samples_per_prompt"] == 2


def test_cli_explains_a_missing_policy(capsys, monkeypatch):
    cli = runpy.run_path(str(ROOT / "examples" / "evaluate.py"), run_name="evaluate_cli")
    monkeypatch.setattr(sys, "argv", ["evaluate.py", "--num-prompts", "3"])
    with pytest.raises(SystemExit) as exit_:
        cli["main"]()  # as the script runs it: the error in one line (tests/agents/cli/test_cli_errors.py)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("evaluate.py: error: give exactly one of --checkpoint")
    with pytest.raises(ValueError, match="exactly one of --checkpoint"):  # a caller's main(argv) raises
        cli["main"](["--num-prompts", "3"])


def test_a_policy_trained_in_chat_form_is_evaluated_in_it(tmp_path, monkeypatch):
    from cory_agents.evaluation import held_out
    from cory_env.tasks import get_task

    config = TrainConfig(
        model="tiny", chat=True, algo="ppo", iterations=1, batch_size=4, mini_batch_size=4, ppo_epochs=1,
        min_new_tokens=3, max_new_tokens=3, out=str(tmp_path), report_to="none", reward=REWARD,
        prompt_source="rotten_tomatoes", save_model=False,
    )  # fmt: skip
    Trainer(config).train(progress=False)
    made, real = [], held_out.env  # the real environment, its settings recorded
    monkeypatch.setattr(held_out, "env", lambda **kw: made.append(kw) or real(**kw))
    result = evaluate(small(checkpoint=str(tmp_path)), progress=False)
    assert made and all(kw["chat"] is get_task("sentiment").chat for kw in made)  # the pioneer's part of it
    assert math.isfinite(result["learners"]["pioneer"]["task_reward_mean"])
