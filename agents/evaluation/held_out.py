"""Evaluating a policy on held-out prompts: task reward, KL to the reference, diversity, pass@k.

A policy is a training run's checkpoint (every learner, or those chosen: CORY's ``llm_0`` and
``llm_1``, PPO's ``pioneer``) or a model name evaluated as it is. Each learner answers the
held-out prompts alone, as the pioneer (``with_observer=False``), through the environment and
with the same :class:`~cory_agents.acting.actor.LMActor` and sampling settings as in training;
``samples_per_prompt`` (k) answers per prompt. Reported per learner:

- ``task_reward_mean`` (and ``_std``): the task reward over all answers;
- ``kl``: exact KL to the reference summed over the response, mean over answers (what
  training logs as ``kl``: the paper's KL);
- ``combined_reward``: ``task_reward_mean - kl_coef * kl``, with the learner's final ``kl_coef``;
- ``distinct_1``, ``distinct_2``: :func:`distinct_n` over all answers (falls when outputs collapse);
- ``repetition_rate``: :func:`repetition_rate` of bigrams (rises when outputs collapse);
- ``pass@1``, ``pass@k``: :func:`pass_at_k`, an answer being correct when its reward is at
  least ``pass_threshold`` (default 1.0 for gsm8k, off for other tasks).

Example::

    result = evaluate(EvalConfig(checkpoint="runs/cory", num_prompts=64, samples_per_prompt=4))
    print(format_result(result))

or ``python examples/evaluate.py --checkpoint runs/cory --samples-per-prompt 4``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from cory_agents.evaluation.answers import distinct_n, mean_pass_at_k, ngrams, pass_at_k, repetition_rate  # noqa: F401
from cory_agents.evaluation.policies import (  # noqa: F401 - cory-eval's and cory-export's
    CheckpointNotFoundError,
    find_checkpoint,
    policy_from_checkpoint,
    policy_from_model,
    run_folder,
    train_config_from,
)
from cory_agents.evaluation.report import (  # noqa: F401
    EVAL_COLUMNS,
    check_output_file,
    fmt,
    format_result,
    jsonable,
    markdown_table,
    write_json,
)
from cory_agents.learners.lm import flag
from cory_agents.learners.ppo import Episode, PPOLearner
from cory_agents.training.build import resolve_device
from cory_agents.training.chat_settings import solo_chat_form
from cory_agents.training.checkpoint import load_checkpoint
from cory_agents.training.config import TrainConfig, build_task, with_task_defaults
from cory_env import env
from cory_env.chat_prompts import ChatForm
from cory_env.errors import UsageError
from cory_env.prompts import Prompt, PromptSource
from cory_env.rewards import get_reward
from cory_env.rewards.base import RewardFunction
from cory_env.tasks import get_task
from cory_env.templates import Template

logger = logging.getLogger(__name__)


# ------------------------------------------------------------- task and reward
def task_prompts(
    run: TrainConfig | str, tokenizer: Any, *, split: str = "test", seed: int = 0, source: str = "auto"
) -> tuple[PromptSource, Template]:
    """The prompt source for ``split`` of a task (by name) or of a run's task (``--task``, or its
    ``--task-file``), and the pioneer's template (the run's own, else the task's)."""
    run = TrainConfig(task=run) if isinstance(run, str) else run
    task = build_task(run)
    if task.min_agents > 1:  # a model alone plays one position of a game it cannot win alone
        raise UsageError(
            f"--task {task.name} is a game of {task.min_agents} agents: a model answering alone scores nothing "
            f"there. Its training run's metrics.csv has the team's success (reward_mean); evaluate a model alone "
            f"on another task (--task sentiment)"
        )
    return task.prompts(tokenizer, split=split, seed=seed, source=source), run.pioneer_template or task.pioneer_template


def load_reward(
    name: str, task: str, device: torch.device | None = None, timeout: float | None = None
) -> tuple[str, RewardFunction]:
    """``(name, function)`` of the reward ``name``, or of the task's default reward when ``name`` is
    empty; ``timeout``: :func:`~cory_env.rewards.get_reward`'s (``--reward-timeout``)."""
    if not name:
        default = get_task(task).default_reward
        if callable(default):
            return getattr(default, "__name__", "default"), default
        name = default
    return name, get_reward(name, device=device, timeout=timeout)


