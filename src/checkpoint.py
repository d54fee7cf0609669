"""
A training's resumable checkpoint: the Trainer's state_dict, to go on exactly where it stopped, with
the run's identity (pipeline.run_identity), so that another run's checkpoint is refused in one line.
"""

import os

import torch

from errors import RunError, short_reason
from files import atomic_write

# checkpoints of the code before (2: every GPU's RNG; none: older) are refused, in one line
FORMAT = 3


def save(path, trainer_state, config):
    """
    Write a Trainer's state_dict, run_identity and params_metadata atomically: a failed write keeps
    the old one.
    """
    identity, metadata = config.run_identity, config.params_metadata
    checkpoint = dict(trainer_state, format=FORMAT, run_identity=identity, params_metadata=metadata)
    if os.path.exists(path):
        then = "; the last checkpoint is kept, and --resume goes on from it"
    else:
        then = "; no checkpoint was written: make room and run the command again"
    atomic_write(path, lambda f: torch.save(checkpoint, f), on_failure=then)


def read(path):
    """
    The checkpoint at `path`, or None if there is none; RunError if it cannot be read or is of the
    code before.
    """
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None
    except Exception as e:
        raise RunError(
            f"checkpoint {path} cannot be read ({short_reason(e)}): delete it to start over"
        ) from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        raise RunError(
            f"checkpoint {path} was written by an earlier version of this code: "
            "delete it to start over"
        )
    return checkpoint


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
