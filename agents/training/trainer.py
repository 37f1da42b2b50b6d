"""Training loop: CORY (two learners) or single-agent PPO, driven through the environment.

CORY plays ``RoleExchangeWrapper(CollectiveRewardWrapper(env))``: learners ``llm_0`` and
``llm_1`` are persistent objects, so a role exchange keeps each one's weights, optimizer
state, value head, KL controller and score statistics (the authors' code rebuilt its
trainers from disk every exchange, losing all but the weights). PPO plays the same
environment with the pioneer alone and its own task reward.

Each iteration: one batched episode (the rollout), then an update per learner. A learner
is built by the factory ``LEARNERS[config.learner]`` (``--learner ppo|grpo|rloo``); any
object with the :class:`~agents.learners.base.Learner` interface can be registered there.
Under ``accelerate launch`` every process plays its own episode and the updates are
synchronised (:mod:`agents.distributed.data_parallel`); only the main process writes files.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from trl.trainer.utils import disable_dropout_in_model

from agents.speed import padding_free
from agents.training.checkpoint import checkpoint_dir, latest_checkpoint, load_latest, save_checkpoint
from agents.speed.cpu_linear import use_cpu_linear
from agents.distributed.data_parallel import DataParallel, fingerprint
from agents.training.export import MODEL_DIR, save_policies
from agents.distributed.fsdp import full_state, is_sharded, shard_state
from agents.learners.grpo import GRPOConfig, GRPOLearner
from agents.speed.host_memory import retain_freed_memory
from agents.training.interrupt import StopRequests
from agents.algorithms.kl import ESTIMATORS
from agents.learners.base import Episode, Learner
from agents.training.metrics import MetricsLogger
from agents.training.plots import plot_run
from agents.training.trackers import resolve_report_to
from agents.learners.ppo import PPOConfig, PPOLearner
from agents.learners.value_model import CausalLMWithValueHead
from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper, env
from cory_env.models import EMBEDDED_MODEL, hugging_face_model, load_causal_lm, load_tokenizer
from cory_env.prompts import PromptSource, repeat_each
from cory_env.rewards import get_reward
from cory_env.rewards.base import RewardFunction
from cory_env.tasks import TASKS, Task, custom_task, get_task

logger = logging.getLogger(__name__)

ALGOS = ("cory", "ppo")
ROLE_IDS = {"pioneer": 0, "observer": 1}

#: Builds one learner: ``factory(config, *, policy, reference, seed, sampling, device)``, where
#: ``policy`` is this learner's trainable causal LM (full copy or LoRA adapter view, on ``device``),
#: ``reference`` its frozen reference (learners on one device share it), ``sampling`` LMActor's
#: keyword arguments. Under ``accelerate launch`` the factory also gets ``data_parallel``
#: (:class:`~agents.distributed.data_parallel.DataParallel`): the learner must then average its gradients
#: over the processes (``data_parallel.average_gradients``) so that their weights stay equal,
#: and under FSDP shard any module it adds to ``policy`` (``data_parallel.shard``) before
#: building its optimizer (``policy`` and ``reference`` come sharded).
LearnerFactory = Callable[..., Learner]


def ppo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device, data_parallel=None) -> PPOLearner:
    """PPO-LLM: the policy gets a value head (critic)."""
    model = CausalLMWithValueHead(policy).to(device)
    if data_parallel is not None:
        data_parallel.shard(model.v_head)  # FSDP: the value head is a unit of its own (the LM is one already)
    return PPOLearner(model, reference, config.ppo_config(), seed, sampling, data_parallel=data_parallel)


def grpo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device, data_parallel=None) -> GRPOLearner:
    """GRPO: group-normalised advantages, k3 KL term in the loss; no value head."""
    return GRPOLearner(policy, reference, config.grpo_config("grpo"), seed, sampling, data_parallel=data_parallel)


def rloo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device, data_parallel=None) -> GRPOLearner:
    """RLOO: leave-one-out baseline, KL penalty in the reward; no value head."""
    return GRPOLearner(policy, reference, config.grpo_config("rloo"), seed, sampling, data_parallel=data_parallel)


#: ``--learner`` choices. Register another algorithm with ``LEARNERS["name"] = factory``
#: before building the Trainer (or the command-line parser): see docs/plug-in-your-algorithm.md.
LEARNERS: dict[str, LearnerFactory] = {"ppo": ppo_learner, "grpo": grpo_learner, "rloo": rloo_learner}


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig:
    """Everything a run needs; each field is a command-line flag of examples/train_cory.py."""

    algo: str = _f("cory", "cory: two learners, collective reward, role exchange; ppo: single-agent baseline", choices=list(ALGOS))
    learner: str = _f("ppo", "learning algorithm of each agent: ppo (value head, GAE); grpo or rloo (critic-free, --group-size responses per prompt)", choices=LEARNERS.keys())
    group_size: int = _f(4, "grpo/rloo: responses per prompt, consecutive in the batch (--batch-size must be a multiple); ppo ignores it")
    task: str = _f("sentiment", "task: sentiment (movie-review continuation) or gsm8k (grade-school math)", choices=sorted(TASKS))
    task_file: str = _f("", "your own prompts: a .jsonl or .csv file, one row per prompt (--task still gives templates and reward)")
    query_field: str = _f("query", "--task-file column holding the query; the other columns go to the reward as metadata")
    pioneer_template: str = _f("", "pioneer prompt, a format string with {query} (empty: the task's)")
    observer_template: str = _f("", "observer prompt, a format string with {query} and {response} (empty: the task's)")
    model: str = _f(EMBEDDED_MODEL, "model name or path (Hub name, local folder, or the embedded smollm2-135m)")
    reward: str = _f("", "reward (empty: the task's: vader, gsm8k): a registered name, package.module:function, or a Hub text-classification model (raw logit of its positive label)")
    prompt_source: str = _f("auto", "where the task's prompts come from: auto, or sentiment: imdb, rotten_tomatoes; gsm8k: gsm8k, gsm_symbolic")
    review_source: str = _f("auto", "sentiment prompts: auto, imdb or rotten_tomatoes (used when --prompt-source is auto)")
    iterations: int = _f(45, "training iterations (one batched episode each)")
    batch_size: int = _f(32, "conversations per iteration")
    mini_batch_size: int = _f(16, "conversations per gradient step")
    gradient_accumulation_steps: int = _f(1, "minibatches per optimizer step")
    ppo_epochs: int = _f(1, "passes over each batch (PPO epochs; grpo/rloo: num_iterations)")
    lr: float = _f(3e-5, "Adam learning rate")
    value_lr: float = _f(0.0, "ppo: Adam learning rate of the value head (0: --lr)")
    kl_coef: float = _f(0.05, "KL coefficient eta (initial value if adaptive); grpo: beta of the k3 loss term, rloo: of the summed KL in the reward")
    adaptive_kl: bool = _f(False, "adapt the KL coefficient towards --target-kl")
    target_kl: float = _f(6.0, "target KL (summed over the response) of the adaptive controller")
    kl_horizon: int = _f(10000, "horizon of the adaptive KL controller")
    kl_estimator: str = _f("k1", "per-token KL in the reward: k1 (sampled token), abs, mse, k3, full (whole distribution); grpo's loss term is k3", choices=list(ESTIMATORS))
    vf_coef: float = _f(0.1, "value loss coefficient")
    cliprange: float = _f(0.2, "policy ratio clip range")
    cliprange_value: float = _f(0.2, "value clip range")
    gamma: float = _f(1.0, "discount")
    lam: float = _f(0.95, "GAE lambda")
    max_grad_norm: float = _f(1.0, "gradient clipping norm (0: off)")
    score_scaling: bool = _f(False, "scale task scores by their running std")
    score_norm: bool = _f(False, "also subtract the running mean of scores")
    role_exchange_period: int = _f(5, "iterations between role exchanges (CORY's T_REx)")
    no_role_exchange: bool = _f(False, "ablation: never exchange roles")
    no_knowledge_transfer: bool = _f(False, "ablation: the observer sees only the query")
    min_new_tokens: int = _f(0, "response length limit is sampled per batch from [min, max] (0: the task's: sentiment 12, gsm8k 128)")
    max_new_tokens: int = _f(0, "largest response length limit (0: the task's: sentiment 12, gsm8k 256)")
    temperature: float = _f(1.0, "sampling temperature")
    top_k: int = _f(0, "top-k sampling (0: off, the paper's setting)")
    top_p: float = _f(1.0, "nucleus sampling (1.0: off, the paper's setting)")
    context_length: int = _f(0, "observation width in tokens, prompt + response must fit (0: the task's: sentiment 128, gsm8k 1024)")
    seed: int = _f(0, "random seed (prompts, sampling, minibatches)")
    out: str = _f("runs/cory", "output folder: metrics.csv, samples.jsonl, plots, checkpoints")
    resume: bool = _f(False, "continue from the newest checkpoint in --out")
    overwrite: bool = _f(False, "start over in an --out that already holds a run (its checkpoints are deleted)")
    checkpoint_every: int = _f(10, "save a checkpoint every N iterations (and at the end)")
    keep_checkpoints: int = _f(1, "newest checkpoints kept; with 2, --resume can fall back if the newest is damaged")
    trust_checkpoint: bool = _f(False, "--resume may load an old pickle checkpoint (iter_NNNNNN.pt): your own only")
    samples_per_iteration: int = _f(4, "sample generations per learner written to samples.jsonl")
    report_to: str = _f("tensorboard", "experiment trackers, as TRL's --report_to (accelerate's): tensorboard (in --out), "
                        "wandb, mlflow, trackio, ..., comma-separated; all or none. metrics.csv is written anyway")
    tensorboard: bool | None = _f(None, "deprecated: --tensorboard false is --report-to none", nargs="?", const=True)
    save_model: bool = _f(True, "at the end, write each learner's policy as a Hugging Face model to --out/model/<learner> (with --lora: its PEFT adapter), tokenizer included")
    lora: bool = _f(False, "train LoRA adapters on one shared frozen base (the reference is the base itself)")
    lora_r: int = _f(16, "LoRA rank")
    lora_alpha: int = _f(32, "LoRA alpha")
    lora_target_modules: str = _f("all-linear", "modules that get adapters: all-linear, or comma-separated names (e.g. q_proj,v_proj,lm_head)")
    bf16: bool = _f(False, "bfloat16 autocast for forward passes (float32 weights and optimizer)")
    gradient_checkpointing: bool = _f(False, "recompute activations in the backward pass: less memory, more time")
    gradient_checkpointing_observer: bool = _f(False, "CORY: recompute activations only in the observer's update, whose context (query twice + the pioneer's response) is the widest: most of --gradient-checkpointing's memory saving for less of its time")
    retain_freed_memory: bool = _f(True, "CPU runs on Linux: keep freed memory in the process for reuse instead of returning it to the OS (no page faults on every large tensor: a CORY iteration 6-11%% faster, same peak memory; see agents.speed.host_memory)")
    cpu_linear: bool = _f(True, "CPU runs in float32: linear layers take the matrix-multiply layout the CPU runs fastest when a decode step multiplies a few rows, and give a frozen LM head a contiguous input (a CORY rollout about 12%% faster, the iteration about 1.6%%; see agents.speed.cpu_linear)")
    padding_free: bool = _f(True, "prompt prefills, scoring and training passes run each batch's real tokens as one row, without the padding of its shorter contexts, and the tokens a context starts with in common with an earlier one (a prompt template's head, a GRPO group's prompt) once (as TRL's padding_free; sdpa attention, per context; see agents.speed.padding_free)")
    load_in_4bit: bool = _f(False, "CUDA only, with --lora: load the base in 4 bits (bitsandbytes NF4), as the paper's GSM8K runs")
    device: str = _f("auto", "cpu, cuda, or auto (under accelerate launch: each process's own device)")
    learner_devices: str = _f("", "one device per learner, comma-separated (e.g. cuda:0,cuda:1: llm_0 and llm_1, each with its own reference copy); single process, full fine-tuning")
    preset: str = _f("", "paper-imdb: the paper's IMDB settings (GPT2-Large, distilbert-imdb, batch 256, 100 iterations)", choices=["", "paper-imdb"])

    def ppo_config(self) -> PPOConfig:
        return PPOConfig(
            learning_rate=self.lr, value_learning_rate=self.value_lr or None, mini_batch_size=self.mini_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps, ppo_epochs=self.ppo_epochs,
            gamma=self.gamma, lam=self.lam, cliprange=self.cliprange, cliprange_value=self.cliprange_value,
            vf_coef=self.vf_coef, init_kl_coef=self.kl_coef, adaptive_kl=self.adaptive_kl, target_kl=self.target_kl,
            kl_horizon=self.kl_horizon, kl_estimator=self.kl_estimator, max_grad_norm=self.max_grad_norm or None,
            score_scaling=self.score_scaling, score_norm=self.score_norm, bf16=self.bf16,
        )  # fmt: skip

    def grpo_config(self, advantage: str) -> GRPOConfig:
        """``advantage="grpo"``: KL as a k3 loss term (GRPO, TRL GRPOTrainer); ``"rloo"``: in the reward (TRL RLOOTrainer)."""
        return GRPOConfig(
            group_size=self.group_size, advantage=advantage, kl_penalty="loss" if advantage == "grpo" else "reward",
            kl_coef=self.kl_coef, kl_estimator=self.kl_estimator, adaptive_kl=self.adaptive_kl, target_kl=self.target_kl,
            kl_horizon=self.kl_horizon, learning_rate=self.lr, epochs=self.ppo_epochs, mini_batch_size=self.mini_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps, cliprange=self.cliprange,
            max_grad_norm=self.max_grad_norm or None, bf16=self.bf16,
        )  # fmt: skip


#: The paper's IMDB settings (tables 1-2); explicit flags still win.
PRESETS: dict[str, dict[str, Any]] = {
    "paper-imdb": dict(
        model="gpt2-large", reward="lvwerra/distilbert-imdb", review_source="imdb", iterations=100,
        batch_size=256, mini_batch_size=256, ppo_epochs=4, lr=1.41e-5, kl_coef=0.3, gamma=1.0, lam=0.95,
        cliprange=0.2, cliprange_value=0.2, vf_coef=0.1, role_exchange_period=5, min_new_tokens=4, max_new_tokens=15,
    ),  # fmt: skip
}


def apply_preset(config: TrainConfig) -> TrainConfig:
    """Fill the preset's values into fields still at their defaults."""
    if not config.preset:
        return config
    defaults = TrainConfig()
    changes = {k: v for k, v in PRESETS[config.preset].items() if getattr(config, k) == getattr(defaults, k)}
    return dataclasses.replace(config, **changes)


