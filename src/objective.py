"""
What a training step minimises (the course's objective, and GPT-1's auxiliary loss on the
question when finetuning with lm_weight > 0), as the trainer's step weighs it: every kind
of target's mean loss, times its share of the global batch's targets of that kind.
"""

import torch
import torch.nn.functional as F


def question_lm_targets(x, y):
    """
    (B, T) language-model targets of the text before each row's first real target (a
    finetuning example's question): x's next character there, the pad 0 elsewhere. The
    question's first character has no target: nothing comes before it.
    """
    length = y.size(1)
    first = torch.where(y.any(dim=1), (y != 0).int().argmax(dim=1), length)
    next_chars = torch.cat((x[:, 1:], torch.zeros_like(x[:, :1])), dim=1)
    return torch.where(torch.arange(length, device=y.device)[None, :] < first[:, None], next_chars, 0)


class Objective:
    """
    What a step minimises: the mean cross-entropy over y's real targets (the pad 0
    ignored), plus, with lm_weight > 0, lm_weight times the mean over the questions'
    characters (question_lm_targets): GPT-1's L_task + lambda L_LM.
    """

    def __init__(self, lm_weight=0.0):
        self.weights = [1.0] if not lm_weight else [1.0, lm_weight]

    def targets(self, x, y):
        """Every kind of target of rows x, y: [(B, T)], 0 where nothing is scored."""
        return [y] if len(self.weights) == 1 else [y, question_lm_targets(x, y)]

    def counts(self, x, y):
        """Every kind of target's count in rows x, y: [0-dim int64 tensors on their device]."""
        return [(t != 0).sum() for t in self.targets(x, y)]

    def shares(self, targets, totals, ranks):
        """
        A pass's share of the global batch's targets of each kind (`totals`: counts() of the
        global batch), times `ranks` (0 for a rank's row that counts for nothing): [0-dim
        float64 tensors on the device], whose division is Python's, read back by nothing.
        """
        return [(t != 0).sum().mul(ranks).double() / n.clamp(min=1).double() for t, n in zip(targets, totals)]

    def loss(self, logits, targets, shares):
        """
        The sum over the kinds of target of weight * share * the mean loss over the pass's
        targets of that kind; a kind with a zero share adds nothing (its mean over no targets
        is NaN), chosen on the device.
        """
        flat = logits.reshape(-1, logits.size(-1))
        total = 0
        for t, weight, share in zip(targets, self.weights, shares):
            term = F.cross_entropy(flat, t.reshape(-1), ignore_index=0) * (weight * share).float()
            total = total + torch.where(share != 0, term, 0.0)
        return total
