"""
A step's loss over its global batch, and the one rule for splitting it: the batch goes to the ranks
(rank_rows) and into forward passes of rows of similar length (forward_passes), and each pass adds
its mean loss times its share of the batch's targets, times the number of ranks, whose gradients DDP
averages. However it is split, the step has the gradient of the batch's mean loss. GPT-1's auxiliary
loss on the question (lm_weight > 0) is a second kind of target, weighed by the same rule.
"""

import torch
import torch.nn.functional as F


def real_lengths(y):
    """(B, T) targets -> (B,) the position after each row's last target that is not the pad 0."""
    positions = torch.arange(1, y.size(1) + 1, device=y.device)
    return ((y != 0) * positions).max(dim=1).values


def question_lm_targets(x, y):
    """
    Language-model targets (B, T) for a finetuning example's question, the text before its first
    real target: x's next character there, the pad 0 elsewhere. The question's first character is
    not a target: nothing comes before it.
    """
    length = y.size(1)
    first = torch.where(y.any(dim=1), (y != 0).int().argmax(dim=1), length)
    next_chars = torch.cat((x[:, 1:], torch.zeros_like(x[:, :1])), dim=1)
    return torch.where(
        torch.arange(length, device=y.device)[None, :] < first[:, None], next_chars, 0
    )


def forward_passes(x, y, size=None, cut=True):
    """
    A batch as forward passes of `size` rows (None: all) sorted by length, each cut after its last
    real target; passes without one are left out. A batch that fits in one pass keeps its order, and
    cut=False leaves it whole.
    """
    if not cut:
        return [(x, y)]
    lengths = real_lengths(y)
    if size is None or size >= len(y) or not y.any():
        n = max(1, int(lengths.max()))
        return [(x[:, :n], y[:, :n])]
    passes = []
    for rows in torch.argsort(lengths, stable=True).split(size):
        n = int(lengths[rows].max())
        if n:
            passes.append((x[rows, :n], y[rows, :n]))
    return passes


def rank_rows(x, y, rank, world_size):
    """
    This rank's rows (rank, rank + N, ...) of a global batch and whether they count (a spare rank's
    row does not).
    """
    if world_size == 1:
        return x, y, True
    rows = torch.arange(len(y))[rank::world_size]
    if len(rows) == 0:
        return x[:1], y[:1], False
    return x[rows], y[rows], True


class Objective:
    """
    The mean loss over y's real targets plus lm_weight times the questions' mean: GPT-1's L_task +
    lambda L_LM.
    """

    def __init__(self, lm_weight=0.0):
        self.weights = [1.0] if not lm_weight else [1.0, lm_weight]

    def targets(self, x, y):
        """
        Every kind of target of rows x, y, as (B, T) tensors that are 0 where nothing is scored.
        """
        return [y] if len(self.weights) == 1 else [y, question_lm_targets(x, y)]

    def counts(self, x, y):
        """Every kind of target's count in rows x, y, as 0-dim int64 tensors on their device."""
        return [(t != 0).sum() for t in self.targets(x, y)]

    def shares(self, targets, totals, ranks):
        """
        A pass's share of the global batch's targets of each kind (`totals`), times `ranks` (0 for a
        row that counts for nothing): float64 on the device, to divide as Python does with nothing
        read back.
        """
        return [
            (t != 0).sum().mul(ranks).double() / n.clamp(min=1).double()
            for t, n in zip(targets, totals)
        ]

    def loss(self, logits, targets, shares):
        """
        The sum of weight * share * the pass's mean loss over the kinds; a zero share (a NaN mean)
        adds nothing.
        """
        flat = logits.reshape(-1, logits.size(-1))
        total = 0
        for t, weight, share in zip(targets, self.weights, shares):
            term = F.cross_entropy(flat, t.reshape(-1), ignore_index=0) * (weight * share).float()
            total = total + torch.where(share != 0, term, 0.0)
        return total
