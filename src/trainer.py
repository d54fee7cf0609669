"""
The training loop shared by pretraining and finetuning (minGPT's Trainer).

AdamW with weight decay on the matrix-multiply weights only, a learning rate that
warms up linearly and then follows a cosine down to 10% of its peak (both counted
in training tokens, block_size-1 per example; step s uses the rate for the tokens
up to and including its own batch), gradient-norm clipping, a tqdm bar and
TensorBoard scalars.

Padding is skipped: every batch is cut after its last target that is not the pad
(exact, since the loss ignores pad targets and every model here is causal), and
batches can be drawn from pools of examples grouped by length (bucket_pool), so
that a batch holds examples of similar length. On the CPU a batch also goes through
the model in passes of rows of similar length, each cut to its own longest row,
with gradients accumulated: the same batch and the same mean loss, so the same
gradient (with dropout, the same in distribution), for less arithmetic. AdamW is
the fused one on CUDA and the CPU. On CUDA it trains in bf16 (fp16 with a gradient
scaler where bf16 is missing) with TF32 matmuls, and reads the loss back only every
log_every steps instead of after every step.

With checkpoint_path set, it keeps a resumable checkpoint (model, optimizer,
schedule, epoch, position in the epoch and random states) written atomically after
every epoch and every checkpoint_minutes; resume=True continues from it. Every
epoch's data order comes from its own seeded generator, so a resumed run replays
the interrupted epoch's batches up to where it stopped and goes on exactly as an
uninterrupted run would (bit for bit on a CPU without DataLoader workers).

Under torch.distributed (torchrun), every rank builds the same global batches and
trains on its own rows of each, with the loss weighted so that the averaged
gradient is the single-process one; only rank 0 shows the bar, logs and writes.
"""

import contextlib
import logging
import math
import os
import random
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from utils import atomic_write, pick_device, rank_and_world_size, save_params, short_reason

logger = logging.getLogger(__name__)

CPU_MICRO_BATCH = 64  # rows per forward pass on the CPU: enough for efficient matmuls, few enough to share a length


class TrainerConfig:
    """Optimisation settings: the class attributes are defaults, every kwarg becomes an attribute."""

    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1  # only on matmul weights
    lr_decay = False  # linear warmup, then cosine decay to 10%
    warmup_tokens = 375e6
    final_tokens = 260e9  # tokens at which the cosine reaches 10%
    num_workers = 0
    writer = None  # a torch.utils.tensorboard.SummaryWriter, or None
    ckpt_path = None  # where to save the model's state_dict after every epoch, or None
    device = "auto"  # "auto", "cuda", "mps" or "cpu"
    skip_padding = True  # cut every batch after its last non-pad target (exact)
    bucket_pool = 16  # with skip_padding, batches per pool of examples grouped by length (1: no grouping)
    micro_batch_size = None  # with skip_padding, rows per forward pass (None: CPU_MICRO_BATCH on the CPU, else all)
    precision = "auto"  # "auto" (bf16, or fp16 + GradScaler, on CUDA; fp32 elsewhere), "fp32", "bf16", "fp16"
    fused_adamw = None  # None: fused on CUDA and the CPU, where PyTorch has a fused AdamW
    compile = False  # torch.compile the model
    log_every = 10  # steps between reading the loss back for the bar and TensorBoard
    checkpoint_path = None  # resumable checkpoint (see module docstring), or None
    checkpoint_minutes = None  # also write it every this many minutes within an epoch
    resume = False  # continue from checkpoint_path if it exists
    run_identity = None  # a dict saved in the checkpoint; resuming with a different one is refused
    data_seed = None  # seed of the epochs' data order (None: drawn from torch's generator)
    epoch_end = None  # called as epoch_end(epochs_done) on every rank after each epoch, e.g. to probe the model

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def lr_multiplier(tokens, warmup_tokens, final_tokens):
    """The learning-rate factor after `tokens` training tokens: linear warmup, cosine to 0.1, then 0.1."""
    if tokens < warmup_tokens:
        return tokens / max(1, warmup_tokens)
    progress = min(1.0, (tokens - warmup_tokens) / max(1, final_tokens - warmup_tokens))
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


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


