"""Every family users bring trains correctly: the model matrix of docs/supported-models.md.

Each family's tiny random model (tests/support/model_zoo.py; sliding windows of 8 tokens, the real
checkpoints' dropouts) through a padded batch against each context alone, PPO and CORY iterations with the
defaults and against padded passes, LoRA, and the static-cache decode against the eager actor; the real
checkpoints' configs on the meta device for the choices the package makes; and the page, which must be what
:func:`tests.support.supported_models.render` writes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from cory_agents.acting.actor import LMActor
from cory_agents.learners.dropout import has_dropout
from cory_agents.speed import attention_kinds, padding_free
from cory_agents.training.trainer import Trainer
from cory_env.models import load_causal_lm, load_tokenizer
from tests.support.model_zoo import FAMILIES, SLIDING, WINDOW, published_config, save_tiny
from tests.support.runs import toy_config
from tests.support.supported_models import PAGE, padded_batch_error, prepared, render
from tests.support.transcripts import CONTEXT, play

#: The families whose passes stay padded, and why (the probe's or the attention implementation's verdict).
PADDED = {"gemma2": "attention implementation is 'eager'", "falcon": "does not receive the packed batch"}

#: Prompts in GPT-2's vocabulary whose CORY observer contexts run past the windows of 8 tokens.
PROMPTS = [
    "the movie was good and the plot was great and the acting was very good",
    "the plot is not very good",
    "acting is very fine and the film is ok",
]


def length_reward(queries, responses, **_):
    return [len(r) / 40 for r in responses]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, gpt2_tokenizer):
    """``zoo(family)``: a folder with the family's tiny model and GPT-2's BPE tokenizer (saved once per module).
    GPT-2's tokenizer loads right whatever tokenizer class transformers maps a family to (the toy word
    tokenizer comes back empty as Qwen2's)."""
    root, saved = tmp_path_factory.mktemp("zoo"), {}

    def folder(family: str) -> Path:
        if family not in saved:
            saved[family] = save_tiny(family, root / family, gpt2_tokenizer)
        return saved[family]

    return folder


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("passes", ["padding-free", "padded"])
def test_a_padded_batch_gives_each_context_its_own_logits(family, passes):
    model = prepared(family, padding_free_passes=passes == "padding-free")
    if passes == "padding-free":
        assert padding_free.is_enabled(model) == (family not in PADDED)
        if family in PADDED:
            assert PADDED[family] in padding_free.fallback_reason(model)
    assert padded_batch_error(model, vocab_size=64) <= 1e-4


@pytest.mark.parametrize("family", SLIDING)
def test_the_windows_the_attention_receives_are_those_the_config_gives(family):
    model = prepared(family, padding_free_passes=False)
    windows = attention_kinds.sliding_windows(model)
    assert WINDOW in windows  # each sliding family's tiny model has a window the batches run past
    assert padding_free.enable(model) == (family not in PADDED)
    if family not in PADDED:
        ids = torch.randint(3, 64, (2, 16), generator=torch.Generator().manual_seed(0))
        mask = torch.ones_like(ids)
        mask[0, :3] = 0
        packed = padding_free.PackedBatch.pack(ids, mask, keep=torch.tensor([14, 15]))
        row = dict(input_ids=packed.input_ids, position_ids=packed.position_ids, logits_to_keep=packed.logits_to_keep)
        with torch.no_grad():
            model(**row, packed=packed, use_cache=False)
        assert packed.attended == windows  # each layer's attention call, in order


def one_run(folder: Path, out: Path, algo: str, iterations: int, **kw) -> tuple[Trainer, list[dict[str, float]]]:
    config = toy_config(
        folder,
        out,
        algo=algo,
        iterations=iterations,
        batch_size=4,
        mini_batch_size=4,
        ppo_epochs=1,
        context_length=64,
        min_new_tokens=4,
        max_new_tokens=6,
        **kw,
    )
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=length_reward)
    for lm in trainer.learners.values():
        assert not has_dropout(lm.model) and not has_dropout(lm.reference)
    return trainer, [trainer.run_iteration()[0] for _ in range(iterations)]


