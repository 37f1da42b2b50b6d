"""The command line's sections: one dataclass per kind of setting, each field a flag of ``cory-train``.

:class:`TaskConfig`, :class:`ModelConfig`, :class:`GameConfig`, :class:`GenerationConfig`,
:class:`OutputConfig` and :class:`SpeedConfig`, with the learners' own configs
(:class:`~cory_agents.learners.lm.LMLearnerConfig` and its subclasses) between the game and the
generation, make up :class:`~cory_agents.training.config.TrainConfig`. A field's help text is what
``--help`` prints and docs/cli.md shows; its default is the one default of that setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from cory_agents.learners.lm import flag
from cory_agents.training.registry import LearnerNames
from cory_env.errors import UsageError
from cory_env.models import EMBEDDED_MODEL
from cory_env.tasks import TASKS

ALGOS = ("cory", "ppo")


@dataclass(kw_only=True)
class TaskConfig:
    """The prompts, the templates and the reward."""

    _argument_group_name: ClassVar[str] = "Task: the prompts, the templates and the reward"

    task: str = flag(
        "sentiment",
        "task: sentiment (movie-review continuation), gsm8k (grade-school math) or signal (a signalling game of two)",
        choices=sorted(TASKS),
    )
    task_file: str = flag(
        "", "your own prompts: a .jsonl or .csv file, one row per prompt (--task still gives templates and reward)"
    )
    query_field: str = flag(
        "query", "--task-file column holding the query; the other columns go to the reward as metadata"
    )
    prompt_source: str = flag(
        "auto",
        "where the task's prompts come from: auto, or sentiment: imdb, rotten_tomatoes; gsm8k: gsm8k, gsm_symbolic",
    )
    chat: bool = flag(
        False,
        "play the task in chat form: each agent sees the conversation (its system message, the others' turns as "
        "user messages, its own as assistant messages) through its model's chat template; default: the raw form's "
        "string prompts, as TRL applies a chat template only to conversational data (a --task-file of messages is "
        "played in chat form without this flag)",
    )
    pioneer_template: str = flag("", "pioneer prompt, a format string with {query} (empty: the task's)")
    observer_template: str = flag(
        "",
        "observer prompt, a format string with {query} and {response} (empty: the task's); in a chain of --num-agents N > 2, every later agent's, {response} the previous answer",
    )
    templates: str = flag(
        "",
        "a chain's templates, one per agent, as a JSON list (e.g. '[\"{query}\", \"{query}{response}\", \"{query}{responses}\"]': {response_k} is agent k's answer, {responses} all earlier ones); with --rounds R an agent's entry may be a list of R templates ({response_k_j}: agent k's answer in round j, {round}); overrides --pioneer-template and --observer-template",
    )
    reward: str = flag(
        "",
        "reward (empty: the task's: vader, gsm8k): a registered name, package.module:function, or a Hub text-classification model (raw logit of its positive label)",
    )
    num_secrets: int = flag(4, "signal: the number of secret words K (2-8; chance is 1/K)")
    secret_words: str = flag("colours", "signal: the kind of secret words", choices=["colours", "animals"])
    taboo_choices: int = flag(
        4, "taboo: words the guesser chooses from (the secret and K-1 others of the list; 0: any word, no list)"
    )
    reward_timeout: float | None = flag(
        None,
        "seconds one reward call may take before the run stops with an error naming the reward (default: 300, or no limit for a reward function with the attribute slow = True); 0: no limit",
    )


@dataclass(kw_only=True)
class ModelConfig:
    """What is fine-tuned, and where."""

    _argument_group_name: ClassVar[str] = "Model: what is fine-tuned, and where"

    model: str = flag(
        EMBEDDED_MODEL,
        "model name or path (Hub name, local folder, the embedded smollm2-135m, or tiny: random weights that learn nothing, for smoke runs)",
    )
    models: str = flag(
        "",
        "a team of different models: one per agent, comma-separated, llm_0 first (e.g. smollm2-135m,gpt2-large); each has its own tokenizer and frozen reference (empty: --model for every agent)",
    )
    lora: bool = flag(False, "train LoRA adapters on one shared frozen base (the reference is the base itself)")
    lora_r: int = flag(16, "LoRA rank")
    lora_alpha: int = flag(32, "LoRA alpha")
    lora_target_modules: str = flag(
        "all-linear", "modules that get adapters: all-linear, or comma-separated names (e.g. q_proj,v_proj,lm_head)"
    )
    load_in_4bit: bool = flag(
        False, "CUDA only, with --lora: load the base in 4 bits (bitsandbytes NF4), as the paper's GSM8K runs"
    )
    device: str = flag("auto", "cpu, cuda, or auto (under accelerate launch: each process's own device)")
    learner_devices: str = flag(
        "",
        "one device per learner, comma-separated (e.g. cuda:0,cuda:1: llm_0 and llm_1, each with its own reference copy); single process, full fine-tuning",
    )


@dataclass(kw_only=True)
class GameConfig:
    """The game the learners play: CORY's chain or PPO's pioneer alone, its size and its schedule."""

    _argument_group_name: ClassVar[str] = "Game: CORY or PPO, the agents and the schedule"

    algo: str = flag(
        "cory",
        "cory: a chain of learners (two, or --num-agents), collective reward, role exchange; ppo: single-agent baseline",
        choices=list(ALGOS),
    )
    num_agents: int | None = flag(
        None,
        "CORY: agents in the chain (default 2, the paper's pioneer and observer; or the length of --models); each is a learner, llm_0 ... llm_{N-1}, and they rotate through the positions every --role-exchange-period iterations",
    )
    learner: str = flag(
        "ppo",
        "learning algorithm: ppo (value head, GAE); grpo or rloo (critic-free, --group-size responses per prompt), "
        "each agent alone; happo (sequential PPO updates), mappo (a centralised critic) or difference (difference "
        "rewards), the team at once; or a learner an installed package declares (entry points cory_env.learners)",
        choices=LearnerNames(),
    )
    iterations: int = flag(45, "training iterations (one batched episode each; at least 1)")
    batch_size: int = flag(32, "conversations per iteration")
    rounds: int = flag(
        1,
        "times the chain plays in an episode (1: once, as CORY); in later rounds each agent reads the turns before it",
    )
    turn_rewards: bool = flag(
        False,
        "score every turn and reward it at its end (CORY: each round's collective reward at the round's end); default: each agent's turns summed, at the episode's end",
    )
    role_exchange_period: int = flag(5, "iterations between role exchanges (CORY's T_REx)")
    no_role_exchange: bool = flag(False, "ablation: never exchange roles")
    no_knowledge_transfer: bool = flag(False, "ablation: the observer sees only the query")
    no_carried_context: bool = flag(
        False,
        "ablation, chat form: render and prefill every turn afresh (an agent's later turns do not carry its "
        "earlier ones' tokens and KV cache)",
    )
    seed: int = flag(0, "random seed (prompts, sampling, minibatches)")
    preset: str = flag(
        "",
        "paper-imdb: the paper's IMDB settings (GPT2-Large, distilbert-imdb, batch 256, 100 iterations)",
        choices=["", "paper-imdb"],
    )


@dataclass(kw_only=True)
class GenerationConfig:
    """How the answers are sampled."""

    _argument_group_name: ClassVar[str] = "Generation: how the answers are sampled"

    min_new_tokens: int = flag(
        0, "response length limit is sampled per batch from [min, max] (0: the task's: sentiment 12, gsm8k 128)"
    )
    max_new_tokens: int = flag(0, "largest response length limit (0: the task's: sentiment 12, gsm8k 256)")
    temperature: float = flag(1.0, "sampling temperature")
    top_k: int = flag(0, "top-k sampling (0: off, the paper's setting)")
    top_p: float = flag(1.0, "nucleus sampling (1.0: off, the paper's setting)")
    context_length: int = flag(
        0, "observation width in tokens, prompt + response must fit (0: the task's: sentiment 128, gsm8k 1024)"
    )


@dataclass(kw_only=True)
class OutputConfig:
    """Files, trackers, checkpoints."""

    _argument_group_name: ClassVar[str] = "Output: files, trackers, checkpoints"

    out: str = flag("runs/cory", "output folder: metrics.csv, samples.jsonl, plots, checkpoints")
    resume: bool = flag(False, "continue from the newest checkpoint in --out")
    overwrite: bool = flag(False, "start over in an --out that already holds a run (its checkpoints are deleted)")
    checkpoint_every: int = flag(10, "save a checkpoint every N iterations (and at the end)")
    keep_checkpoints: int = flag(1, "newest checkpoints kept; with 2, --resume can fall back if the newest is damaged")
    trust_checkpoint: bool = flag(False, "--resume may load an old pickle checkpoint (iter_NNNNNN.pt): your own only")
    samples_per_iteration: int = flag(4, "sample generations per learner written to samples.jsonl")
    report_to: str = flag(
        "tensorboard",
        "experiment trackers, as TRL's --report_to (accelerate's): tensorboard (in --out), "
        "wandb, mlflow, trackio, ..., comma-separated; all or none. metrics.csv is written anyway",
    )
    save_model: bool = flag(
        True,
        "at the end, write each learner's policy as a Hugging Face model to --out/model/<learner> (with --lora: its PEFT adapter), tokenizer included",
    )


@dataclass(kw_only=True)
class SpeedConfig:
    """The same numbers, computed faster or in less memory."""

    _argument_group_name: ClassVar[str] = "Speed and memory: the same numbers, computed faster or in less memory"

    gradient_checkpointing: bool = flag(False, "recompute activations in the backward pass: less memory, more time")
    gradient_checkpointing_observer: bool = flag(
        False,
        "CORY: recompute activations only in the observer's update, whose context (query twice + the pioneer's response) is the widest: most of --gradient-checkpointing's memory saving for less of its time",
    )
    retain_freed_memory: bool = flag(
        True,
        "CPU runs on Linux: keep freed memory in the process for reuse instead of returning it to the OS (no page faults on every large tensor; same peak memory; cory_agents.speed.host_memory, figures in docs/benchmarks.md)",
    )
    cpu_linear: bool = flag(
        True,
        "CPU runs in float32: linear layers take the matrix-multiply layout the CPU runs fastest when a decode step multiplies a few rows, and give a frozen LM head a contiguous input (cory_agents.speed.cpu_linear, figures in docs/benchmarks.md)",
    )
    padding_free: bool = flag(
        True,
        "prompt prefills, scoring and training passes run each batch's real tokens as one row, without the padding of its shorter contexts, and the tokens a context starts with in common with an earlier one (a prompt template's head, a GRPO group's prompt) once (as TRL's padding_free; sdpa attention, per context; cory_agents.speed.padding_free)",
    )
    reuse_scoring_pass: bool = flag(
        True,
        "PPO with one minibatch per epoch (--mini-batch-size = --batch-size): epoch 0's training forward pass doubles as the scoring pass of the old log-probs and values, one forward pass fewer per update (cory_agents.speed.scoring_reuse)",
    )
    compile: bool = flag(
        False,
        "decode each turn with a static KV cache of --context-length tokens and a torch.compile'd one-token step (CUDA graphs on a GPU), compiled once per model at the first turn: the same tokens, fewer launches per token (cory_agents.acting.static_decode; docs/benchmarks.md has the measurements behind the default)",
    )


#: The numbers a value of which the run would take and then fail on, deep inside (the optimizer, the
#: sampler, peft) or train nothing with: (field, lowest value, whether the lowest is allowed, what it means).
NUMBER_RANGES: tuple[tuple[str, float, bool, str], ...] = (
    ("lr", 0.0, True, "the AdamW learning rate, e.g. 3e-5"),
    ("weight_decay", 0.0, True, "AdamW's weight decay, 0: none"),
    ("kl_coef", 0.0, True, "the KL penalty's coefficient, 0: no penalty; a negative one would reward drifting away"),
    ("temperature", 0.0, False, "the sampling temperature, 1.0: the model's own distribution"),
    ("top_k", 0, True, "0: off"),
    ("samples_per_iteration", 0, True, "sample generations written per learner, 0: none"),
    ("lora_r", 1, True, "the LoRA rank"),
    ("lora_alpha", 0, False, "LoRA's scale: the adapters' output is multiplied by lora_alpha / lora_r"),
    ("rounds", 1, True, "the times the chain plays in an episode, 1: once"),
)


def check_numbers(config: Any) -> None:
    """Each number of :data:`NUMBER_RANGES` (and ``--top-p``) finite and in its range, else a UsageError naming the
    flag, the range and what the value means."""
    for name, lowest, allowed, meaning in NUMBER_RANGES:
        value = getattr(config, name)
        if not math.isfinite(value) or value < lowest or (value == lowest and not allowed):
            bound = f"{'at least' if allowed else 'above'} {lowest:g}"
            raise UsageError(f"--{name.replace('_', '-')} must be a number {bound} ({meaning}), got {value}")
    if not (math.isfinite(config.top_p) and 0 < config.top_p <= 1):
        raise UsageError(f"--top-p must be above 0 and at most 1 (nucleus sampling, 1.0: off), got {config.top_p}")
