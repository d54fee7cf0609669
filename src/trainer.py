"""
The training loop shared by pretraining and finetuning: minGPT's Trainer, as the course has it.

By default it optimises exactly as the course's trainer does: AdamW with weight decay on all
but the biases, the course's warmup and cosine by tokens seen, gradient-norm clipping, fp32. Other
decay groups and schedules are switches, because the decay groups alone cost the course's recipe
most of its accuracy (docs/optimisation.md).

The whole step is gradient_step, and its arithmetic is one file, factgpt/training/step.py: the
loss and the rule that splits a batch over passes and ranks, AdamW and its groups, the precision,
the schedule and the running loss. Capturing the step as a CUDA graph is a wrapper around it
(factgpt/training/capture.py).
"""

import contextlib
import logging
import random

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from tqdm.auto import tqdm

from factgpt.common.distributed import pick_device, rank_and_world_size
from factgpt.common.signals import (
    TrainingInterrupted,
    leave_stop_signals_to_the_main_process,
    stop_signals_caught,
)
from factgpt.settings.recipe import Recipe
from factgpt.training import checkpoint
from factgpt.training.batching import EpochBatches, to_device
from factgpt.training.capture import capture_mode, captured
from factgpt.training.params import save_params
from factgpt.training.step import (
    LossTally,
    Objective,
    TokenSchedule,
    autocast_and_scaler,
    course_adamw,
    forward_passes,
    rank_rows,
)
from utils import eval_mode

logger = logging.getLogger(__name__)

# rows per forward pass on the CPU: few enough to share a length, enough for efficient matmuls
CPU_MICRO_BATCH = 16


def with_recipe_defaults(cls):
    """
    `cls` with each Recipe field the Trainer reads that the course's settings lack, at the Recipe's
    default (settings/recipe.py, their one home, says what each does).
    """
    for name, default in Recipe.trainer_defaults().items():
        if name not in vars(cls):
            setattr(cls, name, default)
    return cls


@with_recipe_defaults
class TrainerConfig:
    """
    Every setting the Trainer reads: the course's, with its names and defaults; the Recipe's
    training fields (with_recipe_defaults); and the run's. Like the course's, it keeps any other
    name it is given.
    """

    # the course's
    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1
    lr_decay = False  # linear warmup, then the cosine (see lr_schedule)
    warmup_tokens = 375e6
    final_tokens = 260e9  # the cosine's half period in tokens (its bottom, below the 10% floor)
    ckpt_path = None  # where to save the model's state_dict after every epoch, or None
    num_workers = 0
    writer = None  # the course's SummaryWriter; Trainer(writer=...) is the same
    # the run's
    device = "auto"  # one of distributed.DEVICES
    micro_batch_size = None  # rows per forward pass (None: CPU_MICRO_BATCH on the CPU, else all)
    fused_adamw = None  # None: fused on CUDA and the CPU, where PyTorch has a fused AdamW
    log_every = 10  # steps between reading the loss back for the bar and TensorBoard
    data_seed = None  # seed of the epochs' data order (None: drawn from torch's generator)

    def __init__(self, **kwargs):
        for name, value in kwargs.items():
            setattr(self, name, value)


