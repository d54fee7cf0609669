"""
The whole assignment as one table (./run.sh):

    ./run.sh [--jobs N] [--variants V ...] [run.py flags]
    ./run.sh demo

(run.sh starts this module as `python -m factgpt.table.assignment` with src/ on the path.)

London for everyone; vanilla finetuned without pretraining; and each variant pretrained, then read
out two ways: finetuned on the handout's question (the course's row), and asked zero-shot in the
corpus's own words (--readout frames). Every row writes dev and test predictions; the table goes to
results.md and results.json. Without a CUDA GPU the trainings take --recipe cpu.

Each row runs in a process of its own, --jobs N of them side by side, its log in logs/<row>.log;
with several GPUs, a row a GPU. Run again, it keeps each task written with the settings and inputs
it reads (tasks.py) and goes on from a cut training's checkpoint. `demo` runs the experiment on a
generated world (docs/demo.md).
"""

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

import torch

from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.errors import RunError
from factgpt.common.files import resolve_data_path
from factgpt.common.questions import read_question_file, score_line
from factgpt.corpus.reading import answered_pairs, read_pairs, read_text
from factgpt.settings.command_line import OneLineParser
from factgpt.settings.recipes import HANDOUT_BOTTLENECK_DIM
from factgpt.settings.run_config import available_cores, cuda_num_workers
from factgpt.table import demo, results
from factgpt.table.supervisor import Table, all_kept, end_with_the_table, say, visible_gpus
from factgpt.table.tasks import LOGS, Task, run_tasks
from model import VARIANTS

DATA = ("wiki.txt", "birth_places_train.tsv", "birth_dev.tsv", "birth_test_inputs.tsv")
WIKI, TRAIN, DEV, TEST = DATA
SPLITS = {"dev": DEV, "test": TEST}
# On a CPU, two trainings side by side with a thread each got through the table's work faster
# than one at a time with both threads (docs/speed.md); on CUDA they share one GPU.
CPU_JOBS = 2


@dataclasses.dataclass
class Row:
    """A row of the table: its name, its files' prefix (and its log's), and its tasks in order."""

    name: str
    prefix: str
    tasks: list

    @property
    def log(self):
        return Path(LOGS) / f"{self.prefix}.log"


def readout_tasks(variant, params, prefix, readout, flags):
    """The dev and test evaluations of params by a readout, writing <prefix>.<split>.predictions."""
    tasks = []
    for split, questions in SPLITS.items():
        output = f"{prefix}.{split}.predictions"
        argv = ["evaluate", variant, WIKI, *flags, "--readout", readout]
        argv += ["--reading_params_path", params, "--eval_corpus_path", questions]
        argv += ["--outputs_path", output]
        if readout == "frames":  # the frames readout is fitted on the training people
            argv += ["--finetune_corpus_path", TRAIN]
        tasks.append(Task(f"{readout}: {split}", argv, output, split))
    return tasks


def training(name, function, variant, flags, params, *inputs):
    """A pretraining or finetuning task of the table, writing `params`."""
    argv = [function, variant, WIKI, *flags, *inputs, "--writing_params_path", params]
    return Task(name, argv, params)


def table_rows(variants, flags):
    """
    Vanilla finetuned without pretraining, then each variant pretrained and read out both ways.
    """
    pairs = ["--finetune_corpus_path", TRAIN]
    scratch = "vanilla.model.params"
    rows = [
        Row("vanilla without pretraining", "vanilla.nopretrain", [
            training("finetuning", "finetune", "vanilla", flags, scratch, *pairs),
            *readout_tasks("vanilla", scratch, "vanilla.nopretrain", "question", flags),
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
            *readout_tasks(variant, finetuned, f"{variant}.pretrain", "question", [*own, *flags]),
            *readout_tasks(variant, pretrained, f"{variant}.frames", "frames", [*own, *flags]),
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


def parse_args(argv):
    """The table's own flags; the rest are run.py flags for every training and evaluation."""
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
        help=f"rows side by side (default: {CPU_JOBS} on a CPU, a GPU each on CUDA)",
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


def check_data():
    """
    Every data file here or in data/, and each read as the table reads it, before any training:
    else one line naming the first missing or malformed file (and its line).
    """
    for name in DATA:
        if not os.path.isfile(resolve_data_path(name)):
            raise RunError(f"{name} is neither here nor in data/: see data/README.md")
    read_text(WIKI, "pretraining corpus")
    for name in (
        TRAIN,
        DEV,
    ):  # the table trains on the one and scores the other: places on every line
        answered_pairs(name, name)
    read_pairs(TEST, TEST)  # questions, with or without their places


def run_row(args, flags):
    """A row's process: the tasks of one row, each epoch said to the table as a line of JSON."""
    end_with_the_table()

    def said(task, epoch, epochs):
        print(json.dumps(dict(task=task.name, epoch=epoch, epochs=epochs)), flush=True)

    def tasks():
        try:
            run_tasks(row.tasks, said)
        except KeyboardInterrupt:  # an evaluation stopped: nothing of it was written
            raise SystemExit(128 + signal.SIGINT) from None

    row = next(row for row in table_rows(args.variants, flags) if row.prefix == args.row)
    return exit_status("run.sh", tasks)


def run_table(args, flags):
    """
    The whole table: the rows not kept run, then results.md and results.json from the tasks'
    records.
    """
    cuda = torch.cuda.is_available()
    if not cuda:
        flags = ["--recipe", "cpu", *flags]  # first, so that a --recipe among the flags wins
    gpus = visible_gpus(torch.cuda.device_count()) if cuda else []
    jobs = args.jobs or (len(gpus) if cuda else CPU_JOBS)  # a row a GPU
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
    row_command = [sys.executable, "-m", "factgpt.table.assignment", "--variants", *args.variants]
    table = Table(rows, [*row_command, *job_flags, *flags], jobs, env, gpus)
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