def build_task(config: TrainConfig) -> Task:
    """The task of ``--task``; with ``--task-file``, that file's prompts with the task's settings."""
    task = get_task(config.task)
    if config.task_file:
        task = custom_task(config.task_file, like=task, name="custom", query_field=config.query_field)
    return task


def with_task_defaults(config: TrainConfig, task: Task) -> TrainConfig:
    """Fill the fields left empty (reward, lengths, context) with the task's choices."""
    changes: dict[str, Any] = dict(
        reward=config.reward or task.default_reward,
        min_new_tokens=config.min_new_tokens or task.min_new_tokens,
        max_new_tokens=config.max_new_tokens or task.max_new_tokens,
        context_length=config.context_length or task.context_length,
    )
    if not config.min_new_tokens and changes["min_new_tokens"] > changes["max_new_tokens"]:
        changes["min_new_tokens"] = changes["max_new_tokens"]  # --max-new-tokens below the task's minimum
    return dataclasses.replace(config, **changes)


def prompt_source_name(config: TrainConfig) -> str:
    """``--prompt-source``, or for the sentiment task the older ``--review-source``."""
    if config.prompt_source == "auto" and config.task == "sentiment":
        return config.review_source
    return config.prompt_source


class Trainer:
    """Plays batched episodes and updates the learners; checkpoints and resumes exactly."""

    def __init__(
        self,
        config: TrainConfig,
        prompts: PromptSource | Sequence[str] | None = None,
        reward_fn: RewardFunction | None = None,
    ):
        """``prompts`` and ``reward_fn`` override the task's prompt source and ``config.reward``."""
        config = apply_preset(config)
        self.task = build_task(config)
        self.config = config = with_task_defaults(config, self.task)
        if config.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {config.algo!r}")
        if config.batch_size % config.mini_batch_size:
            raise ValueError(
                f"--batch-size {config.batch_size} must be a multiple of --mini-batch-size {config.mini_batch_size}"
            )
        for name in ("checkpoint_every", "keep_checkpoints"):
            if getattr(config, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(config, name)}")
        if config.learner not in LEARNERS:
            raise ValueError(f"learner must be one of {sorted(LEARNERS)} (or registered in LEARNERS), got {config.learner!r}")
        if config.learner in ("grpo", "rloo"):  # bad values fail now, not after loading the models
            config.grpo_config(config.learner)
            _check_group_size(config.batch_size, config.group_size, config.learner)
        # An unknown or uninstalled tracker fails now; the config keeps the trackers it resolved to.
        trackers = resolve_report_to(config.report_to, config.tensorboard)
        self.config = config = dataclasses.replace(config, report_to=",".join(trackers) or "none", tensorboard=None)
        self.data_parallel = dp = DataParallel.from_environment()
        if dp.fsdp is not None and config.lora:
            raise ValueError(
                "FSDP shards full fine-tuning only: --lora keeps one frozen base shared by two adapters. Drop --lora, "
                "or launch --lora with examples/accelerate/multi_gpu.yaml (data parallel)"
            )
        if dp.zero is not None and config.lora:
            raise ValueError(
                "DeepSpeed ZeRO is supported for full fine-tuning only: drop --lora, or launch --lora with "
                "examples/accelerate/multi_gpu.yaml (data parallel)"
            )
        if config.gradient_checkpointing_observer and (config.algo != "cory" or dp.sharded or dp.zero is not None):
            raise ValueError(
                "--gradient-checkpointing-observer applies to CORY's observer in a single process or data-parallel run; "
                "with --algo ppo, FSDP or DeepSpeed use --gradient-checkpointing (every update)"
            )
        if dp.bf16 and not config.bf16:
            self.config = config = dataclasses.replace(config, bf16=True)
        names = ["llm_0", "llm_1"] if config.algo == "cory" else ["pioneer"]
        self.device, learner_devices = self._devices(config, names)
        if config.retain_freed_memory and any(d.type == "cpu" for d in learner_devices.values()):
            retain_freed_memory()
        if config.bf16 and dp.is_main_process and (slow := _emulated_bfloat16(learner_devices.values())):
            logger.warning("--bf16 on %s, which has no bfloat16 arithmetic: autocast emulates it, many times slower "
                           "than float32 (the embedded model on an AVX2 CPU: a forward pass 7.6x, forward+backward "
                           "26x). Drop --bf16 on this machine", slow)  # fmt: skip
        _seed_everything(config.seed)  # the same on every process: the initial weights must be equal
        self.out = Path(config.out)
        tokenizer = load_tokenizer(config.model)
        # The task's data and reward before the models: a bad --task-file or --reward fails fast.
        if prompts is None:
            prompts = self.task.prompts(tokenizer, split="train", seed=config.seed, source=prompt_source_name(config))
        reward = get_reward(reward_fn if reward_fn is not None else config.reward, self.device)
        references, policies = self._build_models(config, names, learner_devices)
        self.policies = policies  # what the learners act with (gathered whole for a rollout), by learner
        self.tokenizer = tokenizer
        sampling = dict(do_sample=True, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
        self.learners: dict[str, Learner] = {}
        for i, name in enumerate(names):
            extra = {"data_parallel": dp} if dp.is_distributed or dp.sharded else {}
            learner = LEARNERS[config.learner](
                config, policy=policies[name], reference=references[name], seed=dp.seed(config.seed) * 1000 + i,
                sampling=sampling, device=learner_devices[name], **extra,
            )  # fmt: skip
            if not isinstance(learner, Learner):
                raise TypeError(f"learner {config.learner!r} built a {type(learner).__name__}, which lacks act, learn, "
                                f"state_dict or load_state_dict (see agents.learners.base.Learner)")  # fmt: skip
            self.learners[name] = learner
        if dp.sharded:
            _check_sharded(self.learners)
        # Every process starts from process 0's weights (value heads included), then draws its own data.
        dp.broadcast_parameters(p for learner in self.learners.values() for p in _trainable_parameters(learner))
        if dp.is_distributed:
            _seed_everything(dp.seed(config.seed))
        group_size = int(getattr(self.learners[names[0]], "group_size", 1))
        _check_group_size(config.batch_size, group_size, config.learner)
        if group_size > 1:  # each prompt group_size times in a row: groups of responses to compare
            prompts = repeat_each(prompts, group_size)

        base = env(
            tokenizer=tokenizer,
            prompts=prompts,
            reward_fn=reward,
            pioneer_template=config.pioneer_template or self.task.pioneer_template,
            observer_template=config.observer_template or self.task.observer_template,
            num_conversations=config.batch_size,
            max_new_tokens=(config.min_new_tokens, config.max_new_tokens),
            context_length=config.context_length,
            knowledge_transfer=not config.no_knowledge_transfer,
            with_observer=config.algo == "cory",
        )
        base.check_prompts()  # a prompt too long for --context-length fails now, not at the episode that draws it
        self.game = base
        if config.algo == "cory":
            period = None if config.no_role_exchange else config.role_exchange_period
            self.game = RoleExchangeWrapper(CollectiveRewardWrapper(base), period=period)
        self.iteration = 0
        self.stopped_by = ""  # the signal that stopped train() before its last iteration, if one did

    def _devices(self, config: TrainConfig, names: list[str]) -> tuple[torch.device, dict[str, torch.device]]:
        """The main device (models are loaded there; the reward model runs there) and each learner's."""
        dp = self.data_parallel
        if dp.is_distributed:
            if config.learner_devices:
                raise ValueError(
                    "--learner-devices is for a single process; under accelerate launch each process uses its own "
                    "device (drop --learner-devices, or run without accelerate launch)"
                )
            if config.device != "auto" and torch.device(config.device).type != dp.device.type:
                raise ValueError(
                    f"--device {config.device} conflicts with the launcher's device {dp.device}: drop --device "
                    f"(CUDA_VISIBLE_DEVICES= runs the processes on CPUs)"
                )
            return dp.device, dict.fromkeys(names, dp.device)
        if not config.learner_devices:
            device = resolve_device(config.device)
            return device, dict.fromkeys(names, device)
        specs = [s.strip() for s in config.learner_devices.split(",") if s.strip()]
        if len(specs) != len(names):
            raise ValueError(
                f"--learner-devices lists {len(specs)} device(s) for {len(names)} learner(s) ({', '.join(names)}): "
                f"give one per learner, e.g. --learner-devices {','.join(f'cuda:{i}' for i in range(len(names)))}"
            )
        try:
            devices = [torch.device(s) for s in specs]
        except RuntimeError as exc:
            raise ValueError(f"--learner-devices {config.learner_devices!r}: {exc}") from exc
        for d in devices:
            _check_available(d, "--learner-devices")
        if config.lora and len(set(devices)) > 1:
            raise ValueError("--learner-devices with different devices needs full fine-tuning: --lora shares one base")
        if config.device != "auto":
            raise ValueError("give either --device or --learner-devices, not both")
        return devices[0], dict(zip(names, devices))

    def _build_models(
        self, config: TrainConfig, names: list[str], devices: dict[str, torch.device]
    ) -> tuple[dict[str, torch.nn.Module], dict[str, torch.nn.Module]]:
        """Each learner's frozen reference and trainable causal LM (its factory adds a value head if needed).

        Full fine-tuning copies the model per learner, on the learner's device; learners on
        the same device share one reference. ``--lora`` puts one adapter per learner on a
        single shared base whose adapter-free forward is the reference.
        """
        kwargs: dict[str, Any] = {}
        if config.load_in_4bit:
            if not config.lora or self.device.type != "cuda":
                raise ValueError("--load-in-4bit needs --lora and a CUDA device (bitsandbytes 4-bit weights are frozen)")
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
            )
        base = load_causal_lm(config.model, device=None if config.load_in_4bit else self.device, **kwargs)
        disable_dropout_in_model(base)
        base.requires_grad_(False)
        if config.cpu_linear and self.device.type == "cpu":  # before the copies, which keep the class
            use_cpu_linear(base)
        if config.padding_free:  # before the copies, which keep the attention implementation
            padding_free.enable(base)
        dp = self.data_parallel
        if dp.sharded:
            lms = {n: copy.deepcopy(base).requires_grad_(True) for n in names}
            _checkpoint_activations(config, *lms.values())
            for lm in lms.values():
                dp.shard(lm)
            dp.shard(base, frozen=True)  # the shared frozen reference
            return dict.fromkeys(names, base), lms
        if not config.lora:
            on_device = {self.device: base}  # one frozen reference per device
            for device in devices.values():
                on_device.setdefault(device, copy.deepcopy(base).to(device))
            lms = {n: copy.deepcopy(on_device[devices[n]]).requires_grad_(True) for n in names}
            _checkpoint_activations(config, *lms.values())
            references = {n: on_device[devices[n]] for n in names}
            return references, lms
        from peft import LoraConfig

        from agents.training.adapters import AdapterView, shared_lora_model

        lora = LoraConfig(
            r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
            target_modules=_target_modules(config.lora_target_modules), task_type="CAUSAL_LM",
        )  # fmt: skip
        _checkpoint_activations(config, base)
        shared = shared_lora_model(base, names, lora)
        return dict.fromkeys(names, AdapterView(shared, None)), {n: AdapterView(shared, n) for n in names}

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
        if dp.is_distributed:
            weights = {
                n: fingerprint(state["learners"][n]["model"] if "model" in state["learners"][n]
                               else _named_trainable(learner, gather=sharded))
                for n, learner in self.learners.items()
            }  # fmt: skip
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
            raise ValueError(
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
                mine = shard_state(mine, learner.state_dict(), _trainable_parameters(learner))
            learner.load_state_dict(mine)
        if state["episodes"] is not None:
            self.game.episodes = state["episodes"]
        raw = self.game.unwrapped
        raw.np_random = np.random.Generator(np.random.PCG64())
        raw.np_random.bit_generator.state = state["env_rng"]
        torch.set_rng_state(state["torch_rng"])

    # ------------------------------------------------------------------ loop
    def rollout(self) -> dict[str, tuple[Episode, dict[str, Any]]]:
        """Play one batched episode; return each learner's episode and final info."""
        self.game.reset(seed=self.data_parallel.seed(self.config.seed) if self.iteration == 0 else None)
        finals = {}
        with self.data_parallel.gathered(self.policies.values()):  # FSDP: whole weights while acting
            for agent in self.game.agent_iter():
                obs, reward, term, trunc, info = self.game.last()
                if term or trunc:
                    finals[agent] = (Episode.from_final_step(obs, info), info)
                    self.game.step(None)
                else:
                    self.game.step(self.learners[agent].act(agent, obs))
        return finals

    def run_iteration(self) -> tuple[dict[str, float], list[dict[str, Any]]]:
        start = time.perf_counter()
        finals = self.rollout()
        rollout_s = time.perf_counter() - start
        tokens = sum(int(np.sum(info["response_length"])) for _, info in finals.values())
        metrics: dict[str, float] = {}
        samples = []
        for name, (episode, info) in finals.items():
            with self._recomputing(name, info["role"]):
                stats = self.learners[name].learn(episode)
            metrics.update({f"{name}/{k}": v for k, v in stats.items()})
            metrics[f"{name}/role"] = ROLE_IDS[info["role"]]
            for b in range(min(self.config.samples_per_iteration, len(info["query"]))):
                samples.append(dict(learner=name, role=info["role"], query=info["query"][b],
                                    response=info["response"][b], task_reward=float(info["task_reward"][b]),
                                    reward=float(info["reward"][b])))  # fmt: skip
        dp = self.data_parallel
        if dp.is_distributed:  # every process's tokens, and its samples tagged with its index
            tokens = dp.sum({"tokens": tokens})["tokens"]
            samples = [s | {"process": i} for i, mine in enumerate(dp.gather_objects(samples)) for s in mine]
        metrics["tokens_per_s"] = tokens / rollout_s
        metrics["seconds"] = time.perf_counter() - start
        self.iteration += 1
        return metrics, samples

    @contextlib.contextmanager
    def _recomputing(self, name: str, role: str) -> Iterator[None]:
        """``--gradient-checkpointing-observer``: recompute activations while the observer learns
        (with ``--gradient-checkpointing`` they are recomputed in every update already)."""
        c = self.config
        if not (c.gradient_checkpointing_observer and role == "observer") or c.gradient_checkpointing:
            yield
            return
        layers = hugging_face_model(self.learners[name].model)  # under LoRA: the shared base
        _recompute_activations(layers, True)
        try:
            yield
        finally:
            _recompute_activations(layers, False)

    def train(self, progress: bool = True) -> Path:
        """Run (or resume) to ``config.iterations``; returns the output folder.

        In a data-parallel run every process calls this; only the main one writes files.
        """
        c, dp = self.config, self.data_parallel
        main = dp.is_main_process
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
        dp.wait_for_everyone()
        checkpoint = latest_checkpoint(self.out)
        if checkpoint is not None and not c.resume:
            if not c.overwrite:
                raise FileExistsError(
                    f"{self.out} already holds a run (checkpoint {checkpoint.name}): pass --resume to continue it, "
                    f"--overwrite to start over there, or choose another --out"
                )
            dp.wait_for_everyone()  # every process has looked before the main one deletes
            if main:
                shutil.rmtree(checkpoint.parent)
            checkpoint = None
        loaded = load_latest(self.out, trust=c.trust_checkpoint) if checkpoint is not None else None
        checkpoint = loaded[0] if loaded else None  # the newest intact one; every process loads the same file
        if loaded:
            state = loaded[1]
            check_resumable(state.get("config", {}), dataclasses.asdict(c), self.out)
            self.load_state_dict(state)
            if main:
                logger.info("resuming %s from %s: iteration %d of %d", self.out, checkpoint.name, self.iteration,
                            c.iterations)  # fmt: skip
        elif c.resume and main:
            logger.warning("--resume: no checkpoint in %s yet, so the run starts at iteration 0",
                           checkpoint_dir(self.out))  # fmt: skip
        records = MetricsLogger(self.out, resume=checkpoint is not None, report_to=c.report_to,
                                config=dataclasses.asdict(c)) if main else None  # fmt: skip
        if checkpoint is not None and records is not None:
            records.truncate(self.iteration - 1)
        if main:
            (self.out / "config.json").write_text(json.dumps(dataclasses.asdict(c), indent=2))
        bar = tqdm(total=c.iterations, initial=self.iteration, disable=not (progress and main), desc=c.algo, unit="it")
        self.stopped_by = ""
        stop = StopRequests(_announce_stop if main else None)  # Ctrl-C, SIGTERM: stop after the iteration
        with records if records is not None else contextlib.nullcontext(), stop:
            while self.iteration < c.iterations:
                it = self.iteration
                metrics, samples = self.run_iteration()
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
        if self.stopped_by and main:
            logger.warning("stopped by %s after iteration %d of %d, checkpoint saved: continue with --resume --out %s",
                           self.stopped_by, self.iteration, c.iterations, self.out)  # fmt: skip
        elif c.save_model and not self.stopped_by:
            self.save_model()
        dp.wait_for_everyone()
        return self.out

    def save_model(self, folder: str | Path | None = None) -> dict[str, Path]:
        """Write each learner's policy as a Hugging Face model to ``folder/<learner>`` (default
        ``--out/model``): :func:`agents.training.export.save_policies`. In a data-parallel run every process
        calls it (under FSDP it gathers the weights); only the main one writes. Returns the paths."""
        folder = self.out / MODEL_DIR if folder is None else Path(folder)
        dp = self.data_parallel
        return save_policies(self.policies, self.tokenizer, folder, sharded=dp.sharded, main=dp.is_main_process)


#: Settings a resumed run may change: how far it runs, what it writes, and how it computes the
#: same numbers (memory and speed switches). Any other change would not continue the same run.
RESUMABLE_CHANGES = frozenset({
    "iterations", "out", "resume", "overwrite", "checkpoint_every", "keep_checkpoints", "trust_checkpoint",
    "samples_per_iteration", "tensorboard", "report_to",
    "save_model", "retain_freed_memory", "cpu_linear", "padding_free", "gradient_checkpointing",
    "gradient_checkpointing_observer",
})  # fmt: skip


def changed_settings(saved: dict[str, Any], current: dict[str, Any], may_change: Iterable[str] = ()) -> str:
    """The settings (:class:`TrainConfig` fields) in which ``current`` differs from ``saved``, other
    than ``may_change``, written as flags: ``"--lr 0.01 -> 0.001, ..."``; empty if there are none.
    Settings one side does not know (written by another version) are not compared."""
    changed = sorted(k for k in (saved.keys() & current.keys()) - set(may_change) if saved[k] != current[k])
    return ", ".join(f"--{k.replace('_', '-')} {saved[k]!r} -> {current[k]!r}" for k in changed)


def check_resumable(saved: dict[str, Any], current: dict[str, Any], out: str | Path = "") -> None:
    """Raise a ValueError naming every setting (after presets and task defaults) in which a resumed
    run differs from the run that wrote its checkpoint, other than :data:`RESUMABLE_CHANGES`."""
    if diffs := changed_settings(saved, current, RESUMABLE_CHANGES):
        raise ValueError(
            f"--resume: the checkpoint in {out} was written by a run with other settings ({diffs}). Resume with "
            f"that run's settings ({Path(out) / 'config.json'}), or start a new run: another --out, or --overwrite"
        )


def _announce_stop(name: str) -> None:
    tqdm.write(f"{name}: finishing this iteration, then a checkpoint (again to stop at once)")


def resolve_device(spec: str) -> torch.device:
    """``--device``: ``auto`` (CUDA when torch sees a GPU, else the CPU), or a device this torch can
    use; anything else fails with a ValueError saying why."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise ValueError(f"--device {spec!r}: {exc} (give cpu, cuda, cuda:N or auto)") from exc
    _check_available(device, "--device")
    return device


def _emulated_bfloat16(devices: Iterable[torch.device]) -> str:
    """The first of ``devices`` without bfloat16 arithmetic (a CPU without AVX512-BF16 or AMX, a GPU
    before Ampere), described; empty if they all have it."""
    for d in devices:
        if d.type == "cpu" and not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
            return f"this CPU ({torch.backends.cpu.get_cpu_capability()})"
        if d.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
            return f"{torch.cuda.get_device_name(d)}"
    return ""


def _check_available(device: torch.device, flag: str) -> None:
    """A CUDA ``device`` that this torch cannot use fails here, naming ``flag`` and what torch sees."""
    if device.type != "cuda" or (torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()):
        return
    if torch.version.cuda is None:
        why = f"this PyTorch ({torch.__version__}) is a CPU build: install a CUDA build (pytorch.org/get-started)"
    else:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        why = f"torch sees {torch.cuda.device_count()} GPU(s) (CUDA_VISIBLE_DEVICES={visible})"
    raise ValueError(f"{flag}: {device} is not available: {why}; or run on the CPU")


def _checkpoint_activations(config: TrainConfig, *models: torch.nn.Module) -> None:
    """``--gradient-checkpointing``: recompute activations in the backward pass, in every update."""
    if config.gradient_checkpointing:
        for model in models:
            _recompute_activations(model, True)


def _recompute_activations(model: torch.nn.Module, on: bool) -> None:
    """Switch a Hugging Face model's decoder layers to recomputing their activations in the
    backward pass (non-reentrant), or back. Only active in training mode, so rollouts keep their KV cache."""
    if on:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.activation_checkpointing_disable()


def _check_group_size(batch_size: int, group_size: int, learner: str) -> None:
    if batch_size % group_size:
        raise ValueError(
            f"--batch-size {batch_size} must be a multiple of --group-size {group_size}: the {learner} learner "
            f"compares {group_size} responses per prompt, so each prompt fills {group_size} conversations"
        )


def _trainable_parameters(learner: Learner) -> list[torch.nn.Parameter]:
    """What a learner's optimizer updates (or, lacking one, its model's trainable weights)."""
    optimizer = getattr(learner, "optimizer", None)
    if optimizer is not None:
        return [p for group in optimizer.param_groups for p in group["params"]]
    return [p for p in learner.model.parameters() if p.requires_grad]


def _named_trainable(learner: Learner, gather: bool = False) -> dict[str, torch.Tensor]:
    """A learner's trainable weights by position (for a learner whose state has no ``"model"``);
    ``gather``: whole tensors of sharded ones (a collective)."""
    named = {str(i): p for i, p in enumerate(_trainable_parameters(learner))}
    return full_state(named) if gather else named


def _check_sharded(learners: dict[str, Learner]) -> None:
    """Under FSDP every trainable weight must be sharded (a learner shards what it adds to its policy)."""
    for name, learner in learners.items():
        plain = [p for p in _trainable_parameters(learner) if not is_sharded(p)]
        if plain:
            raise ValueError(
                f"learner {name!r} trains {len(plain)} parameter(s) that FSDP does not shard (shapes "
                f"{[tuple(p.shape) for p in plain[:3]]}): a learner must pass every module it adds to the policy "
                f"through data_parallel.shard(module) before building its optimizer (see agents/distributed/fsdp.py)"
            )


def _target_modules(spec: str) -> str | list[str]:
    return spec if spec == "all-linear" else [m.strip() for m in spec.split(",") if m.strip()]


def _postfix(metrics: dict[str, float]) -> dict[str, str]:
    shown = {}
    for key, value in sorted(metrics.items()):  # stable order: learners swap roles, not places
        learner, _, name = key.rpartition("/")
        if name in ("task_reward_mean", "kl"):
            shown[f"{learner}.{'R' if name.startswith('task') else 'KL'}"] = f"{value:.3f}"
    shown["tok/s"] = f"{metrics['tokens_per_s']:.0f}"
    return shown


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
