"""Rollout throughput: environment + LMActor against ``model.generate``.

Both sides run in the same process, interleaved episode by episode (the machine is
shared and noisy), with the same model, batch, prompts, response length and sampling
(``do_sample=True, top_k=0, top_p=1.0, temperature=1.0``, the paper's setting):

* environment: one whole batched episode of ``cory_env.env`` (pioneer turn, then the
  observer turn) played by one :class:`cory_agents.acting.actor.LMActor` serving both agents.
  The timer covers everything a rollout pays: ``reset()`` (prompt sampling,
  tokenization), ``last()``/``observe``, every ``act()`` (one incremental forward per
  token step, KV cache per agent), ``step()``, the turn ends (decoding, the observer's
  prompt, the reward) and the final dead steps;
* generate: two ``model.generate`` calls, one on the pioneer's prompts and one on the
  observer's prompts *that the environment built in that episode* (its ``context``
  infos), each timed with its tokenization and the decoding of its responses.

The environment has no pioneer-only mode, so one full episode (two turns) is compared
with two generate calls: both produce ``2 * B * max_new_tokens`` new tokens from the
same prompts. Every response runs to exactly ``max_new_tokens`` on both sides: the
environment gets ``stop_token_ids=[]`` and generate an ``eos_token_id`` outside the
vocabulary (so it can never be sampled and the sampling distribution is the same as
the environment's, unlike ``min_new_tokens`` which masks EOS); both are checked.
The reward is the response length in characters, so reward time does not matter;
the decoding + reward cost per episode is measured and printed separately.

Throughput is new tokens per second; each side's figure is the median over rounds, the
ratio the median of the rounds' ratios. Target: environment / generate >= 0.9 at B=16.
Torch threads are left at the default. On a shared machine other processes' threads
slow torch's CPU kernels many times over (the threads of an OpenMP team wait for each
other), so the script prints how busy the other processes kept the CPUs during the
rounds and warns when they were: such a run's figures mean little.

    python benchmarks/rollout.py --batch-size 16 --max-new-tokens 15 --rounds 3

``--tiny``: where per-token overhead dominates. A 2-layer, 64-wide Llama over a 1024-token vocabulary
(random weights) decodes ``--max-new-tokens`` tokens after a 16-token prompt at batch 1, 8 and 64, by
four paths measured side by side, interleaved: the eager :class:`LMActor` (dynamic cache), the compiled
actor (``cache_length``: static cache and compiled step, ``--compile``), ``model.generate`` (dynamic
cache) and ``model.generate(cache_implementation="static")`` with its forward compiled. Each path's
decode time per step is (time for T tokens - time for 1 token) / (T - 1): the prefill cancels. It
prints decode tokens/s and the ratios the issue asks for (compiled actor / eager actor, compiled actor
/ static generate), each path's compile time, and the ATen operators one eager decode step dispatches
(counted with a ``TorchDispatchMode``: what a GPU would launch in eager mode) beside the kernels of the
compiled step.

    python benchmarks/rollout.py --tiny --max-new-tokens 32 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from cory_agents.acting.actor import LMActor
from cory_agents.speed.cpu_linear import use_cpu_linear
from cory_env import env
from cory_env.models import EMBEDDED_MODEL, load_causal_lm, load_tokenizer
from cory_env.tasks.sentiment import sentiment_prompts

SAMPLING = dict(do_sample=True, top_k=0, top_p=1.0, temperature=1.0)


def length_reward(queries, responses, **_):
    return [float(len(r)) for r in responses]


def env_episode(game, actor: LMActor, seed: int) -> tuple[float, float, int, list[str], list[str]]:
    """One timed episode: (seconds, seconds inside act(), new tokens, pioneer prompts, observer prompts)."""
    act_s, infos = 0.0, {}
    start = time.perf_counter()
    game.reset(seed=seed)
    for agent in game.agent_iter():
        obs, reward, term, trunc, info = game.last()
        if term:
            infos[agent] = info
            game.step(None)
        else:
            t0 = time.perf_counter()
            action = actor.act(agent, obs)
            act_s += time.perf_counter() - t0
            game.step(action)
    seconds = time.perf_counter() - start
    T = game.unwrapped.max_new_tokens
    lengths = np.concatenate([infos["pioneer"]["response_length"], infos["observer"]["response_length"]])
    if not np.all(lengths == T):
        raise AssertionError(f"environment responses are not all {T} tokens long: {lengths}")
    return seconds, act_s, int(lengths.sum()), infos["pioneer"]["context"], infos["observer"]["context"]


def generate_pair(model, tokenizer, prompt_sets: list[list[str]], max_new_tokens: int) -> tuple[float, int]:
    """Timed generate calls, one per prompt set: (seconds, new tokens)."""
    never = len(tokenizer) + 1000  # an EOS id the model cannot produce: rows never stop early
    device = next(model.parameters()).device
    tokens, start = 0, time.perf_counter()
    for texts in prompt_sets:
        enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left").to(device)
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            eos_token_id=never,
            pad_token_id=tokenizer.pad_token_id,
            **SAMPLING,
        )
        new = out[:, enc["input_ids"].shape[1] :]
        if new.shape != (len(texts), max_new_tokens):
            expected = (len(texts), max_new_tokens)
            raise AssertionError(f"generate produced {tuple(new.shape)} new tokens, expected {expected}")
        tokenizer.batch_decode(new.tolist(), skip_special_tokens=True)  # .tolist() waits for the device
        tokens += new.numel()
    return time.perf_counter() - start, tokens


def decode_and_reward_seconds(game, repeats: int = 20) -> float:
    """What the environment's two turn ends spend decoding responses and scoring them, per episode."""
    raw = game.unwrapped
    L, T = raw.context_length, raw.max_new_tokens
    # The last episode's response tokens, from the environment's buffers (a benchmark may peek).
    rows = [raw._turns[a].tokens[:, L : L + T] for a in ("pioneer", "observer")]
    start = time.perf_counter()
    for _ in range(repeats):
        for ids in rows:
            responses = raw.tokenizer.batch_decode(ids.tolist(), skip_special_tokens=True)
            length_reward(raw.queries, responses)
    return (time.perf_counter() - start) / repeats


