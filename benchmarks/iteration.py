"""Seconds and peak memory per training iteration: PPO against CORY, same batch.

Each configuration runs in fresh child processes (so peak RSS is its own): ``--rounds`` rounds,
each running every configuration once (a warm-up iteration, then ``--iterations`` measured
ones). Times are medians over the rounds, and ratios are taken round by round, so that the
machine's drift over minutes cancels (side by side in one run). The defaults are the
settings at which the CORY authors' code was measured on this kind of machine with the
embedded model: batch 8, mini-batch 8, 10 new tokens per response, 4 PPO epochs,
full-vocabulary KL. Its seconds and peak memory per iteration (``AUTHORS`` below) and this
script's results are in docs/benchmarks.md.

Targets: CORY costs at most 2.2x a PPO iteration; with shared-base LoRA, CORY's peak
memory is at most 1.3x PPO's; our CORY needs at most 40% of the authors' CORY time.

    python benchmarks/iteration.py                 # full fine-tuning and LoRA, PPO and CORY
    python benchmarks/iteration.py --bf16          # the same under bfloat16 autocast
    python benchmarks/iteration.py --no-lora --host-memory-ablation   # also CORY with freed memory
                                                   # returned to the OS (cory_agents.speed.host_memory)
    python benchmarks/iteration.py --no-lora --cpu-linear-ablation    # also CORY with plain nn.Linear
                                                   # layers (cory_agents.speed.cpu_linear)
    python benchmarks/iteration.py --no-lora --padding-free-ablation  # also CORY with padded passes
                                                   # (cory_agents.speed.padding_free off)
    python benchmarks/iteration.py --no-lora --scoring-reuse-ablation # also CORY with PPO's separate
                                                   # scoring pass (cory_agents.speed.scoring_reuse off)
    python benchmarks/iteration.py --no-lora --compile-comparison   # also CORY decoding with a static cache and
                                                   # a compiled step (--compile; compiled in the warm-up)
    python benchmarks/iteration.py --lora-only --gradient-checkpointing-observer   # CORY recomputes
                                                   # activations in the observer's update only
    python benchmarks/iteration.py --learner grpo --no-lora --padding-free-ablation   # GRPO learners
                                                   # (--group-size 4 responses per prompt); --task gsm8k
    python benchmarks/iteration.py --no-lora --chain-lengths 3,4   # also CORY chains of 3 and 4 agents
                                                   # (--num-agents; docs/teams.md)
    python benchmarks/iteration.py --no-lora --game-rounds 2   # also CORY playing 2 rounds (--rounds;
                                                   # docs/games.md): R rounds should cost at most R x one
    python benchmarks/iteration.py --no-lora --chat-rounds 2,4   # also CORY in chat form (--chat) over 1, 2 and
                                                   # 4 rounds, with the carried context and rendered afresh
                                                   # (--no-carried-context); --compile-comparison: compiled too
    python benchmarks/iteration.py --no-lora --padding-free-ablation --before cac7d4d   # every configuration
                                                   # also with the code of another commit, side by side
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

AUTHORS = {"ppo": (15.3, 3.7), "cory": (32.8, 6.0)}  # seconds per iteration, peak GB
#: --<flag>: also run CORY with these TrainConfig fields changed, under this name.
ABLATIONS = {
    "host_memory_ablation": ("cory, freed memory returned to the OS", {"retain_freed_memory": False}),
    "cpu_linear_ablation": ("cory, plain nn.Linear", {"cpu_linear": False}),
    "padding_free_ablation": ("cory, padded passes", {"padding_free": False}),
    "scoring_reuse_ablation": ("cory, separate scoring pass", {"reuse_scoring_pass": False}),
    "compile_comparison": ("cory, --compile", {"compile": True}),
}


def gemm_rate(device: str, bf16: bool, windows: int = 5, seconds: float = 0.3) -> float:
    """FLOP/s of this machine's matrix multiply at a training-sized shape (256 tokens through an
    MLP projection of the embedded model: 576 -> 1536), measured now, in this process: the best
    of a few short windows, since the floor is what the hardware can do when nothing interferes."""
    import torch

    dtype = torch.bfloat16 if bf16 else torch.float32
    a = torch.randn(256, 576, device=device, dtype=dtype)
    b = torch.randn(576, 1536, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(10):
        a @ b
    sync()
    best = 0.0
    for _ in range(windows):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(10):
                a @ b
            sync()
            n += 10
        best = max(best, n * 2 * 256 * 576 * 1536 / (time.perf_counter() - start))
    return best


def child(spec: dict) -> None:
    """Run inside a fresh process: build the trainer, time its iterations, count the FLOPs of
    one more, print JSON."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from cory_agents.training.config import TrainConfig
    from cory_agents.training.trainer import Trainer

    with tempfile.TemporaryDirectory() as out:
        config = TrainConfig(**spec["config"], out=out, report_to="none")
        trainer = Trainer(config)
        learn, updates = trainer.team.learn, []

        def timed_learn(*args, **kwargs):  # the update's share of an iteration; the rest is the rollout
            start = time.perf_counter()
            out = learn(*args, **kwargs)
            updates.append(time.perf_counter() - start)
            return out

        trainer.team.learn = timed_learn
        trainer.run_iteration()  # warm-up
        times, updates = [], []
        usage = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(spec["iterations"]):
            start = time.perf_counter()
            trainer.run_iteration()
            times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_SELF)
        n = spec["iterations"]
        faults, kernel_s = (after.ru_minflt - usage.ru_minflt) / n, (after.ru_stime - usage.ru_stime) / n
        if torch.cuda.is_available() and spec["config"].get("device") == "cuda":
            peak_gb = torch.cuda.max_memory_allocated() / 1024**3  # GPU memory is what limits there
        else:
            peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
        flops = None
        if spec["count_flops"]:  # untimed, after the peak was read (counting holds memory): one more iteration
            with FlopCounterMode(display=False) as counter:
                trainer.run_iteration()
            flops = counter.get_total_flops()
    rate = gemm_rate(config.device if config.device != "auto" else "cpu", config.bf16)
    print(
        "RESULT "
        + json.dumps(
            {
                "seconds": statistics.median(times),
                "times": times,
                "update_seconds": statistics.median(updates),
                "peak_gb": peak_gb,
                "page_faults": faults,
                "kernel_s": kernel_s,
                "flops": flops,
                "gemm_flops_per_s": rate,
            }
        )
    )


