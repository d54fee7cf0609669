"""
A training's resumable checkpoint: the Trainer's whole state, to go on exactly where it stopped,
with the run's identity (pipeline.trainings.run_identity), so that another run's checkpoint is
refused in one line. Also when a checkpoint is due, which torchrun's ranks decide together.
"""

import dataclasses
import os
import random
import time
from typing import Optional

import torch
import torch.distributed as dist

from factgpt.common.distributed import launch_rank, over_ranks
from factgpt.common.errors import RunError, short_reason
from factgpt.common.files import atomic_write, set_aside
from factgpt.training.capture import lr_tensor

# checkpoints of the code before are set aside, in one line (3: an identity of every training
# setting; 2: every GPU's RNG; none: older)
FORMAT = 4


def save(path, trainer_state, identity=None, metadata=None):
    """
    Write a Trainer's state, the run's identity and the params' metadata atomically: a failed write
    keeps the old one.
    """
    checkpoint = dict(trainer_state, format=FORMAT, run_identity=identity, params_metadata=metadata)
    if os.path.exists(path):
        then = "; the last checkpoint is kept, and --resume goes on from it"
    else:
        then = "; no checkpoint was written: make room and run the command again"
    atomic_write(path, lambda f: torch.save(checkpoint, f), on_failure=then)


def read(path):
    """
    The checkpoint at `path`, or None if there is none. One that cannot be read, or is of the code
    before, is set aside (files.set_aside) and is None too: the training starts over.
    """
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None
    except Exception as e:
        why = f"cannot be read ({short_reason(e)})"
    else:
        if isinstance(checkpoint, dict) and checkpoint.get("format") == FORMAT:
            return checkpoint
        why = "was written by an earlier version of this code"
    set_aside(path, f"(a checkpoint) {why}", "starting from the beginning", launch_rank() == 0)
    return None


def verified(checkpoint, path, identity):
    """
    The checkpoint read from `path`, if it belongs to the run of this identity; RunError if it is
    another run's.
    """
    saved, identity = checkpoint["run_identity"] or {}, identity or {}
    if saved != identity:
        differences = ", ".join(
            f"{key} {saved.get(key)!r} there, {identity.get(key)!r} here"
            for key in sorted(set(saved) | set(identity))
            if saved.get(key) != identity.get(key)
        )
        raise RunError(
            f"checkpoint {path} is from a run with other settings ({differences}): "
            "resume with the same command, or delete it to start over"
        )
    return checkpoint


@dataclasses.dataclass
class Checkpoints:
    """
    Where and when a training writes its resumable checkpoint, what each records of the run, and the
    checkpoint it goes on from.
    """

    path: str
    identity: Optional[dict] = None  # saved in each; going on from another run's is refused
    metadata: Optional[dict] = None  # what the model is, saved as it is
    checkpoint_minutes: Optional[float] = None  # also one every this many minutes in an epoch
    checkpoint_every_epoch: bool = True  # False: after the last epoch, and when minutes are due
    resume_from: Optional[dict] = None  # a checkpoint as read() returns it

    def __post_init__(self):
        self.last_save = time.monotonic()

    def resumed_state(self):
        """The checkpoint to go on from, verified to be this run's, or None."""
        if self.resume_from is None:
            return None
        return verified(self.resume_from, self.path, self.identity)

    def due(self, device, world_size, logged):
        """
        Whether `checkpoint_minutes` have passed since the last checkpoint. Under torchrun the ranks
        decide together, after a step whose loss is read back, because their clocks differ.
        """
        if not self.checkpoint_minutes or (world_size > 1 and not logged):
            return False
        due = time.monotonic() - self.last_save >= 60 * self.checkpoint_minutes
        if world_size == 1:  # no device round trip: a CUDA step must not wait for the GPU
            return due
        return bool(over_ranks(torch.tensor(int(due), device=device), dist.ReduceOp.MAX))

    def save(self, trainer_state, rank):
        """Write the trainer's state (rank 0 only); every rank restarts the clock."""
        self.last_save = time.monotonic()
        if rank == 0:
            save(self.path, trainer_state, self.identity, self.metadata)


def trainer_state(trainer):
    """Everything a resumed Trainer needs to go on as if it had not stopped."""
    cuda = trainer.device.type == "cuda"
    return {
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "epoch": trainer.epoch,  # the epoch to run next (0-based) ...
        "batches_done": trainer.batches_done,  # ... and how many of its batches are done
        "step": trainer.step,
        "epoch_losses": list(trainer.epoch_losses),
        "epoch_loss_so_far": float(trainer.tally.epoch),
        "data_seed": trainer.data_seed,
        "python_random": trainer.epoch_random_state,  # the examples' draws replay from it
        "torch_random": torch.get_rng_state(),
        # its GPU's only
        "cuda_random": torch.cuda.get_rng_state(trainer.device) if cuda else None,
    }


def restore(trainer, state):
    """
    Put the trainer's model, optimisation, progress and random generators back as trainer_state
    had them.
    """
    trainer.model.load_state_dict(state["model"])
    capturable = [group["capturable"] for group in trainer.optimizer.param_groups]
    trainer.optimizer.load_state_dict(state["optimizer"])
    # as this run's step needs them
    for group, tensor_rate in zip(trainer.optimizer.param_groups, capturable):
        group["capturable"] = tensor_rate
        rate = float(group["lr"])
        group["lr"] = lr_tensor(rate, trainer.device) if tensor_rate else rate
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.scaler.load_state_dict(state["scaler"])
    trainer.epoch, trainer.batches_done = state["epoch"], state["batches_done"]
    trainer.step = state["step"]
    trainer.epoch_losses = list(state["epoch_losses"])
    trainer.tally.epoch.fill_(state["epoch_loss_so_far"])
    trainer.data_seed = state["data_seed"]
    random.setstate(state["python_random"])
    # dropout's generators; the skipped batches are replayed from the data's own generators
    if trainer.world_size > 1:  # every rank draws its own dropout
        torch.manual_seed(state["step"] * trainer.world_size + trainer.rank)
    else:
        torch.set_rng_state(state["torch_random"])
        if state["cuda_random"] is not None and trainer.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_random"], trainer.device)