class Trainer:
    """
    Trains `model` on `train_dataset` (pairs of Long tensors x, y); reports the loss on
    `test_dataset` if given. `epoch_end(epochs_done)` is called on every rank after each epoch, and
    `checkpoints` (checkpoint.Checkpoints) makes the training resumable.
    """

    def __init__(
        self,
        model,
        train_dataset,
        test_dataset,
        config,
        writer=None,
        epoch_end=None,
        checkpoints=None,
    ):
        self.config = config
        self.writer = writer if writer is not None else config.writer
        self.epoch_end, self.checkpoints = epoch_end, checkpoints
        self.device = pick_device(config.device)
        self.model = model.to(self.device)
        self.train_dataset, self.test_dataset = train_dataset, test_dataset
        self.rank, self.world_size = rank_and_world_size()
        self.autocast, self.scaler = autocast_and_scaler(config.precision, self.device)
        self.optimizer = course_adamw(model, config, self.device)
        self.schedule = TokenSchedule(config, len(train_dataset), train_dataset[0][0].numel())
        self.scheduler = LambdaLR(self.optimizer, self.schedule.factor)
        self.objective = Objective(config.finetune_lm_weight)
        self.batches = EpochBatches(train_dataset, config, self.device)
        self.micro_batch_size = config.micro_batch_size or (
            CPU_MICRO_BATCH if self.device.type == "cpu" else None
        )
        # the progress: steps taken, the epoch in progress (0-based), its batches done
        # and loss so far (tally)
        self.step, self.epoch, self.batches_done = 0, 0, 0
        self.epoch_losses = []  # mean training loss of every finished epoch
        self.tally = LossTally(self.device, self.world_size, config.learning_rate, self.schedule)
        self.data_seed = config.data_seed
        if self.data_seed is None:
            self.data_seed = int(torch.randint(2**62, ()))
        # the examples' draws (span corruptions, windows) replay from it
        self.epoch_random_state = random.getstate()
        resumed = checkpoints.resumed_state() if checkpoints else None
        if resumed is not None:
            checkpoint.restore(self, resumed)
            if self.rank == 0:
                logger.warning(
                    "resuming from %s after %d steps (%d epochs done)",
                    checkpoints.path,
                    self.step,
                    self.epoch,
                )
        self.forward = self.ddp = model
        if self.world_size > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.forward = self.ddp = DistributedDataParallel(model, device_ids=device_ids)
        if config.compile:
            self.forward = torch.compile(self.forward, dynamic=True)
        self.captured_gradient_step = captured(
            self.gradient_step, capture_mode(config, self.device), self.device, self.world_size
        )
        self.bar = None  # train()'s progress bar, closed when it returns

    def train(self):
        """Run the epochs from the start, or from the checkpoint when resuming."""
        total, disable = self.config.max_epochs * len(self.batches), self.rank != 0
        self.bar = tqdm(
            total=total, initial=self.step, dynamic_ncols=True, desc="training", disable=disable
        )
        # a signal stops the run after its step only where that step's checkpoint is written:
        # in one process, since DDP's ranks would not agree on the step
        stoppable = self.checkpoints is not None and self.world_size == 1
        try:
            with stop_signals_caught(stoppable) as caught:
                while self.epoch < self.config.max_epochs:
                    self.run_epoch(caught)
                if caught:  # a signal at the last epoch's end, after its checkpoint
                    raise TrainingInterrupted(caught[0], self.step, self.checkpoints.path)
        finally:
            self.bar.close()  # before any error is said, so that it gets a line of its own
            self.batches.close()

    def run_epoch(self, caught):
        """
        One epoch, or the rest of it when resuming, then what follows an epoch: its losses, hooks
        and checkpoint.
        """
        c, epoch = self.config, self.epoch
        self.model.train()
        self.epoch_random_state = random.getstate()
        next_seed = self.data_seed + epoch + 1 if epoch + 1 < c.max_epochs else None
        for x, y in self.batches.epoch(self.data_seed + epoch, self.batches_done, next_seed):
            lr, loss = self.train_step(x, y)
            self.bar.update()
            self.batches_done += 1
            logged = self.step % c.log_every == 0
            if logged:
                self.report(self.tally.close_window(self.step, lr))
            # caught only has signals when there are checkpoints
            if self.checkpoint_due(logged) or caught:
                self.tally.epoch_sum()  # after a non-finite loss, no checkpoint
                self.save_checkpoint()
            if caught:
                raise TrainingInterrupted(caught[0], self.step, self.checkpoints.path)
        self.report(self.tally.read_closed())
        self.epoch_losses.append(self.tally.epoch_sum() / len(self.batches))
        self.bar.set_description(
            f"epoch {epoch + 1}/{c.max_epochs} mean loss {self.epoch_losses[-1]:.4f}"
        )
        self.log("train/epoch_loss", self.epoch_losses[-1])
        if self.test_dataset is not None:
            test_loss = self.evaluate_loss(self.test_dataset)
            logger.info("epoch %d: test loss %.4f", epoch + 1, test_loss)
            self.log("test/loss", test_loss)
        if c.ckpt_path is not None and self.rank == 0:
            save_params(self.model, c.ckpt_path)
        if self.epoch_end is not None:
            self.epoch_end(epoch + 1)
        self.epoch, self.batches_done = epoch + 1, 0
        self.tally.new_epoch()
        self.epoch_random_state = random.getstate()
        if self.checkpoints is not None and (
            self.checkpoints.checkpoint_every_epoch
            or self.epoch == c.max_epochs
            or self.checkpoint_due(logged=True)
        ):
            self.save_checkpoint()

    def report(self, window):
        """A logging window's (step, rate, mean loss), if any, to the bar and TensorBoard."""
        if window is not None:
            step, lr, loss = window
            description = (
                f"epoch {self.epoch + 1}/{self.config.max_epochs} loss {loss:.4f} lr {lr:.2e}"
            )
            self.bar.set_description(description, refresh=False)
            self.log("train/loss", loss, step)
            self.log("train/lr", lr, step)

    def train_step(self, x, y):
        """
        One optimizer step on a global batch, captured or not, then the rate's schedule. Returns
        the step's learning rate and this rank's part of the loss, a device scalar not read back.
        """
        loss = self.captured_gradient_step(x, y)
        lr = self.config.learning_rate * self.schedule.factor(self.step)
        self.scheduler.step()
        self.step += 1
        self.tally.add(loss, self.step)
        return lr, loss

    def gradient_step(self, x, y):
        """
        Forward, loss and backward over this rank's passes of the batch, then clipping and AdamW;
        returns this rank's part of the loss. Cut batches come on the host, where their passes are
        planned, so nothing here waits for the device.
        """
        totals = [to_device(self.device, n) for n in self.objective.counts(x, y)]
        x, y, counted = rank_rows(x, y, self.rank, self.world_size)
        passes = forward_passes(x, y, self.micro_batch_size, cut=self.batches.cut)
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=self.device)
        for i, (xp, yp) in enumerate(passes):
            targets = [to_device(self.device, t) for t in self.objective.targets(xp, yp)]
            shares = self.objective.shares(targets, totals, counted * self.world_size)
            # DDP averages the gradients over the ranks once, at the last pass's backward
            synced = i == len(passes) - 1 or self.world_size == 1
            with contextlib.nullcontext() if synced else self.ddp.no_sync():
                with self.autocast:
                    logits, _ = self.forward(to_device(self.device, xp))
                    pass_loss = self.objective.loss(logits, targets, shares)
                self.scaler.scale(pass_loss).backward()
            loss += pass_loss.detach().float()
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_norm_clip)
        self.scaler.step(self.optimizer)  # fp16 skips a step whose gradients are not finite
        self.scaler.update()
        return loss

    def checkpoint_due(self, logged):
        """Whether the checkpoint_minutes have passed (checkpoint.Checkpoints.due)."""
        if self.checkpoints is None:
            return False
        return self.checkpoints.due(self.device, self.world_size, logged)

    def save_checkpoint(self):
        """Write the resumable state (rank 0 only; checkpoint.py)."""
        self.checkpoints.save(checkpoint.trainer_state(self), self.rank)

    def log(self, name, value, step=None):
        """A scalar for TensorBoard, by step (this one unless told; rank 0's writer, if any)."""
        if self.writer is not None:
            self.writer.add_scalar(name, value, self.step if step is None else step)

    @torch.no_grad()
    def evaluate_loss(self, dataset):
        """The mean loss over a dataset, with dropout off; the model's mode is left as it was."""
        c = self.config
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=c.batch_size,
            num_workers=c.num_workers,
            worker_init_fn=leave_stop_signals_to_the_main_process,
        )
        with eval_mode(self.model):
            losses = [self.model(x.to(self.device), y.to(self.device))[1].item() for x, y in loader]
        return sum(losses) / max(1, len(losses))
