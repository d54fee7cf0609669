"""batching.py's pure functions, without a model or a Trainer."""

import pytest
import torch

from batching import micro_batches, rank_rows, real_lengths


def padded_batch(lengths, width=12, seed=0):
    """x, y whose row i has lengths[i] real targets (ids 1..9), then the pad 0."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        y[row, :n] = torch.randint(1, 10, (n,), generator=generator)
    x = torch.randint(1, 10, y.shape, generator=generator)
    return x, y


def test_real_lengths_count_to_the_last_real_target():
    y = torch.tensor([[3, 0, 4, 0], [0, 0, 0, 0], [1, 2, 3, 4]])
    assert real_lengths(y).tolist() == [3, 0, 4]


@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_micro_batches_hold_every_real_target_once_with_shares_of_the_mean(size):
    x, y = padded_batch([5, 1, 12, 0, 7, 3, 9])
    passes = micro_batches(x, y, size)
    assert sum(share for _, _, share in passes) == pytest.approx(1.0)
    assert sum(int((yp != 0).sum()) for _, yp, _ in passes) == int((y != 0).sum())
    for xp, yp, share in passes:
        assert xp.shape == yp.shape and yp.size(1) == int(real_lengths(yp).max())  # cut after the last target
        assert share == pytest.approx(int((yp != 0).sum()) / int((y != 0).sum()))
    if size >= len(y):
        assert len(passes) == 1


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
def test_rank_rows_split_the_batch_and_weigh_the_ranks_to_the_global_mean(world_size):
    x, y = padded_batch([5, 1, 12, 4, 7, 3, 9])
    losses = torch.rand(y.shape, generator=torch.Generator().manual_seed(1))  # a loss per target
    weighted_means, taken = [], 0
    for rank in range(world_size):
        xr, yr, weight = rank_rows(x, y, rank, world_size)
        rows = list(range(rank, len(y), world_size))
        if rows:
            assert torch.equal(xr, x[rows]) and torch.equal(yr, y[rows])
            taken += len(rows)
            weighted_means.append(losses[rows][yr != 0].mean() * weight)
        else:  # a rank without rows joins the step with one that counts for nothing
            assert len(yr) == 1 and weight == 0
            weighted_means.append(torch.tensor(0.0))
    assert taken == len(y)
    # DistributedDataParallel averages the ranks: that is the mean over the whole batch
    assert float(torch.stack(weighted_means).mean()) == pytest.approx(float(losses[y != 0].mean()))
