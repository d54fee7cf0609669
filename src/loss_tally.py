"""
The training loss as the trainer keeps it: summed on the device, and read back (summed over the
ranks) only where shown or saved. A non-finite loss stops the training with a RunError where it is
read back, before anything from its step on is written.
"""

import torch
import torch.distributed as dist

from distributed import over_ranks
from errors import RunError

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
