"""
A character-level GPT (minGPT) in four variants: vanilla, rope (rotary position embeddings instead
of pos_emb), synthesizer and perceiver, a Perceiver-AR bottleneck whose n_layer-2 inner blocks run
over m = bottleneck_dim latents, at O(m^2) instead of O(L^2). With a KVCache, a forward reads only
the new tokens, reusing the keys and values of the earlier ones.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from attention import CausalCrossAttention, CausalSelfAttention, SynthesizerAttention


class GPTConfig:
    """
    Model hyperparameters: the class attributes are defaults, every kwarg becomes an attribute.
    """

    embd_pdrop = 0.1
    resid_pdrop = 0.1
    attn_pdrop = 0.1
    perceiver = False
    bottleneck_dim = None
    synthesizer = False
    rope = False

    def __init__(self, vocab_size, block_size, **kwargs):
        self.vocab_size = vocab_size
        self.block_size = block_size
        for k, v in kwargs.items():
            setattr(self, k, v)


VARIANTS = ("vanilla", "perceiver", "synthesizer", "rope")
# a Block's self-attention by the variant whose flag is set
# (CausalSelfAttention otherwise: it rotates with config.rope)
SELF_ATTENTION = {"synthesizer": SynthesizerAttention}


def variant_config(
    variant, vocab_size, block_size, n_layer, n_head, n_embd, bottleneck_dim=None, dropout=0.1
):
    """
    The GPTConfig of a variant by its name, the one place where a name becomes a model:
    config.<variant> is True.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant}")
    flags = {name: name == variant for name in VARIANTS if name != "vanilla"}
    return GPTConfig(
        vocab_size,
        block_size,
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        **flags,
        bottleneck_dim=bottleneck_dim if variant == "perceiver" else None,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        resid_pdrop=dropout,
    )


class KVCache(dict):
    """Per-attention-module keys/values for incremental decoding; `length` tokens are in it."""

    def __init__(self):
        super().__init__()
        self.length = 0

    def keep_rows(self, rows):
        """
        Keep only these batch rows (a 1-D index or boolean mask) of every cached (B, nh, T, hs)
        tensor.
        """
        for module in list(self):
            self[module] = tuple(t[rows] for t in self[module])


def mlp(config):
    """The position-wise feed-forward network of every block: d -> 4d -> d."""
    return nn.Sequential(
        nn.Linear(config.n_embd, 4 * config.n_embd),
        nn.GELU(),
        nn.Linear(4 * config.n_embd, config.n_embd),
        nn.Dropout(config.resid_pdrop),
    )


class Block(nn.Module):
    """A pre-LayerNorm Transformer block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        flagged = (
            attention for name, attention in SELF_ATTENTION.items() if getattr(config, name, False)
        )
        self.attn = next(flagged, CausalSelfAttention)(config)
        self.mlp = mlp(config)

    def forward(self, x, cache=None, start=0):
        x = x + self.attn(self.ln1(x), cache, start)
        return x + self.mlp(self.ln2(x))


class DownProjectBlock(nn.Module):
    """
    The perceiver's first block, (B, L, C) -> (B, m, C): the learned basis C queries the input,
    latent i reading inputs 0..i. Only the latents the inputs complete are computed, at most one per
    decoding step.
    """

    def __init__(self, config):
        super().__init__()
        self.C = nn.Parameter(torch.empty(1, config.bottleneck_dim, config.n_embd))
        nn.init.xavier_uniform_(self.C)
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalCrossAttention(config)
        self.mlp = mlp(config)

    def forward(self, x_input, cache=None, start=0, stop=None):
        """Latents start..stop-1 (all m by default) for inputs that begin at position `start`."""
        m = self.C.size(1)
        latent_start = min(start, m)
        C = self.C[:, latent_start : m if stop is None else stop]
        if C.size(1) == 0:
            return x_input[:, :0]
        y = C + self.attn(self.ln1(x_input), self.ln1(C), cache, latent_start)
        return y + self.mlp(self.ln2(y))


class UpProjectBlock(nn.Module):
    """
    The perceiver's last block, latents (B, m, C) and input (B, L, C) -> (B, L, C): input i reads
    latents 0..i.
    """

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.attn = CausalCrossAttention(config)
        self.mlp = mlp(config)

    def forward(self, y, x_input, cache=None, start=0):
        x = x_input + self.attn(self.ln1(y), self.ln1(x_input), cache, start)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """The full language model: embeddings, blocks, final LayerNorm and a linear head."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        if config.rope and (config.perceiver or config.synthesizer):
            raise ValueError(
                "rope rotates the queries and keys of self-attention: "
                "not for the perceiver or synthesizer"
            )
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        if not config.rope:  # rope's positions are in the attention
            self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.drop = nn.Dropout(config.embd_pdrop)
        self.perceiver = config.perceiver
        if config.perceiver:
            self.down_block = DownProjectBlock(config)
            self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer - 2)])
            self.up_block = UpProjectBlock(config)
        else:
            self.blocks = nn.Sequential(*[Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.block_size = config.block_size
        self.apply(self._init_weights)

    def get_block_size(self):
        return self.block_size

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def forward(self, idx, targets=None, cache=None):
        """
        The logits (B, T, vocab_size) of idx (B, T), and the loss over the targets that are not the
        pad 0 (None without targets). With a KVCache, idx continues the sequence in the cache.
        """
        start = 0 if cache is None else cache.length
        T = idx.size(1)
        if start + T > self.block_size:
            raise ValueError(
                f"cannot forward a sequence of length {start + T}: "
                f"the block size is {self.block_size}"
            )
        x = self.tok_emb(idx)
        if not self.config.rope:
            x = x + self.pos_emb[:, start : start + T, :]
        x = self.drop(x)
        if self.perceiver:
            m = self.down_block.C.size(1)
            y = self.down_block(x, cache, start, stop=min(start + T, m))
            if y.size(1) > 0:
                for block in self.blocks:
                    y = block(y, cache, min(start, m))
            x = self.up_block(y, x, cache, start)
        else:
            for block in self.blocks:
                x = block(x, cache, start)
        if cache is not None:
            cache.length += T
        logits = self.head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=0
            )
        return logits, loss
