"""
How well a model predicts a corpus: its documents' span-corruption loss, on the same examples for
every model.
"""

import math

import torch
import torch.nn.functional as F

from factgpt.training.step import real_lengths
from utils import eval_mode


@torch.no_grad()
def corruption_loss(model, dataset, device, seed=0, batch_size=64):
    """
    The loss in nats summed over the real targets of one example per document of `dataset`, drawn
    with `seed`, and those targets' count. The model's train/eval mode is left as it was.
    """
    generator = torch.Generator().manual_seed(seed)
    x, y = dataset.corrupt_all(torch.arange(len(dataset)), generator)
    with eval_mode(model):
        nats, targets = 0.0, 0
        for xb, yb in zip(x.split(batch_size), y.split(batch_size)):
            n = max(1, int(real_lengths(yb).max()))  # nothing after the last real target is scored
            logits, _ = model(xb[:, :n].to(device))
            flat = logits.reshape(-1, logits.size(-1)).float()
            nats += F.cross_entropy(
                flat, yb[:, :n].reshape(-1).to(device), ignore_index=0, reduction="sum"
            ).item()
            targets += int((yb != 0).sum())
    return nats, targets


def bits_per_character(nats, targets):
    """A summed loss in nats as bits per target character."""
    return nats / max(1, targets) / math.log(2)
