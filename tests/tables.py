"""run.sh's smoke table for the tests: a folder laid out as README says, runs, kills and what they leave."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from conftest import ROOT, TINY, run_process
from factgpt.table.world import write_world

SMOKE_STAGES = "corpus+pairs; corpus+pairs epochs=1 lr=3e-4 max_shift=13 decay_epochs=1"
# Two writers and no biography: an untrained model writes every line to its end, and these tests are
# about running, keeping and resuming; test_frames tests the readout's candidates.
SMOKE_READOUT = ["--readout_frames", "2", "--readout_biography", "0"]
SMOKE = ["--pretrain_epochs", "1", "--pretrain_stages", SMOKE_STAGES, "--finetune_epochs_from_scratch", "1",
         "--finetune_epochs_from_pretrained", "1", *SMOKE_READOUT, *TINY]  # fmt: skip
DEADLINE = 300  # seconds any run of the table may take before the test fails
QUIET = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def assignment_copy(folder):
    """A folder with run.sh, a copy of src/ and a small generated world in data/, as README lays it out."""
    folder.mkdir()
    shutil.copy(ROOT / "run.sh", folder)
    shutil.copytree(ROOT / "src", folder / "src", ignore=shutil.ignore_patterns("__pycache__"))
    write_world(folder / "data", n_train=40, n_dev=10, n_test=10, n_places=8)
    return folder


def table_command(*args, **env):
    """run.sh's smoke table (one epoch a stage, the tiny model) on a machine without CUDA, one thread a row."""
    environment = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    return ["bash", "run.sh", *SMOKE, *args], {**environment, "VARIANTS": "vanilla", **env}


def run_table(folder, *args, **env):
    command, environment = table_command(*args, **env)
    return run_process(command, timeout=DEADLINE, cwd=folder, env=environment)


def record(folder, output):
    """The record of the step that writes `output`, or {}."""
    path = folder / "logs" / "tasks" / f"{output}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def killed_table(folder, until, *args, **env):
    """run.sh's smoke table killed with SIGKILL, as a dropped session kills it, as soon as until(folder) holds."""
    command, environment = table_command(*args, **env)
    with subprocess.Popen(command, cwd=folder, env=environment, start_new_session=True, **QUIET) as process:
        try:
            wait_for(lambda: until(folder), process)
        finally:
            os.killpg(process.pid, signal.SIGKILL)


def wait_for(condition, process):
    """Wait until condition() holds while the process runs, within the deadline."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert process.poll() is None, "run.sh ended before the moment the test waits for"
        assert time.monotonic() < deadline, "run.sh took too long to reach the moment the test waits for"
        time.sleep(0.02)


def figures(value):
    """results.json without the times, which no two runs share."""
    if isinstance(value, dict):
        return {k: figures(v) for k, v in value.items() if k not in ("seconds", "elapsed_minutes")}
    if isinstance(value, list):
        return [figures(v) for v in value]
    return value


def table_cells(folder):
    """results.md's rows without their times, and results.json's figures."""
    rows = (folder / "results.md").read_text(encoding="utf-8").splitlines()
    cells = [row.split(" | ")[:3] for row in rows if row.startswith("| ")]
    return cells, figures(json.loads((folder / "results.json").read_text(encoding="utf-8")))


def mtimes(folder, *names):
    return [(folder / name).stat().st_mtime_ns for name in names]


LEFT_BEHIND = ("*.ckpt", "*.lock", "*.tmp", "*.part")
TRAININGS = ["vanilla.model.params", "vanilla.pretrain.params", "vanilla.finetune.params"]
