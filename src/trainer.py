"""
The training loop shared by pretraining and finetuning: minGPT's Trainer, as the course has it.

By default it optimises exactly as the course's trainer does: AdamW with weight decay on all
but the biases, the course's warmup and cosine by tokens seen (schedule.py), gradient-norm
clipping, fp32. Other decay groups and schedules are switches, because the decay groups alone
cost the course's recipe most of its accuracy (docs/optimisation.md).

Every forward pass adds its mean loss times its share of the global batch's targets, times
the number of ranks, whose gradients DDP averages. So a batch cut into passes, split over
ranks, or scored with an auxiliary loss still has the gradient of the batch's mean loss.
A step that reads nothing back can be captured as one CUDA graph (capture.py).
"""

import contextlib
import logging
import random
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from tqdm.auto import tqdm

import checkpoint
from batching import (
    EpochBatches,
    forward_passes,
    leave_stop_signals_to_the_main_process,
    rank_rows,
    to_device,
)
from capture import capture_mode, captured, lr_tensor
from config import HANDOUT
from distributed import over_ranks, pick_device, rank_and_world_size, stop_signals_caught
from loss_tally import LossTally
from objective import Objective
from optimisation import Precision, course_adamw
from params import save_params
from schedule import TokenSchedule
from utils import eval_mode

logger = logging.getLogger(__name__)

# rows per forward pass on the CPU: few enough to share a length, enough for efficient matmuls
CPU_MICRO_BATCH = 16


