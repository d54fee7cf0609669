"""The rope variant: the course's 2024 rotary API, relative positions, and the model without pos_emb."""

import pytest
import torch

import model
import models
from attention import CausalSelfAttention, apply_rotary_emb, precompute_rotary_emb
from model import GPT, variant_config


def rope_config(**sizes):
    return variant_config("rope", 40, 32, **{"n_layer": 2, "n_head": 4, "n_embd": 32, **sizes})


def test_the_table_holds_cos_and_sin_of_each_position_times_each_frequency():
    dim, positions = 8, 20
    table = precompute_rotary_emb(dim, positions)
    assert table.shape == (positions, dim // 2, 2)
    for t in [0, 1, 7, 19]:
        for i in range(1, dim // 2 + 1):  # the handout's θ_i = 10000^(-2(i-1)/dim), i = 1..dim/2
            angle = torch.tensor(t * 10000 ** (-2 * (i - 1) / dim))
            assert table[t, i - 1, 0] == pytest.approx(angle.cos().item(), abs=1e-6)
            assert table[t, i - 1, 1] == pytest.approx(angle.sin().item(), abs=1e-6)


def test_apply_rotary_emb_multiplies_each_pair_by_a_unit_complex_number():
    torch.manual_seed(0)
    dim, T = 16, 11
    x = torch.randn(2, 3, T, dim)
    table = precompute_rotary_emb(dim, 32)
    pairs = torch.view_as_complex(x.reshape(2, 3, T, dim // 2, 2).contiguous())
    theta = 10000 ** (-torch.arange(dim // 2, dtype=torch.float64) * 2 / dim)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * theta
    expected = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles).to(pairs.dtype)).flatten(-2)
    assert torch.allclose(apply_rotary_emb(x, table), expected, atol=1e-5)
    later = apply_rotary_emb(x, table[5:])  # a sliced table rotates as if x started at position 5
    assert torch.allclose(later, apply_rotary_emb(torch.cat([x[:, :, :5], x], dim=2), table)[:, :, 5:], atol=1e-5)


def test_a_rotated_score_depends_only_on_the_distance_between_query_and_key():
    torch.manual_seed(0)
    dim = 16
    table = precompute_rotary_emb(dim, 128)
    q, k = torch.randn(dim), torch.randn(dim)

    def score(i, j):
        at = lambda v, t: apply_rotary_emb(v.view(1, 1, 1, dim), table[t:])  # noqa: E731
        return (at(q, i) * at(k, j)).sum().item()

    for i, j in [(0, 0), (10, 3), (3, 10), (30, 0)]:
        for shift in [1, 10, 90]:
            assert score(i + shift, j + shift) == pytest.approx(score(i, j), abs=1e-4)
    assert score(10, 3) != pytest.approx(score(10, 4), abs=1e-3)  # the distance does matter


def test_the_rope_model_has_no_position_embedding_and_keeps_the_table_as_a_buffer():
    gpt = GPT(rope_config())
    assert not hasattr(gpt, "pos_emb") and "pos_emb" not in dict(gpt.named_parameters())
    buffers = dict(gpt.named_buffers())
    assert buffers["blocks.0.attn.rope_cache"].shape == (32, 32 // 4 // 2, 2)
    assert torch.equal(buffers["blocks.1.attn.rope_cache"], precompute_rotary_emb(8, 32))
    assert "blocks.0.attn.rope_cache" in gpt.state_dict()
    assert hasattr(GPT(variant_config("vanilla", 40, 32, n_layer=2, n_head=4, n_embd=32)), "pos_emb")


def test_odd_head_dimensions_and_other_variants_are_refused():
    with pytest.raises(ValueError, match="head dimension must be even"):
        CausalSelfAttention(rope_config(n_head=2, n_embd=6))
    config = rope_config()
    config.synthesizer = True
    with pytest.raises(ValueError, match="not for the perceiver or synthesizer"):
        GPT(config)


def test_the_2024_module_name_imports_the_same_classes():
    assert models.GPT is model.GPT and models.GPTConfig is model.GPTConfig and models.Block is model.Block
    assert models.GPTConfig(10, 20, rope=True).rope is True and model.GPTConfig.rope is False
