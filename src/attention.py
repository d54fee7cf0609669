"""
The attention variants of the assignment, all causal and all run through PyTorch's
scaled_dot_product_attention (SDPA), which picks a fused kernel where the hardware has one:
- CausalSelfAttention: minGPT's masked multi-head self-attention, with rotary embeddings under
  config.rope;
- CausalCrossAttention: queries from one sequence, keys and values from another (model.py's
  perceiver);
- SynthesizerAttention: scores from a per-position MLP, not from query-key dot products.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def split_heads(x, n_head):
    """(B, T, C) -> (B, n_head, T, C // n_head)."""
    B, T, C = x.size()
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def merge_heads(y):
    """(B, n_head, T, head_dim) -> (B, T, n_head * head_dim)."""
    B, n_head, T, head_dim = y.size()
    return y.transpose(1, 2).contiguous().view(B, T, n_head * head_dim)


def precompute_rotary_emb(dim, max_positions):
    """
    The rotary table (max_positions, dim // 2, 2) of (cos(t θ_i), sin(t θ_i)), θ_i = 10000^(-2i /
    dim).
    """
    theta = 10000.0 ** (-torch.arange(0, dim // 2, dtype=torch.float32) * 2 / dim)  # (dim/2,)
    # (T, dim/2)
    angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * theta[None, :]
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rotary_emb(x, rope_cache):
    """
    Rotate each pair (x[2i], x[2i+1]) of x (B, n_head, T, head_dim), as the complex number x[2i] + j
    x[2i+1], by the angle t θ_i of its position t, read from row t of rope_cache (slice it to start
    elsewhere).
    """
    T = x.size(-2)
    cos, sin = rope_cache[:T].unbind(-1)  # (T, head_dim/2) each
    real, imag = x.float().unflatten(-1, (-1, 2)).unbind(-1)  # (B, nh, T, head_dim/2) each
    rotated = torch.stack([real * cos - imag * sin, real * sin + imag * cos], dim=-1)
    return rotated.flatten(-2).type_as(x)


def extend_cache(module, cache, *tensors):
    """
    With a cache (model.KVCache), this call's keys and values (B, nh, T, hs) appended to those
    cached before.
    """
    if cache is None:
        return tensors
    if module in cache:
        tensors = tuple(torch.cat([old, new], dim=2) for old, new in zip(cache[module], tensors))
    cache[module] = tensors
    return tensors


def causal_attention(q, k, v, q_start=0, bias=None, dropout_p=0.0, scale=None):
    """
    SDPA where query i sits at position q_start + i and sees the keys up to its own position, with
    `bias` (T_kv,) added to every query's scores. q_start is the number of positions already
    decoded, or 0.
    """
    if q_start == 0 and bias is None:
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale
        )
    q_pos = torch.arange(q_start, q_start + q.size(-2), device=q.device)
    visible = torch.arange(k.size(-2), device=q.device)[None, :] <= q_pos[:, None]  # (T_q, T_kv)
    mask = (
        visible
        if bias is None
        else bias.expand_as(visible).masked_fill(~visible, float("-inf")).to(q.dtype)
    )
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)


class CausalCrossAttention(nn.Module):
    """
    Multi-head attention of queries from x_q over keys and values from x_kv, query i seeing key
    positions 0..i even where T_q != T_kv. A query of batch size 1 (a learned basis) serves the
    whole batch.
    """

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be a multiple of n_head"
        self.key = nn.Linear(config.n_embd, config.n_embd)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_pdrop = config.attn_pdrop
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.n_head = config.n_head

    def forward(self, x_kv, x_q, cache=None, q_start=0):
        if x_q.size(0) != x_kv.size(0):
            x_q = x_q.expand(x_kv.size(0), -1, -1)
        q, k = self.place(
            split_heads(self.query(x_q), self.n_head),
            split_heads(self.key(x_kv), self.n_head),
            q_start,
        )
        k, v = extend_cache(self, cache, k, split_heads(self.value(x_kv), self.n_head))
        dropout = self.attn_pdrop if self.training else 0.0
        y = causal_attention(q, k, v, q_start, dropout_p=dropout)
        return self.resid_drop(self.proj(merge_heads(y)))

    def place(self, q, k, q_start):
        """
        Queries and keys (B, nh, T, hs) with their positions put in: none here (the GPT adds
        pos_emb).
        """
        return q, k


def register_course_mask(module, block_size):
    """
    Register the course's causal mask buffer, which SDPA does not need: it is part of the course's
    state_dicts, so .params files stay interchangeable with the course's code both ways.
    """
    module.register_buffer(
        "mask", torch.ones(block_size, block_size).tril().view(1, 1, block_size, block_size)
    )


class CausalSelfAttention(CausalCrossAttention):
    """
    Masked self-attention; with config.rope, rotary embeddings (Su et al., 2021) as in the course's
    2024 code.
    """

    def __init__(self, config):
        super().__init__(config)
        register_course_mask(self, config.block_size)
        self.rope = config.rope
        if self.rope:
            head_dim = config.n_embd // config.n_head
            if head_dim % 2:
                raise ValueError(
                    "rope rotates pairs of dimensions: the head dimension must be even, "
                    f"got {head_dim}"
                )
            self.register_buffer("rope_cache", precompute_rotary_emb(head_dim, config.block_size))

    def forward(self, x, cache=None, q_start=0):
        return super().forward(x, x, cache, q_start)

    def place(self, q, k, q_start):
        """
        With rope, queries and keys (both from positions q_start..) rotated by their positions.
        """
        if not self.rope:
            return q, k
        rope_cache = self.rope_cache[q_start:]
        return apply_rotary_emb(q, rope_cache), apply_rotary_emb(k, rope_cache)


class SynthesizerAttention(nn.Module):
    """
    Dense Synthesizer attention (Tay et al., 2020): Y_i = softmax(ReLU(X A_i + b1) B + b2) (X V_i)
    per head i.

    A_i and b1 are head i's slice of w1, B is w2[:, :T]; the names and shapes are the course's, so
    its .params files load. The columns of w2 act as learned keys and b2 as a bias per key, so SDPA
    runs it with scale 1.
    """

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be a multiple of n_head"
        self.w1 = nn.Linear(config.n_embd, config.n_embd)
        self.w2 = nn.Parameter(torch.empty(config.n_embd // config.n_head, config.block_size - 1))
        self.b2 = nn.Parameter(torch.zeros(config.block_size - 1))
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_pdrop = config.attn_pdrop
        self.resid_drop = nn.Dropout(config.resid_pdrop)
        self.n_head = config.n_head
        self.max_len = config.block_size - 1
        nn.init.uniform_(self.w2, -0.001, 0.001)
        register_course_mask(self, config.block_size)

    def forward(self, x, cache=None, q_start=0):
        T = q_start + x.size(1)  # positions seen so far, this call's included
        if T > self.max_len:
            raise ValueError(
                f"SynthesizerAttention takes at most {self.max_len} positions, got {T}"
            )
        h = split_heads(F.relu(self.w1(x)), self.n_head)  # (B, nh, T_new, hs)
        (v,) = extend_cache(self, cache, split_heads(self.value(x), self.n_head))  # (B, nh, T, hs)
        # (B, nh, T, hs), one set for all
        keys = self.w2[:, :T].t().to(h.dtype).expand(h.size(0), h.size(1), -1, -1)
        dropout = self.attn_pdrop if self.training else 0.0
        y = causal_attention(h, keys, v, q_start, bias=self.b2[:T], dropout_p=dropout, scale=1.0)
        return self.resid_drop(self.proj(merge_heads(y)))