def kl_keys(metrics: dict[str, float]) -> list[str]:
    keys = [k for k in metrics if k.endswith("/kl")]
    assert keys, sorted(metrics)
    return keys


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("algo", ["ppo", "cory"])
def test_training_with_the_defaults_matches_padded_passes(family, algo, zoo, tmp_path):
    """Iteration 0's KL is 0 (policy and reference are the same weights, nothing dropped), and the
    second iteration's metrics are the padded run's: the packed attention is the model's own."""
    runs = {on: one_run(zoo(family), tmp_path / str(on), algo, 2, padding_free=on)[1] for on in (True, False)}
    for key in kl_keys(runs[True][0]):
        assert runs[True][0][key] == 0 and runs[False][0][key] == 0, key
    later, padded = runs[True][1], runs[False][1]
    for key in [*kl_keys(later), *(k for k in later if k.endswith("policy_loss") or k.endswith("task_reward_mean"))]:
        assert math.isfinite(later[key])
        assert later[key] == pytest.approx(padded[key], rel=1e-3, abs=1e-5), key
    assert any(later[k] > 0 for k in kl_keys(later))  # the policy moved


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_trains_every_family(family, zoo, tmp_path):
    trainer, (first,) = one_run(zoo(family), tmp_path, "cory", 1, lora=True, lora_target_modules="all-linear")
    assert all(first[k] == 0 for k in kl_keys(first))
    assert all(math.isfinite(v) for k, v in first.items() if k.endswith("loss"))
    adapters = [p for n, p in trainer.learners["llm_0"].model.named_parameters() if "lora_B" in n and p.requires_grad]
    assert adapters and any(bool(p.abs().sum() > 0) for p in adapters)  # LoRA's B starts at 0: the update moved it


@pytest.mark.parametrize("family", FAMILIES)
def test_the_static_cache_decode_gives_the_eager_actors_tokens(family, zoo):
    model, tokenizer = load_causal_lm(str(zoo(family))).eval(), load_tokenizer(str(zoo(family)))
    runs = []
    for cache_length in (None, CONTEXT):
        actor = LMActor(
            model, do_sample=True, generator=torch.Generator().manual_seed(3), cache_length=cache_length, compile=False
        )
        runs.append(play(model, tokenizer, actor))
    (eager_texts, eager_ids), (static_texts, static_ids) = runs
    assert static_texts == eager_texts
    for a, b in zip(eager_ids, static_ids):
        assert (a == b).all()


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_the_compiled_decode_gives_the_eager_actors_tokens(family, zoo):
    model, tokenizer = load_causal_lm(str(zoo(family))).eval(), load_tokenizer(str(zoo(family)))
    runs = []
    for cache_length in (None, CONTEXT):
        actor = LMActor(model, do_sample=True, generator=torch.Generator().manual_seed(3), cache_length=cache_length)
        runs.append(play(model, tokenizer, actor))
    assert runs[1][0] == runs[0][0]


#: What the package must choose for each real checkpoint (docs/supported-models.md): its sliding windows
#: (window, how many layers) and whether its config alone rules packed attention out.
REAL = {
    "gemma2": ((4096, 13), "soft-capped attention logits"),
    "gemma3": ((512, 22), None),
    "phi3": ((2047, 32), None),
    "mistral": ((4096, 32), None),
    "qwen2": (None, None),  # Qwen2.5 ships use_sliding_window false: full attention on every layer
}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_real_checkpoints_configs_get_the_windows_they_were_trained_with(family):
    with torch.device("meta"):
        real = AutoModelForCausalLM.from_config(published_config(family))
    windows = [w for w in attention_kinds.sliding_windows(real) if w is not None]
    expected_windows, expected_reason = REAL.get(family, (None, None))
    assert (None if not windows else (windows[0], len(windows))) == expected_windows
    assert len(set(windows)) <= 1
    reason = attention_kinds.unsupported(real)
    assert (reason is None) if expected_reason is None else (expected_reason in reason)


def test_the_supported_models_page_is_generated_from_the_matrix():
    assert PAGE.read_text() == render(), "regenerate it: .venv/bin/python -m tests.support.supported_models"


@pytest.mark.parametrize("family", ["llama3", "mistral", "gemma3"])
def test_a_sliding_window_narrower_than_the_context_renders_every_chat_turn_afresh(family, tmp_path):
    """A carried context keeps masked columns between its turns, which a sliding window would count: a model
    whose window (8 tokens here) is narrower than --context-length plays the chat form without carrying."""
    from tests.support.chat_templates import family_tokenizer

    folder = save_tiny(family, tmp_path / "model", family_tokenizer("smollm2"))
    config = toy_config(
        folder,
        tmp_path / "run",
        task="sentiment",
        chat=True,
        rounds=2,
        context_length=160,
        batch_size=4,
        mini_batch_size=4,
        ppo_epochs=1,
    )
    trainer = Trainer(config, prompts=PROMPTS, reward_fn=length_reward)
    assert trainer.game.unwrapped.chat.carry == (family not in SLIDING)
    metrics, _ = trainer.run_iteration()
    assert all(math.isfinite(v) for k, v in metrics.items() if k.endswith("/kl"))
