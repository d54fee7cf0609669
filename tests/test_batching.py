"""batching.py's pure functions, without a model or a Trainer."""

import os
import random

import pytest
import torch

from batching import EpochBatches, forward_passes, rank_rows, real_lengths
from config import default_num_workers
from dataset import CharCorruptionDataset
from trainer import TrainerConfig


def padded_batch(lengths, width=12, seed=0):
    """x, y whose row i has lengths[i] real targets (ids 1..9), then the pad 0."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        y[row, :n] = torch.randint(1, 10, (n,), generator=generator)
    x = torch.randint(1, 10, y.shape, generator=generator)
    x[:, 0] = 10 + torch.arange(len(lengths))  # which row of the batch: 10 + its index
    return x, y


def rows_of(xp):
    """The batch's indices of the rows of a pass (padded_batch's x marks them)."""
    return (xp[:, 0] - 10).tolist()


def test_real_lengths_count_to_the_last_real_target():
    y = torch.tensor([[3, 0, 4, 0], [0, 0, 0, 0], [1, 2, 3, 4]])
    assert real_lengths(y).tolist() == [3, 0, 4]


@pytest.mark.parametrize("size", [None, 1, 2, 3, 8])
def test_forward_passes_hold_every_real_target_once_each_cut_after_its_last(size):
    x, y = padded_batch([5, 1, 12, 0, 7, 3, 9])
    passes = forward_passes(x, y, size)
    assert sum(int((yp != 0).sum()) for _, yp in passes) == int((y != 0).sum())
    rows = [i for xp, _ in passes for i in rows_of(xp)]
    assert len(rows) == len(set(rows))  # no row twice ...
    assert {i for i in range(len(y)) if y[i].any()} <= set(rows)  # ... and every row with a target once
    for xp, yp in passes:
        assert xp.shape == yp.shape and yp.size(1) == int(real_lengths(yp).max())  # cut after the last target
        assert torch.equal(xp, x[rows_of(xp), : xp.size(1)]) and torch.equal(yp, y[rows_of(xp), : yp.size(1)])
        assert not y[rows_of(xp), yp.size(1) :].any()  # nothing real was cut off
    if size is None or size >= len(y):  # one pass, in the batch's own order
        assert len(passes) == 1 and rows_of(passes[0][0]) == list(range(len(y)))
    assert forward_passes(x, y, size, cut=False)[0][1] is y  # cut=False: the batch as it is


def shares_of(y, rank_and_passes, world_size):
    """The step's rule: a pass's share is its real targets / the global batch's * the world size (0 if not counted)."""
    total = int((y != 0).sum())
    return [counted * world_size * int((yp != 0).sum()) / total for counted, yp in rank_and_passes]


@pytest.mark.parametrize("world_size", [1, 2, 3, 7, 8, 16])
@pytest.mark.parametrize("size", [None, 1, 2])
def test_the_shares_of_passes_and_ranks_add_up_to_the_world_size_and_the_global_mean(world_size, size):
    x, y = padded_batch([5, 1, 12, 4, 7, 3, 9])
    losses = torch.rand(y.shape, generator=torch.Generator().manual_seed(1))  # a loss per target
    all_shares, rank_losses, taken = [], [], []
    for rank in range(world_size):
        xr, yr, counted = rank_rows(x, y, rank, world_size)
        rows = list(range(rank, len(y), world_size))
        if rows:
            assert counted and torch.equal(xr, x[rows]) and torch.equal(yr, y[rows])
            taken += rows
        else:  # a rank without rows joins the step with one that counts for nothing
            assert len(yr) == 1 and not counted
        passes = forward_passes(xr, yr, size)
        shares = shares_of(y, [(counted, yp) for _, yp in passes], world_size)
        all_shares += shares
        rank_loss = 0.0
        for (xp, yp), share in zip(passes, shares):  # each pass's mean loss times its share
            pass_losses = losses[rows_of(xp), : yp.size(1)][yp != 0]
            rank_loss += float(pass_losses.mean()) * share
        rank_losses.append(rank_loss)
    assert sorted(taken) == list(range(len(y)))  # the ranks' rows cover the batch once
    assert sum(all_shares) == pytest.approx(world_size)
    # DistributedDataParallel averages the ranks: that is the mean over the whole batch
    assert sum(rank_losses) / world_size == pytest.approx(float(losses[y != 0].mean()))


def test_dataloader_workers_follow_the_cores_on_cuda_only(monkeypatch):
    """Colab's two vCPUs get one worker, a large host four, one core none; the CPU never any."""
    for cores, workers in [(2, 1), (1, 0), (16, 4), (5, 4)]:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)), raising=False)
        assert default_num_workers(torch.device("cuda")) == workers
        assert default_num_workers(torch.device("cpu")) == 0


def test_an_epoch_with_workers_is_the_same_after_a_resume(tiny_world):
    """
    DataLoader workers live on from epoch to epoch: a resumed run's loader, made at epoch 1,
    must give epoch 1 the order and span corruptions of the loader that ran epoch 0 first.
    """
    with open(tiny_world["wiki.txt"], encoding="utf-8") as f:
        corpus = CharCorruptionDataset(f.read(), 64)
    config = TrainerConfig(batch_size=16, num_workers=2)
    uninterrupted, resumed = EpochBatches(corpus, config), EpochBatches(corpus, config)
    list(uninterrupted.epoch(7))
    batches, resumed_batches = list(uninterrupted.epoch(8)), list(resumed.epoch(8))
    assert len(batches) == len(resumed_batches) == len(uninterrupted)
    for (x, y), (rx, ry) in zip(batches, resumed_batches):
        assert torch.equal(x, rx) and torch.equal(y, ry)
    assert sum(len(y) for _, y in batches) == len(corpus)
    assert sorted(index for index, _ in resumed.keys.keys) == list(range(len(corpus)))  # every example once


@pytest.mark.parametrize("corrupt_by_epoch", [False, True])
def test_fixed_shapes_give_every_batch_one_shape_and_the_full_padding_rows(tiny_world, corrupt_by_epoch):
    """fixed_shapes: the full_padding epoch's batches row for row, the short last one grown with empty rows."""
    with open(tiny_world["wiki.txt"], encoding="utf-8") as f:
        corpus = CharCorruptionDataset(f.read(), 64)
    settings = dict(batch_size=16, num_workers=0, corrupt_by_epoch=corrupt_by_epoch)
    random.seed(0)  # the span corruptions' draws (without workers or corrupt_by_epoch, from Python's generator)
    padded = list(EpochBatches(corpus, TrainerConfig(full_padding=True, **settings)).epoch(3))
    random.seed(0)
    fixed = list(EpochBatches(corpus, TrainerConfig(fixed_shapes=True, **settings)).epoch(3))
    assert len(corpus) % 16 and len(fixed) == len(padded)  # the last batch is short
    assert {tuple(x.shape) for x, _ in fixed} == {tuple(y.shape) for _, y in fixed} == {(16, 63)}
    for (x, y), (px, py) in zip(fixed, padded):
        n = len(py)
        assert torch.equal(x[:n], px) and torch.equal(y[:n], py)
        assert not x[n:].any() and not y[n:].any()
