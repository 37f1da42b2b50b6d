"""Training loop: CORY (a chain of learners, two by default) or single-agent PPO, driven through the environment.

CORY plays ``RoleExchangeWrapper(CollectiveRewardWrapper(env))``: learners ``llm_0``,
``llm_1`` (... ``llm_{N-1}`` with ``--num-agents N``) are persistent objects, so a role
exchange keeps each one's weights, optimizer state, value head, KL controller and score
statistics (the authors' code rebuilt its trainers from disk every exchange, losing all but
the weights). With ``--models`` each learner is its own model, with its own tokenizer and
frozen reference. PPO plays the same environment with the pioneer alone and its own task reward.

The trainer is the loop. What it plays comes from two steps that run before it:
:func:`~cory_agents.training.config.resolve` (every setting filled in and checked) and
:func:`~cory_agents.training.build.assemble` (task, models, learners, game). Each iteration: one
batched episode (the rollout), then the team's update: ``team.learn`` with every learner's
episode (:mod:`cory_agents.learners.team`; per-agent learners each learn alone, a team learner such as
HAPPO learns for all at once). A learner is built by ``--learner``'s factory (:func:`~cory_agents.training.registry.learner_spec`)
(``--learner ppo|grpo|rloo|happo|difference``, :mod:`cory_agents.training.registry`); any object with
the :class:`~cory_agents.learners.base.Learner` or :class:`~cory_agents.learners.team.TeamLearner`
interface can be registered there.
Under ``accelerate launch`` every process plays its own episode and the updates are
synchronised (:mod:`cory_agents.distributed.data_parallel`); only the main process writes files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from cory_agents.distributed.data_parallel import DataParallel, fingerprint
from cory_agents.distributed.fsdp import full_state, shard_state
from cory_agents.learners.base import Episode
from cory_agents.learners.team import TeamEpisode
from cory_agents.training.build import assemble, named_trainable, trainable_parameters
from cory_agents.training.checkpoint import TEMPORARY as CHECKPOINT_TEMPORARY
from cory_agents.training.checkpoint import (
    checkpoint_dir,
    checkpoint_iteration,
    latest_checkpoint,
    load_latest,
    save_checkpoint,
)
from cory_agents.training.config import TrainConfig, resolve
from cory_agents.training.export import MODEL_DIR, save_policies
from cory_agents.training.interrupt import StopRequests
from cory_agents.training.metrics import MetricsLogger
from cory_agents.training.ownership import check_run_folder, remove_checkpoints
from cory_agents.training.plots import plot_run
from cory_agents.training.provenance import record_session
from cory_agents.training.resumable import check_resumable
from cory_agents.training.run_lock import RunExistsError, RunLock
from cory_env.context import starts_turn
from cory_env.errors import CoryError, UsageError
from cory_env.prompts import PromptSource
from cory_env.rewards.base import RewardCallCancelled, RewardFunction
from cory_env.write_failures import remove_leftovers, write_whole, writing

logger = logging.getLogger(__name__)


class Trainer:
    """Plays batched episodes and updates the learners; checkpoints and resumes exactly."""

    def __init__(
        self,
        config: TrainConfig,
        prompts: PromptSource | Sequence[str] | None = None,
        reward_fn: RewardFunction | None = None,
    ):
        """``prompts`` and ``reward_fn`` override the task's prompt source and ``config.reward``."""
        self.data_parallel = DataParallel.from_environment()
        self.config = resolve(config, self.data_parallel)  # bad settings fail here, before a model is loaded
        run = assemble(self.config, self.data_parallel, prompts=prompts, reward_fn=reward_fn)
        self.task, self.device, self.tokenizers, self.reward = run.task, run.device, run.tokenizers, run.reward
        self.policies, self.learners, self.team, self.game = run.policies, run.learners, run.team, run.game
        self.team_run = run.team_run  # the modules the team owns, if any
        self.tokenizer = self.tokenizers[self.config.learner_names()[0]]  # the first learner's: it selects the prompts
        self.out = Path(self.config.out)
        self.iteration = 0
        self.stopped_by = ""  # the signal that stopped train() before its last iteration, if one did

    @property
    def stop_status(self) -> int:
        """The exit status of a run a signal stopped (Ctrl-C, SIGTERM: ``128 +`` its number, as a shell reports
        it; ``--resume`` continues it), else 0. A stop another process of the launch received counts as SIGTERM."""
        if not self.stopped_by:
            return 0
        return 128 + getattr(signal.Signals, self.stopped_by, signal.SIGTERM).value

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs. In a data-parallel run every process must call it (it
        gathers each process's random states and weight fingerprints, checked to be equal;
        under FSDP also every sharded weight and optimizer state, whole, onto the CPU)."""
        dp = self.data_parallel
        sharded = dp.sharded
        learners = {n: learner.state_dict() for n, learner in self.learners.items()}
        if sharded:  # whole tensors, as a single process saves them (a collective)
            learners = {n: full_state(s) for n, s in learners.items()}
        state = {
            "iteration": self.iteration,
            "learners": learners,
            "episodes": getattr(self.game, "episodes", None),
            "env_rng": self.game.unwrapped.np_random.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "config": dataclasses.asdict(self.config),
        }
        if team := self.team.state_dict():  # a team learner's own state, beyond its members' (whole, under FSDP)
            state["team"] = full_state(team) if sharded else team
        if dp.is_distributed:
            weights = {
                n: fingerprint(
                    state["learners"][n]["model"]
                    if "model" in state["learners"][n]
                    else named_trainable(learner, gather=sharded)
                )
                for n, learner in self.learners.items()
            }
            for name, module in self.team_run.modules.items():  # a module the team owns (a shared critic)
                weights[f"team/{name}"] = fingerprint(
                    full_state(dict(module.named_parameters())) if sharded else dict(module.named_parameters())
                )
            dp.check_in_sync(weights)
            state["processes"] = dp.gather_objects(self._process_state() | {"weights_sha256": weights})
        return state

    def _process_state(self) -> dict[str, Any]:
        """The random states that differ between the processes of a data-parallel run."""
        return {
            "env_rng": self.game.unwrapped.np_random.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "generators": {
                n: (learner.generator.get_state(), learner.sampling_generator.get_state())
                for n, learner in self.learners.items()
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        processes = state.get("processes")
        if len(processes or [None]) != self.data_parallel.num_processes:
            raise UsageError(
                f"the checkpoint was written by {len(processes or [None])} process(es), this run has "
                f"{self.data_parallel.num_processes}: resume with the same accelerate launch --num_processes"
            )
        if processes:  # this process's own random states
            mine = processes[self.data_parallel.process_index]
            state = {**state, "env_rng": mine["env_rng"], "torch_rng": mine["torch_rng"]}
            state["learners"] = {
                n: {**s, "generator": mine["generators"][n][0], "sampling_generator": mine["generators"][n][1]}
                for n, s in state["learners"].items()
            }
        self.iteration = state["iteration"]
        sharded = self.data_parallel.sharded
        for name, learner in self.learners.items():
            mine = state["learners"][name]
            if sharded:  # this process's shards of the whole tensors
                mine = shard_state(mine, learner.state_dict(), trainable_parameters(learner))
            learner.load_state_dict(mine)
        if "team" in state:
            team = state["team"]
            if sharded:  # this process's shards of the owned modules' whole tensors
                team = shard_state(team, self.team.state_dict(), self.team_run.trainable_parameters())
            self.team.load_state_dict(team)
        if state["episodes"] is not None:
            self.game.episodes = state["episodes"]
        raw = self.game.unwrapped
        raw.np_random = np.random.Generator(np.random.PCG64())
        raw.np_random.bit_generator.state = state["env_rng"]
        torch.set_rng_state(state["torch_rng"])

    # ------------------------------------------------------------------ loop
    def rollout(self) -> dict[str, tuple[Episode, dict[str, Any]]]:
        """Play one batched episode; return each learner's episode and final info.

        Under CORY ``self.game`` is the environment in its two wrappers: at ``reset`` the role exchange
        seats each learner at its chain position for this episode, and at the episode's end the
        collective reward gives every learner the sum of the task rewards (the final ``info``'s
        ``reward``; ``task_reward`` is its own)."""
        self.game.reset(seed=self.data_parallel.seed(self.config.seed) if self.iteration == 0 else None)
        finals = {}
        self.sampling_states: dict[str, list[torch.Tensor]] = {}  # each learner's, as each of its turns starts
        with self.data_parallel.gathered(self.policies.values()):  # FSDP: whole weights while acting
            for agent in self.game.agent_iter():
                obs, reward, term, trunc, info = self.game.last()
                if term or trunc:
                    finals[agent] = (self._episode(obs, info), info)
                    self.game.step(None)
                else:
                    learner = self.learners[agent]
                    # A turn starts where nothing of it is cached yet: for replays' common random numbers.
                    if starts_turn(obs) and hasattr(learner, "sampling_generator"):
                        self.sampling_states.setdefault(agent, []).append(learner.sampling_generator.get_state())
                    self.game.step(learner.act(agent, obs))
        return finals

    def _episode(self, observation: dict[str, Any], info: dict[str, Any]) -> Episode:
        """A learner's episode at its final step: from its final observation, or over several rounds
        from every turn it played (:meth:`~cory_env.PioneerObserverEnv.played_turns`)."""
        raw = self.game.unwrapped
        if raw.rounds == 1:
            return Episode.from_final_step(observation, info)
        return Episode.from_turns(raw.played_turns(info["role"]), info)

    @contextlib.contextmanager
    def _plots_on_error(self, bar: tqdm, main: bool) -> Iterator[None]:
        """A run that ends in an error it knows (a reward that fails, an update that is not finite) still draws
        the plots of the iterations it logged, to see what led there; then the error goes on."""
        try:
            yield
        except CoryError:
            bar.close()
            if main:
                try:
                    plot_run(self.out)
                except Exception as exc:  # noqa: BLE001 - the run's own error is the one to report
                    logger.warning("no plots after the error: %s: %s", type(exc).__name__, exc)
            raise

    def team_episode(self, finals: dict[str, tuple[Episode, dict[str, Any]]]) -> TeamEpisode:
        """What the team learns from: :meth:`rollout`'s episodes, each learner's role, the environment
        that played them, and the context to act again in (the gathered weights under FSDP)."""
        return TeamEpisode(
            episodes={name: episode for name, (episode, _) in finals.items()},
            roles={name: info["role"] for name, (_, info) in finals.items()},
            env=self.game.unwrapped,
            acting=lambda: self.data_parallel.gathered(self.policies.values()),
            data_parallel=self.data_parallel,
            sampling_states=self.sampling_states,
        )

    def run_iteration(self) -> tuple[dict[str, float], list[dict[str, Any]]]:
        start = time.perf_counter()
        finals = self.rollout()
        rollout_s = time.perf_counter() - start
        if self.game.unwrapped.rounds == 1:
            tokens = sum(int(np.sum(info["response_length"])) for _, info in finals.values())
        else:  # every turn's
            tokens = sum(int(ep.attention_mask[:, -ep.response_width :].sum()) for ep, _ in finals.values())
        stats = self.team.learn(self.team_episode(finals))
        metrics: dict[str, float] = {}
        samples = []
        for name, (_, info) in finals.items():
            metrics.update({f"{name}/{k}": v for k, v in stats.pop(name, {}).items()})
            metrics[f"{name}/role"] = self.game.unwrapped.possible_agents.index(info["role"])
            for b in range(min(self.config.samples_per_iteration, len(info["query"]))):
                samples.append(
                    dict(
                        learner=name,
                        role=info["role"],
                        query=info["query"][b],
                        context=info["context"][b],
                        response=info["response"][b],
                        task_reward=float(info["task_reward"][b]),
                        reward=float(info["reward"][b]),
                    )
                )
        for key, values in stats.items():  # a team learner's statistics of its own
            metrics.update({f"{key}/{k}": v for k, v in values.items()})
        dp = self.data_parallel
        if dp.is_distributed:  # every process's tokens, and its samples tagged with its index
            tokens = dp.sum({"tokens": tokens})["tokens"]
            samples = [s | {"process": i} for i, mine in enumerate(dp.gather_objects(samples)) for s in mine]
        metrics["tokens_per_s"] = tokens / rollout_s
        metrics["seconds"] = time.perf_counter() - start
        self.iteration += 1
        return metrics, samples

    def train(self, progress: bool = True) -> Path:
        """Run (or resume) to ``config.iterations``; returns the output folder.

        The run holds the output folder's lock throughout (:mod:`cory_agents.training.run_lock`): a
        second run into the same ``--out`` fails at once. In a data-parallel run every process
        calls this; only the main one holds the lock and writes files.
        """
        with RunLock(self.out) if self.data_parallel.is_main_process else contextlib.nullcontext():
            return self._train(progress)

    def _train(self, progress: bool) -> Path:
        c, dp = self.config, self.data_parallel
        main = dp.is_main_process
        if main:  # a user's file where the run writes is refused before anything is written
            check_run_folder(self.out, list(self.policies) if c.save_model else [])
            self.out.mkdir(parents=True, exist_ok=True)
            # The run holds the folder's lock: a temporary checkpoint there is one a killed process left.
            remove_leftovers(checkpoint_dir(self.out), CHECKPOINT_TEMPORARY, "a checkpoint write")
        dp.wait_for_everyone()
        checkpoint = latest_checkpoint(self.out)
        if checkpoint is not None and not c.resume:
            if not c.overwrite:
                raise RunExistsError(
                    f"{self.out} already holds a run (checkpoint {checkpoint.name}): pass --resume to continue it, "
                    f"--overwrite to start over there, or choose another --out"
                )
            dp.wait_for_everyone()  # every process has looked before the main one deletes
            if main:
                remove_checkpoints(checkpoint.parent)  # its checkpoint files; anything else there stays
            checkpoint = None
        loaded = load_latest(self.out, trust=c.trust_checkpoint) if checkpoint is not None else None
        checkpoint = loaded[0] if loaded else None  # the newest intact one; every process loads the same file
        if loaded:
            state = loaded[1]
            check_resumable(state.get("config", {}), dataclasses.asdict(c), self.out)
            self.load_state_dict(state)
            if main:
                logger.info(
                    "resuming %s from %s: iteration %d of %d", self.out, checkpoint.name, self.iteration, c.iterations
                )
        elif c.resume and main:
            logger.warning(
                "--resume: no checkpoint in %s yet, so the run starts at iteration 0", checkpoint_dir(self.out)
            )
        records = (
            MetricsLogger(self.out, resume=checkpoint is not None, report_to=c.report_to, config=dataclasses.asdict(c))
            if main
            else None
        )
        if checkpoint is not None and records is not None:
            records.truncate(self.iteration - 1)
        if main:
            settings = json.dumps(dataclasses.asdict(c), indent=2)
            with writing(self.out / "config.json", len(settings)):  # whole, or a full disk's one line
                write_whole(self.out / "config.json", settings)
            record_session(self.out, self.iteration)  # which code trains from here
        bar = tqdm(total=c.iterations, initial=self.iteration, disable=not (progress and main), desc=c.algo, unit="it")
        self.stopped_by = ""
        abandoned = ""  # the reward whose call a stop request abandoned, if one was
        self.reward.cancel.clear()
        stop = StopRequests(self._stop_requested)  # Ctrl-C, SIGTERM: stop after the iteration
        with records if records is not None else contextlib.nullcontext(), stop, self._plots_on_error(bar, main):
            while self.iteration < c.iterations:
                it = self.iteration
                try:
                    metrics, samples = self.run_iteration()
                except RewardCallCancelled:  # a stop request during a reward call that did not return
                    self.stopped_by, abandoned = stop.signal, self.reward.name
                    break
                if records is not None:
                    records.log(it, metrics)
                    records.log_samples(it, samples)
                bar.set_postfix(_postfix(metrics), refresh=False)
                bar.update(1)
                # A stop signal in any process stops them all after this iteration (a collective).
                stopping = dp.sum({"stop": bool(stop.signal)})["stop"] > 0
                if self.iteration % c.checkpoint_every == 0 or self.iteration == c.iterations or stopping:
                    state = self.state_dict()  # collective in a data-parallel run
                    if main:
                        save_checkpoint(self.out, it, state, keep=c.keep_checkpoints)
                if stopping and self.iteration < c.iterations:
                    self.stopped_by = stop.signal or "a stop signal in another process"
                    break
        bar.close()
        if main:
            plot_run(self.out)
        if abandoned and main:
            kept = latest_checkpoint(self.out)
            first_lost = checkpoint_iteration(kept) + 2 if kept else 1
            lost = (
                f"iteration {first_lost} is"
                if first_lost == self.iteration + 1
                else f"iterations {first_lost} to {self.iteration + 1} are"
            )
            logger.warning(
                "stopped by %s during a call of the reward %s, which did not return: %s lost; "
                "%s: continue with --resume --out %s",
                self.stopped_by,
                abandoned,
                lost,
                f"the last checkpoint, {kept.name}, is kept" if kept else "no checkpoint was written yet",
                self.out,
            )
        elif self.stopped_by and main:
            logger.warning(
                "stopped by %s after iteration %d of %d, checkpoint saved: continue with --resume --out %s",
                self.stopped_by,
                self.iteration,
                c.iterations,
                self.out,
            )
        elif c.save_model and not self.stopped_by:
            self.save_model()
        dp.wait_for_everyone()
        return self.out

    def _stop_requested(self, signal_name: str) -> None:
        """The first Ctrl-C or SIGTERM: finish the iteration, then checkpoint; a reward call that hangs is abandoned."""
        if self.data_parallel.is_main_process:
            tqdm.write(f"{signal_name}: finishing this iteration, then a checkpoint (again to stop at once)")
        self.reward.cancel.set()

    def save_model(self, folder: str | Path | None = None) -> dict[str, Path]:
        """Write each learner's policy as a Hugging Face model to ``folder/<learner>`` (default
        ``--out/model``): :func:`cory_agents.training.export.save_policies`. In a data-parallel run every process
        calls it (under FSDP it gathers the weights); only the main one writes. Returns the paths."""
        folder = self.out / MODEL_DIR if folder is None else Path(folder)
        dp = self.data_parallel
        return save_policies(self.policies, self.tokenizers, folder, sharded=dp.sharded, main=dp.is_main_process)


def _postfix(metrics: dict[str, float]) -> dict[str, str]:
    shown = {}
    for key, value in sorted(metrics.items()):  # stable order: learners swap roles, not places
        learner, _, name = key.rpartition("/")
        if name in ("task_reward_mean", "kl"):
            shown[f"{learner}.{'R' if name.startswith('task') else 'KL'}"] = f"{value:.3f}"
    shown["tok/s"] = f"{metrics['tokens_per_s']:.0f}"
    return shown
