"""Padding-free passes (cory_agents.speed.padding_free): the same outputs, gradients and updates as padded ones."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from cory_agents.learners.lm import predicting_columns, response_inputs, response_logits
from cory_agents.learners.value_model import CausalLMWithValueHead
from cory_agents.speed import attention_kinds, padding_free
from cory_agents.speed.padding_free import PackedBatch
from cory_agents.training.trainer import Trainer
from cory_env.models import hugging_face_model
from tests.support.model_zoo import FAMILIES, WINDOW, tiny_model
from tests.support.runs import toy_config
from tests.support.toy import fraction_good

T = 4


def packing(model: torch.nn.Module) -> list[bool]:
    """Whether each forward pass of ``model``'s decoder stack from now on runs a packed batch."""
    calls: list[bool] = []
    backbone = hugging_face_model(model).base_model
    backbone.register_forward_pre_hook(lambda m, args, kwargs: calls.append("packed" in kwargs), with_kwargs=True)
    return calls


def tiny(arch: str) -> torch.nn.Module:
    if arch in FAMILIES:  # tests/support/model_zoo.py: sliding windows of 8 tokens
        return tiny_model(arch, vocab_size=40)
    torch.manual_seed(0)
    if arch == "llama":
        config = LlamaConfig(
            vocab_size=40,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            bos_token_id=1,
            eos_token_id=1,
        )
        return LlamaForCausalLM(config).eval()
    config = GPT2Config(
        vocab_size=40,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=1,
        eos_token_id=1,
    )
    return GPT2LMHeadModel(config).eval()


