"""
run.sh, the whole assignment's table (src/assignment.py), as a user runs it: its table, its
settings or data changed, a stale checkpoint, bad input; and collect_submission.sh.
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT
from questions import read_question_file, score_line
from tables import (
    DEADLINE,
    LEFT_BEHIND,
    QUIET,
    TRAININGS,
    assignment_copy,
    killed_table,
    mtimes,
    record,
    run_table,
    table_command,
)


@pytest.mark.slow
def test_the_table_has_both_readouts_scored_from_their_predictions(sequential):
    folder, done = sequential
    assert "training with --recipe cpu" in done.stderr
    said = done.stderr.splitlines()
    assert [line.split(" (")[0] for line in said if line.startswith("== started")] == [
        "== started: vanilla without pretraining",
        "== started: vanilla with pretraining",
    ]
    assert sum(line.startswith("== finished: ") and " min, at " in line for line in said) == 2
    table = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    assert [row["name"] for row in table["rows"]] == [
        "London baseline",
        "vanilla without pretraining",
        "vanilla with pretraining",
    ]
    dev = read_question_file(folder / "data" / "birth_dev.tsv")
    scores = 0
    for row in table["rows"][1:]:
        for readout in row["readouts"].values():
            predicted = (folder / readout["dev"]["output"]).read_text(encoding="utf-8").splitlines()
            correct = sum(answer == place for answer, (_, _, place) in zip(predicted, dev))
            assert (readout["dev"]["correct"], readout["dev"]["total"]) == (correct, len(dev))
            tests = (folder / readout["test"]["output"]).read_text(encoding="utf-8")
            assert tests.count("\n") == 10 and readout["test"]["total"] == 0
            assert score_line(10, correct).removeprefix("Correct: ") in done.stdout
            scores += 1
        assert all(training["seconds"] > 0 and len(training["digest"]) == 16 for training in row["trainings"].values())
    assert scores == 3  # vanilla without pretraining asked the question; with pretraining, both readouts
    pretrained = table["rows"][2]
    assert list(pretrained["trainings"]) == ["pretraining", "finetuning"] and list(pretrained["readouts"]) == [
        "question",
        "frames",
    ]
    assert pretrained["readouts"]["question"]["dev"]["output"] == "vanilla.pretrain.dev.predictions"  # the course's
    assert table["commit"] is None  # a copy of src/ outside git; in a checkout, its commit
    assert table["machine"]["cores"] >= 1 and table["flags"][:2] == ["--recipe", "cpu"]
    assert done.stdout.strip() == (folder / "results.md").read_text(encoding="utf-8").strip()
    assert not [path for pattern in LEFT_BEHIND for path in folder.rglob(pattern)]
    outputs = [step["output"] for row in table["rows"][1:] for step in row["trainings"].values()]
    outputs += [split["output"] for row in table["rows"][1:] for r in row["readouts"].values() for split in r.values()]
    assert len(outputs) == 9 and all(record(folder, output)["state"] == "done" for output in outputs)


@pytest.mark.slow
def test_a_changed_readout_or_data_file_reruns_only_what_reads_it(sequential, tmp_path):
    reference, _ = sequential
    folder = tmp_path / "changed"
    shutil.copytree(reference, folder, symlinks=True)
    trained = mtimes(folder, *TRAININGS)
    done = run_table(folder, "--jobs", "1", "--readout_frames", "2")  # a reading setting: no training again
    assert done.returncode == 0, done.stderr[-3000:]
    assert mtimes(folder, *TRAININGS) == trained
    assert "== vanilla without pretraining: kept" not in done.stderr  # its evaluations read the readout's settings
    log = (folder / "logs" / "vanilla.pretrain.log").read_text(encoding="utf-8")
    assert "== pretraining: kept vanilla.pretrain.params" in log and "== finetuning: kept" in log

    dev_predictions = [f"vanilla.{p}.dev.predictions" for p in ("nopretrain", "pretrain", "frames")]
    dev = mtimes(folder, *dev_predictions)
    tests = folder / "data" / "birth_test_inputs.tsv"
    tests.write_text("".join(tests.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")
    done = run_table(folder, "--jobs", "1", "--readout_frames", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert mtimes(folder, *TRAININGS, *dev_predictions) == trained + dev  # only the test evaluations read it
    for prefix in ("nopretrain", "pretrain", "frames"):
        assert (folder / f"vanilla.{prefix}.test.predictions").read_text(encoding="utf-8").count("\n") == 9


@pytest.mark.slow
def test_a_checkpoint_of_other_settings_is_never_resumed(tmp_path):
    """
    A flag changed and the table stopped before the new training's first checkpoint, while the
    old settings' checkpoint was still there: the next run trains afresh, to a fresh run's params.
    """
    fresh = assignment_copy(tmp_path / "fresh")
    command, environment = table_command("--dropout", "0.05")
    with subprocess.Popen(command, cwd=fresh, env=environment, **QUIET) as fresh_run:  # beside the rest
        folder = assignment_copy(tmp_path / "stale")
        checkpoint = folder / "vanilla.pretrain.params.ckpt"
        killed_table(folder, lambda f: checkpoint.exists())
        old_key = record(folder, "vanilla.pretrain.params")["key"]
        new_key = lambda f: record(f, "vanilla.pretrain.params").get("key", old_key) != old_key  # noqa: E731
        killed_table(folder, new_key, "--dropout", "0.05")
        done = run_table(folder, "--dropout", "0.05")
        assert done.returncode == 0, done.stderr[-3000:]
        assert fresh_run.wait(timeout=DEADLINE) == 0
    for name in TRAININGS:
        assert (folder / name).read_bytes() == (fresh / name).read_bytes(), name


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


def test_bad_input_is_one_line_and_nothing_runs(tmp_path):
    folder = assignment_copy(tmp_path / "bad")
    jobs = "run.sh: error: argument --jobs: takes a positive number of rows to run at once, got '0'"
    for args, env, said in [
        (["--pretrain_epochs", "x"], {}, "run.sh: error: argument --pretrain_epochs: 'x' is not an int"),
        (["--jobs", "0"], {}, jobs),
        ([], {"VARIANTS": "vanilla gpt"}, "run.sh: error: VARIANTS: unknown variant 'gpt'"),
        ([], {"REMOVE": "birth_dev.tsv"}, "run.sh: birth_dev.tsv is neither here nor in data/: see data/README.md"),
    ]:
        if env.pop("REMOVE", None):
            (folder / "data" / "birth_dev.tsv").unlink()
        command = ["bash", str(folder / "run.sh"), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, **env})
        assert done.returncode == 2 and done.stderr.strip().startswith(said), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in folder.iterdir()) == ["data", "run.sh", "src"]


def collect(folder, *args):
    done = subprocess.run(
        ["bash", str(folder / "collect_submission.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return done.returncode, done.stdout, done.stderr


def test_collect_submission_zips_exactly_its_files_or_leaves_no_zip(tmp_path):
    shutil.copy(ROOT / "collect_submission.sh", tmp_path)
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    names = ["vanilla.model.params", "vanilla.nopretrain.dev.predictions", "vanilla.nopretrain.test.predictions"]
    names += [
        f"{v}.{kind}"
        for v in ["vanilla", "perceiver"]
        for kind in ["pretrain.params", "finetune.params", "pretrain.dev.predictions", "pretrain.test.predictions"]
    ]
    for name in names:
        (tmp_path / name).write_text(name)
    # the course's modules and what they import: everything in src/ but the demo world's generator
    course = [f"src/{p.name}" for p in (ROOT / "src").glob("*.py") if p.name != "world.py"]
    code, out, err = collect(tmp_path, "2023")
    assert code == 0 and "wrote assignment5.zip" in out, err
    with zipfile.ZipFile(tmp_path / "assignment5.zip") as z:
        assert sorted(z.namelist()) == sorted(names + course)
        z.extractall(tmp_path / "unzipped")
    help_text = subprocess.run(
        [sys.executable, str(tmp_path / "unzipped" / "src" / "run.py"), "--help"], capture_output=True, text=True
    )
    assert help_text.returncode == 0 and "pretrain_corpus_path" in help_text.stdout, help_text.stderr  # self-contained

    rope = [f"rope.{kind}" for kind in ["pretrain.params", "finetune.params", "pretrain.dev.predictions",
                                        "pretrain.test.predictions"]]  # fmt: skip
    for name in rope:
        (tmp_path / name).write_text(name)
    code, out, err = collect(tmp_path, "2024")  # the 2024 edition: vanilla's and rope's files
    assert code == 0, err
    with zipfile.ZipFile(tmp_path / "assignment5.zip") as z:
        assert sorted(z.namelist()) == sorted(names[:7] + rope + course)

    (tmp_path / "rope.finetune.params").unlink()
    code, _, err = collect(tmp_path, "2024")  # the course's row needs the finetuned params
    assert code == 1 and "rope.finetune.params" in err and not (tmp_path / "assignment5.zip").exists()
    code, _, err = collect(tmp_path, "2021")  # the synthesizer's files are missing
    assert code == 1 and "synthesizer.pretrain.params" in err and not (tmp_path / "assignment5.zip").exists()
    for args in [["2022"], ["2023", "extra"]]:
        (tmp_path / "assignment5.zip").write_text("an older zip")
        code, _, err = collect(tmp_path, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and not (tmp_path / "assignment5.zip").exists(), err
