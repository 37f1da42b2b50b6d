"""Training loop: CORY (two learners) or single-agent PPO, driven through the environment.

CORY plays ``RoleExchangeWrapper(CollectiveRewardWrapper(env))``: learners ``llm_0`` and
``llm_1`` are persistent objects, so a role exchange keeps each one's weights, optimizer
state, value head, KL controller and score statistics (the authors' code rebuilt its
trainers from disk every exchange, losing all but the weights). PPO plays the same
environment with the pioneer alone and its own task reward.

Each iteration: one batched episode (the rollout), then an update per learner. A learner
is built by the factory ``LEARNERS[config.learner]`` (``--learner ppo|grpo|rloo``); any
object with the :class:`~agents.learner.Learner` interface can be registered there.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from trl.trainer.utils import disable_dropout_in_model

from agents.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from agents.grpo import GRPOConfig, GRPOLearner
from agents.kl import ESTIMATORS
from agents.learner import Episode, Learner
from agents.metrics import MetricsLogger
from agents.plots import plot_run
from agents.ppo import PPOConfig, PPOLearner
from agents.value_model import CausalLMWithValueHead
from cory_env import CollectiveRewardWrapper, RoleExchangeWrapper, env
from cory_env.models import EMBEDDED_MODEL, load_causal_lm, load_tokenizer
from cory_env.prompts import PromptSource, repeat_each
from cory_env.rewards.base import RewardFunction
from cory_env.tasks.sentiment import sentiment_prompts

ALGOS = ("cory", "ppo")
ROLE_IDS = {"pioneer": 0, "observer": 1}

#: Builds one learner: ``factory(config, *, policy, reference, seed, sampling, device)``, where
#: ``policy`` is this learner's trainable causal LM (full copy or LoRA adapter view, on ``device``),
#: ``reference`` the frozen reference shared by all learners, ``sampling`` LMActor's keyword arguments.
LearnerFactory = Callable[..., Learner]


def ppo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device) -> PPOLearner:
    """PPO-LLM: the policy gets a value head (critic)."""
    return PPOLearner(CausalLMWithValueHead(policy).to(device), reference, config.ppo_config(), seed, sampling)


def grpo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device) -> GRPOLearner:
    """GRPO: group-normalised advantages, k3 KL term in the loss; no value head."""
    return GRPOLearner(policy, reference, config.grpo_config("grpo"), seed, sampling)


def rloo_learner(config: TrainConfig, *, policy, reference, seed, sampling, device) -> GRPOLearner:
    """RLOO: leave-one-out baseline, KL penalty in the reward; no value head."""
    return GRPOLearner(policy, reference, config.grpo_config("rloo"), seed, sampling)


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
    task: str = _f("sentiment", "task: sentiment (movie-review continuation)", choices=["sentiment"])
    model: str = _f(EMBEDDED_MODEL, "model name or path (Hub name, local folder, or the embedded smollm2-135m)")
    reward: str = _f("vader", "reward: vader, a Hub text-classification model (raw logit of its positive label), or package.module:function")
    review_source: str = _f("auto", "sentiment prompts: auto, imdb or rotten_tomatoes")
    iterations: int = _f(20, "training iterations (one batched episode each)")
    batch_size: int = _f(8, "conversations per iteration")
    mini_batch_size: int = _f(8, "conversations per gradient step")
    gradient_accumulation_steps: int = _f(1, "minibatches per optimizer step")
    ppo_epochs: int = _f(4, "passes over each batch (PPO epochs; grpo/rloo: num_iterations)")
    lr: float = _f(1.41e-5, "Adam learning rate")
    kl_coef: float = _f(0.3, "KL coefficient eta (initial value if adaptive); grpo: beta of the k3 loss term, rloo: of the summed KL in the reward")
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
    min_new_tokens: int = _f(4, "response length limit is sampled per batch from [min, max]")
    max_new_tokens: int = _f(15, "largest response length limit")
    temperature: float = _f(1.0, "sampling temperature")
    top_k: int = _f(0, "top-k sampling (0: off, the paper's setting)")
    top_p: float = _f(1.0, "nucleus sampling (1.0: off, the paper's setting)")
    context_length: int = _f(128, "observation width in tokens (prompt + response must fit)")
    seed: int = _f(0, "random seed (prompts, sampling, minibatches)")
    out: str = _f("runs/cory", "output folder: metrics.csv, samples.jsonl, plots, checkpoints")
    resume: bool = _f(False, "continue from the newest checkpoint in --out")
    overwrite: bool = _f(False, "start over in an --out that already holds a run (its checkpoints are deleted)")
    checkpoint_every: int = _f(10, "save a checkpoint every N iterations (and at the end)")
    samples_per_iteration: int = _f(4, "sample generations per learner written to samples.jsonl")
    tensorboard: bool = _f(True, "also log to TensorBoard in --out")
    lora: bool = _f(False, "train LoRA adapters on one shared frozen base (the reference is the base itself)")
    lora_r: int = _f(16, "LoRA rank")
    lora_alpha: int = _f(32, "LoRA alpha")
    lora_target_modules: str = _f("all-linear", "modules that get adapters: all-linear, or comma-separated names (e.g. q_proj,v_proj,lm_head)")
    bf16: bool = _f(False, "bfloat16 autocast for forward passes (float32 weights and optimizer)")
    gradient_checkpointing: bool = _f(False, "recompute activations in the backward pass: less memory, more time")
    load_in_4bit: bool = _f(False, "CUDA only, with --lora: load the base in 4 bits (bitsandbytes NF4), as the paper's GSM8K runs")
    device: str = _f("auto", "cpu, cuda, or auto")
    preset: str = _f("", "paper-imdb: the paper's IMDB settings (GPT2-Large, distilbert-imdb, batch 256, 100 iterations)", choices=["", "paper-imdb"])

    def ppo_config(self) -> PPOConfig:
        return PPOConfig(
            learning_rate=self.lr, mini_batch_size=self.mini_batch_size,
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


def resolve_reward(name: str, device: torch.device) -> RewardFunction:
    """``vader``, ``package.module:function``, or a Hub text-classification model name."""
    if name == "vader":
        from cory_env.rewards.sentiment import vader_sentiment

        return vader_sentiment
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot import reward {name!r}: {exc}. Use package.module:function") from exc
    return _classifier_reward(name, device)


def _classifier_reward(name: str, device: torch.device) -> RewardFunction:
    """Raw logit of the positive label of a text classifier (the paper's distilbert-imdb reward)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from cory_env.hub import hub_offline
    from cory_env.models import ModelNotAvailableError

    try:
        tok = AutoTokenizer.from_pretrained(name, local_files_only=hub_offline())
        clf = AutoModelForSequenceClassification.from_pretrained(name, local_files_only=hub_offline()).to(device).eval()
    except OSError as exc:
        raise ModelNotAvailableError(
            f"reward {name!r} is neither 'vader', a module:function, nor a loadable text-classification model "
            f"({exc}). Offline, use --reward vader (the embedded default)."
        ) from exc
    labels = {v.upper(): k for k, v in clf.config.id2label.items()}
    positive = labels.get("POSITIVE", labels.get("POS", max(clf.config.id2label)))

    @torch.no_grad()
    def classifier_reward(queries: list[str], responses: list[str], **_: Any) -> list[float]:
        enc = tok([q + r for q, r in zip(queries, responses)], return_tensors="pt", padding=True, truncation=True)
        return clf(**enc.to(device)).logits[:, positive].float().cpu().tolist()

    classifier_reward.__qualname__ = f"classifier_reward[{name}]"
    return classifier_reward


class Trainer:
    """Plays batched episodes and updates the learners; checkpoints and resumes exactly."""

    def __init__(
        self,
        config: TrainConfig,
        prompts: PromptSource | Sequence[str] | None = None,
        reward_fn: RewardFunction | None = None,
    ):
        """``prompts`` and ``reward_fn`` override the task's prompt source and ``config.reward``."""
        self.config = config = apply_preset(config)
        if config.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {config.algo!r}")
        if config.batch_size % config.mini_batch_size:
            raise ValueError(
                f"--batch-size {config.batch_size} must be a multiple of --mini-batch-size {config.mini_batch_size}"
            )
        if config.learner not in LEARNERS:
            raise ValueError(f"learner must be one of {sorted(LEARNERS)} (or registered in LEARNERS), got {config.learner!r}")
        if config.learner in ("grpo", "rloo"):  # bad values fail now, not after loading the models
            config.grpo_config(config.learner)
            _check_group_size(config.batch_size, config.group_size, config.learner)
        _seed_everything(config.seed)
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto" else config.device
        )
        self.out = Path(config.out)
        tokenizer = load_tokenizer(config.model)
        names = ["llm_0", "llm_1"] if config.algo == "cory" else ["pioneer"]
        reference, policies = self._build_models(config, names)
        sampling = dict(do_sample=True, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)
        self.learners: dict[str, Learner] = {}
        for i, name in enumerate(names):
            learner = LEARNERS[config.learner](
                config, policy=policies[name], reference=reference, seed=config.seed * 1000 + i, sampling=sampling,
                device=self.device,
            )  # fmt: skip
            if not isinstance(learner, Learner):
                raise TypeError(f"learner {config.learner!r} built a {type(learner).__name__}, which lacks act, learn, "
                                f"state_dict or load_state_dict (see agents.learner.Learner)")  # fmt: skip
            self.learners[name] = learner
        group_size = int(getattr(self.learners[names[0]], "group_size", 1))
        _check_group_size(config.batch_size, group_size, config.learner)
        if prompts is None:
            prompts = sentiment_prompts(tokenizer, source=config.review_source)
        if group_size > 1:  # each prompt group_size times in a row: groups of responses to compare
            prompts = repeat_each(prompts, group_size)

        base = env(
            tokenizer=tokenizer,
            prompts=prompts,
            reward_fn=reward_fn if reward_fn is not None else resolve_reward(config.reward, self.device),
            num_conversations=config.batch_size,
            max_new_tokens=(config.min_new_tokens, config.max_new_tokens),
            context_length=config.context_length,
            knowledge_transfer=not config.no_knowledge_transfer,
            with_observer=config.algo == "cory",
        )
        self.game = base
        if config.algo == "cory":
            period = None if config.no_role_exchange else config.role_exchange_period
            self.game = RoleExchangeWrapper(CollectiveRewardWrapper(base), period=period)
        self.iteration = 0

    def _build_models(
        self, config: TrainConfig, names: list[str]
    ) -> tuple[torch.nn.Module, dict[str, torch.nn.Module]]:
        """The frozen reference and one trainable causal LM per learner (its factory adds a value head if needed).

        Full fine-tuning copies the model per learner; ``--lora`` puts one adapter per
        learner on a single shared base whose adapter-free forward is the reference.
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
        if not config.lora:
            lms = {n: copy.deepcopy(base).requires_grad_(True) for n in names}
            if config.gradient_checkpointing:
                for lm in lms.values():
                    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            return base, lms
        from peft import LoraConfig

        from agents.adapters import AdapterView, shared_lora_model

        lora = LoraConfig(
            r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
            target_modules=_target_modules(config.lora_target_modules), task_type="CAUSAL_LM",
        )  # fmt: skip
        if config.gradient_checkpointing:  # only active in training mode, so rollouts keep their KV cache
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        shared = shared_lora_model(base, names, lora)
        return AdapterView(shared, None), {n: AdapterView(shared, n) for n in names}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "learners": {n: learner.state_dict() for n, learner in self.learners.items()},
            "episodes": getattr(self.game, "episodes", None),
            "env_rng": self.game.unwrapped.np_random.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "config": dataclasses.asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = state["iteration"]
        for name, learner in self.learners.items():
            learner.load_state_dict(state["learners"][name])
        if state["episodes"] is not None:
            self.game.episodes = state["episodes"]
        raw = self.game.unwrapped
        raw.np_random = np.random.Generator(np.random.PCG64())
        raw.np_random.bit_generator.state = state["env_rng"]
        torch.set_rng_state(state["torch_rng"])

    # ------------------------------------------------------------------ loop
    def rollout(self) -> dict[str, tuple[Episode, dict[str, Any]]]:
        """Play one batched episode; return each learner's episode and final info."""
        self.game.reset(seed=self.config.seed if self.iteration == 0 else None)
        finals = {}
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
            stats = self.learners[name].learn(episode)
            metrics.update({f"{name}/{k}": v for k, v in stats.items()})
            metrics[f"{name}/role"] = ROLE_IDS[info["role"]]
            for b in range(min(self.config.samples_per_iteration, len(info["query"]))):
                samples.append(dict(learner=name, role=info["role"], query=info["query"][b],
                                    response=info["response"][b], task_reward=float(info["task_reward"][b]),
                                    reward=float(info["reward"][b])))  # fmt: skip
        metrics["tokens_per_s"] = tokens / rollout_s
        metrics["seconds"] = time.perf_counter() - start
        self.iteration += 1
        return metrics, samples

    def train(self, progress: bool = True) -> Path:
        """Run (or resume) to ``config.iterations``; returns the output folder."""
        c = self.config
        self.out.mkdir(parents=True, exist_ok=True)
        checkpoint = latest_checkpoint(self.out)
        if checkpoint is not None and not c.resume:
            if not c.overwrite:
                raise FileExistsError(
                    f"{self.out} already holds a run (checkpoint {checkpoint.name}): pass --resume to continue it, "
                    f"--overwrite to start over there, or choose another --out"
                )
            shutil.rmtree(checkpoint.parent)
            checkpoint = None
        logger = MetricsLogger(self.out, tensorboard=c.tensorboard, resume=checkpoint is not None)
        if checkpoint is not None:
            self.load_state_dict(load_checkpoint(checkpoint))
            logger.truncate(self.iteration - 1)
        (self.out / "config.json").write_text(json.dumps(dataclasses.asdict(c), indent=2))
        bar = tqdm(total=c.iterations, initial=self.iteration, disable=not progress, desc=c.algo, unit="it")
        with logger:
            while self.iteration < c.iterations:
                it = self.iteration
                metrics, samples = self.run_iteration()
                logger.log(it, metrics)
                logger.log_samples(it, samples)
                bar.set_postfix(_postfix(metrics), refresh=False)
                bar.update(1)
                if self.iteration % c.checkpoint_every == 0 or self.iteration == c.iterations:
                    save_checkpoint(self.out, it, self.state_dict())
        bar.close()
        plot_run(self.out)
        return self.out


def _check_group_size(batch_size: int, group_size: int, learner: str) -> None:
    if batch_size % group_size:
        raise ValueError(
            f"--batch-size {batch_size} must be a multiple of --group-size {group_size}: the {learner} learner "
            f"compares {group_size} responses per prompt, so each prompt fills {group_size} conversations"
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
