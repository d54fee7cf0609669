"""run.sh's table killed as a dropped session kills it, then run again: it goes on to the same table."""

import contextlib
import os
import signal
import subprocess

import pytest

from tables import (
    DEADLINE,
    LEFT_BEHIND,
    TRAININGS,
    assignment_copy,
    killed_table,
    mtimes,
    record,
    run_table,
    table_cells,
    table_command,
    wait_for,
)


@pytest.mark.slow
def test_killed_after_a_row_and_in_an_evaluation_it_goes_on_to_the_same_table(sequential, tmp_path):
    reference, _ = sequential
    folder = assignment_copy(tmp_path / "killed")
    first_row_done = lambda f: record(f, "vanilla.nopretrain.test.predictions").get("state") == "done"  # noqa: E731
    killed_table(folder, first_row_done, "--jobs", "1")
    first_row = mtimes(folder, "vanilla.model.params", "vanilla.nopretrain.dev.predictions")
    in_frames = lambda f: record(f, "vanilla.frames.dev.predictions").get("state") == "started"  # noqa: E731
    killed_table(folder, in_frames, "--jobs", "1")
    trained = mtimes(folder, "vanilla.pretrain.params", "vanilla.finetune.params")
    done = run_table(folder, "--jobs", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "== vanilla without pretraining: kept: its params and predictions were written earlier with the same settings"
        in done.stderr.splitlines()
    )
    assert mtimes(folder, "vanilla.model.params", "vanilla.nopretrain.dev.predictions") == first_row
    assert mtimes(folder, "vanilla.pretrain.params", "vanilla.finetune.params") == trained
    assert table_cells(folder) == table_cells(reference)
    assert not [path for pattern in LEFT_BEHIND for path in folder.rglob(pattern)]


@pytest.mark.slow
def test_side_by_side_killed_in_a_training_resumes_it_to_the_same_table(sequential, tmp_path):
    reference, _ = sequential
    folder = assignment_copy(tmp_path / "jobs")
    killed_table(folder, lambda f: (f / "vanilla.pretrain.params.ckpt").exists(), "--jobs", "2")
    done = run_table(folder, "--jobs", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "== 2 rows at a time, 1 thread(s) each; their logs in logs/" in done.stderr
    assert "resuming from vanilla.pretrain.params.ckpt" in (folder / "logs" / "vanilla.pretrain.log").read_text()
    # resumed exactly, side by side: the one-at-a-time table, digests and scores alike
    assert table_cells(folder)[1]["rows"] == table_cells(reference)[1]["rows"]
    for name in TRAININGS:
        assert (folder / name).read_bytes() == (reference / name).read_bytes(), name


@pytest.mark.slow
def test_a_stop_reaches_every_row_which_checkpoints_and_goes_on_when_run_again(tmp_path):
    """SIGINT to the table alone (a notebook's stop, Ctrl-C): each running row stops cleanly, and the table says so."""
    folder = assignment_copy(tmp_path / "stopped")
    longer = ["--pretrain_epochs", "4", "--finetune_epochs_from_scratch", "300"]  # both rows still training
    command, environment = table_command("--jobs", "2", *longer)
    with subprocess.Popen(command, cwd=folder, env=environment, start_new_session=True, stderr=subprocess.PIPE,
                          text=True) as process:  # fmt: skip
        try:
            wait_for(lambda: (folder / "vanilla.pretrain.params.ckpt").exists(), process)
            process.send_signal(signal.SIGINT)
            said = process.communicate(timeout=DEADLINE)[1]
        finally:
            with contextlib.suppress(ProcessLookupError):  # whatever the table left running
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, said[-2000:]
    assert said.rstrip().endswith("\nrun.sh: stopped; run the same command again to go on where it stopped")
    for log in ("vanilla.pretrain.log", "vanilla.nopretrain.log"):
        assert "stopped by SIGINT" in (folder / "logs" / log).read_text(encoding="utf-8"), log
    assert (folder / "vanilla.pretrain.params.ckpt").exists() and not (folder / "results.md").exists()
    done = run_table(folder, "--jobs", "2", *longer)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from vanilla.pretrain.params.ckpt" in (folder / "logs" / "vanilla.pretrain.log").read_text()
