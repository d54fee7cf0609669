"""
How a command of this project ends: the library's log lines said plainly, the one error type,
RunError, as one line and exit code 2, a stopped training as 128 + its signal, and torchrun's
process group torn down.
"""

import logging
import sys

import torch
from tqdm.contrib.logging import logging_redirect_tqdm

from factgpt.common.distributed import launch_rank
from factgpt.common.errors import RunError
from factgpt.common.signals import TrainingInterrupted

# the loggers whose INFO lines a command says: the held-out loss of every epoch, the people
# finetuned on, the tasks of the assignment's table
SAID_AT_INFO = ("factgpt.training.logs", "factgpt.pipeline.api", "factgpt.table.tasks")


def exit_status(prog, call):
    """
    Run call() as a command: 0, or 2 with a RunError said in one line, or 128 + the signal of an
    interrupted training. torchrun's process group ends here.
    """
    said = logging.StreamHandler(sys.stderr)  # the library's warnings, one plain line each
    said.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger().addHandler(said)
    for name in SAID_AT_INFO:
        logging.getLogger(name).setLevel(logging.INFO)
    try:
        # a line said during training goes above the progress bar, not into it
        with logging_redirect_tqdm():
            call()
        if torch.distributed.is_initialized():
            # the ranks leave together, rank 0's files written: no rank tears down alone
            torch.distributed.barrier()
    except RunError as e:
        if launch_rank() == 0:
            print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except TrainingInterrupted as e:
        print(f"{prog}: {e}: run the same command with --resume to go on", file=sys.stderr)
        return 128 + e.signum
    finally:
        logging.getLogger().removeHandler(said)
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0