def other_processes_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has been busy, minus this process's (Linux; else None)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    machine = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    own = os.times()
    return machine - (own.user + own.system)


# ------------------------------------------------------------------ --tiny: the overhead-bound regime
TINY_BATCHES = (1, 8, 64)
TINY_PROMPT = 16


def tiny_llama(seed: int = 0):
    """The overhead-bound model: 2 layers, 64 wide, vocabulary 1024, random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


def actor_decode(actor: LMActor, prompt: torch.Tensor, new_tokens: int) -> float:
    """Seconds for ``actor`` to answer ``prompt`` ``(B, P)`` with ``new_tokens`` tokens, as the environment feeds it
    (a prefill observation, then one new column per step)."""
    B, P = prompt.shape
    L = P + new_tokens
    ids = np.zeros((B, L), dtype=np.int64)
    mask = np.zeros((B, L), dtype=np.int64)
    ids[:, :P], mask[:, :P] = prompt.cpu().numpy(), 1
    start = time.perf_counter()
    for t in range(new_tokens):
        past, new = (0, P) if t == 0 else (P + t - 1, 1)
        width = past + new
        observation = {
            "input_ids": ids[:, :width],
            "attention_mask": mask[:, :width],
            "past_length": np.full(B, past),
            "num_new_tokens": np.full(B, new),
        }
        token = actor.act("pioneer", observation)
        ids[:, width], mask[:, width] = token, 1
    return time.perf_counter() - start


def generate_decode(model, prompt: torch.Tensor, new_tokens: int, static: bool) -> float:
    """Seconds for ``model.generate`` to answer ``prompt`` with ``new_tokens`` tokens (no early stop)."""
    from transformers import CompileConfig

    extra = {}
    if static:
        compile_config = CompileConfig(mode="reduce-overhead" if prompt.is_cuda else "default")
        compile_config._compile_all_devices = True  # on a CPU too
        extra = dict(cache_implementation="static", compile_config=compile_config)
    start = time.perf_counter()
    model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        eos_token_id=model.config.vocab_size + 7,  # never sampled: every row runs to new_tokens
        pad_token_id=0,
        **SAMPLING,
        **extra,
    )
    return time.perf_counter() - start


def dispatched_ops(fn) -> int:
    """ATen operators ``fn()`` dispatches (each one kernel launch in eager mode on a GPU)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


