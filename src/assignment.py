"""
The whole assignment as one table (./run.sh):

    python src/assignment.py [--jobs N] [--variants V ...] [run.py flags]
    python src/assignment.py demo

London for everyone; vanilla finetuned without pretraining; and each variant pretrained, then read
out two ways: finetuned on the handout's question (the course's row), and asked zero-shot in the
corpus's own words (--readout frames). Every row writes dev and test predictions; the table goes to
results.md and results.json. Without a CUDA GPU the trainings take --recipe cpu.

Each row runs in a process of its own, --jobs N of them side by side, its log in logs/<row>.log.
Run again, it keeps each step written with the same settings and inputs (steps.py) and goes on
from a cut training's checkpoint. `demo` runs the experiment on a generated world (docs/demo.md).
"""

import argparse
import concurrent.futures
import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
from tqdm import tqdm

import demo
import results
from arguments import OneLineParser
from cli import exit_status
from config import HANDOUT_BOTTLENECK_DIM
from distributed import exit_process
from errors import RunError
from files import resolve_data_path
from model import VARIANTS
from questions import read_question_file, score_line
from run_config import available_cores, cuda_num_workers
from steps import LOGS, Step, run_steps

DATA = ("wiki.txt", "birth_places_train.tsv", "birth_dev.tsv", "birth_test_inputs.tsv")
WIKI, TRAIN, DEV, TEST = DATA
SPLITS = {"dev": DEV, "test": TEST}
# On a CPU, two trainings side by side with a thread each got through the table's work faster
# than one at a time with both threads (docs/speed.md); on CUDA they share one GPU.
CPU_JOBS = 2
PR_SET_PDEATHSIG = 1  # prctl's option: a signal for this process when its parent ends (Linux)


def say(line):
    """A line to the person running the table, above the bars (standard output is the table's)."""
    tqdm.write(line, file=sys.stderr)


@dataclasses.dataclass
class Row:
    """A row of the table: its name, its files' prefix (and its log's), and its steps in order."""

    name: str
    prefix: str
    steps: list

    @property
    def log(self):
        return Path(LOGS) / f"{self.prefix}.log"


def readout_steps(variant, params, prefix, readout, flags):
    """The dev and test evaluations of params by a readout, writing <prefix>.<split>.predictions."""
    steps = []
    for split, questions in SPLITS.items():
        output = f"{prefix}.{split}.predictions"
        argv = ["evaluate", variant, WIKI, *flags, "--readout", readout]
        argv += ["--reading_params_path", params, "--eval_corpus_path", questions]
        argv += ["--outputs_path", output]
        if readout == "frames":  # the frames readout is fitted on the training people
            argv += ["--finetune_corpus_path", TRAIN]
        steps.append(Step(f"{readout}: {split}", argv, output, split))
    return steps


def training(name, function, variant, flags, params, *inputs):
    """A pretraining or finetuning step of the table, writing `params`."""
    argv = [function, variant, WIKI, *flags, *inputs, "--writing_params_path", params]
    return Step(name, argv, params)


def table_rows(variants, flags):
    """
    Vanilla finetuned without pretraining, then each variant pretrained and read out both ways.
    """
    pairs = ["--finetune_corpus_path", TRAIN]
    scratch = "vanilla.model.params"
    rows = [
        Row("vanilla without pretraining", "vanilla.nopretrain", [
            training("finetuning", "finetune", "vanilla", flags, scratch, *pairs),
            *readout_steps("vanilla", scratch, "vanilla.nopretrain", "question", flags),
        ])
    ]  # fmt: skip
    for variant in variants:
        # the handout's perceiver commands pass its bottleneck; flags given win
        own = ["--bottleneck_dim", str(HANDOUT_BOTTLENECK_DIM)] if variant == "perceiver" else []
        pretrained, finetuned = f"{variant}.pretrain.params", f"{variant}.finetune.params"
        rows.append(Row(f"{variant} with pretraining", f"{variant}.pretrain", [
            training("pretraining", "pretrain", variant, [*own, *flags], pretrained),
            training("finetuning", "finetune", variant, [*own, *flags], finetuned,
                     "--reading_params_path", pretrained, *pairs),
            # the course's names: <variant>.pretrain.<split>.predictions, from the finetuned params
            *readout_steps(variant, finetuned, f"{variant}.pretrain", "question", [*own, *flags]),
            *readout_steps(variant, pretrained, f"{variant}.frames", "frames", [*own, *flags]),
        ]))  # fmt: skip
    return rows


