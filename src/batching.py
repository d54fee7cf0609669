"""
How examples become the batches a step trains on: pure functions of CPU tensors.

Every model here is causal and the loss ignores pad targets (id 0), so a batch can be
cut after its last real target, and split into passes of rows of similar length,
without changing its mean loss or gradient.
"""

import torch


def real_lengths(y):
    """(B, T) targets -> (B,) the position after each row's last target that is not the pad 0."""
    positions = torch.arange(1, y.size(1) + 1, device=y.device)
    return ((y != 0) * positions).max(dim=1).values


def length_buckets(x, y, batch_size, generator=None):
    """
    Split a pool of examples into batches of similar length, each cut to its longest row.
    The full batches come in random order (ties in length broken at random), then a
    short remainder batch of randomly chosen examples, as a DataLoader would end an epoch.
    """
    lengths = real_lengths(y)
    order = torch.randperm(len(y), generator=generator)
    n_remainder = len(y) % batch_size
    remainder, rest = order[:n_remainder], order[n_remainder:]
    rest = rest[torch.argsort(lengths[rest], stable=True)]
    chunks = [rows for rows in rest.split(batch_size) if len(rows)]
    chunks = [chunks[i] for i in torch.randperm(len(chunks), generator=generator).tolist()]
    chunks += [remainder] if n_remainder else []
    for rows in chunks:
        n = max(1, int(lengths[rows].max()))
        yield x[rows, :n], y[rows, :n]


def micro_batches(x, y, size):
    """
    A batch as forward passes: [(x, y, share)], share being the pass's part of the batch's
    real targets, so that the shares' weighted sum of the passes' mean losses is the
    batch's mean loss. The rows are sorted by length, split into `size` rows, and each
    pass is cut after its last real target; a batch of at most `size` rows is one pass.
    """
    lengths = real_lengths(y)
    if size >= len(y) or not y.any():
        n = max(1, int(lengths.max()))
        return [(x[:, :n], y[:, :n], 1.0)]
    passes = []
    for rows in torch.argsort(lengths, stable=True).split(size):
        targets = int((y[rows] != 0).sum())
        if targets:  # rows without a real target add nothing to the batch's mean loss
            n = int(lengths[rows].max())
            passes.append((x[rows, :n], y[rows, :n], targets))
    total = sum(targets for _, _, targets in passes)
    return [(xp, yp, targets / total) for xp, yp, targets in passes]


def rank_rows(x, y, rank, world_size):
    """
    Rank `rank`'s rows of a global batch (rows rank, rank + N, ...) and the weight of
    their mean loss: with every rank's loss weighted so, the gradient that
    DistributedDataParallel averages is that of the mean loss over the global batch.
    """
    if world_size == 1:
        return x, y, 1.0
    rows = torch.arange(rank, len(y), world_size)
    mine, total = int((y[rows] != 0).sum()), int((y != 0).sum())
    if len(rows) == 0:  # fewer rows than ranks: join the step with a row that counts for nothing
        rows, mine = torch.arange(1), 0
    return x[rows], y[rows], world_size * mine / max(1, total)