def autocast_dtype(device, precision):
    """The dtype to autocast to, or None for fp32."""
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def parameter_groups(model, weight_decay):
    """AdamW groups: decay the weights that multiply activations, not biases, LayerNorms or embeddings."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.dim() == 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class CheckpointError(ValueError):
    """The checkpoint to resume cannot be read, or was written by a run with other settings."""


class Trainer:
    """Trains `model` on `train_dataset` (pairs of Long tensors x, y); reports the loss on `test_dataset` if given."""

    def __init__(self, model, train_dataset, test_dataset, config):
        self.config = config
        self.device = pick_device(config.device)
        self.model = model.to(self.device)
        self.train_dataset = train_dataset
        self.test_dataset = test_dataset
        self.epoch_losses = []  # mean training loss of every finished epoch
        self.step = 0  # optimizer steps taken
        self.useful_tokens = 0  # targets of the global batches trained on that are not the pad
        self.rank, self.world_size = rank_and_world_size()

    def tokens_after(self, step):
        """Training tokens seen once batch `step` (0-based) is done: the schedule's clock."""
        n, bs = len(self.train_dataset), self.config.batch_size
        steps_per_epoch = math.ceil(n / bs)
        epochs, within = divmod(step, steps_per_epoch)
        return (epochs * n + min((within + 1) * bs, n)) * self.tokens_per_example

    def lr_lambda(self, step):
        if not self.config.lr_decay:
            return 1.0
        return lr_multiplier(self.tokens_after(step), self.config.warmup_tokens, self.config.final_tokens)

    def global_batches(self, loader, generator):
        """The epoch's global batches (x, y) on the CPU, in an order fixed by the loader's and `generator`'s seeds."""
        config = self.config
        for x, y in loader:
            if config.skip_padding:
                yield from length_buckets(x, y, config.batch_size, generator)
            else:
                yield x, y

    def local_batch(self, x, y):
        """
        This rank's rows of a global batch (on the CPU) and the weight of their mean loss:
        with every rank's loss weighted so, the gradient DistributedDataParallel averages
        is that of the mean loss over the global batch.
        """
        if self.world_size == 1:
            return x, y, 1.0
        rows = torch.arange(self.rank, len(y), self.world_size)
        mine, total = int((y[rows] != 0).sum()), int((y != 0).sum())
        if len(rows) == 0:  # fewer rows than ranks: join the step with a row that counts for nothing
            rows, mine = torch.arange(1), 0
        return x[rows], y[rows], self.world_size * mine / max(1, total)

    def micro_batches(self, x, y):
        """
        A batch as forward passes on the device: [(x, y, share)], share being the pass's
        part of the batch's real targets, so that the shares' weighted sum of the passes'
        mean losses is the batch's mean loss. With skip_padding the rows are sorted by
        length, split into micro_batch_size rows, and each pass is cut after its last real
        target; otherwise the batch is one pass.
        """
        if not self.config.skip_padding:
            return [(self.to_device(x), self.to_device(y), 1.0)]
        size = self.config.micro_batch_size or (CPU_MICRO_BATCH if self.device.type == "cpu" else len(y))
        lengths = real_lengths(y)
        if size >= len(y) or not y.any():
            n = max(1, int(lengths.max()))
            return [(self.to_device(x[:, :n]), self.to_device(y[:, :n]), 1.0)]
        passes = []
        for rows in torch.argsort(lengths, stable=True).split(size):
            targets = int((y[rows] != 0).sum())
            if targets:  # rows without a real target add nothing to the batch's mean loss
                n = int(lengths[rows].max())
                passes.append((x[rows, :n], y[rows, :n], targets))
        total = sum(targets for _, _, targets in passes)
        return [(self.to_device(xp), self.to_device(yp), targets / total) for xp, yp, targets in passes]

    def backward(self, forward, passes, weight=1.0, autocast=None, scaler=None, ddp=None):
        """
        Forward and backward every pass of a batch, the gradients adding up to those of the
        batch's mean loss times `weight`; returns that mean loss (detached). Under DDP the
        gradients are averaged across ranks once, after the last pass.
        """
        loss = 0.0
        for i, (x, y, share) in enumerate(passes):
            last = i == len(passes) - 1
            sync = contextlib.nullcontext() if ddp is None or last else ddp.no_sync()
            with sync:
                with autocast or contextlib.nullcontext():
                    _, pass_loss = forward(x, y)
                scaled = pass_loss * (share * weight)
                (scaled if scaler is None else scaler.scale(scaled)).backward()
            loss = loss + pass_loss.detach() * share
        return loss

    def to_device(self, t):
        """A CPU tensor on the training device; on CUDA through pinned memory, without waiting for the copy."""
        if self.device.type == "cuda":
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    def global_mean(self, value):
        """A per-rank loss sum made global (every rank must call this at the same step)."""
        if self.world_size > 1:
            dist.all_reduce(value)
            value = value / self.world_size
        return value

    def save_checkpoint(self, state):
        """Write the resumable checkpoint atomically (rank 0 only)."""
        if self.rank == 0:
            atomic_write(self.config.checkpoint_path, lambda f: torch.save(state, f))

    def load_checkpoint(self):
        """The checkpoint to resume from, or None; raises CheckpointError if it cannot be read or it is another run's."""
        path = self.config.checkpoint_path
        if not (self.config.resume and path and os.path.exists(path)):
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise CheckpointError(f"checkpoint {path} cannot be read ({short_reason(e)}): delete it to start over") from None
        saved, wanted = state.get("run_identity"), self.config.run_identity
        if saved != wanted:
            differences = ", ".join(
                f"{key} {saved.get(key)!r} there, {wanted.get(key)!r} here"
                for key in sorted(set(saved or {}) | set(wanted or {}))
                if (saved or {}).get(key) != (wanted or {}).get(key)
            )
            raise CheckpointError(f"checkpoint {path} is from a run with other settings ({differences}): "
                                  "resume with the same command, or delete it to start over")
        return state

    def train(self):
        config, model = self.config, self.model
        self.tokens_per_example = self.train_dataset[0][0].numel()
        on_cuda = self.device.type == "cuda"
        if on_cuda:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        dtype = autocast_dtype(self.device, config.precision)
        autocast = torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        scaler = torch.amp.GradScaler(self.device.type, enabled=dtype == torch.float16)
        fused = self.device.type in ("cuda", "cpu") if config.fused_adamw is None else config.fused_adamw
        optimizer = torch.optim.AdamW(
            parameter_groups(model, config.weight_decay), lr=config.learning_rate, betas=config.betas, fused=fused
        )
        scheduler = LambdaLR(optimizer, self.lr_lambda)
        data_seed = config.data_seed
        if data_seed is None:
            data_seed = int(torch.randint(2**62, ()))
        start_epoch, skip, epoch_loss_so_far = 0, 0, 0.0
        checkpoint = self.load_checkpoint()
        if checkpoint is not None:
            model.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            scheduler.load_state_dict(checkpoint["scheduler"])
            scaler.load_state_dict(checkpoint["scaler"])
            start_epoch, skip = checkpoint["epoch"], checkpoint["batches_done"]
            self.step, self.useful_tokens = checkpoint["step"], checkpoint["useful_tokens"]
            self.epoch_losses, epoch_loss_so_far = checkpoint["epoch_losses"], checkpoint["epoch_loss_so_far"]
            data_seed = checkpoint["data_seed"]
            random.setstate(checkpoint["python_random"])
            self.restore_torch_random(checkpoint)  # replaying the skipped batches draws only from the data's generators
            if self.rank == 0:
                logger.warning("resuming from %s after %d steps (%d epochs done)", config.checkpoint_path, self.step,
                               start_epoch)

        forward, ddp = model, None
        if self.world_size > 1:
            forward = ddp = DistributedDataParallel(model, device_ids=[self.device.index] if on_cuda else None)
        if config.compile:
            forward = torch.compile(forward, dynamic=True)
        pool = config.batch_size * (config.bucket_pool if config.skip_padding else 1)
        generator = torch.Generator()
        loader = DataLoader(
            self.train_dataset,
            batch_size=pool,
            shuffle=True,
            generator=generator,
            num_workers=config.num_workers,
            persistent_workers=config.num_workers > 0,
            pin_memory=on_cuda,
        )
        steps_per_epoch = math.ceil(len(self.train_dataset) / config.batch_size)
        bar = tqdm(total=config.max_epochs * steps_per_epoch, initial=self.step, dynamic_ncols=True, desc="training",
                   disable=self.rank != 0)
        last_save = time.monotonic()
        for epoch in range(start_epoch, config.max_epochs):
            model.train()
            generator.manual_seed(data_seed + epoch)
            epoch_random_state = random.getstate()  # the dataset's draws (span corruption) replay from here
            epoch_loss = torch.full((), epoch_loss_so_far, device=self.device)
            window_loss, window_steps = torch.zeros((), device=self.device), 0
            for batch, (x, y) in enumerate(self.global_batches(loader, generator)):
                if batch < skip:
                    continue
                self.useful_tokens += int((y != 0).sum())  # counted on the CPU: no device sync
                x, y, weight = self.local_batch(x, y)
                optimizer.zero_grad(set_to_none=True)
                loss = self.backward(forward, self.micro_batches(x, y), weight, autocast, scaler, ddp)
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
                scaler.step(optimizer)
                scaler.update()
                lr = scheduler.get_last_lr()[0]
                scheduler.step()
                weighted = loss.float() * weight
                epoch_loss += weighted
                window_loss += weighted
                window_steps += 1
                self.step += 1
                bar.update()
                if config.writer is not None:
                    config.writer.add_scalar("train/lr", lr, self.step)
                if self.step % config.log_every == 0:
                    mean = self.global_mean(window_loss).item() / window_steps
                    window_loss.zero_()
                    window_steps = 0
                    bar.set_description(f"epoch {epoch + 1}/{config.max_epochs} loss {mean:.4f} lr {lr:.2e}", refresh=False)
                    if config.writer is not None:
                        config.writer.add_scalar("train/loss", mean, self.step)
                minutes = config.checkpoint_minutes
                if config.checkpoint_path and minutes and time.monotonic() - last_save >= 60 * minutes:
                    self.save_checkpoint(self.checkpoint_state(
                        model, optimizer, scheduler, scaler, data_seed, epoch, batch + 1, epoch_loss, epoch_random_state))
                    last_save = time.monotonic()
            skip, epoch_loss_so_far = 0, 0.0
            self.epoch_losses.append(self.global_mean(epoch_loss).item() / steps_per_epoch)
            logger.info("epoch %d: mean train loss %.4f", epoch + 1, self.epoch_losses[-1])
            if self.test_dataset is not None:
                test_loss = self.evaluate_loss(self.test_dataset)
                logger.info("epoch %d: test loss %.4f", epoch + 1, test_loss)
                if config.writer is not None:
                    config.writer.add_scalar("test/loss", test_loss, self.step)
            if config.ckpt_path is not None and self.rank == 0:
                save_params(model, config.ckpt_path)
            if config.epoch_end is not None:
                config.epoch_end(epoch + 1)
            if config.checkpoint_path:
                self.save_checkpoint(self.checkpoint_state(
                    model, optimizer, scheduler, scaler, data_seed, epoch + 1, 0, 0.0, random.getstate()))
                last_save = time.monotonic()
        bar.close()

    def checkpoint_state(self, model, optimizer, scheduler, scaler, data_seed, epoch, batches_done, epoch_loss,
                         python_random):
        """Everything a resumed run needs to go on as if it had not stopped."""
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "epoch": epoch,  # the epoch to run next (0-based) ...
            "batches_done": batches_done,  # ... and how many of its batches are done
            "step": self.step,
            "useful_tokens": self.useful_tokens,
            "epoch_losses": list(self.epoch_losses),
            "epoch_loss_so_far": float(epoch_loss),
            "data_seed": data_seed,
            "python_random": python_random,
            "torch_random": torch.get_rng_state(),
            "cuda_random": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
            "run_identity": self.config.run_identity,
        }

    def restore_torch_random(self, checkpoint):
        """Dropout's generators as they were at the checkpoint (on one process; ranks reseed their own)."""
        if self.world_size > 1:
            torch.manual_seed(checkpoint["step"] * self.world_size + self.rank)
            return
        torch.set_rng_state(checkpoint["torch_random"])
        if checkpoint["cuda_random"] is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state_all(checkpoint["cuda_random"])

    @torch.no_grad()
    def evaluate_loss(self, dataset):
        """The mean loss over a dataset, with dropout off; the model's mode is left as it was."""
        was_training = self.model.training
        self.model.eval()
        loader = DataLoader(dataset, batch_size=self.config.batch_size, num_workers=self.config.num_workers)
        losses = [self.model(x.to(self.device), y.to(self.device))[1].item() for x, y in loader]
        self.model.train(was_training)
        return sum(losses) / max(1, len(losses))
