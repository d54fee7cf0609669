"""
What a training step minimises: the course's loss, plus GPT-1's auxiliary loss on the question where
lm_weight > 0, each kind's mean loss weighed by its share of the global batch's targets of that
kind.
"""

import torch
import torch.nn.functional as F


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
