"""
How examples become an epoch's global batches, drawn on the CPU in an order fixed by the epoch's
seed. Every model here is causal and the loss ignores pad targets (id 0), so a batch can be cut
after its last real target without changing its loss (step.py splits it further).
"""

import math
import random
import threading

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from factgpt.common.signals import leave_stop_signals_to_the_main_process
from factgpt.training.capture import capture_mode
from factgpt.training.step import real_lengths

LENGTH_GROUPING_POOL = 16  # with group_by_length, batches per pool of examples grouped by length


def to_device(device, t):
    """The tensor on `device`, copied from the CPU to CUDA through pinned memory without waiting."""
    if t.device.type == "cpu" and device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


class EpochBatches:
    """
    The global batches (x, y) of an epoch, drawn all at once from a DataLoader or the dataset's
    corrupt_all, in an order fixed by the epoch's seed. Batches are cut after their last real target
    unless full_padding keeps the block size, as the course's. fixed_shapes (or a captured step)
    also pads the short last batch, so that every batch has one shape.
    """

    def __init__(self, dataset, config, device=None):
        self.dataset, self.config, self.device = dataset, config, device or torch.device("cpu")
        self.generator = torch.Generator()
        # a captured step replays one shape
        self.fixed = config.fixed_shapes or capture_mode(config, self.device) != "off"
        self.cut = not (config.full_padding or self.fixed)  # rows cut after their last real target
        # grouping decides which examples share a batch, whatever the batches' width
        self.bucketed = self.cut or config.group_by_length
        pool = LENGTH_GROUPING_POOL if config.group_by_length else 1
        self.chunk_size = config.batch_size * pool
        self.loader, self.keys, self.ahead = None, None, None
        if config.corrupt_by_epoch:
            return
        if config.num_workers == 0:
            order = dict(shuffle=True, generator=self.generator)
        else:
            # persistent workers: each example drawn with its own seed (SeededItems),
            # from the epoch's keys
            self.keys = EpochKeys(len(dataset))
            dataset, order = (
                SeededItems(dataset),
                dict(sampler=self.keys, generator=torch.Generator()),
            )
        self.loader_settings = dict(
            dataset=dataset,
            batch_size=self.chunk_size,
            num_workers=config.num_workers,
            persistent_workers=config.num_workers > 0,
            worker_init_fn=leave_stop_signals_to_the_main_process,
            **order,
        )
        self.loader = DataLoader(**self.loader_settings)

    def close(self):
        """
        End the DataLoader's workers now, and leave a fresh DataLoader for any later epoch. Left to
        the garbage collector, which finds a Trainer in reference cycles, each worker's end waits
        seconds.
        """
        if self.ahead is not None:
            self.ahead.thread.join()
            self.ahead = None
        if self.config.num_workers > 0 and self.loader is not None:
            self.loader = DataLoader(**self.loader_settings)

    def __len__(self):
        """Steps per epoch."""
        return math.ceil(len(self.dataset) / self.config.batch_size)

    def epoch(self, seed, start=0, next_seed=None):
        """
        The epoch's batches (B, T) from batch `start` on, drawn with `seed`, on the device (cut ones
        stay on the host); with workers, epoch `next_seed` is drawn in the background meanwhile.
        """
        ahead, self.ahead = self.ahead, None
        # a draw in the background uses the generator
        drawn = ahead.result() if ahead is not None else None
        x, y, batches = drawn if ahead is not None and ahead.seed == seed else self.drawn(seed)
        if self.keys is not None and next_seed is not None:
            self.ahead = DrawnAhead(self, next_seed)
        # one copy an epoch; cut batches stay on the host, where their passes are planned
        if not self.cut:
            x, y = to_device(self.device, x), to_device(self.device, y)
        for rows, width in batches[start:]:
            yield x[rows, :width], y[rows, :width]

    def drawn(self, seed):
        """
        The epoch drawn with `seed`: examples x, y (N, T) on the CPU, and each batch's rows and
        width, in order.
        """
        self.generator.manual_seed(seed)
        if self.keys is not None:
            self.keys.draw(self.generator)
        if self.loader is not None:
            chunks = self.loader
        else:
            order = torch.randperm(len(self.dataset), generator=self.generator)
            x, y = self.dataset.corrupt_all(order, self.generator)
            chunks = zip(x.split(self.chunk_size), y.split(self.chunk_size))
        xs, ys, batches, size = [], [], [], self.config.batch_size
        # each pool bucketed as it comes, the generator drawn in a plain loop's order
        for x, y in chunks:
            if self.bucketed:
                offset = sum(map(len, ys))
                batches += [
                    (rows + offset, n)
                    for rows, n in bucket_rows(real_lengths(y), size, self.generator)
                ]
            xs.append(x)
            ys.append(y)
        x, y = torch.cat(xs), torch.cat(ys)
        # grouped rows at full width: reordered so that each batch is a slice
        if self.bucketed and not self.cut:
            order = torch.cat([rows for rows, _ in batches])
            x, y = x[order], y[order]
        if self.fixed:
            x, y = padded_rows(x, y, len(self) * size)
        if not self.cut:
            batches = [(slice(i, i + size), x.size(1)) for i in range(0, len(y), size)]
        return x, y, batches


class DrawnAhead:
    """
    EpochBatches.drawn(seed) run in a thread of its own (its workers do the drawing) while an epoch
    trains.
    """

    def __init__(self, batches, seed):
        self.seed, self.value, self.error = seed, None, None
        self.thread = threading.Thread(target=self.draw, args=(batches, seed), daemon=True)
        self.thread.start()

    def draw(self, batches, seed):
        try:
            self.value = batches.drawn(seed)
        except BaseException as e:  # said where the epoch is asked for
            self.error = e

    def result(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


class EpochKeys(Sampler):
    """
    The epoch's (index, seed) keys from its generator: the same epoch whichever worker draws it,
    resumed or not.
    """

    def __init__(self, size):
        self.size, self.keys = size, []

    def draw(self, generator):
        order = torch.randperm(self.size, generator=generator)
        seeds = torch.randint(2**62, (self.size,), generator=generator)
        self.keys = list(zip(order.tolist(), seeds.tolist()))

    def __len__(self):
        return self.size

    def __iter__(self):
        return iter(self.keys)


class SeededItems(Dataset):
    """
    `dataset` read by (index, seed) keys: each item drawn after seeding Python's random with its
    seed.
    """

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, key):
        index, seed = key
        random.seed(seed)
        return self.dataset[index]


def bucket_rows(lengths, batch_size, generator=None):
    """
    Split a pool of examples with these (N,) real lengths into batches of similar length, each its
    rows and width, in random order; a short batch of random rows comes last, as a DataLoader's
    would.
    """
    order = torch.randperm(len(lengths), generator=generator)
    n_remainder = len(lengths) % batch_size
    remainder, rest = order[:n_remainder], order[n_remainder:]
    rest = rest[torch.argsort(lengths[rest], stable=True)]
    chunks = [rows for rows in rest.split(batch_size) if len(rows)]
    chunks = [chunks[i] for i in torch.randperm(len(chunks), generator=generator).tolist()]
    chunks += [remainder] if n_remainder else []
    return [(rows, max(1, int(lengths[rows].max()))) for rows in chunks]


def padded_rows(x, y, rows):
    """
    The batch x, y grown to `rows` rows with pad rows, which have no targets, so that every batch
    has one shape.
    """
    missing = rows - len(y)
    if missing <= 0:
        return x, y
    return torch.cat((x, x.new_zeros(missing, x.size(1)))), torch.cat(
        (y, y.new_zeros(missing, y.size(1)))
    )
