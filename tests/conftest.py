"""Shared fixtures: src/ on sys.path (as the course's autograders have it), small corpora, the assignment data."""

import atexit
import contextlib
import functools
import importlib.util
import os
import random
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
# The research scripts are tested as a user runs them (run_script), never imported: experiments/ stays off sys.path.
EXPERIMENTS = ROOT / "experiments"
TOOLS = ROOT / "tools"  # the GPU loan's script and the bit check

# The working directory of the command lines the tests run, so that their TensorBoard logs
# (expt/ under the working directory) stay out of the checkout.
RUNS_DIR = Path(tempfile.mkdtemp(prefix="tests-runs-"))
atexit.register(shutil.rmtree, RUNS_DIR, ignore_errors=True)

# Model sizes and settings for command lines that must run in seconds on a CPU.
CPU_FLAGS = ["--pretrain_batch_size", "16", "--finetune_batch_size", "16", "--num_workers", "0", "--device", "cpu"]
SMALL = ["--n_layer", "3", "--n_head", "2", "--n_embd", "32", "--bottleneck_dim", "16", *CPU_FLAGS]
TINY = ["--n_layer", "2", "--n_head", "2", "--n_embd", "16", "--bottleneck_dim", "8", *CPU_FLAGS]


RUN_PY = str(ROOT / "src" / "run.py")

# Under pytest-xdist (pytest.ini: a worker per core) the workers share the threads of the run
# (OMP_NUM_THREADS, else the cores this process may use, which in a container are fewer than
# os.cpu_count() says): each trains, and the commands it runs train, with its share.
# More threads than cores (two workers of two threads on two cores) slow every training to a crawl:
# its threads wait on each other.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    from factgpt.settings.run_config import available_cores

    budget = int(os.environ.get("OMP_NUM_THREADS") or available_cores())
    threads_each = max(1, budget // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(threads_each)
    torch.set_num_threads(threads_each)


def small_gpt_config(
    vocab_size, block_size, variant="vanilla", n_layer=2, n_head=2, n_embd=16, bottleneck_dim=8, dropout=0.1
):
    """The GPTConfig of a `variant` model small enough to train in seconds on a CPU; a test gives its own sizes."""
    from model import variant_config

    return variant_config(variant, vocab_size, block_size, n_layer, n_head, n_embd, bottleneck_dim, dropout)


def small_gpt(vocab_size, block_size, variant="vanilla", seed=None, **sizes):
    """A fresh GPT of small_gpt_config(...), torch seeded with `seed` first when one is given (the same weights)."""
    from model import GPT

    if seed is not None:
        torch.manual_seed(seed)
    return GPT(small_gpt_config(vocab_size, block_size, variant, **sizes))


def corpus_of(path, block_size):
    """The span-corruption dataset of the text file at `path`, at `block_size`."""
    from dataset import CharCorruptionDataset

    with open(path, encoding="utf-8") as f:
        return CharCorruptionDataset(f.read(), block_size)


def run_process(command, timeout, **popen):
    """
    subprocess.run(command, capture_output=True, text=True) in a session of its own, so that
    whatever it starts and leaves running (run.sh's background trainings, torchrun's workers)
    ends with it, and everything ends on a timeout: no test leaves a process behind.
    """
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    with subprocess.Popen(command, **pipes, **popen) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def cli(*args, env=None):
    """Run src/run.py in a fresh interpreter, as a user does: (exit code, stdout, stderr)."""
    done = run_process([sys.executable, RUN_PY, *map(str, args)], timeout=300, cwd=RUNS_DIR, env=env)
    return done.returncode, done.stdout, done.stderr


def pretrain_args(variant, corpus, writing_params):
    """The arguments of `run.py pretrain` (add --reading_params_path to go on from params)."""
    return ["pretrain", variant, corpus, "--writing_params_path", writing_params]


def finetune_args(variant, corpus, writing_params, pairs):
    """The arguments of `run.py finetune` from scratch (add --reading_params_path to start from params)."""
    return ["finetune", variant, corpus, "--writing_params_path", writing_params, "--finetune_corpus_path", pairs]


def evaluate_args(variant, corpus, reading_params, questions, outputs):
    """The arguments of `run.py evaluate`."""
    return ["evaluate", variant, corpus, "--reading_params_path", reading_params, "--eval_corpus_path", questions,
            "--outputs_path", outputs]  # fmt: skip


def run_main(*args):
    """run.py's main in this process (faster; capsys sees its output): the exit code."""
    import run

    return run.main([str(a) for a in args])


def run_script(name, *argv):
    """
    experiments/<name>.py (or tools/<name>.py) run as `python experiments/<name>.py ARGV` would, but in this process
    (faster; capsys sees its output, monkeypatched src/ modules are its): its exit status.
    """
    folder = EXPERIMENTS if (EXPERIMENTS / f"{name}.py").exists() else TOOLS
    path = str(folder / f"{name}.py")
    saved_argv, saved_path, saved_modules = sys.argv, sys.path[:], set(sys.modules)
    sys.argv = [path, *map(str, argv)]
    sys.path.insert(0, str(folder))  # as the interpreter puts the script's folder first
    try:
        runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)  # as the interpreter says a message it exits with
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        # the script's sibling modules (src_path, hooks, ...) go with it: the next run imports them afresh
        for module in set(sys.modules) - saved_modules:
            if str(getattr(sys.modules[module], "__file__", None) or "").startswith(str(folder) + os.sep):
                del sys.modules[module]


