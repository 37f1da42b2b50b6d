"""The commands print an error of cory-env's own in one line, with exit status 2 (usage) or 1; --debug and
CORY_DEBUG=1 show its traceback; any other exception keeps its traceback (cory_agents.cli.errors)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from cory_agents.cli import evaluate as cory_eval
from cory_agents.cli import export as cory_export
from cory_agents.cli import train as cory_train
from cory_agents.cli.errors import DEBUG_VARIABLE, error_line, one_line_errors
from cory_agents.evaluation import reward_benchmark
from cory_agents.evaluation.held_out import CheckpointNotFoundError
from cory_env.errors import CoryError, UsageError
from cory_env.rewards.registry import RewardNotFoundError
from tests.support import ROOT
from tests.support.commands import console_script, the_error, toy_args
from tests.support.toy import toy_tokenizer


def command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A real command line, run offline from the repository (``tests.support.toy`` importable)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------- the real commands, as a user runs them


def test_an_unknown_reward_is_one_error_with_its_lines_and_exit_status_2(toy_model, tmp_path):
    result = command(console_script("cory-train"), *toy_args(toy_model, tmp_path / "run", "--reward", "no_such_reward"))
    assert result.returncode == 2, result.stderr[-3000:]
    message = the_error(result.stderr, "cory-train")
    assert message.startswith("unknown reward 'no_such_reward'")
    assert "A reward is a registered name" in message.splitlines()[1]  # the message's own lines are kept
    assert "HF_HUB_OFFLINE" in message


def test_debug_shows_the_traceback(toy_model, tmp_path):
    result = command(
        console_script("cory-train"), "--debug", *toy_args(toy_model, tmp_path / "run", "--reward", "no_such_reward")
    )
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "cory_env.rewards.registry.RewardNotFoundError: unknown reward 'no_such_reward'" in result.stderr
    assert "cory-train: error:" not in result.stderr


def test_a_model_not_there_offline_from_the_example_script(tmp_path):
    result = command(
        sys.executable,
        "examples/train_cory.py",
        "--model",
        "some-org/not-there",
        "--out",
        str(tmp_path / "run"),
        "--iterations",
        "1",
        "--batch-size",
        "2",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    message = the_error(result.stderr, "train_cory.py")  # named as argparse names it
    assert "some-org/not-there" in message and "HF_HUB_OFFLINE" in message


def test_a_data_set_not_there_offline(toy_model, tmp_path):
    empty = tmp_path / "hf_home"  # no cached IMDB, whatever this machine's cache holds
    result = command(
        console_script("cory-train"),
        *toy_args(toy_model, tmp_path / "run", "--prompt-source", "imdb"),
        env={"HF_HOME": str(empty), "HF_DATASETS_CACHE": str(empty / "datasets")},
    )
    assert result.returncode == 1, result.stderr[-3000:]
    message = the_error(result.stderr, "cory-train")
    assert "IMDB" in message and "rotten_tomatoes" in message


# ------------------------------------------------------------- each error class, in the same process


def test_a_batch_the_minibatches_do_not_divide(run, toy_model, tmp_path):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--batch-size", "3"))
    assert code == 2
    assert the_error(err, "cory-train") == "--batch-size 3 must be a multiple of --mini-batch-size 2"
    assert not (tmp_path / "checkpoints").exists()


def test_a_setting_refused_while_parsing(run, toy_model, tmp_path):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--algo", "ppo", "--num-agents", "3"))
    assert code == 2
    assert the_error(err, "cory-train").startswith("--algo ppo trains one agent")
    assert err.count("\n") == 1  # before any log line: the error is all there is


def test_cory_with_one_agent(run, toy_model, tmp_path):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--algo", "cory", "--num-agents", "1"))
    assert code == 2
    assert "--num-agents 1 cannot work" in the_error(err, "cory-train") and "--algo ppo" in err


def test_a_prompt_longer_than_the_context(run, toy_model, tmp_path):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--context-length", "6"))
    assert code == 2
    message = the_error(err, "cory-train")
    assert "context_length=6" in message and "Raise context_length" in message


def test_a_prompt_file_not_there(run, toy_model, tmp_path):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--task-file", "nowhere.jsonl"))
    assert code == 2
    assert the_error(err, "cory-train").startswith("prompt file 'nowhere.jsonl' does not exist")


def test_a_reward_function_that_raises(run, toy_model, tmp_path):
    code, err = run(
        cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--reward", "tests.support.toy:broken_reward")
    )
    assert code == 1
    message = the_error(err, "cory-train")
    assert message.startswith(
        "reward function tests.support.toy:broken_reward raised ZeroDivisionError: division by zero"
    )
    assert "cory:" in err  # the training's progress bar had started: the_error checked the line is the error's


def test_a_classifier_reward_without_a_positive_label(run, toy_model, tmp_path):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tokenizer = toy_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=3,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
    )
    classifier = tmp_path / "three_labels"
    LlamaForSequenceClassification(config).save_pretrained(classifier)
    tokenizer.save_pretrained(classifier)
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path / "run", "--reward", str(classifier)))
    assert code == 2
    assert "has 3 labels" in the_error(err, "cory-train") and "positive_label" in err


def test_a_resume_from_a_damaged_checkpoint(run, toy_model, tmp_path):
    damaged = tmp_path / "checkpoints" / "iter_000000.safetensors"
    damaged.parent.mkdir()
    damaged.write_bytes(b"\x00" * 64)
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--resume"))
    assert code == 1
    assert the_error(err, "cory-train").startswith(f"no intact checkpoint in {damaged.parent}")


def test_an_old_pickle_checkpoint_is_not_trusted(run, toy_model, tmp_path):
    legacy = tmp_path / "checkpoints" / "iter_000000.pt"
    legacy.parent.mkdir()
    torch.save({"iteration": 1}, legacy)
    code, err = run(cory_export.main, "cory-export", ["--checkpoint", str(tmp_path)])
    assert code == 1
    message = the_error(err, "cory-export")
    assert message.startswith(f"{legacy} is a checkpoint in the old pickle format") and "--trust-checkpoint" in message
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--resume"))
    assert code == 1 and "--trust-checkpoint" in the_error(err, "cory-train")


def test_an_unknown_tracker(run, toy_model, tmp_path):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--report-to", "carrier_pigeon"))
    assert code == 2
    assert the_error(err, "cory-train").startswith("--report-to carrier_pigeon: unknown tracker 'carrier_pigeon'")


def test_cory_eval_without_a_checkpoint(run, tmp_path):
    code, err = run(cory_eval.main, "cory-eval", ["--checkpoint", str(tmp_path / "nothing")])
    assert code == 2
    assert the_error(err, "cory-eval").startswith(f"no checkpoint at {tmp_path / 'nothing'}")
    code, err = run(cory_eval.main, "cory-eval", ["--num-prompts", "3"])
    assert (
        code == 2
        and err
        == "cory-eval: error: give exactly one of --checkpoint (a training run) and --model (a model name or path)\n"
    )


def test_cory_bench_refuses_an_unknown_algorithm(run, tmp_path):
    code, err = run(reward_benchmark.main, "cory-bench", ["--algos", "ppo", "grpo", "--out", str(tmp_path / "b")])
    assert code == 2
    assert the_error(err, "cory-bench") == (
        "--algos ppo grpo: choose among cory, ppo, each alone (with --learner) or as ALGO:LEARNER, LEARNER one of "
        "ppo, grpo, rloo, happo, difference, mappo (cory:happo)"
    )


def test_a_folder_that_holds_a_run(run, toy_model, tmp_path):
    cory_train.main(toy_args(toy_model, tmp_path))  # a run, with its checkpoint
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path))
    assert code == 2
    assert the_error(err, "cory-train").startswith(f"{tmp_path} already holds a run")


def test_a_tracker_whose_package_is_not_installed(run, toy_model, tmp_path):
    pytest.importorskip("accelerate")
    if importlib.util.find_spec("comet_ml") is not None:
        pytest.skip("comet_ml is installed here")
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--report-to", "comet_ml"))
    assert code == 1
    assert the_error(err, "cory-train").startswith(
        "--report-to comet_ml: the comet_ml tracker needs the comet-ml "
        "package, which is not installed. Install it with pip install"
    )


def test_a_checkpoint_that_cannot_be_written(run, toy_model, tmp_path):
    (tmp_path / "checkpoints").write_text("a file where the checkpoints folder goes")
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path))
    assert code == 1
    message = the_error(err, "cory-train")
    assert message.startswith(f"could not write the checkpoint {tmp_path / 'checkpoints' / 'iter_000000.safetensors'}")
    assert message.endswith("No earlier checkpoint exists: a rerun starts at iteration 0.")


def test_cory_bench_into_a_folder_that_holds_a_benchmark(run, tmp_path):
    (tmp_path / "benchmark.json").write_text("{}")
    code, err = run(reward_benchmark.main, "cory-bench", ["--out", str(tmp_path)])
    assert code == 2
    assert the_error(err, "cory-bench").startswith(f"{tmp_path} already holds a benchmark: pass --resume")


# ------------------------------------------------------------- a new user's mistakes: each one line, none a traceback


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--lr", "nan", "--lr must be a number at least 0 (the AdamW learning rate, e.g. 3e-5), got nan"),
        ("--lr", "-1", "--lr must be a number at least 0"),  # torch.optim's ValueError before
        ("--weight-decay", "-0.1", "--weight-decay must be a number at least 0"),
        ("--kl-coef", "-1", "--kl-coef must be a number at least 0 (the KL penalty's coefficient, 0: no penalty"),
        ("--temperature", "0", "--temperature must be a number above 0"),  # transformers' ValueError before
        ("--top-k", "-1", "--top-k must be a number at least 0 (0: off), got -1"),
        ("--top-p", "0", "--top-p must be above 0 and at most 1 (nucleus sampling, 1.0: off), got 0.0"),
        ("--role-exchange-period", "0", "--role-exchange-period must be at least 1, got 0"),
        ("--lora-r", "0", "--lora-r must be a number at least 1 (the LoRA rank), got 0"),  # peft's ValueError before
        ("--lora-alpha", "0", "--lora-alpha must be a number above 0"),
        ("--samples-per-iteration", "-1", "--samples-per-iteration must be a number at least 0"),
    ],
)
def test_a_number_that_cannot_work(run, toy_model, tmp_path, flag, value, expected):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--lora", "true", flag, value))
    assert code == 2
    assert the_error(err, "cory-train").startswith(expected)
    assert err.count("\n") == 1  # refused while parsing, before any model loads


def test_lora_target_modules_the_model_does_not_have(run, toy_model, tmp_path):
    args = toy_args(toy_model, tmp_path, "--lora", "true", "--lora-target-modules", "c_attn")  # GPT-2's, not Llama's
    code, err = run(cory_train.main, "cory-train", args)
    assert code == 2
    message = the_error(err, "cory-train")
    assert message.startswith("--lora-target-modules c_attn: no layer of the model has such a name")
    assert "q_proj" in message and "all-linear" in message


def test_a_model_path_that_holds_no_model(run, toy_model, tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\x00" * 8)
    (tmp_path / "empty").mkdir()
    for path, what in [
        (tmp_path / "weights.bin", "is a file, not a model folder"),
        (tmp_path / "empty", "is a folder without config.json"),
    ]:
        code, err = run(cory_train.main, "cory-train", toy_args(path, tmp_path / "run"))
        assert code == 2
        assert the_error(err, "cory-train").startswith(f"model '{path}' {what}")
    code, err = run(cory_eval.main, "cory-eval", ["--model", str(tmp_path / "empty")])
    assert code == 2 and "is a folder without config.json" in the_error(err, "cory-eval")


def test_a_model_folder_without_its_tokenizer(run, toy_model, tmp_path):
    weights_only = tmp_path / "weights_only"
    weights_only.mkdir()
    for name in ("config.json", "model.safetensors"):
        (weights_only / name).write_bytes((toy_model / name).read_bytes())
    code, err = run(cory_train.main, "cory-train", toy_args(weights_only, tmp_path / "run"))
    assert code == 1
    assert the_error(err, "cory-train").startswith(
        f"the model folder '{weights_only}' has no loadable tokenizer (no tokenizer.json or tokenizer_config.json in it)"
    )


def test_a_reward_folder_that_holds_no_model(run, toy_model, tmp_path):
    (tmp_path / "my_reward").mkdir()
    code, err = run(
        cory_train.main, "cory-train", toy_args(toy_model, tmp_path / "run", "--reward", str(tmp_path / "my_reward"))
    )
    assert code == 2
    message = the_error(err, "cory-train")
    assert message.startswith(f"unknown reward '{tmp_path / 'my_reward'}'")
    assert "is a folder without config.json" in message


def test_a_tracker_that_cannot_start(run, monkeypatch, toy_model, tmp_path):
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    class Unreachable:  # as W&B without a login, or an MLflow server that is down
        requires_logging_directory = False

        def __init__(self, *args, **kwargs):
            raise ConnectionError("server at http://tracker:5000 refused the connection")

    monkeypatch.setitem(LOGGER_TYPE_TO_CLASS, "unreachable", Unreachable)
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--report-to", "unreachable"))
    assert code == 1
    assert the_error(err, "cory-train").startswith(
        "--report-to unreachable: the unreachable tracker could not start (ConnectionError: server at "
        "http://tracker:5000 refused the connection). Fix that"
    )


def test_load_in_4bit_without_bitsandbytes(run, toy_model, tmp_path):
    if importlib.util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes is installed here")
    code, err = run(
        cory_train.main, "cory-train", toy_args(toy_model, tmp_path, "--lora", "true", "--load-in-4bit", "true")
    )
    assert code == 1
    assert the_error(err, "cory-train").startswith(
        "--load-in-4bit needs the bitsandbytes package, which is not installed"
    )


def test_cory_eval_out_where_no_file_can_be_written(run, tmp_path):
    (tmp_path / "a_file").write_text("")
    for out, expected in [
        (tmp_path, f"--out {tmp_path} is a folder: give the file to write, e.g. --out {tmp_path / 'evaluation.json'}"),
        (
            tmp_path / "a_file" / "e.json",
            f"--out {tmp_path / 'a_file' / 'e.json'} is below {tmp_path / 'a_file'}, which is a file",
        ),
    ]:
        # refused before the checkpoint is even looked for: no evaluation is lost at the end
        code, err = run(cory_eval.main, "cory-eval", ["--checkpoint", str(tmp_path / "no_run"), "--out", str(out)])
        assert code == 2
        assert the_error(err, "cory-eval").startswith(expected)


def test_cory_bench_out_where_no_folder_can_be(run, tmp_path):
    (tmp_path / "a_file").write_text("")
    for out, expected in [
        (tmp_path / "a_file", f"--out {tmp_path / 'a_file'} is a file, not a folder"),
        (
            tmp_path / "a_file" / "b",
            f"--out {tmp_path / 'a_file' / 'b'} is below {tmp_path / 'a_file'}, which is a file",
        ),
    ]:
        code, err = run(
            reward_benchmark.main, "cory-bench", ["--out", str(out), "--reward", "tests.support.toy:fraction_good"]
        )
        assert code == 2
        assert the_error(err, "cory-bench").startswith(expected)


def test_cory_bench_checks_the_evaluation_flags_before_training(run, tmp_path):
    code, err = run(reward_benchmark.main, "cory-bench", ["--out", str(tmp_path / "b"), "--eval-prompts", "0"])
    assert code == 2
    assert the_error(err, "cory-bench") == "--eval-prompts must be at least 1, got 0"  # was --num-prompts, after a run
    assert not (tmp_path / "b").exists()


def test_play_episode_without_conversations(run, toy_model):
    import runpy

    play_episode = runpy.run_path(str(ROOT / "examples" / "play_episode.py"), run_name="play_episode")
    code, err = run(play_episode["main"], "play_episode.py", ["--model", str(toy_model), "--conversations", "0"])
    assert code == 2
    assert the_error(err, "play_episode.py") == "--conversations must be at least 1, got 0"


# ------------------------------------------------------------- the mechanism


def test_debug_flag_and_variable_let_the_error_through(run, monkeypatch, toy_model, tmp_path):
    args = toy_args(toy_model, tmp_path, "--reward", "no_such_module:score")
    monkeypatch.setattr(sys, "argv", ["cory-train", *args, "--debug"])
    with pytest.raises(RewardNotFoundError, match="cannot import the module 'no_such_module'"):
        cory_train.main()
    monkeypatch.setattr(sys, "argv", ["cory-train", *args])
    monkeypatch.setenv(DEBUG_VARIABLE, "1")
    with pytest.raises(RewardNotFoundError):
        cory_train.main()
    monkeypatch.setenv(DEBUG_VARIABLE, "0")
    assert run(cory_train.main, "cory-train", args)[0] == 2


def test_a_caller_gets_the_exception(toy_model, tmp_path):
    """main(argv), as tests and other programs call it, raises: the caller decides what to print."""
    with pytest.raises(UsageError, match="must be a multiple of --mini-batch-size"):
        cory_train.main([*toy_args(toy_model, tmp_path, "--batch-size", "3"), "--debug"])  # --debug is taken off
    with pytest.raises(CheckpointNotFoundError) as raised:
        cory_export.main(["--checkpoint", str(tmp_path / "nothing")])
    assert isinstance(raised.value, FileNotFoundError)  # what it was before


class _SettingNotUnderstood(UsageError):
    pass


class _ServiceDown(CoryError):
    pass


@one_line_errors
def _fails_with(args: list[str]) -> None:
    """A command whose only argument names the exception it raises."""
    raise {
        "usage": _SettingNotUnderstood("line one\nline two"),
        "cory": _ServiceDown("down: retry later"),
        "bug": ZeroDivisionError("a bug"),
        "interrupt": KeyboardInterrupt(),
    }[args[0]]


def test_any_error_of_cory_envs_own_is_one_line_with_its_exit_code(run):
    assert run(_fails_with, "prog", ["usage"]) == (2, "prog: error: line one\nline two\n")
    assert run(_fails_with, "prog", ["cory"]) == (1, "prog: error: down: retry later\n")
    assert error_line("prog", _ServiceDown()) == "prog: error: _ServiceDown"  # no message: the class says what


def test_other_exceptions_go_through_untouched(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["prog", "bug"])
    with pytest.raises(ZeroDivisionError, match="a bug"):  # Python prints its traceback and exits with 1
        _fails_with()


def test_ctrl_c_is_one_line_and_exit_status_130(run, monkeypatch):
    assert run(_fails_with, "prog", ["interrupt"]) == (130, "prog: stopped by SIGINT\n")
    with pytest.raises(KeyboardInterrupt):  # called with arguments (a test, a notebook): raised to the caller
        _fails_with(["interrupt"])
    monkeypatch.setenv(DEBUG_VARIABLE, "1")
    monkeypatch.setattr(sys, "argv", ["prog", "interrupt"])
    with pytest.raises(KeyboardInterrupt):  # --debug: Python's own traceback
        _fails_with()


def test_every_command_lists_debug_in_its_help():
    import runpy

    play_episode = runpy.run_path(str(ROOT / "examples" / "play_episode.py"), run_name="play_episode")
    for build_parser in (
        cory_train.build_parser,
        cory_eval.build_parser,
        cory_export.build_parser,
        reward_benchmark.build_parser,
        play_episode["build_parser"],
    ):
        assert "--debug" in build_parser().format_help()
        assert DEBUG_VARIABLE in build_parser().format_help().replace("\n", " ")


@pytest.mark.parametrize(
    ("argv", "replacement"),
    [
        (["--review-source", "imdb"], "use --prompt-source"),
        (["--review_source=imdb"], "use --prompt-source"),
        (["--tensorboard", "false"], "use --report-to none"),
        (["--tensorboard"], "use --report-to none"),
        (["--no-tensorboard"], "use --report-to none"),
    ],
)
def test_a_retired_flag_is_refused_naming_its_replacement(argv, replacement, capsys):
    from cory_agents.cli.train import build_parser
    from cory_agents.evaluation.reward_benchmark import build_parser as bench_parser

    for parser in (build_parser(), bench_parser()):
        with pytest.raises(SystemExit) as exit:
            parser.parse_args_into_dataclasses(args=argv)
        assert exit.value.code == 2
        assert f"{argv[0].split('=')[0]} was retired in cory-env 0.2: {replacement}" in capsys.readouterr().err
    assert "--review-source" not in build_parser().format_help()


@pytest.mark.parametrize("argv", [["--source", "imdb"], ["--source=imdb"]])
def test_cory_eval_names_the_prompt_source_as_cory_train_does(argv, capsys):
    from cory_agents.cli.evaluate import build_parser

    parser = build_parser()
    with pytest.raises(SystemExit) as exit:
        parser.parse_args_into_dataclasses(args=["--model", "m", *argv])
    assert exit.value.code == 2
    assert "--source was retired in cory-env 0.3: use --prompt-source" in capsys.readouterr().err
    (config,) = parser.parse_args_into_dataclasses(args=["--model", "m", "--prompt-source", "imdb"])
    assert config.prompt_source == "imdb"
    assert "--source " not in parser.format_help()
    with pytest.raises(SystemExit):  # cory-train's --learner is the algorithm: cory-eval's list is --learners
        parser.parse_args_into_dataclasses(args=["--model", "m", "--learner", "llm_0"])
    assert "--learner was retired in cory-env 0.3: use --learners" in capsys.readouterr().err
    import runpy

    play_episode = runpy.run_path(str(ROOT / "examples" / "play_episode.py"), run_name="play_episode")
    with pytest.raises(SystemExit):  # the example's old name for the same setting
        play_episode["build_parser"]().parse_args(argv)
    assert "--source was retired in cory-env 0.3: use --prompt-source" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--rounds", "0"], "--rounds must be a number at least 1"),
        (
            ["--rounds", "2", "--learner", "grpo", "--group-size", "2"],
            "--rounds 2 needs a learner that supports several turns per agent (Capabilities.rounds), and --learner "
            "grpo does not declare it: use --rounds 1",
        ),
        (
            ["--learner", "mappo", "--models", "a,b"],
            "--models with different models needs a learner that supports a team of different models "
            "(Capabilities.different_models), and --learner mappo does not declare it",
        ),
        (["--learner", "difference", "--difference-replays", "0"], "--difference-replays must be a whole number"),
        (["--algo", "ppo", "--task", "signal"], "--task signal is a game of 2 agents, but --algo ppo plays 1"),
        (
            ["--task", "signal", "--num-secrets", "9", "--prompt-source", "auto"],
            "--num-secrets must be between 2 and 8",
        ),
        (
            ["--rounds", "2", "--templates", '[["{query}", "{query}{response_2_2}"], "{query}{response}"]'],
            "names {response_2_2}, agent 2's answer in round 2, which is not played before agent 1's turn in round 2",
        ),
        (
            ["--task", "signal", "--prompt-source", "auto", "--observer-template", "{query} {secret}"],
            "names {secret}, a private field that only position(s) 0 may see",
        ),
        (["--task", "signal", "--prompt-source", "auto", "--no-knowledge-transfer"], "a private field"),
        (
            ["--rounds", "3", "--templates", '["{query}", "{query}{responses}"]', "--context-length", "20"],
            "(round 3)'s prompt has",
        ),
    ],
    ids=[
        "rounds-0",
        "rounds-with-grpo",
        "mappo-with-two-models",
        "no-replay",
        "signal-alone",
        "too-many-secrets",
        "a-turn-not-yet-played",
        "a-private-field",
        "private-without-knowledge-transfer",
        "context-too-short-for-3-rounds",
    ],
)
def test_a_game_that_cannot_be_played(run, toy_model, tmp_path, flags, error):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, *flags))
    assert code == 2, err[-2000:]
    assert error in the_error(err, "cory-train")
    assert not list(tmp_path.glob("checkpoints/iter_*")), "refused before the first iteration"


def test_cory_eval_of_a_model_alone_in_a_game_of_two(run, toy_model, tmp_path):
    args = ["--model", str(toy_model), "--task", "signal", "--num-prompts", "2", "--out", str(tmp_path / "eval.json")]
    code, err = run(cory_eval.main, "cory-eval", args)
    assert code == 2
    assert the_error(err, "cory-eval").startswith("--task signal is a game of 2 agents")
    assert not (tmp_path / "eval.json").exists()


@pytest.mark.parametrize(
    "flag, value, error",
    [
        ("--cliprange", "0", "--cliprange must be a number above 0"),
        ("--cliprange", "nan", "--cliprange must be a number above 0"),
        ("--gamma", "1.5", "--gamma must be a number from 0 to 1"),
        ("--lam", "nan", "--lam must be a number from 0 to 1"),
        ("--cliprange-value", "-1", "--cliprange-value must be a number above 0"),
        ("--vf-coef", "-0.1", "--vf-coef must be a number at least 0"),
    ],
)
def test_a_ppo_setting_out_of_its_range(run, toy_model, tmp_path, flag, value, error):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, flag, value))
    assert code == 2
    assert the_error(err, "cory-train").startswith(error)


@pytest.mark.parametrize("command, flag", [("cory-bench", "--eval-split"), ("cory-eval", "--split")])
def test_an_unknown_split_is_refused_while_parsing(run, tmp_path, command, flag):
    main = reward_benchmark.main if command == "cory-bench" else cory_eval.main
    args = ["--out", str(tmp_path / "b")] if command == "cory-bench" else ["--model", "smollm2-135m"]
    code, err = run(main, command, [*args, flag, "validation"])
    assert code == 2
    assert "invalid choice: 'validation'" in err and flag in err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--task", "signal", "--prompt-source", "auto", "--num-agents", "3"], "--task signal is a game of 2 agents"),
        (["--num-secrets", "3"], "--num-secrets is a setting of --task signal, not of --task sentiment"),
        (["--rounds", "2", "--score-scaling"], "--score-scaling with --rounds 2"),
    ],
    ids=["signal-of-three", "secrets-elsewhere", "rounds-with-score-scaling"],
)
def test_a_game_setting_that_does_not_fit(run, toy_model, tmp_path, flags, error):
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path, *flags))
    assert code == 2, err[-2000:]
    assert the_error(err, "cory-train").startswith(error)


@pytest.mark.parametrize(
    "row, error",
    [
        ({"secret": "", "words": "red, blue, green"}, "the secret is empty (''), so the receiver can never name it"),
        ({"secret": "purple", "words": "red, blue, green"}, "the secret 'purple' is not among the row's words"),
        ({"secret": "red", "words": "red, blue, red"}, "the words name 'red' more than once (red, blue, red)"),
    ],
    ids=["empty-secret", "secret-not-among-the-words", "a-word-twice"],
)
def test_a_signal_task_file_row_that_can_never_score(run, toy_model, tmp_path, row, error):
    task_file = tmp_path / "signal.jsonl"
    good = {"query": "colour", "secret": "red", "words": "red, blue, green"}
    task_file.write_text(json.dumps(good) + "\n" + json.dumps({"query": "colour", **row}) + "\n")
    flags = ["--algo", "cory", "--task", "signal", "--prompt-source", "auto", "--task-file", str(task_file)]
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path / "run", *flags))
    assert code == 2, err[-2000:]
    assert the_error(err, "cory-train").startswith(f"{task_file}, line 2: {error}")
    assert not (tmp_path / "run").exists(), "refused before anything is written"


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--chat"], "chat form needs a chat template, but the tokenizer of agent 1 (pioneer) has none"),
        (["--chat", "--pioneer-template", "{query}"], "--pioneer-template set the raw form's string prompts"),
        (["--no-carried-context"], "--no-carried-context is an ablation of the chat form's carried context"),
        (
            ["--model", "tiny", "--task", "signal", "--prompt-source", "auto", "--chat", "--rounds", "3"],
            "Raise context_length to",
        ),
        (["--task-file", "BAD_ROLE"], "line 1: message 0 has the role 'bot'"),
    ],
    ids=["no-chat-template", "raw-template-in-chat", "ablation-without-chat", "conversation-too-long", "bad-role"],
)
def test_a_chat_game_that_cannot_be_played(run, toy_model, tmp_path, flags, error):
    (tmp_path / "bad.jsonl").write_text('{"prompt": [{"role": "bot", "content": "Hi"}]}\n')
    flags = [str(tmp_path / "bad.jsonl") if f == "BAD_ROLE" else f for f in flags]
    code, err = run(cory_train.main, "cory-train", toy_args(toy_model, tmp_path / "run", *flags))
    assert code == 2, err[-2000:]
    assert error in the_error(err, "cory-train")
