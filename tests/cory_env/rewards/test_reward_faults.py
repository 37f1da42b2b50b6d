"""Rewards that misbehave: scores that are not real numbers, calls that hang, a stop request during one."""

from __future__ import annotations

import signal
import subprocess
import time

import numpy as np
import pandas as pd
import pytest
import torch

from cory_agents.training.checkpoint import list_checkpoints, load_checkpoint
from cory_env.errors import UsageError
from cory_env.rewards import (
    DEFAULT_REWARD_TIMEOUT,
    RewardCallCancelled,
    RewardFunctionError,
    RewardTimeoutError,
    get_reward,
)
from tests.support import ROOT
from tests.support.runs import cli, cli_env, toy_cli_args

QUERIES, RESPONSES = ["q0", "q1", "q2"], ["a", "b", "c"]


def returning(value):
    def scores(queries, responses, **_):
        return value

    return scores


@pytest.mark.parametrize(
    ("value", "item", "kind"),
    [
        (["0.5", "0.1", "0.2"], 0, "str"),
        ([0.5, True, 0.2], 1, "bool"),
        ([0.5, 0.1, None], 2, "NoneType"),
        ([0.5, np.bool_(False), 0.2], 1, "bool"),
        ([0.5, 0.1, b"1"], 2, "bytes"),
        ([0.5, [0.1], 0.2], 1, "list"),
        (np.array(["1", "2", "3"]), 0, "str"),
        (np.array([0.5, None, 0.2], dtype=object), 1, "NoneType"),
        ([0.5, 0.1, torch.tensor(True)], 2, "Tensor"),
    ],
)
def test_scores_that_are_not_real_numbers_are_refused_naming_the_item(value, item, kind):
    with pytest.raises(RewardFunctionError) as refused:
        get_reward(returning(value))(QUERIES, RESPONSES)
    message = str(refused.value)
    assert (
        f"returned {kind} " in message and f"for item {item} (query 'q{item}'" in message and f"not {kind}" in message
    )
    if kind == "str":
        assert "float(...)" in message


@pytest.mark.parametrize("value", [np.array([True, False, True]), torch.tensor([True, False, True])])
def test_boolean_arrays_are_refused(value):
    with pytest.raises(RewardFunctionError, match="bool"):
        get_reward(returning(value))(QUERIES, RESPONSES)


@pytest.mark.parametrize(
    "value",
    [
        [0.5, 1, 2],
        (0.5, 1.0, 2.0),
        [np.float32(0.5), np.int64(1), np.float64(2)],
        [torch.tensor(0.5), torch.tensor(1), torch.tensor(2.0, dtype=torch.float16)],
        np.array([0.5, 1.0, 2.0], dtype=np.float32),
        torch.tensor([[0.5], [1.0], [2.0]]),
    ],
)
def test_real_numbers_in_any_form_are_accepted(value):
    assert get_reward(returning(value))(QUERIES, RESPONSES) == [0.5, 1.0, 2.0]
    assert get_reward(returning(np.array([1, 2, 3])))(QUERIES, RESPONSES) == [1.0, 2.0, 3.0]


def sleeping(seconds):
    def scores(queries, responses, **_):
        time.sleep(seconds)
        return [1.0] * len(responses)

    return scores


def test_a_call_past_the_timeout_fails_naming_the_reward():
    reward = get_reward(sleeping(30), timeout=0.5)
    start = time.monotonic()
    with pytest.raises(
        RewardTimeoutError, match=r"reward function .*sleeping.* did not return within 0.5 s \(--reward-timeout\)"
    ):
        reward(QUERIES, RESPONSES)
    assert time.monotonic() - start < 5
    assert get_reward(sleeping(0.1), timeout=5)(QUERIES, RESPONSES) == [1.0, 1.0, 1.0]  # within the limit


def test_the_default_limit_and_rewards_that_declare_themselves_slow():
    assert get_reward("vader").timeout == DEFAULT_REWARD_TIMEOUT
    assert get_reward(sleeping(0), timeout=0).timeout is None  # 0: no limit
    slow = sleeping(0)
    slow.slow = True
    assert get_reward(slow).timeout is None
    assert get_reward(slow, timeout=7).timeout == 7  # an explicit limit still applies
    for bad in (-1, float("nan"), True):
        with pytest.raises(UsageError, match="--reward-timeout"):
            get_reward("vader", timeout=bad)


def stopped_during_its_call(seconds):
    """A reward that sleeps ``seconds`` after the run is asked to stop during its call (it sets the request itself,
    so the request always comes after the call began, however late the thread runs)."""
    called = {}

    def scores(queries, responses, **_):
        called["reward"].cancel.set()
        time.sleep(seconds)
        return [1.0] * len(responses)

    called["reward"] = get_reward(scores, timeout=0)
    return called["reward"]