def synchronized(device: str):
    """A timer that waits for the device's queued work first (CUDA runs asynchronously)."""

    def now() -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    return now


def decode_paths(model, cache_length: int, bf16: bool = False, generate: bool = True) -> dict:
    """``--tiny``'s decode paths for one batch size: ``run(prompt, n)`` decodes ``n`` tokens after ``prompt``. The
    eager and the compiled actor (built here, it keeps its static cache of ``cache_length`` and its compiled step
    across calls); with ``generate``, ``model.generate`` with a dynamic and with a static cache."""
    compiled = LMActor(model, **SAMPLING, bf16=bf16, cache_length=cache_length)
    paths = {
        "eager actor": lambda prompt, n: actor_decode(LMActor(model, **SAMPLING, bf16=bf16), prompt, n),
        "compiled actor": lambda prompt, n: actor_decode(compiled, prompt, n),
    }
    if generate:
        paths["generate"] = lambda prompt, n: generate_decode(model, prompt, n, static=False)
        paths["generate static+compiled"] = lambda prompt, n: generate_decode(model, prompt, n, static=True)
    return paths


def decode_rates(paths: dict, prompt: torch.Tensor, new_tokens: int, rounds: int, now=time.perf_counter):
    """Each path's decode tokens/s in each round, ``B / ((time for new_tokens - time for 1) / (new_tokens - 1))``
    (the prefill cancels), the paths interleaved so that the machine's drifts touch every path alike; and each
    path's first call in seconds (compiles, allocations), made before the rounds. ``now``: a clock that waits for
    the device's queued work (CUDA runs asynchronously)."""
    B = prompt.shape[0]
    first: dict[str, float] = {}
    for name, run in paths.items():
        start = now()
        run(prompt, new_tokens)
        first[name] = now() - start
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, run in paths.items():
            start = now()
            run(prompt, new_tokens)
            full = now() - start
            start = now()
            run(prompt, 1)
            rates[name].append(B * (new_tokens - 1) / (full - (now() - start)))
    return rates, first


def decode_ratios(rates: dict[str, list[float]]) -> dict[str, float]:
    """The compiled actor's rate over the eager actor's and (where measured) over the static generate's, each the
    median of the rounds' ratios."""
    against = {"compiled/eager": "eager actor", "compiled/static_generate": "generate static+compiled"}
    return {
        ratio: statistics.median(c / o for c, o in zip(rates["compiled actor"], rates[other]))
        for ratio, other in against.items()
        if other in rates
    }


