"""
The table's rows as processes: each row runs in a process of its own, --jobs of them side by side,
with a bar per training from the epochs it reports as lines of JSON, and a stop passed on to them.
"""

import concurrent.futures
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

from tqdm import tqdm

from factgpt.common.files import REPOSITORY

SRC = REPOSITORY / "src"  # the course's modules and the factgpt package
PR_SET_PDEATHSIG = 1  # prctl's option: a signal for this process when its parent ends (Linux)


class Table:
    """
    The rows, side by side, each in a process of its own: a bar per training, and a line as a
    row starts and ends.
    """

    def __init__(self, rows, command, jobs, env, gpus=()):
        # command + ["--row", PREFIX] runs a row's process, which imports this checkout
        self.rows, self.command, self.jobs, self.env = rows, command, jobs, with_src_path(env)
        self.gpus = list(gpus)  # the CUDA devices the rows take turns on (visible_gpus)
        self.start = time.monotonic()
        self.processes, self.stopped, self.lock = {}, threading.Event(), threading.Lock()
        self.signal = None  # the signal that stopped the table
        self.forwarded = None  # the signal the rows got for it
        self.free_positions = list(range(jobs))

    def minutes(self):
        return (time.monotonic() - self.start) / 60

    def run(self):
        """Each row's exit code (0: done, None: kept or never started after a stop)."""
        codes = {}
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
            for row in self.rows:
                if all_kept(row):
                    kept = "its params and predictions were written earlier with the same settings"
                    say(f"== {row.name}: kept: {kept}")
                    codes[row.name] = None
                else:
                    codes[row.name] = pool.submit(self.run_row, row)
        return {name: code.result() if code is not None else None for name, code in codes.items()}

    def run_row(self, row):
        """
        Run a row's process to its end: its exit code (None where the table stopped before it).
        """
        if self.stopped.is_set():
            return None
        with self.lock:
            position = self.free_positions.pop(0)
        say(f"== started: {row.name} ({row.log}) at {self.minutes():.1f} min")
        row.log.parent.mkdir(parents=True, exist_ok=True)
        command = [*self.command, "--row", row.prefix]
        start = time.monotonic()
        with open(row.log, "a", encoding="utf-8", buffering=1) as log:
            # a session of its own: a stop reaches the row once, from the table (stop below)
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=self.row_env(position),
                start_new_session=True,
            )
            with self.lock:
                self.processes[row.name] = process
                if self.stopped.is_set():  # a stop that came while the process started
                    process.send_signal(self.forwarded)
            self.follow(row, process, position, log)
            code = process.wait()
        with self.lock:
            del self.processes[row.name]
            self.free_positions.append(position)
        minutes = (time.monotonic() - start) / 60
        if code == 0:
            say(f"== finished: {row.name} in {minutes:.1f} min, at {self.minutes():.1f} min")
        elif not self.stopped.is_set():
            say(f"run.sh: {row.name} failed: see {row.log}")
        return code

    def row_env(self, position):
        """
        The environment of the row in bar `position`: with several GPUs, one of its own
        (CUDA_VISIBLE_DEVICES), since the rows running side by side hold different positions.
        """
        env = dict(self.env, ASSIGNMENT_TABLE=str(os.getpid()))
        if len(self.gpus) > 1:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[position % len(self.gpus)]
        return env

    @staticmethod
    def follow(row, process, position, log):
        """
        A bar for each training of the row, from the epochs its process says; anything else it says,
        to its log.
        """
        bar = None
        for line in process.stdout:
            try:
                said = json.loads(line)
                task, epoch, epochs = said["task"], said["epoch"], said["epochs"]
            except (ValueError, TypeError, KeyError):
                log.write(line)
                continue
            if bar is None or bar.desc != f"{row.name}: {task}":
                if bar is not None:
                    bar.close()
                # a line each where the terminal can move between them; else they share one
                where = position if sys.stderr.isatty() else 0
                bar = tqdm(
                    total=epochs,
                    desc=f"{row.name}: {task}",
                    unit="epoch",
                    position=where,
                    leave=False,
                )
            bar.update(epoch - bar.n)
        if bar is not None:
            bar.close()

    def stop(self, signum, frame):
        """
        Start no more rows, and pass the stop to the running ones: each training checkpoints and
        ends. A hang-up (a dropped session) reaches them as SIGTERM, which a training catches.
        """
        with self.lock:  # the signal is known before any row can see the table stopped
            self.signal = signum
            self.forwarded = signal.SIGTERM if signum == getattr(signal, "SIGHUP", None) else signum
            self.stopped.set()
            for process in self.processes.values():
                process.send_signal(self.forwarded)


def say(line):
    """A line to the person running the table, above the bars (standard output is the table's)."""
    tqdm.write(line, file=sys.stderr)


def end_with_the_table():
    """
    On Linux, a row's process is killed with the table's (a session of its own is out of reach of
    a kill of the table's group), and ends at once if the table ended while it started.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.environ.get("ASSIGNMENT_TABLE", str(os.getppid())) != str(os.getppid()):
        raise SystemExit(128 + signal.SIGKILL)


def all_kept(row):
    """Whether every task of the row was written earlier with the settings and inputs it has now."""
    return all(task.kept() for task in row.tasks)


def with_src_path(env):
    """`env` with src/ first on PYTHONPATH, wherever the table was started from."""
    paths = [str(SRC), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return dict(env, PYTHONPATH=os.pathsep.join(paths))


def visible_gpus(count, env=os.environ):
    """
    The `count` CUDA devices this process sees, as CUDA_VISIBLE_DEVICES names them for a child
    (its own list where it is set: "2,3" makes the first device "2").
    """
    named = [
        name.strip() for name in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if name.strip()
    ]
    return named[:count] if "CUDA_VISIBLE_DEVICES" in env else [str(i) for i in range(count)]
