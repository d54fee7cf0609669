"""
A training's resumable checkpoint: what it holds (state), how it is written (save) and
read back (read, and verified: refusing another run's), and how a Trainer is put back (restore), so
that a resumed run goes on exactly as an uninterrupted one would (bit for bit on a CPU:
every epoch's data order comes from its own seed, and the span corruption's draws replay
from Python's random state at the epoch's start, or with DataLoader workers from each
example's seed drawn with the order: batching.EpochKeys).

What a checkpoint belongs to (its identity) is a dict the caller derives from its
settings (pipeline.run_identity: the whole recipe, the data, the stage); resuming under
another identity is refused in one line.
"""

import logging
import os
import random

import torch

from errors import RunError, short_reason
from files import atomic_write

logger = logging.getLogger(__name__)

FORMAT = 3  # checkpoints of the code before (2: every GPU's RNG; none: older) are refused, in one line


def state(trainer):
    """Everything a resumed run needs to go on as if it had not stopped."""
    t = trainer
    return {
        "format": FORMAT,
        "model": t.model.state_dict(),
        "optimizer": t.optimizer.state_dict(),
        "scheduler": t.scheduler.state_dict(),
        "scaler": t.precision.scaler.state_dict(),
        "epoch": t.epoch,  # the epoch to run next (0-based) ...
        "batches_done": t.batches_done,  # ... and how many of its batches are done
        "step": t.step,
        "epoch_losses": list(t.epoch_losses),
        "epoch_loss_so_far": float(t.epoch_loss),
        "data_seed": t.data_seed,
        "python_random": t.epoch_random_state,
        "torch_random": torch.get_rng_state(),
        "cuda_random": torch.cuda.get_rng_state(t.device) if t.device.type == "cuda" else None,  # its GPU's only
        "run_identity": t.config.run_identity,
        "run_facts": t.config.run_facts,
    }


def save(path, checkpoint):
    """Write a checkpoint atomically: a failed write (a full disk) leaves the last one as it was."""
    if os.path.exists(path):
        then = "; the last checkpoint is kept, and --resume goes on from it"
    else:
        then = "; no checkpoint was written: make room and run the command again"
    atomic_write(path, lambda f: torch.save(checkpoint, f), on_failure=then)


def read(path):
    """The checkpoint at `path`, or None if there is none; RunError if it cannot be read or is of the code before."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None
    except Exception as e:
        raise RunError(f"checkpoint {path} cannot be read ({short_reason(e)}): delete it to start over") from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise RunError(f"checkpoint {path} was written by an earlier version of this code: delete it to start over")
    return checkpoint


def verified(checkpoint, path, identity):
    """The checkpoint read from `path`, if it belongs to the run of this identity; RunError if it is another run's."""
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


def restore(trainer, checkpoint):
    """Put the model, the optimisation, the progress and the random generators back as state() had them."""
    t = trainer
    t.model.load_state_dict(checkpoint["model"])
    t.optimizer.load_state_dict(checkpoint["optimizer"])
    t.scheduler.load_state_dict(checkpoint["scheduler"])
    t.precision.scaler.load_state_dict(checkpoint["scaler"])
    t.epoch, t.batches_done, t.step = checkpoint["epoch"], checkpoint["batches_done"], checkpoint["step"]
    t.epoch_losses = checkpoint["epoch_losses"]
    t.epoch_loss = torch.full((), checkpoint["epoch_loss_so_far"], device=t.device)
    t.data_seed = checkpoint["data_seed"]
    random.setstate(checkpoint["python_random"])
    # dropout's generators; the skipped batches are replayed from the data's own generators
    if t.world_size > 1:  # every rank draws its own dropout
        torch.manual_seed(checkpoint["step"] * t.world_size + t.rank)
    else:
        torch.set_rng_state(checkpoint["torch_random"])
        if checkpoint["cuda_random"] is not None and t.device.type == "cuda":
            torch.cuda.set_rng_state(checkpoint["cuda_random"], t.device)
    if t.rank == 0:
        logger.warning("resuming from %s after %d steps (%d epochs done)", t.config.checkpoint_path, t.step, t.epoch)
