"""run.sh (the whole assignment, side by side, resumed) and collect_submission.sh, as a user runs them."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from conftest import ROOT, SMALL, run_process
from world import write_world

SMOKE_STAGES = "corpus+pairs; corpus+pairs epochs=1 lr=3e-4 max_shift=13 decay_epochs=1"
SMOKE_FINETUNING = ["--finetune_epochs_from_scratch", "1", "--finetune_epochs_from_pretrained", "1"]


def assignment_copy(folder):
    """A folder with run.sh, src/ and a small generated world as the assignment's four files."""
    folder.mkdir()
    shutil.copy(ROOT / "run.sh", folder)
    (folder / "src").symlink_to(ROOT / "src")
    write_world(folder, n_train=40, n_dev=10, n_test=10, n_places=8)
    return folder


def run_sh_command(*args, **env):
    """run.sh's smoke run (one epoch a stage, the small model) on a machine without CUDA, one thread a training."""
    smoke = ["--pretrain_epochs", "1", "--pretrain_stages", SMOKE_STAGES, *SMOKE_FINETUNING, *SMALL]
    environment = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **env}
    return ["bash", "run.sh", *smoke, *args], environment


def run_sh(folder, *args, **env):
    command, environment = run_sh_command(*args, **env)
    return run_process(command, timeout=600, cwd=folder, env=environment)


def run_sh_killed(folder, path, **env):
    """run.sh's smoke run killed with SIGKILL, as a dropped session kills it, as soon as `path` exists in the folder."""
    command, environment = run_sh_command(**env)
    with subprocess.Popen(command, cwd=folder, env=environment, start_new_session=True, **QUIET) as process:
        while not (folder / path).exists():
            assert process.poll() is None, f"run.sh ended before {path} was written"
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGKILL)


QUIET = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

# What run.sh writes for its first row, vanilla without pretraining.
NOPRETRAIN_OUTPUTS = ["vanilla.model.params", *(f"vanilla.nopretrain.{split}.predictions" for split in ["dev", "test"])]


@pytest.mark.slow
def test_run_sh_runs_the_whole_assignment_and_side_by_side_to_the_same_results(tmp_path):
    """
    run.sh from a copy of the repository whose data are a small world, one training after
    another (vanilla alone: the assignment notebook's test runs all four variants, and --jobs
    below runs two); then killed and run again; then --jobs.
    """
    folder = assignment_copy(tmp_path / "sequential")
    done = run_sh(folder, VARIANTS="vanilla")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "training with --recipe cpu" in done.stderr
    assert "--readout frames: the pretrained models are asked in the corpus's words" in done.stderr
    commands = [line.split() for line in done.stderr.splitlines() if " src/run.py " in line]
    trainings = [c for c in commands if c[2] in ("pretrain", "finetune")]
    assert len(commands) == 6 and len(trainings) == 2  # the cpu recipe's pretrained model is not finetuned
    assert all(c[c.index("--recipe") + 1] == "cpu" for c in trainings)
    finetunings = [c for c in trainings if c[2] == "finetune"]
    assert len(finetunings) == 1 and "--reading_params_path" not in finetunings[0]  # vanilla without pretraining
    evaluations = [c for c in commands if c[2] == "evaluate"]
    assert [c[c.index("--readout") + 1] for c in evaluations if "--readout" in c] == ["question", "question"]
    assert sum(c[c.index("--reading_params_path") + 1].endswith(".pretrain.params") for c in evaluations) == 2
    stage_logs = [name for name in os.listdir(folder / "expt" / "pretrain") if name.startswith("run_stage2_")]
    assert [name.split("_")[2] for name in stage_logs] == ["vanilla"]
    rows = (folder / "results.md").read_text(encoding="utf-8").splitlines()
    assert [row.split("|")[1].strip() for row in rows[3:6]] == [
        "London baseline",
        "vanilla without pretraining",
        "vanilla with pretraining",
    ]
    assert all(re.fullmatch(r"\d+ out of 10: [\d.]+%", row.split("|")[2].strip()) for row in rows[4:6]), rows
    assert rows[6:] == [
        "",
        "With pretraining: asked zero-shot in the corpus's words (--readout frames); "
        "without: finetuned on the question.",
    ]
    for prefix in ["vanilla.nopretrain", "vanilla.pretrain"]:
        assert (folder / f"{prefix}.test.predictions").read_text(encoding="utf-8").count("\n") == 10

    # Killed in vanilla's pretraining once it has a checkpoint, then run again: the first row is
    # skipped, vanilla's pretraining goes on from its checkpoint, and the table's rows are the ones above.
    sequential, folder = folder, assignment_copy(tmp_path / "killed")
    # the first row as the sequential run wrote it, its stamps too (the same world, the same settings): the
    # killed run skips it and is killed in vanilla's pretraining, without training that row once more first
    for name in NOPRETRAIN_OUTPUTS:
        for path in [name, f"logs/stamps/{name}.key", f"logs/stamps/{name}.out"]:
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(sequential / path, folder / path)
    run_sh_killed(folder, "vanilla.pretrain.params.ckpt", VARIANTS="vanilla")
    done = run_sh(folder, VARIANTS="vanilla")
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stderr.splitlines()
    assert said.count("== vanilla without pretraining: skipped: its params and predictions were written earlier "
                      "with the same settings") == 1  # fmt: skip
    commands = [line.split() for line in said if " src/run.py " in line]
    assert [c[2] for c in commands] == ["pretrain", "evaluate", "evaluate"] and "--resume" in commands[0]
    rows = (folder / "results.md").read_text(encoding="utf-8").splitlines()
    assert rows == (sequential / "results.md").read_text(encoding="utf-8").splitlines()
    for name in ["vanilla.pretrain.dev.predictions", "vanilla.pretrain.test.predictions"]:
        assert (folder / name).read_bytes() == (sequential / name).read_bytes(), name

    # --jobs 2, one thread a training, the pretrained models finetuned and asked the question: a
    # latent length the block cannot hold fails the perceiver's pretraining (vanilla has no use for
    # it), named in one line with its log; vanilla without pretraining is the sequential run's, bit for bit
    # (in the killed run's folder: its rows' settings differ, so they are trained again)
    done = run_sh(
        folder, "--jobs", "2", "--bottleneck_dim", "200", "--readout", "question", VARIANTS="vanilla perceiver"
    )
    assert done.returncode == 1
    assert "the trainings, 2 at a time, 1 thread(s) each" in done.stderr
    assert "run.sh: perceiver with pretraining failed: see logs/perceiver.pretrain.log" in done.stderr.splitlines()
    assert " src/run.py " not in done.stderr  # each training's commands and bars went to its own log
    assert "bottleneck_dim 200" in (folder / "logs" / "perceiver.pretrain.log").read_text(encoding="utf-8")
    rows = (folder / "results.md").read_text(encoding="utf-8").splitlines()
    sequential_rows = (sequential / "results.md").read_text(encoding="utf-8").splitlines()
    assert rows[:5] == sequential_rows[:5]  # the heading, London, vanilla without pretraining
    assert re.fullmatch(r"\| vanilla with pretraining \| \d+ out of 10: [\d.]+% \|", rows[5]), rows
    assert rows[6:] == ["| perceiver with pretraining | failed: see logs/perceiver.pretrain.log |"], rows
    for split in ("dev", "test"):
        name = f"vanilla.nopretrain.{split}.predictions"
        assert (folder / name).read_bytes() == (sequential / name).read_bytes(), name
    vanilla = (folder / "logs" / "vanilla.pretrain.log").read_text(encoding="utf-8")
    assert " src/run.py finetune vanilla " in vanilla and " src/run.py evaluate " in vanilla
    assert (folder / "vanilla.finetune.params").exists() and not (sequential / "vanilla.finetune.params").exists()
    assert " src/run.py finetune vanilla " in (folder / "logs" / "vanilla.nopretrain.log").read_text(encoding="utf-8")