def run(name: str, config: dict, iterations: int, count_flops: bool, script: Path | str = __file__) -> dict:
    """One fresh child process of ``script`` (this one, or its copy in another commit's tree): a
    warm-up iteration, then ``iterations`` timed ones."""
    spec = json.dumps({"config": config, "iterations": iterations, "count_flops": count_flops})
    proc = subprocess.run(
        [sys.executable, str(script), "--child", spec], capture_output=True, text=True, env=None, check=False
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(line[len("RESULT ") :])
    print(
        f"  {name:40s} {result['seconds']:6.2f} s   peak {result['peak_gb']:5.2f} GB   matmul rate "
        f"{result['gemm_flops_per_s'] / 1e9:3.0f} GFLOP/s   {result['page_faults']:,.0f} page faults, "
        f"{result['kernel_s']:.1f} s in the kernel per iteration, {result['update_seconds']:.1f} s of it the update",
        flush=True,
    )
    return result


def combine(rounds: list[dict]) -> dict:
    """One configuration over the rounds: median seconds, every time, the highest peak, the FLOPs of round 1."""
    return {
        "seconds": statistics.median(r["seconds"] for r in rounds),
        "times": [t for r in rounds for t in r["times"]],
        "round_seconds": [r["seconds"] for r in rounds],
        "update_seconds": statistics.median(r["update_seconds"] for r in rounds),
        "peak_gb": max(r["peak_gb"] for r in rounds),
        "flops": rounds[0]["flops"],
        "gemm_flops_per_s": statistics.median(r["gemm_flops_per_s"] for r in rounds),
    }


def measure(configs: dict[str, dict], args: argparse.Namespace, before: Path | None) -> dict[str, dict]:
    """Round by round, every configuration once (and, with ``before``, next to it the same one with
    that commit's code, the two in turn first): the machine's speed drifts by several percent over
    minutes, and then drifts for all of them alike."""
    rounds: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", flush=True)
        for name, config in configs.items():
            pair = [(name, __file__), (f"{name} @{args.before}", before)] if before is not None else [(name, __file__)]
            for label, script in pair if r % 2 == 0 else pair[::-1]:  # which goes first alternates
                result = run(label, config, args.iterations, count_flops=r == 0, script=script)
                rounds.setdefault(label, []).append(result)
    return {name: combine(rs) for name, rs in rounds.items()}


def paired(results: dict[str, dict], a: str, b: str) -> str:
    """``a``'s time over ``b``'s, round by round (measured minutes apart, so the machine's drift cancels):
    the median and the range."""
    ratios = sorted(x / y for x, y in zip(results[a]["round_seconds"], results[b]["round_seconds"]))
    spread = f" (rounds {ratios[0]:.2f}-{ratios[-1]:.2f})" if len(ratios) > 1 else ""
    return f"{statistics.median(ratios):.2f}x{spread}"


@contextlib.contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """This script as it is at ``revision``, in a temporary git worktree (removed afterwards)."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), revision], check=True)
        if (tree / "agents").is_dir() and not (tree / "cory_agents").exists():
            # The folder agents/ installs as cory_agents (setup.py): importable from the tree, ahead of the
            # editable install of this checkout, only under that name.
            (tree / "cory_agents").symlink_to("agents")
        try:
            yield tree / "benchmarks" / "iteration.py"
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=8, help="conversations per iteration")
    p.add_argument("--mini-batch-size", type=int, default=8, help="conversations per gradient step")
    p.add_argument("--new-tokens", type=int, default=10, help="tokens per response (fixed)")
    p.add_argument("--ppo-epochs", type=int, default=4, help="PPO epochs")
    p.add_argument("--kl-estimator", default="full", help="KL estimator of the penalty")
    p.add_argument(
        "--learner",
        default="ppo",
        choices=("ppo", "grpo", "rloo"),
        help="each agent's learning algorithm (PPO and CORY alike)",
    )
    p.add_argument("--group-size", type=int, default=4, help="grpo/rloo: responses per prompt")
    p.add_argument(
        "--task",
        default="sentiment",
        choices=("sentiment", "gsm8k"),
        help="sentiment: Rotten Tomatoes prompts, VADER; gsm8k: the offline problems",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds; each runs every configuration once, in a fresh process (warm-up, then --iterations)",
    )
    p.add_argument("--iterations", type=int, default=1, help="measured iterations per configuration and round")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--no-lora", action="store_true", help="skip the LoRA configurations")
    p.add_argument("--lora-only", action="store_true", help="only the LoRA configurations")
    p.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in backward")
    p.add_argument(
        "--gradient-checkpointing-observer",
        action="store_true",
        help="CORY: recompute activations in the observer's update only (PPO runs without)",
    )
    p.add_argument(
        "--host-memory-ablation",
        action="store_true",
        help="also run CORY with glibc's default malloc (freed memory returned to the OS, page faults on reuse)",
    )
    p.add_argument(
        "--cpu-linear-ablation",
        action="store_true",
        help="also run CORY with plain nn.Linear layers (no cory_agents.speed.cpu_linear layouts)",
    )
    p.add_argument(
        "--padding-free-ablation",
        action="store_true",
        help="also run CORY with padded scoring and training passes (no cory_agents.speed.padding_free)",
    )
    p.add_argument(
        "--scoring-reuse-ablation",
        action="store_true",
        help="also run CORY with PPO's separate no-grad scoring pass (no cory_agents.speed.scoring_reuse)",
    )
    p.add_argument(
        "--compile-comparison",
        action="store_true",
        help="also run CORY with --compile (a static KV cache and a compiled decode step; compiled in the warm-up)",
    )
    p.add_argument(
        "--chain-lengths",
        default="",
        help="also run CORY chains of these lengths, comma-separated (--num-agents; 2 is plain CORY): e.g. 3,4",
    )
    p.add_argument(
        "--game-rounds",
        default="",
        help="also run CORY games of these numbers of rounds, comma-separated (--rounds; 1 is plain CORY): e.g. 2",
    )
    p.add_argument(
        "--chat-rounds",
        default="",
        help="also run CORY in chat form (--chat) for 1 round and these numbers of rounds, comma-separated, each with "
        "the carried context and rendered afresh (--no-carried-context); with --compile-comparison compiled too",
    )
    p.add_argument("--model", default="smollm2-135m", help="model name or path")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument(
        "--plot",
        default="",
        help="also write a PNG of the results here (seconds split into the matmul floor and the rest; peak memory)",
    )
    p.add_argument(
        "--before",
        default="",
        help="a git revision: also run every configuration with that commit's code, interleaved in the same "
        "rounds, and print each one's time now / then (a change's speed, side by side in one run)",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(json.loads(args.child))

    common = dict(
        batch_size=args.batch_size,
        mini_batch_size=args.mini_batch_size,
        ppo_epochs=args.ppo_epochs,
        min_new_tokens=args.new_tokens,
        max_new_tokens=args.new_tokens,
        kl_estimator=args.kl_estimator,
        bf16=args.bf16,
        gradient_checkpointing=args.gradient_checkpointing,
        checkpoint_every=10**6,
        model=args.model,
        device=args.device,
        learner=args.learner,
        group_size=args.group_size,
        task=args.task,
    )
    if args.task == "sentiment":
        common["prompt_source"] = "rotten_tomatoes"
    print(f"settings: {json.dumps(common)}")
    cory_only = {"cory": {"gradient_checkpointing_observer": True}} if args.gradient_checkpointing_observer else {}
    configs = {
        algo: dict(common, algo=algo, **cory_only.get(algo, {})) for algo in ("ppo", "cory") if not args.lora_only
    }
    ablations = [ABLATIONS[flag] for flag in ABLATIONS if getattr(args, flag) and not args.lora_only]
    configs |= {name: dict(common, algo="cory", **cory_only.get("cory", {}), **changes) for name, changes in ablations}
    chains = [int(n) for n in args.chain_lengths.split(",") if n.strip()]
    if any(n < 3 for n in chains):
        p.error("--chain-lengths: give chains of 3 or more agents (2 is plain CORY, always run)")
    if chains and args.lora_only:
        p.error("--chain-lengths compares full fine-tuning runs: drop --lora-only")
    configs |= {
        f"cory, {n} agents": dict(common, algo="cory", num_agents=n, **cory_only.get("cory", {})) for n in chains
    }
    game_rounds = [int(r) for r in args.game_rounds.split(",") if r.strip()]
    if any(r < 2 for r in game_rounds) or (game_rounds and args.lora_only):
        p.error("--game-rounds: give 2 or more rounds (1 is plain CORY, always run), without --lora-only")
    configs |= {
        f"cory, {r} rounds": dict(common, algo="cory", rounds=r, **cory_only.get("cory", {})) for r in game_rounds
    }
    chat_rounds = [int(r) for r in args.chat_rounds.split(",") if r.strip()]
    if any(r < 2 for r in chat_rounds) or (chat_rounds and args.lora_only):
        p.error(
            "--chat-rounds: give 2 or more rounds (1 round in chat form is always run with them), without --lora-only"
        )
    chat = dict(common, algo="cory", chat=True, **cory_only.get("cory", {}))
    compiled = [False, True] if args.compile_comparison else [False]
    for c in compiled if chat_rounds else ():
        configs[chat_name(1, False, c)] = dict(chat, compile=c)
        for r in chat_rounds:
            configs[chat_name(r, False, c)] = dict(chat, rounds=r, compile=c)
            configs[chat_name(r, True, c)] = dict(chat, rounds=r, compile=c, no_carried_context=True)
    if not args.no_lora:
        configs |= {f"{a}+lora": dict(common, algo=a, lora=True, **cory_only.get(a, {})) for a in ("ppo", "cory")}
    with checkout(args.before) if args.before else contextlib.nullcontext() as before:
        results = measure(configs, args, before)
    print()
    for name, res in results.items():
        floor = res["flops"] / res["gemm_flops_per_s"]
        print(
            f"{name:40s} {res['seconds']:6.2f} s/iteration ({', '.join(f'{t:.1f}' for t in res['times'])})   peak "
            f"{res['peak_gb']:5.2f} GB   {res['flops'] / 1e12:.2f} TFLOP of matmuls: {floor:.2f} s at the median "
            f"matmul rate ({res['gemm_flops_per_s'] / 1e9:.0f} GFLOP/s), {floor / res['seconds']:.0%} of the time"
        )

    t = {k: v["seconds"] for k, v in results.items()}
    m = {k: v["peak_gb"] for k, v in results.items()}
    print()
    if not args.lora_only:
        print(f"CORY / PPO time (full fine-tuning):        {paired(results, 'cory', 'ppo')}  (target <= 2.2x)")
        f = {k: v["flops"] for k, v in results.items()}
        print(
            f"CORY / PPO matmul FLOPs (the ratio of times on a machine that is compute-bound): "
            f"{f['cory'] / f['ppo']:.2f}x"
        )
        if at_authors_settings(args, p):
            rs = results["cory"]["round_seconds"]
            print(
                f"CORY vs the authors' CORY time:            {t['cory'] / AUTHORS['cory'][0]:.1%} (rounds "
                f"{min(rs) / AUTHORS['cory'][0]:.1%}-{max(rs) / AUTHORS['cory'][0]:.1%})  (target <= 40%: "
                f"{0.4 * AUTHORS['cory'][0]:.2f} s)"
            )  # one decimal: 40.3% must not read as 40%
            print(f"CORY peak memory vs the authors' 6.0 GB:   {m['cory']:.2f} GB")
            print(f"PPO vs the authors' PPO:                   {t['ppo']:.1f} s vs 15.3 s, {m['ppo']:.2f} GB vs 3.7 GB")
        else:
            print("(the authors' figures were measured at the default settings only: no comparison)")
    for name, _ in ablations:
        print(f"CORY / {name}: {paired(results, 'cory', name)} time, {m['cory'] / m[name]:.2f}x peak memory")
    for n in chains:
        name = f"cory, {n} agents"
        print(
            f"CORY of {n} / CORY of 2 agents:               {paired(results, name, 'cory')} time, "
            f"{m[name] / m['cory']:.2f}x peak memory; / PPO: {paired(results, name, 'ppo')} time, "
            f"{m[name] / m['ppo']:.2f}x peak memory"
        )
    for r in game_rounds:
        name = f"cory, {r} rounds"
        print(
            f"CORY of {r} rounds / CORY of 1:               {paired(results, name, 'cory')} time (target <= {r}x: a "
            f"round costs no more than a turn did), {m[name] / m['cory']:.2f}x peak memory"
        )
    for c in compiled if chat_rounds else ():
        for r in chat_rounds:
            carried, afresh, one = chat_name(r, False, c), chat_name(r, True, c), chat_name(1, False, c)
            print(
                f"{carried}: / afresh {paired(results, carried, afresh)} time; / 1 round {paired(results, carried, one)}"
                f" (afresh / 1 round {paired(results, afresh, one)}); peak {m[carried] / m[afresh]:.2f}x afresh's"
            )
            split = {
                n: (results[n]["seconds"] - results[n]["update_seconds"], results[n]["update_seconds"])
                for n in (carried, afresh, one)
            }
            print(
                "    rollout / update s: "
                + "; ".join(f"{n} {rollout:.1f} / {update:.1f}" for n, (rollout, update) in split.items())
            )
    if not args.no_lora:
        print(f"CORY / PPO time (LoRA shared base):        {paired(results, 'cory+lora', 'ppo+lora')}")
        print(f"CORY+LoRA peak / PPO+LoRA peak:            {m['cory+lora'] / m['ppo+lora']:.2f}x  (target <= 1.3x)")
        if "ppo" in m:
            print(f"CORY+LoRA peak / PPO (full) peak:          {m['cory+lora'] / m['ppo']:.2f}x")
    for name in configs if args.before else ():
        then = f"{name} @{args.before}"
        print(f"{name} now / {then}: {paired(results, name, then)} time, {m[name] / m[then]:.2f}x peak memory")
    if args.plot:
        plot(results, args.plot, authors=at_authors_settings(args, p))
        print(f"plot: {args.plot}")


def chat_name(rounds: int, afresh: bool, compiled: bool) -> str:
    """A chat-form configuration's name (``--chat-rounds``)."""
    return (
        "cory, chat"
        + (f", {rounds} rounds" if rounds > 1 else "")
        + (", afresh" if afresh else "")
        + (", --compile" if compiled else "")
    )


def at_authors_settings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> bool:
    """Whether this run used the settings at which the authors' code was measured: the defaults."""
    names = (
        "batch_size",
        "mini_batch_size",
        "new_tokens",
        "ppo_epochs",
        "kl_estimator",
        "model",
        "device",
        "bf16",
        "gradient_checkpointing",
        "gradient_checkpointing_observer",
        "learner",
        "task",
    )
    return all(getattr(args, n) == parser.get_default(n) for n in names)


def plot(results: dict[str, dict], path: str, authors: bool) -> None:
    """Seconds per iteration (the matmul floor, then the rest) and peak memory per configuration,
    after the authors' figures (gray) when the settings are theirs."""
    from matplotlib.figure import Figure

    ours = list(results.values())
    reference = [("authors' ppo", *AUTHORS["ppo"]), ("authors' cory", *AUTHORS["cory"])] if authors else []
    names = [r[0] for r in reference] + list(results)
    floor = [r["flops"] / r["gemm_flops_per_s"] for r in ours]
    seconds = [r["seconds"] for r in ours]
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    time_ax, mem_ax = fig.subplots(1, 2)
    ref_y, our_y = range(len(reference)), range(len(reference), len(names))
    time_ax.barh(ref_y, [r[1] for r in reference], color="tab:gray", label="the CORY authors' code")
    time_ax.barh(our_y, floor, color="tab:blue", label="our matmuls at this machine's matmul rate (floor)")
    time_ax.barh(
        our_y,
        [t - f for t, f in zip(seconds, floor)],
        left=floor,
        color="tab:orange",
        label="our everything else (measured - floor)",
    )
    mem_ax.barh(ref_y, [r[2] for r in reference], color="tab:gray")
    mem_ax.barh(our_y, [r["peak_gb"] for r in ours], color="tab:green")
    for ax, values, fmt in (
        (time_ax, [r[1] for r in reference] + seconds, "{:.1f}"),
        (mem_ax, [r[2] for r in reference] + [r["peak_gb"] for r in ours], "{:.2f}"),
    ):
        for i, v in enumerate(values):
            ax.text(v, i, " " + fmt.format(v), va="center", fontsize=8)
        ax.set_yticks(range(len(names)), names if ax is time_ax else [""] * len(names))
        ax.invert_yaxis()
        ax.margins(x=0.12)
    if authors:
        time_ax.axvline(
            0.4 * AUTHORS["cory"][0], color="k", linestyle="--", linewidth=1, label="target: 40% of the authors' CORY"
        )
    time_ax.set(xlabel="seconds per iteration", title="time")
    mem_ax.set(xlabel="peak memory (GB)", title="memory")
    time_ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=7, ncol=2)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
