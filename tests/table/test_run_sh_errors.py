"""run.sh's table stopped, given a changed flag after a stop, a row that fails, or bad input."""

import contextlib
import os
import signal
import subprocess

import pytest
import torch

from conftest import main_exit
from factgpt.table.supervisor import Table
from tables import (
    DEADLINE,
    assignment_copy,
    killed_table,
    record,
    run_table,
    table_command,
    wait_for,
)


@pytest.mark.slow
def test_a_stop_reaches_every_row_which_checkpoints_and_goes_on_when_run_again(tmp_path):
    """SIGINT to the table alone (a notebook's stop, Ctrl-C): each running row stops cleanly, and the table says so."""
    folder = assignment_copy(tmp_path / "stopped")
    longer = ["--pretrain_epochs", "100", "--finetune_epochs_from_scratch", "100"]  # both rows still training
    command, environment = table_command("--jobs", "2", *longer)
    with subprocess.Popen(command, cwd=folder, env=environment, start_new_session=True, stderr=subprocess.PIPE,
                          text=True) as process:  # fmt: skip
        try:
            # both rows in their training loops, each past its first checkpoint
            checkpoints = [folder / f"vanilla.{name}.params.ckpt" for name in ("pretrain", "model")]
            wait_for(lambda: all(checkpoint.exists() for checkpoint in checkpoints), process)
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
    logs = [folder / "logs" / f"vanilla.{row}.log" for row in ("pretrain", "nopretrain")]
    resumed = lambda f: all(log.read_text(encoding="utf-8").count("resuming from") for log in logs)  # noqa: E731
    killed_table(folder, resumed, "--jobs", "2", *longer)  # run again, each row goes on where it stopped


class SignalledRow:
    """A row's process as the table holds it, noting the signals it is sent."""

    def __init__(self):
        self.signals = []

    def send_signal(self, signum):
        self.signals.append(signum)


@pytest.mark.parametrize(
    "stop, forwarded",
    [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGTERM), (signal.SIGHUP, signal.SIGTERM)],
)
def test_the_table_passes_a_stop_to_every_running_row(stop, forwarded):
    """
    Each running row gets the table's stop: a hang-up (a dropped session) as SIGTERM, which a training
    catches, checkpoints after its step and ends (test_robustness); the table keeps its own signal for
    its exit code.
    """
    table = Table([], ["python"], 2, {})
    table.processes = {"vanilla": SignalledRow(), "rope": SignalledRow()}
    table.stop(stop, None)
    assert table.stopped.is_set() and table.signal == stop
    assert [row.signals for row in table.processes.values()] == [[forwarded], [forwarded]]


@pytest.mark.slow
def test_a_checkpoint_of_other_settings_is_never_resumed(tmp_path):
    """
    A flag changed and the table stopped before the new training's first checkpoint, while the
    old settings' checkpoint was still there: no checkpoint of the old settings is left to resume.
    """
    folder = assignment_copy(tmp_path / "stale")
    checkpoint = folder / "vanilla.pretrain.params.ckpt"
    killed_table(folder, lambda f: checkpoint.exists())
    old_dropout = torch.load(checkpoint, weights_only=True)["run_identity"]["dropout"]
    old_key = record(folder, "vanilla.pretrain.params")["key"]
    new_key = lambda f: record(f, "vanilla.pretrain.params").get("key", old_key) != old_key  # noqa: E731
    killed_table(folder, new_key, "--dropout", "0.05")
    # stopped once the new settings' training had started: the old checkpoint is gone, or replaced by theirs
    left = torch.load(checkpoint, weights_only=True)["run_identity"]["dropout"] if checkpoint.exists() else None
    assert old_dropout != 0.05 and left in (None, 0.05), f"the old settings' checkpoint (dropout {left}) was kept"
    done = run_table(folder, "--dropout", "0.05")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed" not in (folder / "results.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_failed_row_is_named_in_one_line_and_the_others_finish(tmp_path):
    folder = assignment_copy(tmp_path / "failing")
    done = run_table(folder, "--bottleneck_dim", "200", VARIANTS="perceiver")  # more latents than positions
    assert done.returncode == 1
    assert done.stderr.splitlines().count("run.sh: perceiver with pretraining failed: see logs/perceiver.pretrain.log")
    assert "bottleneck_dim 200" in (folder / "logs" / "perceiver.pretrain.log").read_text(encoding="utf-8")
    rows = (folder / "results.md").read_text(encoding="utf-8").splitlines()
    failed = "failed: see logs/perceiver.pretrain.log"
    assert rows[4] == f"| perceiver with pretraining | {failed} | {failed} |  |  |", rows
    assert rows[3].startswith("| vanilla without pretraining | ") and "failed" not in rows[3]


