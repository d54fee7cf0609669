"""
Proves a refactor exact: runs the course's commands on the real data cut short, one thread, and
prints the sha256 of every params and predictions file they write. Run it at two commits and
compare the lists (diff); any line that differs is a change of results.

    python tools/bitcheck.py OUT_DIR --data DATA_DIR

It covers the handout and cpu recipes (vanilla and perceiver: pretrain, finetune, evaluate by the
question and by frames), ./run.sh's table for vanilla, and ./run.sh demo (its predictions and kept
readout). It goes only through the command lines, so that the same script runs before and after a
move of the code.
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ("wiki.txt", "birth_places_train.tsv", "birth_dev.tsv", "birth_test_inputs.tsv")
# the lines each data file keeps: a few hundred biographies, enough people to fit a readout
LINES = {"wiki.txt": 400, "birth_places_train.tsv": 200, "birth_dev.tsv": 40}
LINES["birth_test_inputs.tsv"] = 30
SHORT = {
    "handout": ["--pretrain_epochs", "2", "--finetune_epochs_from_pretrained", "2"],
    "cpu": [
        "--pretrain_stages",
        "corpus+pairs epochs=2; corpus+pairs epochs=2 lr=3e-4 max_shift=13 decay_epochs=2",
        "--finetune_epochs_from_pretrained",
        "2",
    ],
}
TABLE_FLAGS = ["--pretrain_epochs", "1", "--finetune_epochs_from_pretrained", "1"]
TABLE_FLAGS += ["--finetune_epochs_from_scratch", "1", "--readout_frames", "2"]


def cut_data(source, folder):
    """The first LINES of each data file, into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in DATA:
        lines = (source / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / name).write_text("".join(lines[: LINES[name]]), encoding="utf-8")


def run(command, cwd, env):
    """Run a command, its output to the log; stop at the first that fails."""
    print("$", " ".join(map(str, command)), file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"bitcheck: failed ({done.returncode}):\n{done.stderr[-3000:]}")


def course_commands(recipe, variant, data, out):
    """Pretrain, finetune and evaluate both ways, as run.py's command lines."""
    run_py = [sys.executable, str(ROOT / "src" / "run.py")]
    wiki, train, dev = (str(data / name) for name in DATA[:3])
    common = [variant, wiki, "--recipe", recipe, "--device", "cpu", *SHORT[recipe]]
    prefix = str(out / f"{recipe}.{variant}")
    pretrained, finetuned = f"{prefix}.pretrain.params", f"{prefix}.finetune.params"
    yield [*run_py, "pretrain", *common, "--writing_params_path", pretrained,
           "--mix_corpus_path", train]  # fmt: skip
    yield [*run_py, "finetune", *common, "--reading_params_path", pretrained,
           "--writing_params_path", finetuned, "--finetune_corpus_path", train]  # fmt: skip
    for readout, params in (("question", finetuned), ("frames", pretrained)):
        yield [*run_py, "evaluate", *common, "--readout", readout, "--reading_params_path", params,
               "--eval_corpus_path", dev, "--outputs_path", f"{prefix}.{readout}.dev.predictions",
               "--finetune_corpus_path", train]  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--data", type=Path, required=True, help="the folder of the four files")
    args = parser.parse_args()
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    cut_data(args.data, out / "data")
    # run.sh starts $PYTHON: this interpreter, with its torch, whatever python3 is on the path
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHON=sys.executable)
    for recipe in SHORT:
        for variant in ("vanilla", "perceiver"):
            for command in course_commands(recipe, variant, out / "data", out):
                run(command, out, env)
    # run.sh writes into the folder it lives in: a copy of the entry points runs it there
    table = out / "table"
    shutil.copytree(ROOT / "src", table / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "run.sh", table / "run.sh")
    shutil.copytree(out / "data", table / "data")
    run(["./run.sh", "--variants", "vanilla", "--jobs", "1", *TABLE_FLAGS], table, env)
    demo = dict(env, DEMO_DIR=str(out / "demo"), DEMO_FLAGS="--pretrain_epochs 4")
    run([str(ROOT / "run.sh"), "demo"], out, demo)
    written = sorted(
        p for p in out.rglob("*") if p.is_file() and p.name.endswith((".params", ".predictions", ".readout.json"))
    )
    for path in written:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"{digest}  {path.relative_to(out)}")


if __name__ == "__main__":
    main()
