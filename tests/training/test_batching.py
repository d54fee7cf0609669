"""batching.py's pure functions, without a model or a Trainer."""

import multiprocessing
import os
import random

import pytest
import torch

from conftest import corpus_of
from factgpt.settings.run_config import default_num_workers
from factgpt.training.batching import EpochBatches, EpochKeys
from factgpt.training.step import forward_passes, rank_rows, real_lengths
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


def straightforward_epoch(corpus, seed, workers, batch_size=16):
    """
    The epoch as a plain loop draws it, example by example in the main process: a shuffling
    DataLoader's order (after random.seed(0)), or with workers each example drawn with its own
    seed from the epoch's keys (EpochKeys), whichever process draws it.
    """
    generator = torch.Generator().manual_seed(seed)
    if workers == 0:
        random.seed(0)
        loader = torch.utils.data.DataLoader(corpus, batch_size=batch_size, shuffle=True, generator=generator)
        return list(loader)
    keys = EpochKeys(len(corpus))
    keys.draw(generator)
    items = []
    for index, example_seed in keys:
        random.seed(example_seed)
        items.append(corpus[index])
    return [tuple(map(torch.stack, zip(*items[i : i + batch_size]))) for i in range(0, len(items), batch_size)]


@pytest.mark.parametrize("workers", [0, 2])
def test_an_epoch_drawn_at_once_is_the_plain_loops_batches_row_for_row(tiny_world, workers):
    """
    An epoch is drawn whole into one tensor (the next one in the background with workers),
    and its batches are that tensor's rows: the plain loop's batches, row for row; so is a
    resumed run's epoch (a new EpochBatches, as a resumed run makes at its epoch), from any batch.
    """
    corpus = corpus_of(tiny_world["wiki.txt"], 64)
    config = TrainerConfig(batch_size=16, num_workers=workers, full_padding=True)
    uninterrupted, resumed = EpochBatches(corpus, config), EpochBatches(corpus, config)
    random.seed(0)
    list(uninterrupted.epoch(7, next_seed=8))  # with workers, epoch 8 is drawn while epoch 7 would train
    random.seed(0)
    batches = list(uninterrupted.epoch(8))
    random.seed(0)
    resumed_batches = list(resumed.epoch(8, start=2))
    expected = straightforward_epoch(corpus, 8, workers)
    assert len(batches) == len(expected) == len(uninterrupted) and len(corpus) % 16  # the last batch is short
    assert len({x.untyped_storage().data_ptr() for x, _ in batches}) == 1, "every batch a view of the epoch's tensor"
    for (x, y), (ex, ey) in zip(batches, expected):
        assert torch.equal(x, ex) and torch.equal(y, ey)
    for (x, y), (ex, ey) in zip(resumed_batches, expected[2:], strict=True):
        assert torch.equal(x, ex) and torch.equal(y, ey)


def test_closing_ends_the_workers_at_once_and_a_later_epoch_is_drawn_the_same(tiny_world):
    """
    close(), at the end of Trainer.train, ends the DataLoader's workers then and there (the garbage
    collector, which finds a Trainer in reference cycles, waits seconds for each); an epoch drawn
    after it is the one drawn before.
    """
    corpus = corpus_of(tiny_world["wiki.txt"], 64)
    batches = EpochBatches(corpus, TrainerConfig(batch_size=16, num_workers=2, full_padding=True))
    others = set(multiprocessing.active_children())
    before = list(batches.epoch(7, next_seed=8))  # epoch 8 drawn in the background meanwhile
    workers = set(multiprocessing.active_children()) - others
    assert len(workers) == 2
    batches.close()
    assert not any(worker.is_alive() for worker in workers)
    after = list(batches.epoch(7))
    assert len(after) == len(before) and all(torch.equal(a, b) for pair in zip(after, before) for a, b in zip(*pair))


@pytest.mark.parametrize("corrupt_by_epoch", [False, True])
def test_fixed_shapes_give_every_batch_one_shape_and_the_full_padding_rows(tiny_world, corrupt_by_epoch):
    """fixed_shapes: the full_padding epoch's batches row for row, the short last one grown with empty rows."""
    corpus = corpus_of(tiny_world["wiki.txt"], 64)
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


@pytest.mark.parametrize("corrupt_by_epoch", [False, True])
def test_fixed_shapes_group_by_length_as_the_cut_batches_do(tiny_world, corrupt_by_epoch):
    """
    With group_by_length, fixed shapes (CUDA's captured step) put the same examples in each
    batch as the CPU's cut batches, in the same order, at full width; the short last batch is
    grown with rows of pads.
    """
    corpus = corpus_of(tiny_world["wiki.txt"], 64)
    settings = dict(batch_size=16, num_workers=0, group_by_length=True, corrupt_by_epoch=corrupt_by_epoch)
    random.seed(0)
    cut = list(EpochBatches(corpus, TrainerConfig(**settings)).epoch(3))
    random.seed(0)
    fixed = list(EpochBatches(corpus, TrainerConfig(fixed_shapes=True, **settings)).epoch(3))
    random.seed(0)
    ungrouped = list(EpochBatches(corpus, TrainerConfig(**{**settings, "group_by_length": False})).epoch(3))
    assert len(corpus) % 16 and len(fixed) == len(cut) == len(ungrouped)  # the last batch is short
    assert {tuple(x.shape) for x, _ in fixed} == {(16, 63)}
    for (x, y), (cx, cy) in zip(fixed, cut):
        n, width = cy.shape
        assert torch.equal(x[:n, :width], cx) and torch.equal(y[:n, :width], cy)
        assert not x[n:].any() and not y[n:].any() and not y[:, width:].any()
    assert any(not torch.equal(cy, uy) for (_, cy), (_, uy) in zip(cut, ungrouped))  # grouping changes the batches
