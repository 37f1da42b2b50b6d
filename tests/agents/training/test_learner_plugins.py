"""Bring your own learner: found by entry point, declaring what it supports, with flags of its own.

The learner is the plug-in package of ``examples/plugins/magrpo`` (MAGRPO, a team over GRPO members), made
visible here as an installed distribution would be (a ``dist-info`` folder with its entry point on
``sys.path``); tests/test_plugin_package.py installs it with pip in a fresh environment.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pandas as pd
import pytest

from cory_agents.cli.train import build_parser, main, parse_config
from cory_agents.evaluation.reward_benchmark import for_algo, parse_args
from cory_agents.training import registry
from cory_agents.training.capabilities import Capabilities
from cory_agents.training.config import TrainConfig, resolve
from cory_agents.training.registry import (
    ENTRY_POINT_GROUP,
    LEARNERS,
    LearnerSpec,
    TeamFactory,
    available_learners,
    learner_spec,
    register_learner,
    unregister_learner,
)
from cory_agents.training.trainer import Trainer
from cory_env.errors import UsageError
from tests.support import ROOT
from tests.support.distributions import declare_distribution
from tests.support.runs import PROMPTS, metrics_without_timing, toy_config
from tests.support.toy import fraction_good

PLUGIN = ROOT / "examples" / "plugins" / "magrpo"


def declare(folder, distribution: str, **learners: str) -> None:
    """An installed distribution's metadata in ``folder``: its name and its learners' entry points."""
    declare_distribution(folder, distribution, {ENTRY_POINT_GROUP: learners})


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The plug-in package as pip would leave it: its module importable, its entry point declared."""
    monkeypatch.syspath_prepend(str(PLUGIN))
    declare(tmp_path / "site", "cory-magrpo", magrpo="cory_magrpo:MAGRPO")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "cory_magrpo", raising=False)
    yield
    unregister_learner("magrpo")


def test_an_installed_learner_is_found_by_its_entry_point(installed):
    assert "magrpo" in available_learners() and "magrpo" not in LEARNERS
    assert "cory_magrpo" not in sys.modules  # listed without importing
    spec = learner_spec("magrpo")
    assert spec.origin == "cory-magrpo" and isinstance(spec.factory, TeamFactory)
    assert spec.supports.rounds and spec.supports.groups and not spec.supports.turn_rewards


def test_its_own_flags_are_on_the_command_line_under_its_heading(installed):
    text = build_parser("magrpo").format_help()
    heading = text.index("Learner magrpo:")
    assert text.index("--magrpo_baseline", heading) > heading and "--group_size" in text[heading:]
    assert "magrpo" in text[: text.index("--learner")] + text[text.index("--learner") :].split("\n\n")[0]
    config = parse_config(["--learner", "magrpo", "--magrpo-baseline", "rloo", "--group-size", "4"])
    assert config.magrpo_baseline == "rloo" and config.learner_config().group_size == 4
    assert type(config).__mro__[1] is TrainConfig  # TrainConfig's settings and the learner's


def test_an_unknown_flag_or_a_bad_value_is_one_line_naming_it(installed, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were a flag taken, the run would write here
    for argv, named in (
        (["--learner", "magrpo", "--magrpo-base", "rloo"], "--magrpo-base"),  # no abbreviations
        (["--learner", "magrpo", "--magrpo-beta", "0.1"], "--magrpo-beta"),
        (["--learner", "magrpo", "--magrpo-baseline", "median"], "--magrpo_baseline"),
        (["--learner", "ppo", "--magrpo-baseline", "rloo"], "--learner magrpo"),
    ):
        monkeypatch.setattr(sys, "argv", ["cory-train", *argv])  # as the installed command runs
        with pytest.raises(SystemExit) as stop:
            main()
        err = capsys.readouterr().err
        assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and named in err, err


def test_a_name_two_packages_declare_is_refused_naming_both(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_CHECKED", set())  # packages installed while this process runs
    declare(tmp_path, "one-plugin", twice="somewhere:SPEC")
    declare(tmp_path, "another-plugin", twice="elsewhere:SPEC", ppo="elsewhere:PPO", broken="nowhere:SPEC")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="twice is declared by .*-plugin and by .*-plugin"):
        learner_spec("twice")
    with pytest.raises(UsageError, match="ppo is declared by cory-env and by another-plugin"):
        TrainConfig(learner="ppo")
    with pytest.raises(UsageError, match="broken, declared by another-plugin .* cannot be loaded: ModuleNotFound"):
        learner_spec("broken")


def test_an_entry_point_must_name_a_learner_spec(tmp_path, monkeypatch):
    (tmp_path / "not_a_spec.py").write_text("def factory(config, **_):\n    return None\n")
    declare(tmp_path, "odd-plugin", odd="not_a_spec:factory")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="odd, declared by odd-plugin .* is a function: .* must name a .*LearnerSpec"):
        learner_spec("odd")