# ------------------------------------------------------------------------- settings


@dataclass
class EvalConfig:
    """What to evaluate and how; each field is a flag of examples/evaluate.py. Empty means "the run's"."""

    checkpoint: str = flag(
        "", "a run folder (its newest checkpoint) or a checkpoint file checkpoints/iter_NNNNNN.safetensors"
    )
    trust_checkpoint: bool = flag(
        False, "also load an old pickle checkpoint (iter_NNNNNN.pt): only your own files, a pickle can run code"
    )
    model: str = flag("", "instead of --checkpoint: a model name or path, evaluated as it is (its KL is 0)")
    learners: str = flag("", "learners to evaluate, comma separated (CORY: llm_0,llm_1; PPO: pioneer); default: all")
    task: str = flag("", "task; default: the run's (sentiment for --model)")
    reward: str = flag("", "reward name or package.module:function; default: the run's (the task's for --model)")
    prompt_source: str = flag("", "prompt data (sentiment: auto, imdb, rotten_tomatoes); default: the run's")
    split: str = flag("test", "held-out split of the task's prompts", choices=["train", "test"])
    num_prompts: int = flag(64, "distinct held-out prompts")
    samples_per_prompt: int = flag(1, "answers sampled per prompt (k of pass@k)")
    batch_size: int = flag(32, "conversations generated together")
    max_new_tokens: int = flag(0, "response length limit; 0: the run's --max-new-tokens")
    context_length: int = flag(0, "observation width; 0: the run's")
    pass_threshold: float | None = flag(
        None, "an answer is correct when its reward is >= this (pass@k); default 1.0 for gsm8k, off otherwise"
    )
    seed: int = flag(0, "seed of the prompt choice and of sampling")
    reward_timeout: float | None = flag(
        None, "seconds one reward call may take (0: no limit); default: the run's --reward-timeout, else 300"
    )
    out: str = flag("", "JSON file to write; default: <run>/evaluation.json, or evaluation.json for --model")
    device: str = flag("auto", "cpu, cuda, or auto")

    def __post_init__(self) -> None:
        if bool(self.checkpoint) == bool(self.model):
            raise UsageError("give exactly one of --checkpoint (a training run) and --model (a model name or path)")
        for name in ("num_prompts", "samples_per_prompt", "batch_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")


# ----------------------------------------------------------------------- generation


def held_out_prompts(source: PromptSource, n: int, seed: int = 0) -> list[Prompt]:
    """``n`` prompts with distinct queries drawn from ``source`` (fewer, with a warning, if it has fewer)."""
    rng = np.random.default_rng(seed)
    chosen: dict[str, Prompt] = {}
    barren = 0
    while len(chosen) < n and barren < 3:  # three rounds without a new query: the source is exhausted
        before = len(chosen)
        for prompt in source.sample(rng, n - len(chosen)):
            if len(chosen) < n:
                chosen.setdefault(prompt.query, prompt)
        barren = barren + 1 if len(chosen) == before else 0
    if len(chosen) < n:
        logger.warning("only %d distinct prompts found of the %d asked for", len(chosen), n)
    return list(chosen.values())


class _InOrder:
    """A prompt source that hands out exactly its prompts, in order: one evaluation batch."""

    def __init__(self, prompts: Sequence[Prompt]):
        self.prompts = list(prompts)

    def __len__(self) -> int:
        return len(self.prompts)

    def sample(self, rng: np.random.Generator, n: int) -> list[Prompt]:
        if n != len(self.prompts):
            raise ValueError(f"this batch holds {len(self.prompts)} prompts, {n} were asked for")
        return list(self.prompts)


