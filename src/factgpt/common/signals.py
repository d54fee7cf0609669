"""
How a training stops on SIGINT or SIGTERM: after its step, with a checkpoint of that step written,
so that --resume goes on from it. DataLoader workers leave the signal to the main process.
"""

import contextlib
import os
import signal
import threading


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


@contextlib.contextmanager
def stop_signals_caught(enabled):
    """
    Yield a list that SIGINT and SIGTERM append to, so that the loop can stop after its step; a
    second signal interrupts at once. Only on the main thread and where `enabled`: a checkpoint to
    write, and one process, since DDP's ranks would not agree on the step.
    """
    caught = []
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def handler(signum, frame):
        if caught:
            raise KeyboardInterrupt
        caught.append(signum)

    previous = {
        signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield caught
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def leave_stop_signals_to_the_main_process(worker_id):
    """
    A DataLoader worker runs in a session of its own, so that a signal to the terminal's or the
    run's process group reaches the main process alone, which stops after its step and ends its
    workers (a worker killed first would stall a batch drawn in the background for the DataLoader's
    5-second check). A SIGTERM to the worker itself still ends it, by torch's own handler.
    """
    if hasattr(os, "setsid"):  # POSIX only
        os.setsid()
