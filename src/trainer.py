"""
The training loop shared by pretraining and finetuning (minGPT's Trainer, as the course has it).

By default it optimises exactly as the course's trainer does:
- AdamW with weight decay on every parameter whose name contains neither "bias" nor
  "LayerNorm.weight" (the course's rule; the LayerNorms here are named ln1, ln2 and
  ln_f, so the embeddings, the LayerNorm gains, the head, the perceiver's basis and
  the synthesizer's w2 and b2 are decayed too, and only the biases are not);
- with lr_decay, a learning rate set after every step from the training tokens seen
  so far (block_size-1 per example, pad included): a linear warmup, then
  max(0.1, 0.5 (1 + cos(pi progress))) with progress not clamped, so that past
  final_tokens the rate rises again to its peak and falls back; the first step runs
  at the peak, as the optimizer was built with it;
- gradient-norm clipping, fp32 arithmetic.
decay_groups="matmul" (nanoGPT's groups: only the weights of Linear layers decayed)
and lr_schedule="clamped" (the rate stays on the 10% floor once there) are the
alternatives, for ablations; the decay groups alone cost the course's recipe most of
its accuracy (docs/optimisation.md).

Exact savings, on by default: every batch is cut after its last target that is not
the pad (the loss ignores pad targets and every model here is causal); on the CPU a
batch goes through the model in passes of rows of similar length, each cut to its
own longest row, with gradients accumulated (the same batch and mean loss, so the
same gradient; with dropout, the same in distribution); AdamW is the fused kernel
on CUDA and the CPU; on CUDA the loss is read back only every log_every steps.
Not exact, so off by default: batches drawn from pools of examples grouped by length
(bucket_pool > 1), which changes which examples share a step; bf16 or fp16 autocast
and TF32 matmuls (precision); an epoch's span corruptions drawn at once by the dataset's
corrupt_all (corrupt_by_epoch: the same distribution, other draws).

With aux_lm_weight > 0 (finetuning only; 0, the course's objective, by default), a step
minimises GPT-1's L_task + aux_lm_weight * L_LM: the language-model loss on the
questions' own characters is added to the answer's (AuxiliaryLMObjective).

A step whose loss is not finite stops training (TrainingDiverged, naming the step and
its learning rate) at the next point where the loss is read back anyway (every
log_every steps, before a checkpoint, at the epoch's end), so before anything from
that step on is written.

With checkpoint_path set (and in a single process), SIGINT or SIGTERM stop training
after the step in progress, with a checkpoint of that step (TrainingInterrupted).

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
import signal
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from batching import length_buckets, micro_batches, rank_rows
from checkpoint import save_params
from distributed import pick_device, rank_and_world_size
from files import atomic_write, short_reason

logger = logging.getLogger(__name__)

CPU_MICRO_BATCH = 16  # rows per forward pass on the CPU: few enough to share a length, enough for efficient matmuls


class TrainerConfig:
    """Optimisation settings: the class attributes are defaults, every kwarg becomes an attribute."""

    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1
    decay_groups = "course"  # "course": all but biases (by name, see above); "matmul": Linear weights only
    lr_decay = False  # linear warmup, then the cosine (see lr_schedule)
    lr_schedule = "course"  # "course": the cosine rises again after final_tokens; "clamped": it stays on the floor
    warmup_tokens = 375e6
    final_tokens = 260e9  # the cosine's half period in tokens (its bottom, below the 10% floor)
    num_workers = 0
    writer = None  # a torch.utils.tensorboard.SummaryWriter, or None
    ckpt_path = None  # where to save the model's state_dict after every epoch, or None
    device = "auto"  # "auto", "cuda", "mps" or "cpu"
    skip_padding = True  # cut every batch after its last non-pad target (exact)
    bucket_pool = 1  # with skip_padding, batches per pool of examples grouped by length (1: no grouping)
    micro_batch_size = None  # with skip_padding, rows per forward pass (None: CPU_MICRO_BATCH on the CPU, else all)
    precision = "fp32"  # "fp32", "tf32" (TF32 matmuls on CUDA), "bf16" or "fp16" (autocast; fp16 with a GradScaler)
    fused_adamw = None  # None: fused on CUDA and the CPU, where PyTorch has a fused AdamW
    compile = False  # torch.compile the model
    log_every = 10  # steps between reading the loss back for the bar and TensorBoard
    checkpoint_path = None  # resumable checkpoint (see module docstring), or None
    checkpoint_minutes = None  # also write it every this many minutes within an epoch
    resume = False  # continue from checkpoint_path if it exists
    run_identity = None  # a dict saved in the checkpoint; resuming with a different one is refused
    run_facts = None  # a dict saved in the checkpoint as it is (what the model is), not compared on resume
    data_seed = None  # seed of the epochs' data order (None: drawn from torch's generator)
    epoch_end = None  # called as epoch_end(epochs_done) on every rank after each epoch, e.g. to probe the model
    corrupt_by_epoch = False  # draw each epoch's examples at once with train_dataset.corrupt_all (not per example)
    aux_lm_weight = 0.0  # > 0: train on AuxiliaryLMObjective (finetuning with GPT-1's auxiliary LM loss)

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


DECAY_GROUPS = ("course", "matmul")
LR_SCHEDULES = ("course", "clamped")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
COURSE_NO_DECAY = ("bias", "LayerNorm.weight")  # the course's AdamW rule: names containing these are not decayed
LR_FLOOR = 0.1  # the cosine never takes the rate below 10% of its peak


def lr_multiplier(tokens, warmup_tokens, final_tokens, clamped=False):
    """
    The learning-rate factor after `tokens` training tokens: a linear warmup, then a
    cosine floored at LR_FLOOR. The course's progress is not clamped, so the cosine
    rises again past final_tokens (to the peak at progress 2); clamped=True holds it at the floor.
    """
    if tokens < warmup_tokens:
        return tokens / max(1, warmup_tokens)
    progress = (tokens - warmup_tokens) / max(1, final_tokens - warmup_tokens)
    if clamped:
        progress = min(1.0, progress)
    return max(LR_FLOOR, 0.5 * (1.0 + math.cos(math.pi * progress)))


def autocast_dtype(precision):
    """The dtype to autocast to, or None for fp32 ("fp32", "tf32")."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def parameter_groups(model, weight_decay, groups="course"):
    """
    AdamW's two groups, decayed and not. "course": by name, as the course's trainer
    does, every parameter but those whose name contains "bias" or "LayerNorm.weight";
    "matmul": only the weights of Linear layers (nanoGPT's choice).
    """
    if groups == "course":
        decayed = {name for name, _ in model.named_parameters() if not any(nd in name for nd in COURSE_NO_DECAY)}
    else:
        decayed = {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    decay = [p for name, p in model.named_parameters() if name in decayed]
    no_decay = [p for name, p in model.named_parameters() if name not in decayed]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def question_lm_targets(x, y):
    """
    (B, T) language-model targets of the text before each row's first real target (a
    finetuning example's question): x's next character there, the pad 0 elsewhere. The
    question's first character has no target: nothing comes before it.
    """
    length = y.size(1)
    first = torch.where(y.any(dim=1), (y != 0).int().argmax(dim=1), length)
    next_chars = torch.cat((x[:, 1:], torch.zeros_like(x[:, :1])), dim=1)
    return torch.where(torch.arange(length, device=y.device)[None, :] < first[:, None], next_chars, 0)


class AuxiliaryLMObjective:
    """
    GPT-1's finetuning objective L_task + weight * L_LM for one global batch (x, y): the
    mean loss over y's real targets plus `weight` times the mean language-model loss over
    the questions' characters (question_lm_targets), both means over the whole global
    batch, so that the parts of its passes and ranks add up to the batch's objective.
    """

    def __init__(self, x, y, weight, world_size=1):
        self.weight, self.world_size = weight, world_size
        self.task_targets = max(1, int((y != 0).sum()))
        self.lm_targets = max(1, int((question_lm_targets(x, y) != 0).sum()))

    def __call__(self, logits, x, y):
        """This pass's part of the objective, for the pass's rows x, y (cut as the batch was) and their logits."""
        logits = logits.reshape(-1, logits.size(-1)).float()
        lm_targets = question_lm_targets(x, y).reshape(-1)
        task = F.cross_entropy(logits, y.reshape(-1), ignore_index=0, reduction="sum") / self.task_targets
        lm = F.cross_entropy(logits, lm_targets, ignore_index=0, reduction="sum") / self.lm_targets
        return (task + self.weight * lm) * self.world_size  # DistributedDataParallel averages the ranks' gradients


class CheckpointError(ValueError):
    """The checkpoint to resume cannot be read, or was written by a run with other settings."""


class TrainingDiverged(RuntimeError):
    """A step's loss was not finite: training stopped before writing anything from that step on."""


NO_STEP = 2**62  # "no non-finite loss yet", larger than any step


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped training after a step, and a checkpoint of that step was written."""

    def __init__(self, signum, step, checkpoint_path):
        super().__init__(
            f"stopped by {signal.Signals(signum).name} after step {step}; "
            f"the checkpoint {checkpoint_path} holds the run so far"
        )
        self.signum = signum


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
        # what a step runs: the model itself until setup() wraps it (DDP, compile) and adds precision
        self.forward, self.ddp, self.autocast, self.scaler = self.model, None, contextlib.nullcontext(), None
        for name, allowed in [("decay_groups", DECAY_GROUPS), ("lr_schedule", LR_SCHEDULES), ("precision", PRECISIONS)]:
            if getattr(config, name) not in allowed:
                raise ValueError(f"TrainerConfig.{name} must be one of {allowed}, got {getattr(config, name)!r}")

    def tokens_before(self, step):
        """Training tokens seen in the batches before batch `step` (0-based): the schedule's clock."""
        n, bs = len(self.train_dataset), self.config.batch_size
        epochs, within = divmod(step, math.ceil(n / bs))
        return (epochs * n + min(within * bs, n)) * self.tokens_per_example

    def lr_lambda(self, step):
        """
        The factor of batch `step`'s learning rate. As in the course, the rate is set
        after each step from the tokens seen so far, so the first step runs at the peak.
        """
        if not self.config.lr_decay or step == 0:
            return 1.0
        config = self.config
        return lr_multiplier(
            self.tokens_before(step), config.warmup_tokens, config.final_tokens, clamped=config.lr_schedule == "clamped"
        )

    def epoch_chunks(self, generator):
        """
        The epoch's examples (x, y) in chunks of loader_batch_size: from the DataLoader, or, with
        corrupt_by_epoch, all drawn at once by the dataset's corrupt_all (same distribution, no per-example Python).
        """
        if not self.config.corrupt_by_epoch:
            return self.loader
        order = torch.randperm(len(self.train_dataset), generator=generator)
        x, y = self.train_dataset.corrupt_all(order, generator)
        return zip(x.split(self.loader_batch_size), y.split(self.loader_batch_size))

    def global_batches(self, generator):
        """The epoch's global batches (x, y) on the CPU, in an order fixed by `generator`'s seed."""
        config = self.config
        for x, y in self.epoch_chunks(generator):
            if config.skip_padding:
                yield from length_buckets(x, y, config.batch_size, generator)
            else:
                yield x, y

    def local_batch(self, x, y):
        """This rank's rows of a global batch and the weight of their mean loss (batching.rank_rows)."""
        return rank_rows(x, y, self.rank, self.world_size)

    def micro_batches(self, x, y):
        """
        A batch as forward passes on the device: [(x, y, share)] (batching.micro_batches;
        with skip_padding, passes of micro_batch_size rows, CPU_MICRO_BATCH on the CPU;
        without, the batch is one pass, padded to the block size).
        """
        if not self.config.skip_padding:
            return [(self.to_device(x), self.to_device(y), 1.0)]
        size = self.config.micro_batch_size or (CPU_MICRO_BATCH if self.device.type == "cpu" else len(y))
        return [(self.to_device(xp), self.to_device(yp), share) for xp, yp, share in micro_batches(x, y, size)]

    def forward_backward(self, passes, weight=1.0, objective=None):
        """
        Forward and backward every pass of a batch, the gradients adding up to those of the
        batch's mean loss times `weight`; returns that mean loss (detached). With an
        objective (AuxiliaryLMObjective), each pass adds its part of the objective instead,
        and the shares are not used. Under DDP the gradients are averaged across ranks
        once, after the last pass.
        """
        loss = 0.0
        for i, (x, y, share) in enumerate(passes):
            last = i == len(passes) - 1
            sync = contextlib.nullcontext() if self.ddp is None or last else self.ddp.no_sync()
            with sync:
                with self.autocast:
                    if objective is None:
                        _, pass_loss = self.forward(x, y)
                    else:
                        pass_loss, share = objective(self.forward(x)[0], x, y), 1.0
                scaled = pass_loss * (share * weight)
                (scaled if self.scaler is None else self.scaler.scale(scaled)).backward()
            loss = loss + pass_loss.detach() * share
        return loss

    def to_device(self, t):
        """A CPU tensor on the training device; on CUDA through pinned memory, without waiting for the copy."""
        if self.device.type == "cuda":
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    @contextlib.contextmanager
    def stop_signals_caught(self):
        """
        Yields a list that SIGINT or SIGTERM append their number to, so that the loop can
        stop after the step in progress; a second signal interrupts at once. Only with a
        checkpoint to write, and in a single process (DDP's ranks would not agree on the step).
        """
        caught = []
        main_thread = threading.current_thread() is threading.main_thread()
        if not self.config.checkpoint_path or self.world_size > 1 or not main_thread:
            yield caught
            return

        def handler(signum, frame):
            if caught:
                raise KeyboardInterrupt
            caught.append(signum)

        previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield caught
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)

    def stop_if_diverged(self, first_nonfinite):
        """
        Raise TrainingDiverged if a step so far had a non-finite loss. first_nonfinite (a
        device scalar, the first such step, 1-based, or NO_STEP) is read back only here:
        at the steps where the loss is read anyway, and before anything is written.
        """
        if self.world_size > 1:  # every rank stops at the same check
            first_nonfinite = first_nonfinite.clone()
            dist.all_reduce(first_nonfinite, op=dist.ReduceOp.MIN)
        step = int(first_nonfinite)
        if step != NO_STEP:
            lr = self.config.learning_rate * self.lr_lambda(step - 1)
            raise TrainingDiverged(
                f"the training loss is not finite at step {step} (learning rate {lr:.3g}): "
                "training stopped; nothing was written from that step on"
            )

    def global_mean(self, value):
        """A per-rank loss sum made global (every rank must call this at the same step)."""
        if self.world_size > 1:
            dist.all_reduce(value)
            value = value / self.world_size
        return value

    def load_checkpoint(self):
        """The checkpoint to resume from, or None; CheckpointError if it cannot be read or is another run's."""
        path = self.config.checkpoint_path
        if not (self.config.resume and path and os.path.exists(path)):
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise CheckpointError(
                f"checkpoint {path} cannot be read ({short_reason(e)}): delete it to start over"
            ) from None
        saved, wanted = state.get("run_identity"), self.config.run_identity
        if saved != wanted:
            differences = ", ".join(
                f"{key} {saved.get(key)!r} there, {wanted.get(key)!r} here"
                for key in sorted(set(saved or {}) | set(wanted or {}))
                if (saved or {}).get(key) != (wanted or {}).get(key)
            )
            raise CheckpointError(
                f"checkpoint {path} is from a run with other settings ({differences}): "
                "resume with the same command, or delete it to start over"
            )
        return state

    def train(self):
        """Run the epochs from the start, or from the checkpoint when resuming."""
        self.setup()
        with self.stop_signals_caught() as caught:
            while self.epoch < self.config.max_epochs:
                self.run_epoch(caught)
        self.bar.close()

    def setup(self):
        """Precision, optimizer, schedule, the checkpoint to resume from, DDP and compile, the loader and the bar."""
        config, model = self.config, self.model
        self.tokens_per_example = self.train_dataset[0][0].numel()
        on_cuda = self.device.type == "cuda"
        if on_cuda:
            torch.backends.cuda.matmul.allow_tf32 = config.precision == "tf32"
        dtype = autocast_dtype(config.precision)
        self.autocast = torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=dtype == torch.float16)
        fused = self.device.type in ("cuda", "cpu") if config.fused_adamw is None else config.fused_adamw
        self.optimizer = torch.optim.AdamW(
            parameter_groups(model, config.weight_decay, config.decay_groups),
            lr=config.learning_rate,
            betas=config.betas,
            fused=fused,
        )
        self.scheduler = LambdaLR(self.optimizer, self.lr_lambda)
        self.data_seed = config.data_seed if config.data_seed is not None else int(torch.randint(2**62, ()))
        # progress: the epoch in progress (0-based), its batches done, their loss sum, and
        # Python's random state at the epoch's start (the span corruption's draws replay from it)
        self.epoch, self.batches_done = 0, 0
        self.epoch_loss = torch.zeros((), device=self.device)
        self.epoch_random_state = random.getstate()
        checkpoint = self.load_checkpoint()
        if checkpoint is not None:
            self.load_state_dict(checkpoint)

        self.forward, self.ddp = model, None
        if self.world_size > 1:
            self.forward = self.ddp = DistributedDataParallel(
                model, device_ids=[self.device.index] if on_cuda else None
            )
        if config.compile:
            self.forward = torch.compile(self.forward, dynamic=True)
        self.generator = torch.Generator()
        self.loader_batch_size = config.batch_size * (config.bucket_pool if config.skip_padding else 1)
        self.loader = None
        if not config.corrupt_by_epoch:
            self.loader = DataLoader(
                self.train_dataset,
                batch_size=self.loader_batch_size,
                shuffle=True,
                generator=self.generator,
                num_workers=config.num_workers,
                persistent_workers=config.num_workers > 0,
                pin_memory=on_cuda,
            )
        self.steps_per_epoch = math.ceil(len(self.train_dataset) / config.batch_size)
        self.bar = tqdm(
            total=config.max_epochs * self.steps_per_epoch,
            initial=self.step,
            dynamic_ncols=True,
            desc="training",
            disable=self.rank != 0,
        )
        self.last_save = time.monotonic()
        self.first_nonfinite = torch.full((), NO_STEP, device=self.device)

    def state_dict(self):
        """Everything a resumed run needs to go on as if it had not stopped: the checkpoint's contents."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "epoch": self.epoch,  # the epoch to run next (0-based) ...
            "batches_done": self.batches_done,  # ... and how many of its batches are done
            "step": self.step,
            "useful_tokens": self.useful_tokens,
            "epoch_losses": list(self.epoch_losses),
            "epoch_loss_so_far": float(self.epoch_loss),
            "data_seed": self.data_seed,
            "python_random": self.epoch_random_state,
            "torch_random": torch.get_rng_state(),
            "cuda_random": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
            "run_identity": self.config.run_identity,
            "run_facts": self.config.run_facts,
        }

    def load_state_dict(self, checkpoint):
        """Put the model, the optimisation, the progress and the random generators back as state_dict had them."""
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        self.scaler.load_state_dict(checkpoint["scaler"])
        self.epoch, self.batches_done = checkpoint["epoch"], checkpoint["batches_done"]
        self.step, self.useful_tokens = checkpoint["step"], checkpoint["useful_tokens"]
        self.epoch_losses = checkpoint["epoch_losses"]
        self.epoch_loss = torch.full((), checkpoint["epoch_loss_so_far"], device=self.device)
        self.data_seed = checkpoint["data_seed"]
        random.setstate(checkpoint["python_random"])
        self.restore_torch_random(checkpoint)  # replaying the skipped batches draws only from the data's generators
        if self.rank == 0:
            logger.warning(
                "resuming from %s after %d steps (%d epochs done)", self.config.checkpoint_path, self.step, self.epoch
            )

    def run_epoch(self, caught):
        """
        One epoch (the rest of it when resuming): the steps, the loss for the bar and
        TensorBoard every log_every steps, timed checkpoints and stopping on a signal, then
        the epoch's mean loss, the test loss, epoch_end and the epoch's checkpoint.
        """
        config, epoch, skip = self.config, self.epoch, self.batches_done
        self.model.train()
        self.generator.manual_seed(self.data_seed + epoch)
        self.epoch_random_state = random.getstate()
        window_loss, window_steps = torch.zeros((), device=self.device), 0
        for batch, (x, y) in enumerate(self.global_batches(self.generator)):
            if batch < skip:
                continue
            lr, loss = self.train_step(x, y)
            self.batches_done = batch + 1
            self.epoch_loss += loss
            window_loss += loss
            window_steps += 1
            if self.step % config.log_every == 0:
                self.stop_if_diverged(self.first_nonfinite)
                mean = self.global_mean(window_loss).item() / window_steps
                window_loss.zero_()
                window_steps = 0
                self.bar.set_description(
                    f"epoch {epoch + 1}/{config.max_epochs} loss {mean:.4f} lr {lr:.2e}", refresh=False
                )
                if config.writer is not None:
                    config.writer.add_scalar("train/loss", mean, self.step)
            minutes = config.checkpoint_minutes
            due = config.checkpoint_path and minutes and time.monotonic() - self.last_save >= 60 * minutes
            if due or caught:  # caught only has signals when there is a checkpoint path
                self.stop_if_diverged(self.first_nonfinite)
                self.save_checkpoint()
            if caught:
                self.bar.close()
                raise TrainingInterrupted(caught[0], self.step, config.checkpoint_path)
        self.stop_if_diverged(self.first_nonfinite)
        self.epoch_losses.append(self.global_mean(self.epoch_loss).item() / self.steps_per_epoch)
        self.bar.set_description(f"epoch {epoch + 1}/{config.max_epochs} mean loss {self.epoch_losses[-1]:.4f}")
        if config.writer is not None:
            config.writer.add_scalar("train/epoch_loss", self.epoch_losses[-1], self.step)
        if self.test_dataset is not None:
            test_loss = self.evaluate_loss(self.test_dataset)
            logger.info("epoch %d: test loss %.4f", epoch + 1, test_loss)
            if config.writer is not None:
                config.writer.add_scalar("test/loss", test_loss, self.step)
        if config.ckpt_path is not None and self.rank == 0:
            save_params(self.model, config.ckpt_path)
        if config.epoch_end is not None:
            config.epoch_end(epoch + 1)
        self.epoch, self.batches_done = epoch + 1, 0
        self.epoch_loss = torch.zeros((), device=self.device)
        self.epoch_random_state = random.getstate()
        if config.checkpoint_path:
            self.save_checkpoint()

    def train_step(self, x, y):
        """
        One optimizer step on a global batch (on the CPU): (the step's learning rate, this
        rank's weighted mean loss as a device scalar, not read back).
        """
        self.useful_tokens += int((y != 0).sum())  # counted on the CPU: no device sync
        objective = None
        if self.config.aux_lm_weight:
            objective = AuxiliaryLMObjective(x, y, self.config.aux_lm_weight, self.world_size)
        x, y, weight = self.local_batch(x, y)
        if objective is not None:  # normalised over the global batch already; a rank's placeholder row counts for 0
            weight = float(weight > 0)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_backward(self.micro_batches(x, y), weight, objective)
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_norm_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        self.first_nonfinite = torch.where(
            torch.isfinite(loss), self.first_nonfinite, self.first_nonfinite.clamp(max=self.step + 1)
        )
        self.step += 1
        self.bar.update()
        if self.config.writer is not None:
            self.config.writer.add_scalar("train/lr", lr, self.step)
        return lr, loss.float() * weight

    def save_checkpoint(self):
        """Write state_dict() to the checkpoint atomically (rank 0 only)."""
        self.last_save = time.monotonic()
        if self.rank == 0:
            state = self.state_dict()
            atomic_write(self.config.checkpoint_path, lambda f: torch.save(state, f))

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
