"""
The arithmetic of one optimizer step, in the order a step runs it: the loss over a global batch and
the one rule for splitting it into passes and ranks; AdamW and its decay groups; the precision; the
learning rate's warmup and cosine by tokens seen; and the running loss, read back only where shown.

However a batch is split (rank_rows, forward_passes), each pass adds its mean loss times its
share of the batch's targets, times the number of ranks, whose gradients DDP averages: the step has
the gradient of the batch's mean loss. GPT-1's auxiliary loss on the question (lm_weight > 0) is a
second kind of target, weighed by the same rule. By default every part is the course's
(docs/optimisation.md says why the decay groups and the schedule are switches).
"""

import contextlib
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from factgpt.common.distributed import over_ranks
from factgpt.common.errors import RunError
from factgpt.corpus.reading import BLOCK_SIZE
from factgpt.training.capture import capture_mode, lr_tensor, rate_in_tensor

# -------------------------------------------------------------------------------------- the loss


def real_lengths(y):
    """(B, T) targets -> (B,) the position after each row's last target that is not the pad 0."""
    positions = torch.arange(1, y.size(1) + 1, device=y.device)
    return ((y != 0) * positions).max(dim=1).values


def question_lm_targets(x, y):
    """
    Language-model targets (B, T) for a finetuning example's question, the text before its first
    real target: x's next character there, the pad 0 elsewhere. The question's first character is
    not a target: nothing comes before it.
    """
    length = y.size(1)
    first = torch.where(y.any(dim=1), (y != 0).int().argmax(dim=1), length)
    next_chars = torch.cat((x[:, 1:], torch.zeros_like(x[:, :1])), dim=1)
    return torch.where(
        torch.arange(length, device=y.device)[None, :] < first[:, None], next_chars, 0
    )


def forward_passes(x, y, size=None, cut=True):
    """
    A batch as forward passes of `size` rows (None: all) sorted by length, each cut after its last
    real target; passes without one are left out. A batch that fits in one pass keeps its order, and
    cut=False leaves it whole.
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
    This rank's rows (rank, rank + N, ...) of a global batch and whether they count (a spare rank's
    row does not).
    """
    if world_size == 1:
        return x, y, True
    rows = torch.arange(len(y))[rank::world_size]
    if len(rows) == 0:
        return x[:1], y[:1], False
    return x[rows], y[rows], True


class Objective:
    """
    The mean loss over y's real targets plus lm_weight times the questions' mean: GPT-1's L_task +
    lambda L_LM.
    """

    def __init__(self, lm_weight=0.0):
        self.weights = [1.0] if not lm_weight else [1.0, lm_weight]

    def targets(self, x, y):
        """
        Every kind of target of rows x, y, as (B, T) tensors that are 0 where nothing is scored.
        """
        return [y] if len(self.weights) == 1 else [y, question_lm_targets(x, y)]

    def counts(self, x, y):
        """Every kind of target's count in rows x, y, as 0-dim int64 tensors on their device."""
        return [(t != 0).sum() for t in self.targets(x, y)]

    def shares(self, targets, totals, ranks):
        """
        A pass's share of the global batch's targets of each kind (`totals`), times `ranks` (0 for a
        row that counts for nothing): float64 on the device, to divide as Python does with nothing
        read back.
        """
        return [
            (t != 0).sum().mul(ranks).double() / n.clamp(min=1).double()
            for t, n in zip(targets, totals)
        ]

    def loss(self, logits, targets, shares):
        """
        The sum of weight * share * the pass's mean loss over the kinds; a zero share (a NaN mean)
        adds nothing.
        """
        flat = logits.reshape(-1, logits.size(-1))
        total = 0
        for t, weight, share in zip(targets, self.weights, shares):
            term = F.cross_entropy(flat, t.reshape(-1), ignore_index=0) * (weight * share).float()
            total = total + torch.where(share != 0, term, 0.0)
        return total


# ----------------------------------------------------------------------- AdamW and the precision


# the course's AdamW rule: names containing these are not decayed
COURSE_NO_DECAY = ("bias", "LayerNorm.weight")


def parameter_groups(model, weight_decay, groups="course"):
    """
    AdamW's two groups, decayed and not. "course" decays by name, as the course's trainer does;
    "matmul" decays only the weights of Linear layers, as nanoGPT does.
    """
    if groups == "course":
        decayed = {
            name
            for name, _ in model.named_parameters()
            if not any(nd in name for nd in COURSE_NO_DECAY)
        }
    else:
        decayed = {
            f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.Linear)
        }
    decay = [p for name, p in model.named_parameters() if name in decayed]
    no_decay = [p for name, p in model.named_parameters() if name not in decayed]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def course_adamw(model, config, device):
    """
    The course's AdamW, fused where PyTorch has it. For a captured step it is capturable, and
    its rate is a tensor on the device that the scheduler writes in place.
    """
    fused = device.type in ("cuda", "cpu") if config.fused_adamw is None else config.fused_adamw
    capture = rate_in_tensor(capture_mode(config, device), device, fused)
    groups = parameter_groups(model, config.weight_decay, config.decay_groups)
    optimizer = torch.optim.AdamW(
        groups, lr=config.learning_rate, betas=config.betas, fused=fused, capturable=capture
    )
    if capture:
        for group in optimizer.param_groups:
            group["initial_lr"], group["lr"] = group["lr"], lr_tensor(group["lr"], device)
    return optimizer


def autocast_and_scaler(precision, device):
    """
    The step's arithmetic: an autocast context for bf16 or fp16 (else none), and a GradScaler that
    scales fp16's loss only. TF32 matmuls are switched on CUDA for "tf32".
    """
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    return autocast, torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


