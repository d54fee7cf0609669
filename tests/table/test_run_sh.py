"""
run.sh, the whole assignment's table (factgpt.table.assignment), as a user runs it: its table, its
settings or data changed, killed as a dropped session kills it; and collect_submission.sh.
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT
from factgpt.common.questions import read_question_file, score_line
from factgpt.table.assignment import DATA, table_rows
from factgpt.table.submission import COURSE_MODULES
from factgpt.table.supervisor import Table, visible_gpus
from model import VARIANTS
from tables import (
    LEFT_BEHIND,
    TRAININGS,
    assignment_copy,
    killed_table,
    mtimes,
    record,
    run_table,
    table_cells,
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
    done = run_table(folder, "--jobs", "1", "--readout_frames", "3")  # a reading setting: no training again
    assert done.returncode == 0, done.stderr[-3000:]
    assert mtimes(folder, *TRAININGS) == trained
    assert "== vanilla without pretraining: kept" not in done.stderr  # its evaluations read the readout's settings
    log = (folder / "logs" / "vanilla.pretrain.log").read_text(encoding="utf-8")
    assert "== pretraining: kept vanilla.pretrain.params" in log and "== finetuning: kept" in log

    dev_predictions = [f"vanilla.{p}.dev.predictions" for p in ("nopretrain", "pretrain", "frames")]
    dev = mtimes(folder, *dev_predictions)
    tests = folder / "data" / "birth_test_inputs.tsv"
    tests.write_text("".join(tests.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8")
    done = run_table(folder, "--jobs", "1", "--readout_frames", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert mtimes(folder, *TRAININGS, *dev_predictions) == trained + dev  # only the test evaluations read it
    for prefix in ("nopretrain", "pretrain", "frames"):
        assert (folder / f"vanilla.{prefix}.test.predictions").read_text(encoding="utf-8").count("\n") == 9


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


def collect(folder, *args):
    done = subprocess.run(
        ["bash", str(folder / "collect_submission.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return done.returncode, done.stdout, done.stderr


def unzipped_modules_import(zip_path, folder):
    """Unzip into an empty folder and import every module the zip holds in a fresh interpreter: its CompletedProcess."""
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
        modules = [name.removeprefix("src/").removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                   for name in z.namelist() if name.endswith(".py")]  # fmt: skip
    script = f"import importlib, sys; sys.path.insert(0, 'src'); [importlib.import_module(m) for m in {modules!r}]"
    return subprocess.run([sys.executable, "-I", "-c", script], cwd=folder, capture_output=True, text=True)


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
    # the course's eight modules, and the project's modules they import; never the table's (run.sh, the demo)
    course = {f"src/{name}.py" for name in COURSE_MODULES}
    for name in names:  # the metadata run.py writes beside each params file: the handout's recipe
        if name.endswith(".params"):
            (tmp_path / f"{name}.json").write_text(json.dumps(dict(recipe="handout")), encoding="utf-8")
    code, out, err = collect(tmp_path, "2023")
    assert code == 0 and "wrote assignment5.zip" in out and "the recipe handout)" in out and not err, err
    with zipfile.ZipFile(tmp_path / "assignment5.zip") as z:
        zipped = z.namelist()
    assert sorted(name for name in zipped if not name.endswith(".py")) == sorted(names)
    assert course <= set(zipped) and "src/factgpt/pipeline/api.py" in zipped
    assert not [name for name in zipped if name.startswith("src/factgpt/table/")]
    imported = unzipped_modules_import(tmp_path / "assignment5.zip", tmp_path / "unzipped")
    assert imported.returncode == 0, imported.stderr  # self-contained: every module it holds imports
    help_text = subprocess.run(
        [sys.executable, str(tmp_path / "unzipped" / "src" / "run.py"), "--help"], capture_output=True, text=True
    )
    assert help_text.returncode == 0 and "pretrain_corpus_path" in help_text.stdout, help_text.stderr

    rope = [f"rope.{kind}" for kind in ["pretrain.params", "finetune.params", "pretrain.dev.predictions",
                                        "pretrain.test.predictions"]]  # fmt: skip
    for name in rope:
        (tmp_path / name).write_text(name)
    (tmp_path / "rope.pretrain.params.json").write_text(json.dumps(dict(recipe="cpu")), encoding="utf-8")
    code, out, err = collect(tmp_path, "2024")  # the 2024 edition: vanilla's and rope's files, rope's finetuned params
    assert code == 0 and "the recipe cpu and handout and unknown)" in out, err  # have no metadata
    warning = "collect_submission.sh: warning: the params were trained with the recipe cpu and handout and unknown"
    assert err.strip().splitlines() == [
        warning + ", not the course's (handout): the course's marks were set for its own"
    ]
    with zipfile.ZipFile(tmp_path / "assignment5.zip") as z:
        assert sorted(n for n in z.namelist() if not n.endswith(".py")) == sorted(names[:7] + rope)
        # every edition ships the same modules, the ones that imported whole above
        assert sorted(n for n in z.namelist() if n.endswith(".py")) == sorted(n for n in zipped if n.endswith(".py"))

    (tmp_path / "rope.finetune.params").unlink()
    code, _, err = collect(tmp_path, "2024")  # the course's row needs the finetuned params
    assert code == 1 and "rope.finetune.params" in err and not (tmp_path / "assignment5.zip").exists()
    code, _, err = collect(tmp_path, "2021")  # the synthesizer's files are missing
    assert code == 1 and "synthesizer.pretrain.params" in err and not (tmp_path / "assignment5.zip").exists()
    for args in [["2022"], ["2023", "extra"]]:
        (tmp_path / "assignment5.zip").write_text("an older zip")
        code, _, err = collect(tmp_path, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and not (tmp_path / "assignment5.zip").exists(), err


def test_a_task_reruns_only_when_what_it_reads_changes(tiny_world, tmp_path, monkeypatch):
    """
    A finetuning flag changes the finetunings' keys and keeps every pretraining's; a pretraining
    flag changes the pretrainings'. (An evaluation's key waits for the params it reads.)
    """
    for name, source in zip(DATA, ("wiki.txt", "train.tsv", "dev.tsv", "test.tsv")):
        shutil.copy(tiny_world[source], tmp_path / name)
    monkeypatch.chdir(tmp_path)

    def keys(*flags):
        return {(row.prefix, task.name): task.key() for row in table_rows(VARIANTS, list(flags)) for task in row.tasks}

    base = keys("--recipe", "cpu")
    pretrainings = {name for name in base if name[1] == "pretraining"}
    assert len(pretrainings) == len(VARIANTS) and all(base[name] for name in pretrainings)
    scratch = ("vanilla.nopretrain", "finetuning")  # the one finetuning whose inputs are all there
    for flag, value, changed in [("--finetune_lr", "1e-4", {scratch}), ("--pretrain_lr", "1e-3", pretrainings)]:
        other = keys("--recipe", "cpu", flag, value)
        assert {name for name in base if base[name] != other[name]} == changed, flag


def test_with_several_gpus_each_row_side_by_side_gets_one_of_its_own():
    """The environment each row's process gets: a GPU a bar position, the rows' threads and the table's pid kept."""
    assert visible_gpus(4, {}) == ["0", "1", "2", "3"]
    assert visible_gpus(2, {"CUDA_VISIBLE_DEVICES": "5, 7"}) == ["5", "7"]  # as the parent was given them
    table = Table([], ["python"], 2, {"OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "5,7"}, ["5", "7"])
    envs = [table.row_env(position) for position in (0, 1)]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs] == ["5", "7"]
    assert all(env["OMP_NUM_THREADS"] == "4" and env["ASSIGNMENT_TABLE"] == str(os.getpid()) for env in envs)
    one = Table([], ["python"], 1, {"CUDA_VISIBLE_DEVICES": "5"}, ["5"])  # one GPU: the rows' env is the table's
    assert one.row_env(0)["CUDA_VISIBLE_DEVICES"] == "5"
    assert Table([], ["python"], 2, {}, []).row_env(1).get("CUDA_VISIBLE_DEVICES") is None  # the CPU: none set