def sample_answers(
    learner: PPOLearner,
    tokenizer: Any,
    prompts: Sequence[Prompt],
    reward_fn: RewardFunction,
    *,
    max_new_tokens: int,
    context_length: int,
    pioneer_template: Template = "{query}",
    batch_size: int = 32,
    seed: int = 0,
    progress: bool = True,
    desc: str = "evaluate",
    chat: ChatForm | None = None,
) -> list[dict[str, Any]]:
    """Play ``prompts`` (in order) with ``learner`` as the pioneer alone (in the chat form ``chat``, where given:
    the form a chat-form run was trained in); one record per answer: query, response (text and token ids
    without special tokens), length, task reward, KL."""
    learner.sampling_generator.manual_seed(seed)
    special = set(tokenizer.all_special_ids)
    records: list[dict[str, Any]] = []
    for start in tqdm(range(0, len(prompts), batch_size), desc=desc, unit="batch", disable=not progress, leave=False):
        batch = prompts[start : start + batch_size]
        game = env(
            tokenizer=tokenizer,
            prompts=_InOrder(batch),
            reward_fn=reward_fn,
            num_conversations=len(batch),
            max_new_tokens=max_new_tokens,
            context_length=context_length,
            pioneer_template=pioneer_template,
            with_observer=False,
            chat=chat,
        )
        game.reset(seed=seed)
        for agent in game.agent_iter():
            observation, _, terminated, truncated, info = game.last()
            if terminated or truncated:
                episode, final = Episode.from_final_step(observation, info), info
                game.step(None)
            else:
                game.step(learner.act(agent, observation))
        kl = learner.kl_to_reference(episode)
        width = episode.response_width
        ids, mask = episode.input_ids[:, -width:].tolist(), episode.attention_mask[:, -width:].tolist()
        for b in range(len(batch)):
            records.append(
                dict(
                    query=final["query"][b],
                    response=final["response"][b],
                    response_ids=[t for t, m in zip(ids[b], mask[b]) if m and t not in special],
                    response_length=int(final["response_length"][b]),
                    task_reward=float(final["task_reward"][b]),
                    kl=float(kl[b]),
                )
            )
    return records


def summarize(
    records: Sequence[dict[str, Any]],
    *,
    samples_per_prompt: int,
    kl_coef: float,
    pass_threshold: float | None = None,
    num_examples: int = 3,
) -> dict[str, Any]:
    """The metrics of one learner's answers; ``records`` hold ``samples_per_prompt`` answers per prompt, in a row."""
    rewards = np.array([r["task_reward"] for r in records])
    kl = np.array([r["kl"] for r in records])
    tokens = [r["response_ids"] for r in records]
    summary: dict[str, Any] = {
        "task_reward_mean": float(rewards.mean()),
        "task_reward_std": float(rewards.std()),
        "kl": float(kl.mean()),
        "kl_std": float(kl.std()),
        "kl_coef": float(kl_coef),
        "combined_reward": float(rewards.mean() - kl_coef * kl.mean()),
        "distinct_1": distinct_n(tokens, 1),
        "distinct_2": distinct_n(tokens, 2),
        "repetition_rate": repetition_rate(tokens, 2),
        "response_length": float(np.mean([r["response_length"] for r in records])),
        "answers": len(records),
    }
    if pass_threshold is not None:
        correct = (rewards >= pass_threshold).reshape(-1, samples_per_prompt)
        for k in sorted({1, samples_per_prompt}):
            summary[f"pass@{k}"] = mean_pass_at_k(correct, k)
    summary["examples"] = [
        {key: r[key] for key in ("query", "response", "task_reward", "kl")} for r in records[:num_examples]
    ]
    return summary


def evaluate_learners(
    learners: dict[str, PPOLearner],
    tokenizer: Any,
    prompts: Sequence[Prompt],
    reward_fn: RewardFunction,
    *,
    samples_per_prompt: int = 1,
    pass_threshold: float | None = None,
    progress: bool = True,
    **generation: Any,
) -> dict[str, dict[str, Any]]:
    """Each learner answers every prompt ``samples_per_prompt`` times (same prompts and seed for
    all learners); ``generation`` goes to :func:`sample_answers`. ``tokenizer`` is every learner's,
    or a dict of each learner's own (a team of different models). Returns learner -> :func:`summarize`."""
    repeated = [p for p in prompts for _ in range(samples_per_prompt)]
    results = {}
    for name, learner in learners.items():
        own = tokenizer[name] if isinstance(tokenizer, dict) else tokenizer
        records = sample_answers(learner, own, repeated, reward_fn, progress=progress, desc=name, **generation)
        results[name] = summarize(
            records, samples_per_prompt=samples_per_prompt, kl_coef=learner.kl_ctl.value, pass_threshold=pass_threshold
        )
    return results


