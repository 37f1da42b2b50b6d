"""CPULinear: the same results as nn.Linear in every layout it takes, and the training path untouched."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from cory_agents.speed.cpu_linear import FEW_ROWS, CPULinear, use_cpu_linear


def linear_pair(bias: bool = True) -> tuple[nn.Linear, nn.Linear]:
    torch.manual_seed(0)
    plain = nn.Linear(48, 80, bias=bias)
    fast = copy.deepcopy(plain)
    use_cpu_linear(fast)
    return plain, fast


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 48), (8, 1, 48), (2, FEW_ROWS // 2, 48), (3, 40, 48)])
def test_same_outputs_without_autograd(bias, shape):
    plain, fast = linear_pair(bias)
    x = torch.randn(shape)
    with torch.no_grad():
        expected, got = plain(x), fast(x)
    assert got.shape == expected.shape and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_few_rows_use_the_transposed_product():
    plain, fast = linear_pair()
    x = torch.randn(8, 1, 48)
    products = []
    original = torch.mm
    try:
        torch.mm = lambda a, b: products.append(tuple(a.shape)) or original(a, b)
        with torch.no_grad():
            fast(x)
    finally:
        torch.mm = original
    assert products == [(80, 48)]  # W @ x.T: the weight is the left operand


def test_a_non_contiguous_batched_input_is_copied_into_one_matrix():
    plain, fast = linear_pair()
    plain.requires_grad_(False)
    fast.requires_grad_(False)
    hidden = torch.randn(8, 30, 48)
    x = hidden[:, -11:]  # what a frozen LM head gets under logits_to_keep
    assert not x.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(fast(x), plain(x), rtol=1e-5, atol=1e-6)
    with torch.profiler.profile() as prof, torch.no_grad():
        fast(x)
    names = {e.key for e in prof.key_averages()}
    assert "aten::bmm" not in names and ("aten::mm" in names or "aten::addmm" in names)


def test_training_path_is_exactly_nn_linear():
    plain, fast = linear_pair()
    x = torch.randn(2, 3, 48)  # few rows, but with autograd: F.linear as before
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    plain(x1).square().sum().backward()
    fast(x2).square().sum().backward()
    assert torch.equal(x1.grad, x2.grad)
    assert torch.equal(plain.weight.grad, fast.weight.grad) and torch.equal(plain.bias.grad, fast.bias.grad)


def test_other_dtypes_and_autocast_fall_through():
    plain, fast = linear_pair()
    x = torch.randn(4, 48, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(fast.double()(x), plain.double()(x))
    plain, fast = linear_pair()
    x = torch.randn(4, 48)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, expected = fast(x), plain(x)
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


def test_a_model_keeps_its_weights_names_and_decode_logits():
    plain = tiny_llama()
    fast = copy.deepcopy(plain)
    linears = sum(type(m) is nn.Linear for m in plain.modules())
    assert use_cpu_linear(fast) == linears == 2 * 7 + 1  # q k v o gate up down per layer, and the LM head
    assert all(isinstance(m, nn.Linear) for m in fast.modules() if isinstance(m, CPULinear))
    assert plain.state_dict().keys() == fast.state_dict().keys()
    assert copy.deepcopy(fast).lm_head.__class__ is CPULinear
    ids = torch.randint(0, 300, (4, 7))
    with torch.no_grad():  # prefill, then three one-token steps, as an actor does
        logits = {}
        for name, model in (("plain", plain), ("fast", fast)):
            cache, out = DynamicCache(), []
            step = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
            for _ in range(3):
                out.append(step.logits[:, -1])
                step = model(input_ids=out[-1].argmax(-1, keepdim=True), cache=cache, use_cache=True)
            logits[name] = torch.stack(out)
    torch.testing.assert_close(logits["fast"], logits["plain"], rtol=1e-4, atol=1e-5)


def test_lora_wraps_the_fast_layers():
    from peft import LoraConfig, get_peft_model

    model = tiny_llama()
    use_cpu_linear(model)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    q = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    assert type(q.base_layer) is CPULinear  # the adapter's own projections, added later, stay plain
    ids = torch.randint(0, 300, (2, 5))
    with torch.no_grad():
        got = peft_model(input_ids=ids).logits
        with peft_model.disable_adapter():  # LoRA B starts at zero: the adapted model is the base
            expected = peft_model(input_ids=ids).logits
    torch.testing.assert_close(got, expected)