def test_capabilities_not_names_decide_what_a_learner_may_do(toy_model, tmp_path):
    """grpo declares no rounds; a team of PPO members registered with rounds plays them; refusals name both."""
    with pytest.raises(UsageError, match=r"--rounds 2 needs .*Capabilities.rounds.*--learner grpo does not declare"):
        toy_config(toy_model, tmp_path, algo="cory", learner="grpo", group_size=2, rounds=2)
    happo = LEARNERS["happo"].factory
    register_learner("my-team", TeamFactory("ppo", happo.build))  # declares nothing: a plain learner's defaults
    register_learner("my-rounds-team", TeamFactory("ppo", happo.build), supports=Capabilities(rounds=True))
    try:
        with pytest.raises(UsageError, match="--rounds 2 needs .* --learner my-team does not declare it"):
            toy_config(toy_model, tmp_path, algo="cory", learner="my-team", rounds=2)
        with pytest.raises(UsageError, match="--compile needs .*Capabilities.compile.*--learner my-rounds-team"):
            toy_config(toy_model, tmp_path, algo="cory", learner="my-rounds-team", compile=True)
        config = toy_config(
            toy_model, tmp_path, algo="cory", learner="my-rounds-team", rounds=2, iterations=2, batch_size=4,
            mini_batch_size=4, ppo_epochs=1, max_new_tokens=3, min_new_tokens=3, context_length=64,
        )  # fmt: skip
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
        metrics = pd.read_csv(tmp_path / "metrics.csv")
        assert np.isfinite(metrics[["llm_0/kl_per_turn", "llm_1/policy_loss"]].to_numpy()).all()
    finally:
        unregister_learner("my-team")
        unregister_learner("my-rounds-team")


def test_a_launcher_the_learner_does_not_declare_is_refused(toy_model, tmp_path):
    from cory_agents.distributed.data_parallel import DataParallel

    class TwoProcesses(DataParallel):
        is_distributed = True

    register_learner("alone", LEARNERS["ppo"].factory)
    try:
        with pytest.raises(UsageError, match="accelerate launch needs .*Capabilities.data_parallel.* alone"):
            resolve(toy_config(toy_model, tmp_path, learner="alone"), TwoProcesses())
    finally:
        unregister_learner("alone")


def test_the_team_plays_rounds_its_settings_are_saved_and_a_resume_checks_them(installed, toy_model, tmp_path):
    def config(**kw):
        settings = dict(
            algo="cory", learner="magrpo", group_size=2, rounds=2, iterations=2, batch_size=4, mini_batch_size=4,
            ppo_epochs=1, max_new_tokens=3, min_new_tokens=3, context_length=64, checkpoint_every=1,
        )  # fmt: skip
        return toy_config(toy_model, tmp_path, **(settings | kw))

    Trainer(config(magrpo_baseline="rloo"), prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["magrpo_baseline"] == "rloo" and saved["learner"] == "magrpo"
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert np.isfinite(metrics[["llm_0/kl_per_turn", "llm_1/policy_loss", "team/shared_advantage_abs_mean"]]).all(
        axis=None
    )
    resumed = Trainer(
        config(magrpo_baseline="grpo", iterations=3, resume=True), prompts=PROMPTS, reward_fn=fraction_good
    )
    with pytest.raises(UsageError, match=r"--magrpo-baseline 'rloo' -> 'grpo'"):
        resumed.train(progress=False)


def test_with_one_round_the_team_learns_exactly_as_grpo_alone(installed, toy_model, tmp_path):
    """MAGRPO's shared advantage, the collective reward normalised in its group, is what each GRPO learner computes
    alone from the collective reward it receives: with one round the two runs are the same to the last digit."""

    def run(learner):
        config = toy_config(
            toy_model, tmp_path / learner, algo="cory", learner=learner, group_size=2, iterations=2, batch_size=4,
            mini_batch_size=2, ppo_epochs=2, max_new_tokens=3, min_new_tokens=3,
        )  # fmt: skip
        Trainer(config, prompts=PROMPTS, reward_fn=fraction_good).train(progress=False)
        return metrics_without_timing(tmp_path / learner)

    grpo, magrpo = run("grpo"), run("magrpo")
    shared = [c for c in grpo.columns if c.startswith("llm_")]
    assert len(shared) > 10 and set(shared) <= set(magrpo.columns)
    pd.testing.assert_frame_equal(grpo[shared], magrpo[shared], check_exact=True)


def test_cory_bench_takes_an_installed_learner_and_its_flags(installed):
    train, bench = parse_args(["--algos", "cory", "cory:magrpo", "--magrpo-baseline", "rloo", "--group-size", "2"])
    assert bench.algos == ["cory", "cory:magrpo"] and train.magrpo_baseline == "rloo"
    run = dataclasses.replace(train, **for_algo(train, "cory:magrpo"))
    assert run.learner == "magrpo" and run.learner_config().magrpo_baseline == "rloo"


def test_a_config_without_the_learners_settings_says_how_to_make_one(installed):
    with pytest.raises(UsageError, match=r"lacks --learner magrpo's own settings \(magrpo_baseline\).*for_learner"):
        TrainConfig(learner="magrpo")
    assert TrainConfig.for_learner("magrpo")(learner="magrpo").magrpo_baseline == "grpo"


def test_a_spec_registered_twice_is_refused():
    spec = register_learner("twice-registered", LEARNERS["ppo"].factory)
    try:
        assert isinstance(spec, LearnerSpec) and learner_spec("twice-registered") is spec
        with pytest.raises(ValueError, match="registered already"):
            register_learner("twice-registered", LEARNERS["ppo"].factory)
    finally:
        unregister_learner("twice-registered")