def job_flags_and_env(jobs, cuda):
    """
    With jobs side by side, each row's share of the cores as its threads (unless OMP_NUM_THREADS
    is set) and, on CUDA, as DataLoader workers: the rows' flags and environment.
    """
    env = dict(os.environ)
    if jobs == 1:
        return [], env
    share = max(1, available_cores() // jobs)
    env.setdefault("OMP_NUM_THREADS", str(share))
    return (["--num_workers", str(cuda_num_workers(share))] if cuda else []), env


class Table:
    """
    The rows, side by side, each in a process of its own: a bar per training, and a line as a
    row starts and ends.
    """

    def __init__(self, rows, argv, jobs, env):
        self.rows, self.argv, self.jobs, self.env = rows, argv, jobs, env
        self.start = time.monotonic()
        self.processes, self.stopped, self.lock = {}, threading.Event(), threading.Lock()
        self.signal = None  # the signal that stopped the table
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
        command = [sys.executable, __file__, "--row", row.prefix, *self.argv]
        start = time.monotonic()
        with open(row.log, "a", encoding="utf-8", buffering=1) as log:
            # a session of its own: a stop reaches the row once, from the table (stop below)
            env = dict(self.env, ASSIGNMENT_TABLE=str(os.getpid()))
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
                start_new_session=True,
            )
            with self.lock:
                self.processes[row.name] = process
                if self.stopped.is_set():  # a stop that came while the process started
                    process.send_signal(self.signal)
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
                step, epoch, epochs = said["step"], said["epoch"], said["epochs"]
            except (ValueError, TypeError, KeyError):
                log.write(line)
                continue
            if bar is None or bar.desc != f"{row.name}: {step}":
                if bar is not None:
                    bar.close()
                # a line each where the terminal can move between them; else they share one
                where = position if sys.stderr.isatty() else 0
                bar = tqdm(
                    total=epochs,
                    desc=f"{row.name}: {step}",
                    unit="epoch",
                    position=where,
                    leave=False,
                )
            bar.update(epoch - bar.n)
        if bar is not None:
            bar.close()

    def stop(self, signum, frame):
        """
        Start no more rows, and pass the signal to the running ones: each training checkpoints and
        ends.
        """
        self.stopped.set()
        self.signal = signum
        with self.lock:
            for process in self.processes.values():
                process.send_signal(signum)


def parse_args(argv):
    """assignment.py's own flags; the rest are run.py flags for every training and evaluation."""
    parser = OneLineParser(
        prog="run.sh",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Any other flag is run.py's, for every training and evaluation: "
        "python src/run.py --help.",
        allow_abbrev=False,  # a run.py flag is never taken for a prefix of these
    )
    parser.add_argument(
        "--jobs",
        type=positive_jobs,
        help=f"rows side by side (default: {CPU_JOBS} on a CPU, 1 on CUDA)",
    )
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, metavar="VARIANT",
                        help="pretrained variants "
                        f"(default: $VARIANTS, else {' '.join(VARIANTS)})")  # fmt: skip
    parser.add_argument("--row", help=argparse.SUPPRESS)  # the row a table's process runs
    args, flags = parser.parse_known_args(argv)
    if args.variants is None:  # an empty VARIANTS is all of them, as an unset one
        args.variants = (os.environ.get("VARIANTS") or " ".join(VARIANTS)).split()
        unknown = [v for v in args.variants if v not in VARIANTS]
        if unknown:
            parser.error(f"VARIANTS: unknown variant '{unknown[0]}' ({', '.join(VARIANTS)})")
    args.variants = list(dict.fromkeys(args.variants))  # each once
    return args, flags


def positive_jobs(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"takes a positive number of rows to run at once, got '{text}'"
        )
    return int(text)


def all_kept(row):
    return all(step.kept() for step in row.steps)


def check_data():
    """Every data file here or in data/, else one line naming the first missing."""
    for name in DATA:
        if not os.path.isfile(resolve_data_path(name)):
            raise RunError(f"{name} is neither here nor in data/: see data/README.md")


def run_row(args, flags):
    """A row's process: the steps of one row, each epoch said to the table as a line of JSON."""
    end_with_the_table()

    def said(step, epoch, epochs):
        print(json.dumps(dict(step=step.name, epoch=epoch, epochs=epochs)), flush=True)

    def steps():
        try:
            run_steps(row.steps, said)
        except KeyboardInterrupt:  # an evaluation stopped: nothing of it was written
            raise SystemExit(128 + signal.SIGINT) from None

    row = next(row for row in table_rows(args.variants, flags) if row.prefix == args.row)
    return exit_status("assignment.py", steps)


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


def run_table(args, flags):
    """
    The whole table: the rows not kept run, then results.md and results.json from the steps'
    records.
    """
    cuda = torch.cuda.is_available()
    if not cuda:
        flags = ["--recipe", "cpu", *flags]  # first, so that a --recipe among the flags wins
    jobs = args.jobs or (1 if cuda else CPU_JOBS)
    job_flags, env = job_flags_and_env(jobs, cuda)
    # a bad flag stops the table here, in one line
    rows = table_rows(args.variants, [*job_flags, *flags])
    if not cuda:
        say("run.sh: no CUDA GPU: training with --recipe cpu (docs/cpu-recipe.md)")
    london = results.london(read_question_file(resolve_data_path(DEV)))
    Path("london_baseline_accuracy.txt").write_text(score_line(**london) + "\n", encoding="utf-8")
    if jobs > 1:
        say(
            f"== {jobs} rows at a time, {env['OMP_NUM_THREADS']} thread(s) each; "
            f"their logs in {LOGS}/"
        )
    table = Table(rows, ["--variants", *args.variants, *job_flags, *flags], jobs, env)
    stops = [
        s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
    ]
    previous = {s: signal.signal(s, table.stop) for s in stops}
    try:
        codes = table.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if table.stopped.is_set() and any(
        code != 0 and not all_kept(row) for row, code in zip(rows, codes.values())
    ):
        print(
            "run.sh: stopped; run the same command again to go on where it stopped", file=sys.stderr
        )
        return 128 + table.signal
    print(
        results.write(
            results.table(london, rows, codes, flags, jobs, available_cores(), table.minutes())
        )
    )
    return 1 if any(codes.values()) else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["demo"]:
        return demo.main(argv[1:])
    args, flags = parse_args(argv)
    if args.row:
        return run_row(args, flags)
    try:
        check_data()
    except RunError as e:
        print(f"run.sh: {e}", file=sys.stderr)
        return 2
    return run_table(args, flags)


if __name__ == "__main__":
    exit_process(main())
