"""
The tasks of the assignment's table, each one run.py command, and their records: a task is kept
when its record says it wrote its output with the same settings and inputs, and a cut training goes
on from its checkpoint only when its record says it was started with them.
"""

import dataclasses
import functools
import hashlib
import json
import logging
import os
import shlex
import time
from pathlib import Path
from typing import Optional

from factgpt import pipeline
from factgpt.common.files import atomic_write, resolve_data_path
from factgpt.settings.command_line import build_parser, parse
from factgpt.settings.run_config import INPUTS

logger = logging.getLogger(__name__)

# beside a task's output: logs/tasks/ holds the records, and the table's rows log there
LOGS = "logs"


@dataclasses.dataclass
class Task:
    """
    One run.py command: its name in the logs and the table, its arguments, and the file it writes.
    """

    name: str  # "pretraining", "finetuning", "question: dev", ...
    argv: list  # run.py's arguments, the table's flags included
    output: str  # the params or predictions it writes
    split: Optional[str] = None  # an evaluation's: "dev" or "test"

    def __post_init__(self):
        """
        The RunConfig run.py makes of the arguments: a bad one exits here, with one line and code 2.
        """
        self.cfg = parse(self.argv, build_parser("run.sh"))[0]

    @property
    def training(self):
        return self.cfg.function != "evaluate"

    def settings(self):
        """
        What the task's output follows from, besides its inputs: the settings its training reads (a
        checkpoint's identity too: a finetuning flag leaves a pretraining kept), an evaluation's
        readout and model sizes.
        """
        recipe = self.cfg.recipe
        if self.training:
            return recipe.training_settings(self.cfg.function)
        return recipe.reading_settings() | recipe.sizes(self.cfg.variant)

    def key(self):
        """
        A digest of the settings, the run's controls and every input's content (None while one is
        missing).
        """
        cfg = self.cfg
        inputs = {name: file_digest(getattr(cfg, name)) for name in INPUTS if getattr(cfg, name)}
        if None in inputs.values():
            return None
        identity = dict(
            function=cfg.function, variant=cfg.variant, seed=cfg.seed, device=cfg.device
        )
        identity |= dict(settings=self.settings(), inputs=inputs)
        return hashlib.sha256(
            json.dumps(identity, sort_keys=True, default=str).encode()
        ).hexdigest()[:16]

    @property
    def record_path(self):
        """Where the task's record lives: logs/tasks/ beside its output."""
        output = Path(self.output)
        return output.parent / LOGS / "tasks" / (output.name + ".json")

    def record(self):
        """The task's record, or {} where there is none or it cannot be read."""
        try:
            return json.loads(self.record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def write_record(self, **record):
        text = json.dumps(record, indent=1) + "\n"
        atomic_write(self.record_path, lambda f: f.write(text.encode("utf-8")))

    def kept(self):
        """
        The record of the task where its output was written with the settings and inputs it has now,
        else None.
        """
        record, key = self.record(), self.key()
        done = record.get("state") == "done" and key is not None and record.get("key") == key
        return record if done and record.get("output_digest") == file_digest(self.output) else None

    def run(self, on_epoch=lambda task, epoch, epochs: None):
        """
        Run the task and record it. A training goes on from its checkpoint only where its record
        says it was started with these settings; another run's checkpoint is removed first.
        """
        key, record = self.key(), self.record()
        checkpoint = self.output + ".ckpt"
        resume = self.training and record.get("state") == "started" and record.get("key") == key
        resume = resume and os.path.exists(checkpoint)
        if self.training and not resume and os.path.exists(checkpoint):
            os.remove(checkpoint)
        output = Path(self.output)
        for partial in output.parent.glob(f".{output.name}.*.tmp"):  # a write a kill cut short
            partial.unlink()
        seconds_before = record.get("seconds", 0.0) if resume else 0.0
        self.write_record(key=key, state="started", seconds=seconds_before)
        start, cfg = time.monotonic(), dataclasses.replace(self.cfg, resume=resume)
        if self.training:
            epochs = training_epochs(cfg)

            def epoch_end(end):
                """
                Say the epoch; keep the seconds so far in the record, which a resumed training adds
                to.
                """
                self.write_record(
                    key=key, state="started", seconds=seconds_before + time.monotonic() - start
                )
                on_epoch(self, end.epoch, epochs)

            on_epoch(self, 0, epochs)
            getattr(pipeline, cfg.function)(cfg, on_epoch_end=[epoch_end])
            result = {}
        else:
            evaluation = pipeline.evaluate(cfg)
            result = dict(correct=evaluation.correct, total=evaluation.total)
        seconds = seconds_before + time.monotonic() - start
        self.write_record(
            key=key, state="done", seconds=seconds, output_digest=file_digest(self.output), **result
        )


def training_epochs(cfg):
    """
    A training's epochs: every pretraining stage's, or the finetuning's (from params or from
    scratch).
    """
    if cfg.function == "pretrain":
        return sum(stage.max_epochs for stage in cfg.recipe.stages())
    return cfg.recipe.finetuning(pretrained=bool(cfg.reading_params_path)).max_epochs


def run_tasks(tasks, on_epoch=lambda task, epoch, epochs: None):
    """Run each task that is not kept, in order; a kept one is said in the log."""
    for task in tasks:
        if task.kept():
            logger.info(
                "== %s: kept %s, written earlier with the same settings", task.name, task.output
            )
            continue
        logger.info("== %s: %s", task.name, shlex.join(["run.py", *task.argv]))
        task.run(on_epoch)


@functools.lru_cache(maxsize=None)
def content_digest(path, mtime_ns, size):
    """
    The SHA-256 of a file's bytes, read once for each of its versions (its modification time and
    size).
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path):
    """
    The SHA-256 of the file at `path` (a bare data file name looked up as run.py does), or None.
    """
    resolved = resolve_data_path(path)
    try:
        status = os.stat(resolved)
    except OSError:
        return None
    return content_digest(os.path.realpath(resolved), status.st_mtime_ns, status.st_size)
