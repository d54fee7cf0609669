"""
The course's helpers: seeding, sampling from a model, and scoring predicted birthplaces; a model in
eval mode.
"""

import contextlib
import random

import torch
import torch.nn.functional as F

from factgpt.common.questions import read_question_file


def set_seed(seed):
    """Seed Python's and PyTorch's generators (every device)."""
    random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def eval_mode(model):
    """
    The model in eval mode (dropout off) inside the block, and in the train/eval mode it had after
    it.
    """
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def top_k_logits(logits, k):
    """Keep the k largest logits of every row; the rest become -inf."""
    v, _ = torch.topk(logits, k)
    return logits.masked_fill(logits < v[:, [-1]], float("-inf"))


@torch.no_grad()
def sample(model, x, steps, temperature=1.0, sample=False, top_k=None):
    """
    Extend every row of x (B, T) by `steps` tokens, each the likeliest or, with sample=True, drawn
    from the softmax of logits/temperature (of the top_k if given), in eval mode and on at most
    block_size-1 tokens.
    """
    context = model.get_block_size() - 1
    with eval_mode(model):
        for _ in range(steps):
            logits, _ = model(x[:, -context:])
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                logits = top_k_logits(logits, top_k)
            if sample:
                ix = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            else:
                ix = logits.argmax(dim=-1, keepdim=True)
            x = torch.cat((x, ix), dim=1)
    return x


def evaluate_places(filepath, predicted_places):
    """
    The number of questions of a question<TAB>place file and of exact predictions; (0, 0) without
    places.
    """
    rows = read_question_file(filepath)
    if not rows or rows[0][2] is None:
        return 0, 0
    if len(rows) != len(predicted_places):
        raise ValueError(
            f"{filepath} has {len(rows)} questions but {len(predicted_places)} predictions "
            "were given"
        )
    correct = sum(place == predicted for (_, _, place), predicted in zip(rows, predicted_places))
    return len(rows), correct