def lab_module(name):
    """experiments/<name>.py imported by its path, with experiments/ kept off sys.path (a lab tool a test uses)."""
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main_exit(capsys, *args):
    """run.py's main in this process, argparse's exits included: (exit code, what it said on stderr)."""
    return main_exit(capsys, run_main, *args)


def main_exit(capsys, main, *args):
    """main(*args) in this process, argparse's exits included: (exit code, what it said on stderr)."""
    capsys.readouterr()
    try:
        code = main(*args)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def checkpoint_steps(trainer):
    """The steps after which `trainer` writes its checkpoint: a list it fills as it trains."""
    steps, save = [], trainer.save_checkpoint

    def recorded():
        steps.append(trainer.step)
        save()

    trainer.save_checkpoint = recorded
    return steps


def one_line_error(capsys, *args):
    """Run main in-process; assert exit code 2 and a single stderr line; return that line."""
    capsys.readouterr()
    assert run_main(*args) == 2, args
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def another_value(field, value):
    """A valid value of the Recipe field other than `value`; a field of a type not foreseen here fails the test."""
    from factgpt.settings.recipe import Stage

    if field.metadata["choices"]:
        return next(choice for choice in field.metadata["choices"] if choice != value)
    if field.type is bool:
        return not value
    if field.type is tuple:
        return (*value, Stage("corpus", max_epochs=1))
    if field.type == Optional[float]:
        return 1e-3 if value is None else None
    if field.type is str:
        return "mlp" if value != "mlp" else "ln"
    if field.type is int:
        return value + 1
    if field.type is float:
        return value / 2 if value else 0.5
    raise AssertionError(f"Recipe.{field.name}: no other value for a {field.type}")


A5_DIRS = [ROOT.parent / "shared" / "data" / "a5", ROOT / "data"]
A5_FILES = ["wiki.txt", "birth_places_train.tsv", "birth_dev.tsv", "birth_test_inputs.tsv"]

FIRST = ["Ada", "Bruno", "Clara", "Dmitri", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Naïma", "Håvard"]
LAST = ["Abbott", "Berg", "Costa", "Duval", "Egan", "Fischer", "Garza"]
PLACES = ["Paris", "Lagos", "Oslo", "Lima", "Kyoto", "Perth"]


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes more than about 15 s on two cores (-m 'not slow' skips them)")


# The whole assignment through run.sh and the notebooks: the longest tests, about a minute each on two cores.
END_TO_END = {"test_run_sh.py", "test_run_sh_errors.py", "test_demo.py", "test_notebook.py"}


def pytest_collection_modifyitems(items):
    """
    The files in the order that pytest-xdist hands them to the workers (pytest.ini: a file at a
    time): the end-to-end tests first, then the files with slow tests, so that the longest start
    early and short files fill in beside them, instead of a long file run alone at the end.
    """
    slow = {item.path.name for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.path.name not in END_TO_END, item.path.name not in slow))