VARIANT_NAMES = "(vanilla, perceiver, synthesizer, rope)"


def test_run_sh_refuses_a_bad_jobs_count_or_variant():
    for args, env, said in [
        (["--jobs", "0"], {}, "run.sh: --jobs takes a positive number of trainings to run at once, got '0'"),
        (["--jobs"], {}, "run.sh: --jobs takes a positive number of trainings to run at once, got ''"),
        (
            [],
            {"VARIANTS": "vanilla gpt"},
            "run.sh: VARIANTS: unknown variant 'gpt' (vanilla, perceiver, synthesizer, rope)",
        ),
    ]:
        done = subprocess.run(["bash", str(ROOT / "run.sh"), *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})  # fmt: skip
        assert done.returncode == 2 and done.stderr.strip() == said, done.stderr


# ./run.sh demo made small: 27 people, the demo's model with two blocks, 150 epochs at batch 16 decayed
# over them (at 100 epochs of batch 8 it recalled 7 of 16 with one and two threads)
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

    # read out in frames (results.md says so): the pretrained params made the predictions, no finetune.params
    (tmp_path / "results.md").write_text("| run | dev |\n\nWith pretraining: asked zero-shot (--readout frames)\n")
    for name in [n for n in names + rope if n.endswith("finetune.params")]:
        (tmp_path / name).unlink()
    code, out, err = collect(tmp_path, "2024")
    assert code == 0, err
    with zipfile.ZipFile(tmp_path / "assignment5.zip") as z:
        assert sorted(z.namelist()) == sorted([n for n in names[:7] + rope if "finetune" not in n] + course)
    (tmp_path / "results.md").write_text("| run | dev |\n")
    code, _, err = collect(tmp_path, "2024")  # asked the question: the finetuned params belong in the zip
    assert code == 1 and "vanilla.finetune.params" in err and "rope.finetune.params" in err

    code, _, err = collect(tmp_path, "2021")  # the synthesizer's files are missing
    assert code == 1 and "synthesizer.pretrain.params" in err and not (tmp_path / "assignment5.zip").exists()
    for args in [["2022"], ["2023", "extra"]]:
        (tmp_path / "assignment5.zip").write_text("an older zip")
        code, _, err = collect(tmp_path, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and not (tmp_path / "assignment5.zip").exists(), err
