"""The signalling game's communication measures on a team of the toy model (untrained: the measures' machinery,
not a protocol, is what is tested here; docs/games.md reports them for trained teams)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cory_agents.evaluation.communication import (
    communication_measures,
    communication_table,
    derangement_by_secret,
    message_interventions,
    mutual_information,
)
from cory_agents.training.trainer import Trainer
from tests.support.runs import toy_config


@pytest.fixture
def signal_trainer(toy_model, tmp_path):
    config = toy_config(
        toy_model, tmp_path, algo="cory", task="signal", reward="signal", prompt_source="auto", context_length=96,
        batch_size=8, mini_batch_size=8, iterations=1, max_new_tokens=4, min_new_tokens=4,
    )  # fmt: skip
    return Trainer(config)


def test_mutual_information_against_hand_computed_cases():
    assert mutual_information(list("abcd"), list("wxyz")) == 2.0  # four secrets, a message each: log2 4
    assert mutual_information(list("aabb"), list("xyxy")) == 0.0  # messages independent of the secrets
    # p(a,x) = 1/2, p(b,x) = 1/4, p(b,y) = 1/4; p(a) = p(b) = 1/2, p(x) = 3/4, p(y) = 1/4:
    # I = 1/2 log2((1/2)/(3/8)) + 1/4 log2((1/4)/(3/8)) + 1/4 log2((1/4)/(1/8)) = 0.3113
    assert mutual_information(["a", "a", "b", "b"], ["x", "x", "x", "y"]) == pytest.approx(
        0.5 * math.log2(4 / 3) + 0.25 * math.log2(2 / 3) + 0.25, abs=1e-12
    )
    with pytest.raises(ValueError, match="needs pairs"):
        mutual_information(["a"], [])


def test_a_derangement_gives_each_conversation_a_message_of_another_secret():
    secrets = ["red", "blue", "red", "green", "blue", "red"]
    perm = derangement_by_secret(secrets, np.random.default_rng(0))
    assert all(secrets[perm[b]] != secrets[b] for b in range(len(secrets)))
    assert derangement_by_secret(["red", "red"], np.random.default_rng(0)).tolist() == [0, 1]  # nowhere else to go


def test_the_same_messages_replayed_change_nothing(signal_trainer):
    """With common random numbers, a replay whose messages are the episode's own is the episode: the receivers
    answer as they did, so the causal influence is exactly 0."""
    team = signal_trainer.team_episode(signal_trainer.rollout())
    B = team.env.num_conversations
    result, played = message_interventions(signal_trainer, team, messages_from=list(range(B)))
    assert played["shuffled_answers"] == played["answers"]
    assert result.causal_influence == 0.0 and result.shuffled_success == result.success


def test_the_measures_of_an_episode(signal_trainer):
    measures = communication_measures(signal_trainer, seed=1)
    K = round(1 / measures["chance"])
    assert K == 4 and 0.0 <= measures["mutual_information"] <= math.log2(K) + 1e-12
    table = measures["table"]  # records
    assert sum(r["count"] for r in table) == 8 and {r["secret"] for r in table} <= {"red", "blue", "green", "yellow"}
    for name in ("success", "shuffled_success", "causal_influence"):
        assert 0.0 <= measures[name] <= 1.0


def test_each_receiver_reads_the_message_it_was_given(signal_trainer):
    team = signal_trainer.team_episode(signal_trainer.rollout())
    _, played = message_interventions(signal_trainer, team, seed=2)
    moved = [b for b, c in enumerate(played["messages_from"]) if c != b]
    assert moved, "no conversation got another's message"
    for b in moved:
        given = played["messages"][played["messages_from"][b]]
        assert given in played["shuffled_contexts"][b]
        assert played["secrets"][played["messages_from"][b]] != played["secrets"][b]


def test_the_table_counts_each_secret_message_and_answer():
    table = communication_table(["red", "blue", "red"], ["r", "b", "r"], ["red", "blue", "blue"])
    assert table.to_dict("records")[0] == {"secret": "red", "message": "r", "answer": "red", "count": 1}
    assert table["count"].sum() == 3 and len(table) == 3


def test_cory_eval_measures_a_saved_signalling_team(toy_model, tmp_path, capsys):
    import json

    from cory_agents.cli.evaluate import main

    config = toy_config(
        toy_model, tmp_path / "run", algo="cory", task="signal", reward="signal", prompt_source="auto",
        context_length=96, batch_size=8, mini_batch_size=8, iterations=1, checkpoint_every=1, max_new_tokens=4,
        min_new_tokens=4,
    )  # fmt: skip
    Trainer(config).train(progress=False)
    main(["--checkpoint", str(tmp_path / "run"), "--num-prompts", "16", "--batch-size", "8"])
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    measures = result["communication"]
    assert measures["conversations"] == 16 and sum(r["count"] for r in measures["table"]) == 16
    low, high = measures["success_ci"]
    assert 0.0 <= low <= measures["success"] <= high <= 1.0 and 0.0 < measures["p_value_against_chance"] <= 1.0
    assert "the signalling game, 16 conversations" in printed and "I(secret; message)" in printed