def test_a_cancelled_call_that_does_not_return_is_abandoned_after_the_grace(monkeypatch):
    monkeypatch.setattr("cory_env.rewards.base.CANCEL_GRACE_S", 0.5)
    reward = stopped_during_its_call(30)
    start = time.monotonic()
    with pytest.raises(RewardCallCancelled, match="was abandoned"):
        reward(QUERIES, RESPONSES)
    assert time.monotonic() - start < 5
    assert stopped_during_its_call(0.2)(QUERIES, RESPONSES) == [1.0, 1.0, 1.0]  # one that returns within the grace


def test_a_call_that_begins_after_the_stop_request_runs_to_its_end(monkeypatch):
    """The run finishes the iteration it is in: a reward call of that iteration, begun after the signal,
    is not abandoned however long past the grace it runs."""
    monkeypatch.setattr("cory_env.rewards.base.CANCEL_GRACE_S", 0.2)
    reward = get_reward(sleeping(1.0), timeout=0)
    reward.cancel.set()
    assert reward(QUERIES, RESPONSES) == [1.0, 1.0, 1.0]


def test_tensor_scores_that_need_grad_or_are_half_precision_are_read():
    scores = torch.tensor([0.5, 1.0, 2.0], requires_grad=True) * 2
    assert get_reward(lambda q, r, **_: scores, timeout=5)(QUERIES, RESPONSES) == [1.0, 2.0, 4.0]
    half = torch.tensor([0.5, 1.0, 2.0], dtype=torch.bfloat16)
    assert get_reward(lambda q, r, **_: half, timeout=5)(QUERIES, RESPONSES) == [0.5, 1.0, 2.0]


def test_the_call_keeps_the_callers_gradient_mode():
    seen = []

    def grad_mode(queries, responses, **_):
        seen.append(torch.is_grad_enabled())
        return [0.0] * len(responses)

    reward = get_reward(grad_mode, timeout=10)
    with torch.no_grad():
        reward(QUERIES, RESPONSES)
    reward(QUERIES, RESPONSES)
    assert seen == [False, True]


def test_the_cli_stops_a_reward_that_hangs_with_one_line(toy_model, tmp_path):
    args = toy_cli_args(
        toy_model,
        tmp_path / "run",
        "--algo",
        "ppo",
        "--iterations",
        "2",
        "--reward-timeout",
        "1",
        "--reward",
        "tests.support.toy:slow_fraction_good",
    )
    start = time.monotonic()
    result = subprocess.run(
        cli(*args), env=cli_env() | {"TOY_REWARD_SLEEP": "600"}, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert time.monotonic() - start < 120
    assert result.returncode == 1, result.stderr[-2000:]
    assert (
        "reward function tests.support.toy:slow_fraction_good did not return within 1 s (--reward-timeout)"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.ci
def test_sigterm_during_a_hanging_reward_stops_the_run_keeping_the_last_checkpoint(toy_model, tmp_path):
    out = tmp_path / "run"
    args = cli(
        *toy_cli_args(
            toy_model,
            out,
            "--algo",
            "ppo",
            "--iterations",
            "4",
            "--checkpoint-every",
            "1",
            "--reward-timeout",
            "0",
            "--reward",
            "tests.support.toy:hanging_fraction_good",
        )
    )
    hanging = tmp_path / "hanging"
    run = subprocess.Popen(
        args,
        env=cli_env() | {"TOY_REWARD_HANG_AFTER": "2", "TOY_REWARD_HANG_MARK": str(hanging)},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not hanging.exists() and time.monotonic() < deadline:  # until the third call hangs
        assert run.poll() is None, run.communicate()[1][-2000:]
        time.sleep(0.2)
    assert hanging.exists() and run.poll() is None
    assert [p.name for p in list_checkpoints(out)] == ["iter_000001.safetensors"]
    run.send_signal(signal.SIGTERM)
    start = time.monotonic()
    _, stderr = run.communicate(timeout=60)
    assert time.monotonic() - start < 15, "the stop took too long"
    assert run.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert (
        "during a call of the reward tests.support.toy:hanging_fraction_good, which did not return: iteration 3 is lost"
        in stderr
    )
    assert "the last checkpoint, iter_000001.safetensors, is kept" in stderr and f"--resume --out {out}" in stderr
    assert [p.name for p in list_checkpoints(out)] == ["iter_000001.safetensors"]
    assert load_checkpoint(list_checkpoints(out)[0])["iteration"] == 2
    # The same run, resumed with a reward that answers, ends with every iteration logged once.
    subprocess.run(args + ["--resume", "true"], env=cli_env(), cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert pd.read_csv(out / "metrics.csv")["iteration"].tolist() == [0, 1, 2, 3]