@pytest.fixture(scope="session")
def a5_dir():
    """The assignment's data folder; tests that need it skip when it is absent."""
    for folder in A5_DIRS:
        if all((folder / name).exists() for name in A5_FILES):
            return folder
    pytest.skip("assignment data not found in ../shared/data/a5 or data/")


@pytest.fixture(scope="session")
def sequential(tmp_path_factory):
    """run.sh's smoke table run whole in a new folder, one row at a time: the folder, and what run.sh said."""
    from tables import assignment_copy, run_table

    folder = assignment_copy(tmp_path_factory.mktemp("table") / "sequential")
    done = run_table(folder, "--jobs", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, done


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """A small corpus of biographies and birthplace TSVs over the same people (paths in a dict)."""
    rng = random.Random(0)
    people = [(f"{first} {last}", rng.choice(PLACES)) for first in FIRST for last in LAST]
    rng.shuffle(people)
    folder = tmp_path_factory.mktemp("tiny_world")
    bios = [f"{name}. {name} was born in {place} and worked as a painter." for name, place in people]
    (folder / "wiki.txt").write_text("\n".join(bios) + "\n", encoding="utf-8")
    pairs = [f"Where was {name} born?\t{place}" for name, place in people]
    (folder / "train.tsv").write_text("\n".join(pairs[:60]) + "\n", encoding="utf-8")
    (folder / "dev.tsv").write_text("\n".join(pairs[60:]) + "\n", encoding="utf-8")
    (folder / "test.tsv").write_text("".join(p.split("\t")[0] + "\n" for p in pairs[60:]), encoding="utf-8")
    return {name: str(folder / name) for name in ["wiki.txt", "train.tsv", "dev.tsv", "test.tsv"]}


def copy_params(params, folder):
    """Copy the params file `params` and the files beside it (metadata, checkpoint) into `folder`: the copy's path."""
    params = Path(params)
    for path in params.parent.glob(params.name + "*"):
        shutil.copy(path, folder)
    return Path(folder) / params.name


def trained_once(tmp_path_factory, command, *flags):
    """run.py in-process, `command(params)` then flags, for a session fixture: the params it wrote (p.params)."""
    params = tmp_path_factory.mktemp("trained") / "p.params"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(RUNS_DIR)  # as tensorboard_logs_outside_the_checkout does for a test
        assert run_main(*command(params), *flags) == 0, (command(params), flags)
    return params


@pytest.fixture(scope="session")
def tiny_pretrained(tiny_world, tmp_path_factory):
    """
    vanilla pretrained for one epoch on the tiny world at the TINY size, its checkpoint kept: for the
    tests that read such params (copy_params them to change them).
    """
    command = functools.partial(pretrain_args, "vanilla", tiny_world["wiki.txt"])
    return trained_once(tmp_path_factory, command, "--pretrain_epochs", 1, "--keep_checkpoint", *TINY)


@pytest.fixture(scope="session")
def small_finetuned(tiny_world, tmp_path_factory):
    """vanilla finetuned from scratch for one epoch on the tiny world's training pairs at the SMALL size."""
    command = functools.partial(finetune_args, "vanilla", tiny_world["wiki.txt"], pairs=tiny_world["train.tsv"])
    return trained_once(tmp_path_factory, command, "--finetune_epochs_from_scratch", 1, *SMALL)


@pytest.fixture(scope="session")
def small_pretrained(tiny_world, tmp_path_factory):
    """small_pretrained(variant): its params pretrained for one epoch on the tiny world at the SMALL size."""
    made = {}

    def pretrained(variant):
        if variant not in made:
            command = functools.partial(pretrain_args, variant, tiny_world["wiki.txt"])
            made[variant] = trained_once(tmp_path_factory, command, "--pretrain_epochs", 1, *SMALL)
        return made[variant]

    return pretrained


@pytest.fixture(autouse=True)
def tensorboard_logs_outside_the_checkout(monkeypatch):
    """In-process runs work in RUNS_DIR too, so that their TensorBoard logs (expt/) stay out of the checkout."""
    monkeypatch.chdir(RUNS_DIR)