def batch(shared_head: bool | str = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Three 10-wide contexts: left padding of 3 and 0 columns, and a response that ended 2 tokens
    early; ``shared_head``: all three start with the same 3 tokens (as a prompt template's head);
    ``"groups"``: :func:`groups`; ``"shuffled groups"``: the same in a minibatch's shuffled order."""
    if shared_head == "groups":
        return groups()
    if shared_head == "shuffled groups":
        ids, mask = groups()
        return ids[SHUFFLE], mask[SHUFFLE]
    torch.manual_seed(1)
    ids = torch.randint(3, 40, (3, 10))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    mask[2, -2:] = 0
    ids[1, 0] = 18  # seed 1 starts contexts 0 and 1 with the same token: no context shares a first token here
    if shared_head:
        ids[0, 3:6] = ids[1, :3] = ids[2, :3] = torch.tensor([7, 8, 9])
    return ids, mask


def test_packing_a_batch_by_hand():
    ids, mask = batch()
    packed = PackedBatch.pack(ids, mask, predicting_columns(10, T))
    assert packed.shared.tolist() == [0, 0, 0]
    assert packed.input_ids.tolist() == [[*ids[0, 3:].tolist(), *ids[1].tolist(), *ids[2, :8].tolist()]]
    assert packed.position_ids.tolist() == [[*range(7), *range(10), *range(8)]]
    assert packed.width == 10 and packed.batch_size == 3
    # columns 5..8 predict the response; context 0 starts at column 3, context 2 ends at column 7
    assert packed.logits_to_keep.tolist() == [2, 3, 4, 5, 7 + 5, 7 + 6, 7 + 7, 7 + 8, 17 + 5, 17 + 6, 17 + 7, 17 + 7]
    x = torch.arange(2 * 25 * 3, dtype=torch.float32).view(1, 2, 25, 3)  # (1, H, N, D)
    padded = packed.pad(x)
    assert padded.shape == (3, 2, 10, 3)
    assert torch.equal(padded[1], x[0, :, 7:17])  # context 1, right-padded by nothing
    assert torch.equal(packed.unpad(padded.transpose(1, 2)), x.transpose(1, 2))
    packed.attended.append(True)  # what the attention function does
    assert packed.unpack(torch.zeros(1, 12, 5)).shape == (3, 4, 5)


def test_a_head_all_contexts_share_is_in_the_row_once():
    ids, mask = batch(shared_head=True)
    packed = PackedBatch.pack(ids, mask, predicting_columns(10, T))
    assert packed.shared.tolist() == [0, 3, 3]
    assert packed.input_ids.tolist() == [[7, 8, 9, *ids[0, 6:].tolist(), *ids[1, 3:].tolist(), *ids[2, 3:8].tolist()]]
    assert packed.position_ids.tolist() == [[0, 1, 2, *range(3, 7), *range(3, 10), *range(3, 8)]]
    # context 0's columns 5..8 are its positions 2..5: the head's last token, then its own 3 tokens
    assert packed.logits_to_keep.tolist() == [2, 3, 4, 5, 7 + 2, 7 + 3, 7 + 4, 7 + 5, 14 + 2, 14 + 3, 14 + 4, 14 + 4]
    x = torch.arange(19, dtype=torch.float32).view(1, 1, 19, 1)
    padded = packed.pad(x)[:, 0, :, 0]
    assert padded[:, :3].tolist() == [[0, 1, 2]] * 3  # the head, in every context
    assert padded[1].tolist() == [0, 1, 2, *range(7, 14)]


def groups() -> tuple[torch.Tensor, torch.Tensor]:
    """Two groups of two responses to one prompt each, as GRPO's batches (all four prompts start
    with the same 3-token head): the first group's responses begin with the same token, and the
    last response ended 2 tokens early."""
    ids = torch.tensor(
        [
            [0, 0, 7, 8, 9, 10, 30, 31, 32, 33],
            [0, 0, 7, 8, 9, 10, 30, 35, 36, 37],
            [7, 8, 9, 11, 12, 13, 20, 21, 22, 23],
            [7, 8, 9, 11, 12, 13, 24, 25, 0, 0],
        ]
    )
    mask = (torch.arange(10) >= torch.tensor([2, 2, 0, 0])[:, None]).long()
    mask[3, -2:] = 0
    return ids, mask


def test_contexts_share_what_they_start_with_in_common_with_an_earlier_one():
    ids, mask = groups()
    packed = PackedBatch.pack(ids, mask, predicting_columns(10, T))
    assert packed.shared.tolist() == [0, 5, 3, 6]  # a prompt and a first response token; the head; a prompt
    assert packed.input_ids.tolist() == [[7, 8, 9, 10, 30, 31, 32, 33, 35, 36, 37, 11, 12, 13, 20, 21, 22, 23, 24, 25]]
    assert packed.position_ids.tolist() == [[*range(8), 5, 6, 7, *range(3, 10), 6, 7]]
    # context 1's first two kept positions are context 0's tokens; context 3's first is context 2's
    assert packed.logits_to_keep.tolist() == [3, 4, 5, 6, 3, 4, 8, 9, 13, 14, 15, 16, 13, 18, 19, 19]
    x = torch.arange(20, dtype=torch.float32).view(1, 1, 20, 1)
    padded = packed.pad(x)[:, 0, :, 0]
    assert padded.tolist() == [
        [*range(8), 0, 0],
        [0, 1, 2, 3, 4, 8, 9, 10, 0, 0],
        [0, 1, 2, *range(11, 18)],
        [0, 1, 2, 11, 12, 13, 18, 19, 0, 0],
    ]
    assert torch.equal(packed.unpad(packed.pad(x).transpose(1, 2)), x.transpose(1, 2))


SHUFFLE = [2, 0, 3, 1]  # no context next to another of its group


def test_contexts_share_with_any_earlier_context_in_a_shuffled_batch():
    ids, mask = groups()
    packed = PackedBatch.pack(ids[SHUFFLE], mask[SHUFFLE], predicting_columns(10, T))
    # the first (a group-2 context); the head with it; group 2's prompt with it; group 1's prompt and first token
    assert packed.shared.tolist() == [0, 3, 6, 5]
    assert packed.input_ids.tolist() == [[7, 8, 9, 11, 12, 13, 20, 21, 22, 23, 10, 30, 31, 32, 33, 24, 25, 35, 36, 37]]


def test_masks_that_do_not_pack_fall_back_to_the_padded_pass():
    ids, mask = batch()
    late = mask.clone()
    late[0, :6] = 0  # no real token before the response
    assert PackedBatch.pack(ids, late, predicting_columns(10, T)) is None
    assert PackedBatch.pack(ids, torch.ones_like(mask), predicting_columns(10, T)) is None  # nothing to unpad
    empty = mask.clone()
    empty[1] = 0  # a context without tokens
    assert PackedBatch.pack(ids, empty, predicting_columns(10, T)) is None
    lm = tiny("llama")
    expected = response_logits(lm, ids, late, T)
    padding_free.enable(lm)
    calls = packing(lm)
    torch.testing.assert_close(response_logits(lm, ids, late, T), expected)
    assert calls == [False]  # the model's own forward, padded


def holed(ids: torch.Tensor, mask: torch.Tensor, holes: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The contexts with masked columns inserted before the columns ``holes[b]`` of context ``b`` (as many in
    every context, all before the response), as a carried context has them between its turns."""
    rows = []
    for row, (r_ids, r_mask) in enumerate(zip(ids, mask)):
        kept = r_mask.clone()
        for at in sorted(holes[row], reverse=True):
            r_ids = torch.cat([r_ids[:at], torch.tensor([31]), r_ids[at:]])
            kept = torch.cat([kept[:at], torch.tensor([0]), kept[at:]])
        rows.append((r_ids, kept))
    return torch.stack([r for r, _ in rows]), torch.stack([m for _, m in rows])


@pytest.mark.parametrize("arch", ["llama", "gpt2", "mistral", "gemma3"])
def test_masked_columns_inside_contexts_pack_as_if_they_were_not_there(arch):
    """A carried context's masked columns between turns: the packed pass equals the padded pass over the same
    real tokens without them (positions count real tokens; a sliding window counts real tokens too, which a
    padded pass over the holes would not), gradients included."""
    ids, mask = batch(shared_head=True)
    holes = [[4, 5], [1, 3], [0, 2]]  # inside the prompt of each (context 2: one more padding column)
    with_holes = holed(ids, mask, holes)
    packed = PackedBatch.pack(*with_holes, predicting_columns(12, T))
    assert packed is not None and packed.position_ids.shape[1] == int(mask.sum() - packed.shared.sum())
    valid = mask[:, -T:].bool()
    results = []
    for on, (x, m) in ((False, (ids, mask)), (True, with_holes)):
        torch.manual_seed(2)
        model = CausalLMWithValueHead(tiny(arch))
        assert padding_free.enable(model) if on else not padding_free.is_enabled(model)
        calls = packing(model)
        logits, values = model(**response_inputs(x, m, T))
        assert calls == [on]
        ((logits.logsumexp(-1) * valid).sum() + (values * valid).sum()).backward()
        results.append((logits[valid], values[valid], {n: p.grad for n, p in model.named_parameters()}))
    (logits, values, grads), (packed_logits, packed_values, packed_grads) = results
    torch.testing.assert_close(packed_logits, logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed_values, values, rtol=1e-5, atol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("shared_head", [False, True, "groups", "shuffled groups"])
@pytest.mark.parametrize("arch", ["llama", "gpt2", "mistral", "gemma3"])
def test_padding_free_outputs_and_gradients_equal_the_padded_ones(arch, shared_head):
    ids, mask = batch(shared_head)
    valid = mask[:, -T:].bool()
    results = {}
    for on in (False, True):
        torch.manual_seed(2)
        model = CausalLMWithValueHead(tiny(arch))
        assert padding_free.enable(model) if on else not padding_free.is_enabled(model)
        calls = packing(model)
        logits, values = model(**response_inputs(ids, mask, T))  # one plain call, packed or not
        assert calls == [on]
        loss = (logits.logsumexp(-1) * valid).sum() + (values * valid).sum()
        loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters()}
        results[on] = (logits[valid], values[valid], grads, response_logits(model.lm, ids, mask, T)[valid])
    padded, packed = results[False], results[True]
    torch.testing.assert_close(packed[0], padded[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed[1], padded[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed[3], padded[3], rtol=1e-5, atol=1e-5)
    for name, grad in padded[2].items():
        torch.testing.assert_close(packed[2][name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_a_model_whose_attention_never_sees_the_packed_batch_is_an_error():
    """Hugging Face would mask each context apart by its restarting positions, but would not give
    a shared head to every context: unpacking such outputs raises."""
    ids, mask = batch(shared_head=True)
    lm = tiny("llama")
    padding_free.enable(lm)
    lm.set_attn_implementation("sdpa")  # its attention is no longer the one that reads the packed batch
    with pytest.raises(RuntimeError, match="never received the packed batch.*--no-padding-free"):
        response_logits(lm, ids, mask, T)


def test_decoding_with_a_kv_cache_is_sdpa_itself():
    ids, mask = batch()
    prompt, prompt_mask = ids[:, :6], mask[:, :6].clone()
    plain = tiny("llama")
    enabled = copy.deepcopy(plain)
    assert padding_free.enable(enabled)
    outputs = []
    for lm in (plain, enabled):
        with torch.no_grad():
            out = lm(input_ids=prompt, attention_mask=prompt_mask, use_cache=True)
            steps, cache, attn = [out.logits], out.cache, prompt_mask
            for t in range(3):
                attn = torch.cat([attn, torch.ones(3, 1, dtype=attn.dtype)], 1)
                out = lm(input_ids=ids[:, 6 + t : 7 + t], attention_mask=attn, cache=cache, use_cache=True)
                steps.append(out.logits)
        outputs.append(steps)
    for a, b in zip(*outputs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("prompts", ["groups", "shared head"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_the_actor_prefills_padding_free_and_then_decodes_as_the_padded_prefill_would(arch, prompts):
    from cory_agents.acting.actor import LMActor

    ids, mask = groups() if prompts == "groups" else batch(shared_head=True)
    W, B = 6, ids.shape[0]  # prompts: the first 6 columns (left-padded, sharing a head or a whole prompt)
    plain = tiny(arch)
    enabled = copy.deepcopy(plain)
    assert padding_free.enable(enabled)
    calls = packing(enabled)
    runs = []
    for lm in (plain, enabled):
        actor, logits = LMActor(lm, do_sample=False), []
        for t in range(4):  # the prompt, then 3 token steps
            width = W + t
            obs = dict(
                input_ids=ids[:, :width].numpy(),
                attention_mask=mask[:, :width].numpy(),
                past_length=[0 if t == 0 else width - 1] * B,
                num_new_tokens=[W if t == 0 else 1] * B,
            )
            logits.append(actor.next_token_logits("llm_0", obs))
        runs.append(logits)
    assert calls == [True, False, False, False]  # the prompt packed, the token steps as they were
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_enable_switches_sdpa_only_and_is_not_saved():
    lm = tiny("llama")
    keys = list(lm.state_dict())
    assert padding_free.enable(lm) and padding_free.enable(lm)  # twice: still on
    assert padding_free.is_enabled(CausalLMWithValueHead(lm)) and padding_free.is_enabled(copy.deepcopy(lm))
    # What it changes is the model's class, under the same name: weights, their names and a saved
    # model's architectures are the model's own.
    assert isinstance(lm, LlamaForCausalLM) and type(lm).__name__ == "LlamaForCausalLM"
    assert list(lm.state_dict()) == keys
    assert padding_free.ATTENTION not in lm.config.to_json_string()  # a saved model loads with sdpa
    eager = tiny("llama")
    eager.set_attn_implementation("eager")
    assert not padding_free.enable(eager) and eager.config._attn_implementation == "eager"
    assert not padding_free.is_enabled(torch.nn.Linear(2, 2))


PROMPTS = ["the movie", "the plot is very", "acting is"]  # 2-4 tokens: the pioneer's contexts are padded


@pytest.mark.parametrize(("learner", "lora"), [("ppo", False), ("ppo", True), ("grpo", False)])
def test_training_with_and_without_padding_free_passes_gives_the_same_run(toy_model, tmp_path, learner, lora):  # noqa: F811
    runs = []
    for on in (True, False):
        config = toy_config(
            toy_model,
            tmp_path / str(on),
            algo="cory",
            iterations=2,
            lora=lora,
            learner=learner,
            group_size=2,
            role_exchange_period=1,
            padding_free=on,
        )
        trainer = Trainer(config, prompts=PROMPTS, reward_fn=fraction_good)
        for lm in trainer.learners.values():
            assert padding_free.is_enabled(lm.model) == on and padding_free.is_enabled(lm.reference) == on
        runs.append([trainer.run_iteration()[0] for _ in range(2)])
    # The same samples and, up to float rounding, the same losses: shared tokens' gradients are
    # summed in another order, and at lr 1e-2 four Adam steps make that up to about 1e-4 of a loss.
    for packed, padded in zip(*runs):
        for key in ("llm_0/policy_loss", "llm_1/policy_loss", "llm_0/kl", "llm_1/kl", "llm_0/task_reward_mean"):
            assert packed[key] == pytest.approx(padded[key], rel=1e-3, abs=1e-6), key


def test_a_prefill_into_a_sliding_window_cache_is_left_padded():
    """A cache layer that keeps only a window (or a static layout) is filled by the padded prefill; a plain
    dynamic cache by the packed one, then laid out as the padded prefill leaves it."""
    ids, mask = batch()
    model = tiny("mistral")
    assert padding_free.enable(model)
    calls = packing(model)
    keep = torch.tensor([9])
    for cache in (DynamicCache(), DynamicCache(config=model.config)):
        model(input_ids=ids, attention_mask=mask, logits_to_keep=keep, cache=cache, use_cache=True)
    assert calls == [True, False]
    assert type(DynamicCache(config=model.config).layers[0]).__name__ == "DynamicSlidingWindowLayer"


def test_a_model_whose_layers_drop_the_packed_batch_keeps_padded_passes(caplog):
    """Falcon's decoder layer does not pass extra arguments on to attention: the probe pass finds it when the
    model is switched, the model stays as it was, and one line says so, however often it is switched."""
    model = tiny("falcon")
    own_class = type(model)
    with caplog.at_level("WARNING", logger="cory_agents.speed.padding_free"):
        assert not padding_free.enable(model)
        assert not padding_free.enable(CausalLMWithValueHead(model))  # a value head around it: no second probe
        assert not padding_free.enable(copy.deepcopy(model))
    assert type(model) is own_class and model.config._attn_implementation == "sdpa"
    assert "does not receive the packed batch" in padding_free.fallback_reason(model)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "padding-free passes are off" in lines[0] and "padded passes" in lines[0]
    ids, mask = batch()
    response_logits(model, ids, mask, T)  # the padded pass runs: no crash mid-rollout


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("attention_chunk_size", 16, "chunked attention"),
        ("use_bidirectional_attention", True, "bidirectional attention"),
        ("layer_types", ["full_attention", "linear_attention"], "linear_attention layers"),
    ],
)
def test_an_attention_the_packed_one_cannot_compute_keeps_padded_passes(field, value, reason):
    model = tiny("llama")
    setattr(model.config, field, value)
    assert not padding_free.enable(model) and reason in padding_free.fallback_reason(model)
    assert model.config._attn_implementation == "sdpa"


def test_the_probe_catches_packed_logits_that_are_not_the_padded_ones(monkeypatch):
    """Without its window the packed attention is wrong past 8 tokens (issue 44's bug): the probe's contexts
    run past the window, so the model would have kept padded passes."""
    model = tiny("mistral")
    monkeypatch.setattr(PackedBatch, "window_mask", lambda self, window, device: None)
    assert not padding_free.enable(model)
    assert "packed logits differ from the padded pass's" in padding_free.fallback_reason(model)
    assert attention_kinds.sliding_windows(model) == [WINDOW, WINDOW]