# ----------------------------------------------------------------------------- the learning rate


LR_FLOOR = 0.1  # the cosine never takes the rate below 10% of its peak


def lr_multiplier(tokens, warmup_tokens, final_tokens, clamped=False):
    """
    The learning-rate factor after `tokens` tokens: a linear warmup, then a cosine floored at
    LR_FLOOR. As in the course, the cosine rises again past final_tokens; clamped=True holds it at
    the floor.
    """
    if tokens < warmup_tokens:
        return tokens / max(1, warmup_tokens)
    progress = (tokens - warmup_tokens) / max(1, final_tokens - warmup_tokens)
    if clamped:
        progress = min(1.0, progress)
    return max(LR_FLOOR, 0.5 * (1.0 + math.cos(math.pi * progress)))


def decay_tokens(decay_epochs, examples):
    """
    The cosine's half period in tokens (TrainerConfig.final_tokens) as the course sets it:
    decay_epochs epochs of `examples` examples, a block of tokens each.
    """
    return decay_epochs * examples * BLOCK_SIZE


class TokenSchedule:
    """
    The schedule of a training on `examples` examples of `tokens_per_example` tokens under a
    TrainerConfig.
    """

    def __init__(self, config, examples, tokens_per_example):
        self.config, self.examples, self.tokens_per_example = config, examples, tokens_per_example

    def tokens_before(self, step):
        """
        Training tokens seen in the batches before batch `step` (0-based): the schedule's clock.
        """
        n, bs = self.examples, self.config.batch_size
        epochs, within = divmod(step, math.ceil(n / bs))
        return (epochs * n + min(within * bs, n)) * self.tokens_per_example

    def factor(self, step):
        """
        Batch `step`'s learning-rate factor (LambdaLR's lr_lambda). As in the course, it is set
        after each step from the tokens seen so far, so the first step runs at the peak.
        """
        c = self.config
        if not c.lr_decay or step == 0:
            return 1.0
        return lr_multiplier(
            self.tokens_before(step), c.warmup_tokens, c.final_tokens, c.lr_schedule == "clamped"
        )


# ------------------------------------------------------------------------------ the running loss


NO_STEP = 2**62  # "no non-finite loss yet", larger than any step


class ReadLater:
    """
    A device scalar copied to the host without waiting; value() waits for that copy only (not for
    later steps).
    """

    def __init__(self, scalar):
        self.host, self.copied = scalar, None
        if scalar.device.type == "cuda":
            self.host = torch.empty((), dtype=scalar.dtype, pin_memory=True).copy_(
                scalar, non_blocking=True
            )
            self.copied = torch.cuda.Event()
            self.copied.record()

    def value(self):
        if self.copied is not None:
            self.copied.synchronize()
        return self.host.item()


class LossTally:
    """
    This rank's loss sums for the epoch and the logging window, and the first non-finite step, all
    on the device. Every rank must read back at the same steps, since the reads reduce over the
    ranks.
    """

    def __init__(self, device, world_size, learning_rate, schedule):
        self.device, self.world_size = device, world_size
        self.learning_rate, self.schedule = learning_rate, schedule
        self.new_epoch()
        self.first_nonfinite = torch.full((), NO_STEP, device=device)
        # the last window closed: (step, rate, steps, ReadLater loss sum, first non-finite step)
        self.closed = None

    def add(self, loss, step):
        """
        Step `step`'s loss into both sums, and `step` noted if the loss is not finite; nothing read
        back.
        """
        self.epoch += loss
        self.window += loss
        self.window_steps += 1
        failed = self.first_nonfinite.clamp(max=step)
        self.first_nonfinite = torch.where(torch.isfinite(loss), self.first_nonfinite, failed)

    def close_window(self, step, rate):
        """
        At a logging step, start copying the window's sum and first non-finite step to the host, and
        open a new window. Returns the window before's step, rate and mean loss (its copy long
        done), or None.
        """
        last = self.read_closed()
        window_sum = ReadLater(over_ranks(self.window, dist.ReduceOp.SUM))
        first_nonfinite = ReadLater(over_ranks(self.first_nonfinite, dist.ReduceOp.MIN))
        self.closed = (step, rate, self.window_steps, window_sum, first_nonfinite)
        self.window, self.window_steps = torch.zeros((), device=self.device), 0
        return last

    def read_closed(self):
        """
        The step, rate and mean loss of the last window closed, unread, or None; RunError after a
        non-finite loss.
        """
        if self.closed is None:
            return None
        step, rate, steps, loss_sum, first_nonfinite = self.closed
        self.closed = None
        self.stop_if_nonfinite(int(first_nonfinite.value()))
        return step, rate, loss_sum.value() / (steps * self.world_size)

    def epoch_sum(self):
        """
        The epoch's loss sum so far, over the ranks' mean, read back now (RunError after a
        non-finite loss).
        """
        self.stop_if_nonfinite(int(over_ranks(self.first_nonfinite, dist.ReduceOp.MIN)))
        return (over_ranks(self.epoch, dist.ReduceOp.SUM) / self.world_size).item()

    def new_epoch(self):
        """
        Both sums from zero (what the last epoch's window did not close is in its epoch's sum).
        """
        self.epoch = torch.zeros((), device=self.device)
        self.window, self.window_steps = torch.zeros((), device=self.device), 0

    def stop_if_nonfinite(self, step):
        """
        RunError naming `step`, the first step whose loss was not finite, unless it is NO_STEP.
        """
        if step != NO_STEP:
            raise RunError(
                f"the training loss is not finite at step {step} "
                f"(learning rate {self.learning_rate * self.schedule.factor(step - 1):.3g}): "
                "training stopped; nothing was written from that step on"
            )