def tiny_main(args: argparse.Namespace) -> None:
    """``--tiny``: the four decode paths side by side at each batch size (module docstring)."""
    import torch._inductor.metrics as inductor_metrics

    T = args.max_new_tokens
    model = tiny_llama(args.seed)
    print(f"tiny Llama (2 layers, 64 wide, vocabulary 1024), prompt {TINY_PROMPT}, {T} new tokens, "
          f"torch threads={torch.get_num_threads()}, {args.rounds} rounds; decode tokens/s (prefill excluded)")  # fmt: skip
    for B in TINY_BATCHES:
        prompt = torch.randint(3, 1024, (B, TINY_PROMPT), generator=torch.Generator().manual_seed(B))
        rates, first = decode_rates(decode_paths(model, TINY_PROMPT + T), prompt, T, args.rounds)
        print(f"\nB={B}")
        for name, per_round in rates.items():
            rate = statistics.median(per_round)
            print(f"  {name:26s} {rate:10.0f} tokens/s   {B / rate * 1e3:7.2f} ms/step   "
                  f"first call {first[name]:6.1f} s")  # fmt: skip
        ratios = decode_ratios(rates)
        print(f"  compiled actor / eager actor: {ratios['compiled/eager']:.2f}x (target >= 3);  "
              f"compiled actor / static+compiled generate: {ratios['compiled/static_generate']:.2f}x (target >= 1.0)")  # fmt: skip
    # Operators per decode step, at B=8: the eager actor's dispatched ATen ops against the compiled step's kernels.
    prompt = torch.randint(3, 1024, (8, TINY_PROMPT), generator=torch.Generator().manual_seed(0))
    step = {
        "input_ids": np.concatenate([prompt.numpy(), np.full((8, 1), 5)], axis=1),
        "attention_mask": np.ones((8, TINY_PROMPT + 1), dtype=np.int64),
        "past_length": np.full(8, TINY_PROMPT),
        "num_new_tokens": np.full(8, 1),
    }
    eager = LMActor(model, **SAMPLING)
    actor_decode(eager, prompt, 1)  # the prefill: the cache holds the prompt
    eager_ops = dispatched_ops(lambda: eager.next_token_logits("pioneer", step))
    inductor_metrics.reset()
    torch._dynamo.reset()
    actor_decode(LMActor(model, **SAMPLING, cache_length=TINY_PROMPT + 2), prompt, 2)  # compiles the step afresh
    print(
        f"\noperators per decode step (B=8): eager {eager_ops} ATen operators dispatched; compiled step: "
        f"{inductor_metrics.generated_kernel_count} kernels generated (besides its extern matmul calls); on a GPU "
        f"with mode='reduce-overhead', one CUDA graph replay"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=16, help="conversations in lockstep (B); generate batch size")
    p.add_argument("--max-new-tokens", type=int, default=15, help="tokens per response (every response runs to it)")
    p.add_argument("--rounds", type=int, default=3, help="measurement rounds; the median round is reported")
    p.add_argument("--episodes", type=int, default=4, help="episodes (and generate pairs) per round, interleaved")
    p.add_argument("--model", default=EMBEDDED_MODEL, help="model name or path (default: the embedded SmolLM2-135M)")
    p.add_argument("--seed", type=int, default=0, help="seed for prompts and sampling")
    p.add_argument("--device", default="cpu", help="torch device of the model (e.g. cuda)")
    p.add_argument("--tiny", action="store_true", help="the overhead-bound regime: four decode paths, a tiny model")
    p.add_argument("--compile", action="store_true", help="also the environment with the compiled actor (--compile)")
    args = p.parse_args()
    if args.tiny:
        return tiny_main(args)

    torch.manual_seed(args.seed)
    tokenizer = load_tokenizer(args.model)
    model = load_causal_lm(args.model, device=args.device).eval()
    if args.device == "cpu":
        use_cpu_linear(model)  # as the Trainer does on a CPU: both sides below run the same layers
    game = env(
        tokenizer=tokenizer,
        prompts=sentiment_prompts(tokenizer, source="rotten_tomatoes"),
        reward_fn=length_reward,
        num_conversations=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        stop_token_ids=[],  # every turn runs to max_new_tokens, as generate does below
    )
    actor = LMActor(model, **SAMPLING)
    # --compile: the same episodes with a static cache and a compiled decode step too (compiled in the warm-up).
    compiled = (
        LMActor(model, **SAMPLING, cache_length=game.unwrapped.context_length, max_new_tokens=args.max_new_tokens)
        if args.compile
        else None
    )

    # Warm up both paths (allocator, lazy imports, first-call compilation of kernels).
    _, _, _, pio, obs = env_episode(game, actor, seed=args.seed)
    generate_pair(model, tokenizer, [pio, obs], args.max_new_tokens)
    if compiled is not None:
        env_episode(game, compiled, seed=args.seed)
    compiled_rates = []

    env_rates, gen_rates, outside = [], [], []
    busy_before, wall_before = other_processes_cpu_seconds(), time.perf_counter()
    episode, steps_per_episode = 1, 2 * args.max_new_tokens
    for r in range(args.rounds):
        env_s = act_s = gen_s = compiled_s = 0.0
        env_tokens = gen_tokens = 0
        for _ in range(args.episodes):
            if compiled is not None:  # the same episode, compiled: same seed, same prompts
                compiled_s += env_episode(game, compiled, seed=args.seed + episode)[0]
            s, a, n, pio, obs = env_episode(game, actor, seed=args.seed + episode)
            env_s, act_s, env_tokens = env_s + s, act_s + a, env_tokens + n
            s, n = generate_pair(model, tokenizer, [pio, obs], args.max_new_tokens)
            gen_s, gen_tokens = gen_s + s, gen_tokens + n
            episode += 1
        env_rates.append(env_tokens / env_s)
        gen_rates.append(gen_tokens / gen_s)
        if compiled is not None:
            compiled_rates.append(env_tokens / compiled_s)
        outside.append((env_s - act_s) / (args.episodes * steps_per_episode))
        print(
            f"round {r}: env {env_rates[-1]:8.1f} tok/s   generate {gen_rates[-1]:8.1f} tok/s   "
            f"ratio {env_rates[-1] / gen_rates[-1]:.3f}"
        )

    env_rate, gen_rate = statistics.median(env_rates), statistics.median(gen_rates)
    # Paired: each round's two rates were measured side by side, so their ratio cancels
    # slow drifts in the machine's speed better than a ratio of the two medians.
    ratio = statistics.median(e / g for e, g in zip(env_rates, gen_rates))
    per_episode = 2 * args.batch_size * args.max_new_tokens
    print(
        f"\nmodel={args.model}, device={args.device}, B={args.batch_size}, max_new_tokens={args.max_new_tokens}, "
        f"torch threads={torch.get_num_threads()}, {args.rounds} rounds x {args.episodes} episodes"
    )
    print(f"environment + LMActor: {env_rate:8.1f} new tokens/s  ({per_episode} per episode: 2 turns)")
    print(f"model.generate (x2):   {gen_rate:8.1f} new tokens/s")
    print(
        f"ratio env / generate:  {ratio:.3f}  (median of the rounds' ratios; target >= 0.9: "
        f"{'met' if ratio >= 0.9 else 'NOT met'})"
    )
    print(
        f"outside act():         {statistics.median(outside) * 1e6:.0f} us per token step "
        f"(environment, reset and turn ends, amortised)"
    )
    if compiled_rates:
        paired = statistics.median(c / e for c, e in zip(compiled_rates, env_rates))
        print(
            f"environment + compiled LMActor (--compile): {statistics.median(compiled_rates):8.1f} new tokens/s; "
            f"compiled / eager {paired:.3f} (median of the rounds' ratios; target >= 1.0)"
        )
    print(f"decode + reward:       {decode_and_reward_seconds(game) * 1e3:.2f} ms per episode (both turns)")
    busy_after, wall = other_processes_cpu_seconds(), time.perf_counter() - wall_before
    if busy_before is not None and busy_after is not None:
        others = (busy_after - busy_before) / wall
        print(f"other processes:       {others:.2f} CPUs busy on average during the rounds ({os.cpu_count()} CPUs)")
        if others > 0.1:
            print("warning: other processes were running; their threads slow torch's CPU kernels many times over")


if __name__ == "__main__":
    main()
