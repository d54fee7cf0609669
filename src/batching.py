"""
How examples become the batches a step trains on, on the CPU.

Every model here is causal and the loss ignores pad targets (id 0), so a batch can be
cut after its last real target, and split into passes of rows of similar length,
without changing its mean loss or gradient (the trainer weighs each pass by its share
of the batch's targets).
"""

import math
import random
import signal
import threading

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from capture import way_for

LENGTH_GROUPING_POOL = 16  # with group_by_length, batches per pool of examples grouped by length


def leave_stop_signals_to_the_main_process(worker_id):
    """
    A DataLoader worker takes SIGTERM as it takes a Ctrl-C: it ends quietly, and the main
    process, which gets the same signal when it is sent to the whole process group, stops
    after its step and writes its checkpoint (a worker killed by SIGTERM would end the run
    with the DataLoader's error instead).
    """
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def real_lengths(y):
    """(B, T) targets -> (B,) the position after each row's last target that is not the pad 0."""
    positions = torch.arange(1, y.size(1) + 1, device=y.device)
    return ((y != 0) * positions).max(dim=1).values


def to_device(device, t):
    """A tensor on the training device (as it is if there); from the CPU to CUDA through pinned memory, not waiting."""
    if t.device.type == "cpu" and device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


class EpochBatches:
    """
    The global batches (x, y) of an epoch, in an order fixed by the epoch's seed.

    A whole epoch is drawn at once into one (N, T) tensor, from a DataLoader (with workers,
    each example with its own seed, and the next epoch drawn while this one trains) or from
    the dataset's corrupt_all (corrupt_by_epoch). With group_by_length, pools of
    LENGTH_GROUPING_POOL batches are split into batches of similar length (bucket_rows);
    the same examples share a batch whatever the batches' width. By default each batch is
    cut after its last real target and stays on the host, where its passes are planned.
    full_padding keeps the rows at the block size, as the course's are; fixed_shapes (and a
    captured step) also grows the short last batch with rows of pads, so that every batch
    has one shape. Batches of one width are copied to the device once an epoch, as slices.
    """

    def __init__(self, dataset, config, device=None):
        self.dataset, self.config, self.device = dataset, config, device or torch.device("cpu")
        self.generator = torch.Generator()
        self.fixed = config.fixed_shapes or way_for(config, self.device) != "off"  # a captured step replays one shape
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
        else:  # persistent workers: each example drawn with its own seed (SeededItems), from the epoch's keys
            self.keys = EpochKeys(len(dataset))
            dataset, order = SeededItems(dataset), dict(sampler=self.keys, generator=torch.Generator())
        self.loader = DataLoader(
            dataset,
            batch_size=self.chunk_size,
            num_workers=config.num_workers,
            persistent_workers=config.num_workers > 0,
            worker_init_fn=leave_stop_signals_to_the_main_process,
            **order,
        )

    def __len__(self):
        """Steps per epoch."""
        return math.ceil(len(self.dataset) / self.config.batch_size)

    def epoch(self, seed, start=0, next_seed=None):
        """
        The epoch's global batches (x, y), each (B, T) on the device (cut ones: on the host),
        from batch `start` on, drawn with a generator seeded with `seed`; with workers, epoch
        `next_seed` (if not None) is drawn in the background meanwhile.
        """
        ahead, self.ahead = self.ahead, None
        drawn = ahead.result() if ahead is not None else None  # a draw in the background uses the generator
        x, y, batches = drawn if ahead is not None and ahead.seed == seed else self.drawn(seed)
        if self.keys is not None and next_seed is not None:
            self.ahead = DrawnAhead(self, next_seed)
        if not self.cut:  # one copy an epoch; cut batches stay on the host, where their passes are planned
            x, y = to_device(self.device, x), to_device(self.device, y)
        for rows, width in batches[start:]:
            yield x[rows, :width], y[rows, :width]

    def drawn(self, seed):
        """
        The epoch drawn: its examples x, y (N, T) on the CPU, in the order drawn, and its
        batches [(rows, width)]: a slice or an index tensor of rows, and the batch's width.
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
        for x, y in chunks:  # each pool bucketed as it comes, the generator drawn in a plain loop's order
            if self.bucketed:
                offset = sum(map(len, ys))
                batches += [(rows + offset, n) for rows, n in bucket_rows(real_lengths(y), size, self.generator)]
            xs.append(x)
            ys.append(y)
        x, y = torch.cat(xs), torch.cat(ys)
        if self.bucketed and not self.cut:  # grouped rows at full width: reordered so that each batch is a slice
            order = torch.cat([rows for rows, _ in batches])
            x, y = x[order], y[order]
        if self.fixed:
            x, y = padded_rows(x, y, len(self) * size)
        if not self.cut:
            batches = [(slice(i, i + size), x.size(1)) for i in range(0, len(y), size)]
        return x, y, batches


class DrawnAhead:
    """EpochBatches.drawn(seed) in a thread of its own (its workers do the drawing), for when the epoch is due."""

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
    The epoch's examples in their order, each with the seed its span corruption is drawn with:
    (index, seed) keys drawn from the epoch's generator, so that the epoch is the same whichever
    worker process draws it and however many epochs the workers ran before (a resumed run).
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
    """`dataset` read by (index, seed) keys: the item at index drawn after seeding Python's random with seed."""

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
    A pool of examples of these (N,) real lengths split into batches of similar length:
    [(rows, width)], each batch's rows and its longest row's length. The full batches come
    in random order (ties in length broken at random), then a short remainder batch of
    randomly chosen examples, as a DataLoader would end an epoch.
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
    A batch x, y (B, T) grown to `rows` rows with rows of pads, which have no targets: its loss
    and gradients are the batch's, and every batch of an epoch has one shape (a CUDA graph's).
    """
    missing = rows - len(y)
    if missing <= 0:
        return x, y
    return torch.cat((x, x.new_zeros(missing, x.size(1)))), torch.cat((y, y.new_zeros(missing, y.size(1))))


def forward_passes(x, y, size=None, cut=True):
    """
    A batch as forward passes [(x, y)]: its rows sorted by length, `size` rows at a time
    (None: all), each pass cut after its last real target; a batch of at most `size`
    rows is one pass in its own order, and cut=False leaves it whole. Passes without a
    real target are left out: they add nothing to the batch's loss.
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
    Rank `rank`'s rows of a global batch (rows rank, rank + N, ...), and whether they
    count: with fewer rows than ranks, a rank joins the step with a row that counts for nothing.
    """
    if world_size == 1:
        return x, y, True
    rows = torch.arange(len(y))[rank::world_size]
    if len(rows) == 0:
        return x[:1], y[:1], False
    return x[rows], y[rows], True