@pytest.mark.parametrize(
    "args, variants, said",
    [
        (["--pretrain_epochs", "x"], None, "run.sh: error: argument --pretrain_epochs: 'x' is not an int"),
        (["--jobs", "0"], None, "run.sh: error: argument --jobs: takes a positive number of rows to run at once"),
        ([], "vanilla gpt", "run.sh: error: VARIANTS: unknown variant 'gpt'"),
    ],
)
def test_bad_input_is_one_line_and_nothing_runs(tmp_path, monkeypatch, capsys, args, variants, said):
    """The table's main in this process, as run.sh calls it: exit code 2, one line, nothing written."""
    from factgpt.common import files
    from factgpt.table import assignment

    folder = assignment_copy(tmp_path / "bad")
    if variants:
        monkeypatch.setenv("VARIANTS", variants)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(files, "DATA_DIR", folder / "data")  # the copy's data/, as its src/ would find it
    monkeypatch.setattr(assignment, "Table", None)  # a table that got past its checks fails here, before any row
    code, err = main_exit(capsys, assignment.main, args)
    assert code == 2 and err.strip().startswith(said), err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["data", "run.sh", "src"]


@pytest.mark.parametrize(
    "name, text, said",
    [
        (
            "birth_dev.tsv",
            "Where was Al Ba born?\tParis\nWhere was Cy Do born?\n",
            "line 2: expected 'question<TAB>place'",
        ),
        ("birth_places_train.tsv", "Where was Al Ba born?\n", "line 1: expected 'question<TAB>place', got 1 field(s)"),
        ("birth_test_inputs.tsv", "Where was Al Ba born?\tParis\tRome\n", "line 1: expected 'question<TAB>place'"),
        ("wiki.txt", "\n", "is empty"),
    ],
)
def test_a_malformed_data_file_is_one_line_before_any_training(tmp_path, monkeypatch, capsys, name, text, said):
    """Each of the four files, malformed: the table's main says the file and the line, exit code 2, nothing written."""
    from factgpt.common import files
    from factgpt.table import assignment

    folder = assignment_copy(tmp_path / "malformed")
    (folder / "data" / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(folder)
    monkeypatch.setattr(files, "DATA_DIR", folder / "data")
    monkeypatch.setattr(assignment, "Table", None)  # a table that got past its checks fails here, before any row
    code, err = main_exit(capsys, assignment.main, [])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("run.sh: ") and name in err and said in err, err
    assert sorted(p.name for p in folder.iterdir()) == ["data", "run.sh", "src"]


def test_run_sh_says_a_missing_data_file_in_one_line(tmp_path):
    """run.sh in a folder of its own whose data/ lacks a file (the checkout's data/ is not looked at)."""
    folder = assignment_copy(tmp_path / "bad")
    (folder / "data" / "birth_dev.tsv").unlink()
    done = subprocess.run(["bash", str(folder / "run.sh")], capture_output=True, text=True, timeout=60)
    said = "run.sh: birth_dev.tsv is neither here nor in data/: see data/README.md"
    assert done.returncode == 2 and done.stderr.strip() == said, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["data", "run.sh", "src"]
