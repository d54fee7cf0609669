"""GPT and the attention variants: configuration, shapes, causality, loss and parameter layouts."""

import math

import pytest
import torch
import torch.nn.functional as F

from attention import CausalCrossAttention, CausalSelfAttention, SynthesizerAttention
from conftest import small_gpt, small_gpt_config
from factgpt.training.params import load_params, save_params
from model import GPT, VARIANTS, Block, DownProjectBlock, GPTConfig, UpProjectBlock

VOCAB, BLOCK = 40, 32
SIZES = dict(n_layer=4, n_head=4, n_embd=32, bottleneck_dim=8)


def small_config(variant="vanilla"):
    return small_gpt_config(VOCAB, BLOCK, variant, **SIZES)


def small_model(variant, seed=0):
    return small_gpt(VOCAB, BLOCK, variant, seed=seed, **SIZES).eval()


def test_config_defaults_and_kwargs():
    config = GPTConfig(10, 20, n_layer=3, n_head=2, n_embd=8, anything="kept")
    assert (config.vocab_size, config.block_size, config.n_layer, config.n_head, config.n_embd) == (10, 20, 3, 2, 8)
    assert config.anything == "kept"
    assert GPTConfig.embd_pdrop == GPTConfig.resid_pdrop == GPTConfig.attn_pdrop == 0.1
    assert GPTConfig.perceiver is False and GPTConfig.bottleneck_dim is None and GPTConfig.synthesizer is False
    assert GPT(config).get_block_size() == 20


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("length", [1, 5, BLOCK - 1])
def test_forward_shapes(variant, length):
    model = small_model(variant)
    idx = torch.randint(0, VOCAB, (3, length))
    logits, loss = model(idx)
    assert logits.shape == (3, length, VOCAB) and loss is None
    _, loss = model(idx, idx)
    assert loss.dim() == 0 and torch.isfinite(loss)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_is_causal(variant):
    model = small_model(variant)
    idx = torch.randint(2, VOCAB, (2, BLOCK - 1))
    logits, _ = model(idx)
    for t in [0, 3, 7, 8, 20, BLOCK - 2]:  # below and above the perceiver's bottleneck of 8
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 1 - 2) % (VOCAB - 2) + 2
        new_logits, _ = model(changed)
        assert torch.allclose(new_logits[:, :t], logits[:, :t], atol=1e-5), f"position {t} leaked backwards"
        assert not torch.allclose(new_logits[:, t], logits[:, t]), f"position {t} does not see its own token"


@pytest.mark.parametrize("variant", VARIANTS)
def test_loss_ignores_pad_targets(variant):
    model = small_model(variant)
    idx = torch.randint(0, VOCAB, (2, 16))
    targets = torch.randint(1, VOCAB, (2, 16))
    targets[0, 5:] = 0
    targets[1, :3] = 0
    logits, loss = model(idx, targets)
    keep = targets != 0
    expected = F.cross_entropy(logits[keep], targets[keep])
    assert torch.allclose(loss, expected)


def test_perceiver_structure():
    model = small_gpt(VOCAB, BLOCK, "perceiver", n_layer=5, n_head=4, n_embd=32, bottleneck_dim=8)
    assert isinstance(model.down_block, DownProjectBlock)
    assert isinstance(model.up_block, UpProjectBlock)
    assert len(model.blocks) == 3 and all(isinstance(b, Block) for b in model.blocks)
    assert model.down_block.C.shape == (1, 8, 32)
    bound = math.sqrt(6 / (8 * 32 + 32))  # Xavier-uniform for a (1, m, d) tensor
    assert model.down_block.C.abs().max() <= bound and model.down_block.C.std() > bound / 3


@pytest.mark.parametrize("length", [3, 8, 20])
def test_perceiver_projections_change_the_length(length):
    config = small_config("perceiver")
    down, up = DownProjectBlock(config), UpProjectBlock(config)
    x = torch.randn(2, length, 32)
    y = down(x)
    assert y.shape == (2, 8, 32)
    assert up(y, x).shape == (2, length, 32)


