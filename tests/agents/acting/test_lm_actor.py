"""Token sampling: the categorical distribution of each row, reproducible from the generator."""

from __future__ import annotations

import pytest
import torch

from cory_agents.acting.actor import generate_positions, sample_categorical


def test_samples_follow_each_rows_distribution():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0], [0.0, 0.0, 0.0, 0.5, 0.5]])
    n = 40_000
    tokens = sample_categorical(probs.repeat(n, 1), torch.Generator().manual_seed(0)).view(n, 2)
    for row in range(2):
        freq = torch.bincount(tokens[:, row], minlength=5).double() / n
        sigma = (probs[row].double() * (1 - probs[row].double()) / n).sqrt()
        assert ((freq - probs[row].double()).abs() <= 5 * sigma + 1e-12).all(), (row, freq)
        assert (freq[probs[row] == 0] == 0).all()  # ids cut to probability 0 never come out


def test_unnormalised_rows_and_a_zero_last_id():
    probs = torch.tensor([[2.0, 6.0, 0.0]])  # sums to 8; the last id has probability 0
    tokens = sample_categorical(probs.repeat(20_000, 1), torch.Generator().manual_seed(1))
    freq = torch.bincount(tokens, minlength=3).double() / 20_000
    assert freq[2] == 0 and abs(freq[0] - 0.25) < 0.02


def test_the_same_generator_state_gives_the_same_tokens():
    probs = torch.softmax(torch.randn(8, 1000), -1)
    a = sample_categorical(probs, torch.Generator().manual_seed(7))
    b = sample_categorical(probs, torch.Generator().manual_seed(7))
    c = sample_categorical(probs, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c) and a.dtype == torch.long and a.shape == (8,)


def test_a_row_that_is_not_a_distribution_is_named():
    for bad in (float("nan"), float("inf"), 0.0):
        probs = torch.tensor([[0.5, 0.5], [bad, 0.0 if bad == 0.0 else 1.0]])
        with pytest.raises(ValueError, match="row 1 are not a distribution.*--lr"):
            sample_categorical(probs, torch.Generator().manual_seed(0))


def test_generate_positions_are_those_generate_gives_real_tokens():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=20,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    ids = torch.randint(3, 18, (3, 7))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    mask[1, :1] = 0
    theirs = LlamaForCausalLM(config)._prepare_position_ids_for_generation(ids, {"attention_mask": mask})
    ours = generate_positions(mask)
    assert torch.equal(ours, theirs)
    assert ours.tolist()[0] == [0, 0, 0, 0, 1, 2, 3]