class TrainerConfig:
    """
    Optimisation settings: the course's, with its names and defaults, and this project's controls.
    Every kwarg becomes an attribute; the Recipe fields the Trainer reads are the handout's unless
    given (Recipe.trainer_settings), but weight_decay and warmup_tokens keep the course's.
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
    writer = None  # a torch.utils.tensorboard.SummaryWriter, or None
    # this project's controls
    device = "auto"  # one of distributed.DEVICES
    micro_batch_size = None  # rows per forward pass (None: CPU_MICRO_BATCH on the CPU, else all)
    fused_adamw = None  # None: fused on CUDA and the CPU, where PyTorch has a fused AdamW
    log_every = 10  # steps between reading the loss back for the bar and TensorBoard
    checkpoint_path = None  # resumable checkpoint (checkpoint.py), or None
    checkpoint_minutes = None  # also write it every this many minutes within an epoch
    # write it after every epoch (False: after the last, and when the minutes are due)
    checkpoint_every_epoch = True
    # a checkpoint (checkpoint.read) to go on from; refused unless its identity is run_identity
    resume_from = None
    run_identity = None  # a dict saved in the checkpoint; resuming with a different one is refused
    params_metadata = None  # a dict saved in the checkpoint as it is (what the model is)
    data_seed = None  # seed of the epochs' data order (None: drawn from torch's generator)
    # called as epoch_end(epochs_done) on every rank after each epoch, e.g. to probe the model
    epoch_end = None

    def __init__(self, **kwargs):
        handout = {
            k: v
            for k, v in HANDOUT.trainer_settings(pretraining=True).items()
            if not hasattr(TrainerConfig, k)
        }
        for name, value in (handout | kwargs).items():
            setattr(self, name, value)


class TrainingInterrupted(Exception):
    """
    SIGINT or SIGTERM stopped training after a step, and a checkpoint of that step was written.
    """

    def __init__(self, signum, step, checkpoint_path):
        super().__init__(
            f"stopped by {signal.Signals(signum).name} after step {step}; "
            f"the checkpoint {checkpoint_path} holds the run so far"
        )
        self.signum = signum


class Trainer:
    """
    Trains `model` on `train_dataset` (pairs of Long tensors x, y); reports the loss on
    `test_dataset` if given.
    """

    def __init__(self, model, train_dataset, test_dataset, config):
        self.config = config
        c = config
        self.device = pick_device(c.device)
        self.model = model.to(self.device)
        self.train_dataset, self.test_dataset = train_dataset, test_dataset
        self.rank, self.world_size = rank_and_world_size()
        self.precision = Precision(c.precision, self.device)
        self.optimizer = course_adamw(model, c, self.device)
        self.schedule = TokenSchedule(c, len(train_dataset), train_dataset[0][0].numel())
        self.scheduler = LambdaLR(self.optimizer, self.schedule.factor)
        self.objective = Objective(c.finetune_lm_weight)
        self.batches = EpochBatches(train_dataset, c, self.device)
        self.micro_batch_size = c.micro_batch_size or (
            CPU_MICRO_BATCH if self.device.type == "cpu" else None
        )
        # the progress: steps taken, the epoch in progress (0-based), its batches done
        # and loss so far (tally)
        self.step, self.epoch, self.batches_done = 0, 0, 0
        self.epoch_losses = []  # mean training loss of every finished epoch
        self.tally = LossTally(self.device, self.world_size, c.learning_rate, self.schedule)
        self.data_seed = c.data_seed if c.data_seed is not None else int(torch.randint(2**62, ()))
        # the examples' draws (span corruptions, windows) replay from it
        self.epoch_random_state = random.getstate()
        self.last_save = time.monotonic()
        if c.resume_from is not None:
            self.load_state_dict(
                checkpoint.verified(c.resume_from, c.checkpoint_path, c.run_identity)
            )
            if self.rank == 0:
                logger.warning(
                    "resuming from %s after %d steps (%d epochs done)",
                    c.checkpoint_path,
                    self.step,
                    self.epoch,
                )
        self.forward = self.ddp = model
        if self.world_size > 1:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.forward = self.ddp = DistributedDataParallel(model, device_ids=device_ids)
        if c.compile:
            self.forward = torch.compile(self.forward, dynamic=True)
        self.captured_gradient_step = captured(
            self.gradient_step, capture_mode(c, self.device), self.device, self.world_size
        )
        self.bar = None  # train()'s progress bar, closed when it returns

    def train(self):
        """Run the epochs from the start, or from the checkpoint when resuming."""
        total, disable = self.config.max_epochs * len(self.batches), self.rank != 0
        self.bar = tqdm(
            total=total, initial=self.step, dynamic_ncols=True, desc="training", disable=disable
        )
        try:
            with stop_signals_caught(
                self.config.checkpoint_path and self.world_size == 1
            ) as caught:
                while self.epoch < self.config.max_epochs:
                    self.run_epoch(caught)
                if caught:  # a signal at the last epoch's end, after its checkpoint
                    raise TrainingInterrupted(caught[0], self.step, self.config.checkpoint_path)
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
            # caught only has signals when there is a checkpoint path
            if self.timed_checkpoint_due(logged) or caught:
                self.tally.epoch_sum()  # after a non-finite loss, no checkpoint
                self.save_checkpoint()
            if caught:
                raise TrainingInterrupted(caught[0], self.step, c.checkpoint_path)
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
        if c.epoch_end is not None:
            c.epoch_end(epoch + 1)
        self.epoch, self.batches_done = epoch + 1, 0
        self.tally.new_epoch()
        self.epoch_random_state = random.getstate()
        last = self.epoch == c.max_epochs
        if c.checkpoint_path and (
            c.checkpoint_every_epoch or last or self.timed_checkpoint_due(logged=True)
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
        One optimizer step on a global batch, captured or not (capture.py). Returns the step's
        learning rate and this rank's part of the loss, a device scalar that is not read back.
        """
        loss = self.captured_gradient_step(x, y)
        lr = self.config.learning_rate * self.schedule.factor(self.step)
        self.scheduler.step()
        self.step += 1
        self.tally.add(loss, self.step)
        return lr, loss

    def gradient_step(self, x, y):
        """
        Forward and backward over the batch's passes, then clipping and AdamW; returns this rank's
        part of the loss. Cut batches come on the host, where their passes are planned; batches
        of one width come on the device, and nothing here waits for it.
        """
        totals = [to_device(self.device, n) for n in self.objective.counts(x, y)]
        x, y, counted = rank_rows(x, y, self.rank, self.world_size)
        passes = forward_passes(x, y, self.micro_batch_size, cut=self.batches.cut)
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=self.device)
        for i, (xp, yp) in enumerate(passes):
            targets = [to_device(self.device, t) for t in self.objective.targets(xp, yp)]
            shares = self.objective.shares(targets, totals, counted * self.world_size)
            last = i == len(passes) - 1
            with (
                self.ddp.no_sync() if self.world_size > 1 and not last else contextlib.nullcontext()
            ):
                with self.precision.autocast:
                    logits, _ = self.forward(to_device(self.device, xp))
                    pass_loss = self.objective.loss(logits, targets, shares)
                self.precision.backward(pass_loss)
            loss += pass_loss.detach().float()
        self.precision.step(self.optimizer, self.model.parameters(), self.config.grad_norm_clip)
        return loss

    def timed_checkpoint_due(self, logged):
        """
        Whether checkpoint_minutes have passed since the last checkpoint. Under torchrun the
        ranks decide together, after a step whose loss is read back, because their clocks differ.
        """
        c = self.config
        if not (c.checkpoint_path and c.checkpoint_minutes) or (self.world_size > 1 and not logged):
            return False
        due = time.monotonic() - self.last_save >= 60 * c.checkpoint_minutes
        if self.world_size == 1:  # no device round trip: a CUDA step must not wait for the GPU
            return due
        return bool(over_ranks(torch.tensor(int(due), device=self.device), dist.ReduceOp.MAX))

    def log(self, name, value, step=None):
        """A scalar for TensorBoard, by step (this one unless told; rank 0's writer, if any)."""
        if self.config.writer is not None:
            self.config.writer.add_scalar(name, value, self.step if step is None else step)

    def save_checkpoint(self):
        """Write the resumable state to checkpoint_path (rank 0 only; checkpoint.py)."""
        self.last_save = time.monotonic()
        if self.rank == 0:
            checkpoint.save(self.config.checkpoint_path, self.state_dict(), self.config)

    def state_dict(self):
        """Everything a resumed run needs to go on as if it had not stopped."""
        cuda = self.device.type == "cuda"
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.precision.scaler.state_dict(),
            "epoch": self.epoch,  # the epoch to run next (0-based) ...
            "batches_done": self.batches_done,  # ... and how many of its batches are done
            "step": self.step,
            "epoch_losses": list(self.epoch_losses),
            "epoch_loss_so_far": float(self.tally.epoch),
            "data_seed": self.data_seed,
            "python_random": self.epoch_random_state,  # the examples' draws replay from it
            "torch_random": torch.get_rng_state(),
            # its GPU's only
            "cuda_random": torch.cuda.get_rng_state(self.device) if cuda else None,
        }

    def load_state_dict(self, state):
        """
        Put the model, the optimisation, the progress and the random generators back as state_dict
        had them.
        """
        self.model.load_state_dict(state["model"])
        capturable = [group["capturable"] for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state["optimizer"])
        # as this run's step needs them
        for group, tensor_rate in zip(self.optimizer.param_groups, capturable):
            group["capturable"] = tensor_rate
            group["lr"] = (
                lr_tensor(float(group["lr"]), self.device) if tensor_rate else float(group["lr"])
            )
        self.scheduler.load_state_dict(state["scheduler"])
        self.precision.scaler.load_state_dict(state["scaler"])
        self.epoch, self.batches_done, self.step = (
            state["epoch"],
            state["batches_done"],
            state["step"],
        )
        self.epoch_losses = list(state["epoch_losses"])
        self.tally.epoch.fill_(state["epoch_loss_so_far"])
        self.data_seed = state["data_seed"]
        random.setstate(state["python_random"])
        # dropout's generators; the skipped batches are replayed from the data's own generators
        if self.world_size > 1:  # every rank draws its own dropout
            torch.manual_seed(state["step"] * self.world_size + self.rank)
        else:
            torch.set_rng_state(state["torch_random"])
            if state["cuda_random"] is not None and self.device.type == "cuda":
                torch.cuda.set_rng_state(state["cuda_random"], self.device)

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