def test_cross_attention_broadcasts_a_batch_one_query():
    attn = CausalCrossAttention(small_config()).eval()
    x_kv, x_q = torch.randn(3, 10, 32), torch.randn(1, 6, 32)
    assert torch.allclose(attn(x_kv, x_q), attn(x_kv, x_q.expand(3, -1, -1)), atol=1e-6)
    for b in range(3):
        assert torch.allclose(attn(x_kv, x_q)[b], attn(x_kv[b : b + 1], x_q)[0], atol=1e-6)


def test_self_attention_is_cross_attention_of_a_sequence_with_itself():
    attn = CausalSelfAttention(small_config()).eval()
    x = torch.randn(2, 9, 32)
    assert torch.equal(attn(x), CausalCrossAttention.forward(attn, x, x))


def test_block_attention_follows_the_config():
    assert isinstance(Block(small_config("vanilla")).attn, CausalSelfAttention)
    assert isinstance(Block(small_config("synthesizer")).attn, SynthesizerAttention)


def test_synthesizer_parameter_layout():
    attn = SynthesizerAttention(small_config("synthesizer"))
    shapes = {name: tuple(p.shape) for name, p in attn.named_parameters()}
    assert shapes == {
        "w1.weight": (32, 32),
        "w1.bias": (32,),
        "w2": (32 // 4, BLOCK - 1),
        "b2": (BLOCK - 1,),
        "value.weight": (32, 32),
        "value.bias": (32,),
        "proj.weight": (32, 32),
        "proj.bias": (32,),
    }
    assert attn.w2.abs().max() <= 0.001 and attn.w2.std() > 0.0001
    assert torch.equal(attn.b2, torch.zeros(BLOCK - 1))


def synthesizer_by_the_formula(attn, x):
    """Y_i = softmax(ReLU(X A_i + b1) B + b2) (X V_i), causally masked, head by head."""
    T, hs = x.size(1), attn.w2.size(0)
    hidden = F.relu(attn.w1(x))
    values = attn.value(x)
    heads = []
    for i in range(attn.n_head):
        scores = hidden[..., i * hs : (i + 1) * hs] @ attn.w2[:, :T] + attn.b2[:T]
        scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ values[..., i * hs : (i + 1) * hs])
    return attn.proj(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("length", [1, 7, BLOCK - 1])
def test_synthesizer_computes_the_formula(length):
    torch.manual_seed(0)
    attn = SynthesizerAttention(small_config("synthesizer")).eval()
    torch.nn.init.normal_(attn.w2)  # make the scores matter
    torch.nn.init.normal_(attn.b2)
    x = torch.randn(2, length, 32)
    assert torch.allclose(attn(x), synthesizer_by_the_formula(attn, x), atol=1e-5)


def test_synthesizer_trains_w2_and_b2():
    attn = SynthesizerAttention(small_config("synthesizer"))
    attn(torch.randn(2, 10, 32)).square().sum().backward()
    assert attn.w2.grad[:, :10].abs().sum() > 0 and attn.b2.grad[:10].abs().sum() > 0
    assert attn.w2.grad[:, 10:].abs().sum() == 0


def test_params_are_a_plain_state_dict_and_course_masks_are_ignored(tmp_path):
    for variant in VARIANTS:
        model = small_model(variant, seed=1)
        state = model.state_dict()
        state["blocks.0.attn.mask"] = torch.ones(1, 1, BLOCK, BLOCK).tril()  # as the course's modules save it
        torch.save(state, tmp_path / "course.params")
        fresh = small_model(variant, seed=2)
        load_params(fresh, tmp_path / "course.params")
        idx = torch.randint(0, VOCAB, (2, 12))
        assert torch.equal(fresh(idx)[0], model(idx)[0])

        save_params(model, tmp_path / "ours.params")
        saved = torch.load(tmp_path / "ours.params", weights_only=True)
        assert isinstance(saved, dict) and saved.keys() == model.state_dict().keys()
        if variant != "perceiver":  # the course's layout: a causal-mask buffer in every attention module
            assert saved["blocks.0.attn.mask"].shape == (1, 1, BLOCK, BLOCK)

        state = {k: v for k, v in model.state_dict().items() if not k.endswith(".mask")}
        torch.save(state, tmp_path / "maskless.params")
        assert torch.equal(
            load_params(small_model(variant, seed=3), tmp_path / "maskless.params")(idx)[0], model(idx)[0]
        )
