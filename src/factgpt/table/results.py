"""
The assignment's table from its tasks' records, never from printed text: results.json (per row
and readout the score, each training's and evaluation's wall time and settings' digest, the commit
and the machine) and results.md, the same table for a person.
"""

import json
import platform
import shlex
import subprocess
from pathlib import Path

import torch

from factgpt.common.files import REPOSITORY, atomic_write
from factgpt.common.questions import score_line

READOUTS = {"question": "asked the handout's question", "frames": "asked in the corpus's words"}


def london(rows):
    """The London baseline's score over a question file's rows: London for everyone."""
    return dict(correct=sum(place == "London" for _, _, place in rows), total=len(rows))


def commit():
    """
    The repository's commit, with "+changes" where its tracked files differ from it; None outside
    git.
    """
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True, check=True
        )
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 cwd=REPOSITORY, capture_output=True, text=True,
                                 check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def machine(cores):
    """
    The processor, its cores, the GPU where there is one, and the versions that set the arithmetic.
    """
    processor = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            processor = next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return dict(
        processor=processor,
        cores=cores,
        gpu=gpu,
        torch=torch.__version__,
        python=platform.python_version(),
    )


def task_result(task):
    """
    What the table says of a task: its record where it is kept, with its output; None where it is
    not done.
    """
    record = task.kept()
    if record is None:
        return None
    result = dict(output=task.output, seconds=round(record["seconds"], 3), digest=record["key"])
    if not task.training:
        result.update(correct=record["correct"], total=record["total"])
    return result


def row_results(row, code):
    """
    A row as results.json has it: its trainings and its readouts by split, and whether it failed.
    """
    trainings, readouts = {}, {}
    for task in row.tasks:
        if task.training:
            trainings[task.name] = task_result(task)
        else:
            readouts.setdefault(task.cfg.recipe.readout, {})[task.split] = task_result(task)
    return dict(
        name=row.name, failed=bool(code), log=str(row.log), trainings=trainings, readouts=readouts
    )


def cell(row, readout):
    """
    A row's dev score by a readout: blank where the row has no such readout, and where it failed,
    its log.
    """
    if readout not in row["readouts"]:
        return ""
    dev = row["readouts"][readout].get("dev")
    if dev:
        return score_line(dev["total"], dev["correct"]).removeprefix("Correct: ")
    return f"failed: see {row['log']}" if row.get("failed") else ""


def minutes(results):
    """The minutes of tasks (blank where none is done), joined by '+'."""
    return " + ".join(f"{r['seconds'] / 60:.1f}" for r in results if r and "seconds" in r)


def dev_and_test(readout):
    """A readout's dev and test evaluations as one, for their minutes (None until both are done)."""
    splits = list(readout.values())
    if all(split and "seconds" in split for split in splits):
        return dict(seconds=sum(split["seconds"] for split in splits))
    return None


def markdown(table):
    """results.md: a line per row, the two readouts side by side, then how it was run."""
    lines = [
        (
            f"| run | dev, {READOUTS['question']} | dev, {READOUTS['frames']} "
            "| training (min) | evaluation (min) |"
        ),
        "| --- | --- | --- | --- | --- |",
    ]
    for row in table["rows"]:
        trained = minutes((row.get("trainings") or {}).values())
        evaluated = minutes(dev_and_test(readout) for readout in row["readouts"].values())
        lines.append(
            f"| {row['name']} | {cell(row, 'question')} | {cell(row, 'frames')} "
            f"| {trained} | {evaluated} |"
        )
    m = table["machine"]
    where = m["gpu"] or f"{m['processor']}, {m['cores']} cores"
    return "\n".join([
        *lines,
        "",
        ("Asked the handout's question: finetuned on it first (with pretraining, the course's "
         "row); in the corpus's"),
        ("words: the pretrained params asked zero-shot (--readout frames). Minutes are each "
         "task's wall time, summed"),
        "over stops: the trainings, then each readout's evaluations of dev and test.",
        (f"Flags: `{shlex.join(table['flags'])}`; {table['jobs']} row(s) at a time; "
         f"commit {table['commit']};"),
        f"{where}; torch {m['torch']}.",
    ])  # fmt: skip


def write(table, folder="."):
    """Write results.json and results.md into `folder`; the markdown, to print."""
    text = markdown(table)
    json_text = json.dumps(table, indent=1, ensure_ascii=False) + "\n"
    atomic_write(Path(folder) / "results.json", lambda f: f.write(json_text.encode("utf-8")))
    atomic_write(Path(folder) / "results.md", lambda f: f.write((text + "\n").encode("utf-8")))
    return text


def table(london_score, rows, codes, flags, jobs, cores, elapsed_minutes):
    """
    The table as data: London, then each row; the flags, the commit, the machine, this run's
    minutes.
    """
    london_row = dict(name="London baseline", readouts=dict(question=dict(dev=london_score)))
    return dict(
        rows=[london_row, *(row_results(row, codes.get(row.name)) for row in rows)],
        flags=list(flags),
        jobs=jobs,
        commit=commit(),
        machine=machine(cores),
        elapsed_minutes=round(elapsed_minutes, 1),
    )