def evaluate(config: EvalConfig, *, progress: bool = True, write: bool = True) -> dict[str, Any]:
    """Load the policy, answer the held-out prompts, and (``write``) save the JSON; returns the result."""
    device = resolve_device(config.device)
    if write and config.out:
        check_output_file(config.out)  # a folder, or below a file: refused before the policy loads
    if config.checkpoint:
        path = find_checkpoint(config.checkpoint)
        state = load_checkpoint(path, trust=config.trust_checkpoint)
        run = train_config_from(state["config"])
        policy = {
            "checkpoint": str(path),
            "iterations_trained": int(state["iteration"]),
            "algo": run.algo,
            "model": run.model,
        }
        task = config.task or run.task
        if task == run.task and get_task(task).min_agents > 1:  # a team, in the game it was trained on
            from cory_agents.evaluation.communication import evaluate_team

            return evaluate_team(state, path, config, write=write)
        timeout = config.reward_timeout if config.reward_timeout is not None else run.reward_timeout
        reward_name, reward_fn = load_reward(
            config.reward or (run.reward if task == run.task else ""), task, device, timeout
        )
        trainer = policy_from_checkpoint(state, reward_fn=reward_fn, device=config.device)
        del state  # optimizer moments: not needed any more
        out = Path(config.out) if config.out else run_folder(path) / "evaluation.json"
    else:
        task = config.task or "sentiment"
        run, policy = (
            with_task_defaults(TrainConfig(model=config.model, task=task), get_task(task)),
            {"model": config.model},
        )
        reward_name, reward_fn = load_reward(config.reward, task, device, config.reward_timeout)
        trainer = policy_from_model(config.model, reward_fn=reward_fn, device=config.device)
        out = Path(config.out or "evaluation.json")
    learners = _chosen_learners(trainer.learners, config.learners)
    tokenizer = trainer.game.unwrapped.tokenizer  # the first learner's: it selects the prompts
    if task != run.task:  # another task than the run was trained on: that task's own prompts and template
        run = dataclasses.replace(run, task=task, task_file="", pioneer_template="", prompt_source="auto")
    source = config.prompt_source or run.prompt_source
    prompt_source, pioneer_template = task_prompts(run, tokenizer, split=config.split, seed=config.seed, source=source)
    prompts = held_out_prompts(prompt_source, config.num_prompts, config.seed)
    threshold = config.pass_threshold if config.pass_threshold is not None else (1.0 if task == "gsm8k" else None)
    max_new_tokens = config.max_new_tokens or run.max_new_tokens
    results = evaluate_learners(
        learners,
        trainer.tokenizers,
        prompts,
        reward_fn,
        samples_per_prompt=config.samples_per_prompt,
        pass_threshold=threshold,
        progress=progress,
        max_new_tokens=max_new_tokens,
        context_length=config.context_length or run.context_length,
        pioneer_template=pioneer_template,
        batch_size=config.batch_size,
        seed=config.seed,
        chat=solo_chat_form(run),  # a run trained in chat form is evaluated in it
    )
    result = {
        "policy": policy,
        "task": task,
        "reward": reward_name,
        "split": config.split,
        "source": source,
        "num_prompts": len(prompts),
        "samples_per_prompt": config.samples_per_prompt,
        "max_new_tokens": max_new_tokens,
        "pass_threshold": threshold,
        "seed": config.seed,
        "settings": dataclasses.asdict(config),
        "learners": results,
    }
    if write:
        result["path"] = str(write_json(out, result))
    return result


def _chosen_learners(learners: dict[str, PPOLearner], spec: str) -> dict[str, PPOLearner]:
    if not spec:
        return dict(learners)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in learners]
    if unknown:
        raise UsageError(f"--learners {', '.join(unknown)}: this policy's learners are {', '.join(learners)}")
    return {n: learners[n] for n in names}
