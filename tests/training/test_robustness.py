"""Long runs that survive: checkpoints and resume, divergence, signals, the lock, tolerated inputs, torchrun."""

import dataclasses
import math
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp

from conftest import (
    ROOT,
    RUN_PY,
    RUNS_DIR,
    TINY,
    checkpoint_steps,
    copy_params,
    corpus_of,
    evaluate_args,
    finetune_args,
    one_line_error,
    pretrain_args,
    run_process,
    small_gpt,
)
from conftest import run_main as main
from dataset import CharCorruptionDataset, NameDataset
from factgpt import pipeline
from factgpt.common.errors import RunError
from factgpt.common.signals import TrainingInterrupted
from factgpt.pipeline import start
from factgpt.settings.recipe import parse_stages
from factgpt.settings.recipes import HANDOUT
from factgpt.settings.run_config import RunConfig
from factgpt.training import checkpoint
from factgpt.training.checkpoint import Checkpoints
from factgpt.training.params import read_metadata
from trainer import Trainer, TrainerConfig

# --- checkpoints and resume ------------------------------------------------------------------------------

# run.py as a user runs it (argv: src, a step, run.py and its arguments), except that its first
# checkpoint at that step or later is followed by a wait to be killed: however fast the machine,
# the run cannot end before the test kills it.
HELD_AFTER_A_CHECKPOINT = """
import runpy, sys, time
src, held_from, sys.argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
sys.path.insert(0, src)
import trainer
save = trainer.Trainer.save_checkpoint
def save_and_wait(self):
    save(self)
    if self.step >= held_from:
        time.sleep(600)
trainer.Trainer.save_checkpoint = save_and_wait
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_resume_after_sigkill_ends_like_an_uninterrupted_run(tiny_world, tmp_path, caplog):
    """
    A run killed with SIGKILL mid-epoch (a process of its own) and resumed ends with the same
    steps, learning rate and weights as an uninterrupted run (the resumed and the whole one run here).
    """
    wiki, flags = tiny_world["wiki.txt"], ["--pretrain_epochs", 15, "--keep_checkpoint", *TINY]
    whole = tmp_path / "whole.params"
    assert main(*pretrain_args("vanilla", wiki, whole), *flags) == 0

    cut = tmp_path / "cut.params"
    ckpt = tmp_path / "cut.params.ckpt"
    kill_at = 20  # a checkpoint every step (--checkpoint_minutes 1e-6): in the 4th of 15 epochs of 6 steps
    held = [sys.executable, "-c", HELD_AFTER_A_CHECKPOINT, str(ROOT / "src"), str(kill_at), RUN_PY]
    args = [*pretrain_args("vanilla", wiki, cut), *flags, "--checkpoint_minutes", "1e-6"]
    process = subprocess.Popen([*held, *map(str, args)], cwd=RUNS_DIR, stderr=subprocess.DEVNULL)
    step, deadline = 0, time.monotonic() + 240
    try:
        while step < kill_at and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.01)
            if ckpt.exists():
                step = torch.load(ckpt, weights_only=True)["step"]
    finally:
        process.kill()
        process.wait()
    assert step >= kill_at and process.returncode == -signal.SIGKILL, f"no checkpoint at step {kill_at} seen"
    assert not cut.exists()
    interrupted = torch.load(ckpt, weights_only=True)
    steps_per_epoch = 6  # 84 biographies, batch 16
    assert interrupted["step"] >= kill_at and 0 < interrupted["batches_done"] < steps_per_epoch, "killed mid-epoch"

    caplog.clear()
    assert main(*pretrain_args("vanilla", wiki, cut), *flags, "--resume") == 0
    assert "resuming from" in caplog.text
    a, b = torch.load(tmp_path / "whole.params.ckpt", weights_only=True), torch.load(ckpt, weights_only=True)
    assert a["step"] == b["step"] == 15 * steps_per_epoch
    assert a["scheduler"]["_last_lr"] == b["scheduler"]["_last_lr"]
    assert a["epoch_losses"] == b["epoch_losses"]
    whole_state, cut_state = torch.load(whole, weights_only=True), torch.load(cut, weights_only=True)
    assert all(torch.equal(whole_state[k], cut_state[k]) for k in whole_state)


# how long a DataLoader waits on its workers before it checks that they live
# (torch.utils.data._utils.MP_STATUS_CHECK_INTERVAL)
DATALOADER_CHECK_SECONDS = 5.0


@pytest.mark.slow
@pytest.mark.parametrize("signum, workers", [(signal.SIGINT, 0), (signal.SIGTERM, 2)])
def test_sigint_and_sigterm_write_a_checkpoint_and_say_how_to_resume(signum, workers, tiny_world, tmp_path, caplog):
    """
    Ctrl-C, or a stopped Colab session: a checkpoint of the last step, one line, exit 128 +
    signal; SIGTERM sent to the whole process group, DataLoader workers in it.
    """
    common = [
        *pretrain_args("vanilla", tiny_world["wiki.txt"], tmp_path / "p.params"),
        "--pretrain_epochs",
        20,
        *TINY,
        "--num_workers",  # after TINY's 0
        workers,
    ]
    ckpt = tmp_path / "p.params.ckpt"
    process = subprocess.Popen(
        [sys.executable, RUN_PY, *map(str, common)],
        cwd=RUNS_DIR,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while not ckpt.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.01)
    os.killpg(process.pid, signum)
    signalled = time.monotonic()
    err = process.communicate(timeout=120)[1]
    stopped_in = time.monotonic() - signalled
    assert process.returncode == 128 + signum, err
    # the workers left the group's signal to the main process: no wait for the DataLoader's check
    assert stopped_in < DATALOADER_CHECK_SECONDS, (stopped_in, err)
    said = [line for line in err.splitlines() if line.startswith("run.py:")]
    assert len(said) == 1 and f"stopped by {signal.Signals(signum).name} after step" in said[0], err
    assert "--resume" in said[0] and "Traceback" not in err
    assert not (tmp_path / "p.params").exists()
    assert 6 <= torch.load(ckpt, weights_only=True)["step"] < 20 * 6  # 6 steps an epoch

    caplog.clear()
    assert main(*common, "--resume") == 0  # the resumed run in this process
    assert "resuming from" in caplog.text and (tmp_path / "p.params").exists(), caplog.text


# A dataset whose sixth item fails, read by a DataLoader worker set up as the Trainer sets up its
# own; the error leaves the script holding the iterator, so only the interpreter's exit ends the worker.
FAILING_WORKER = """
import torch
from torch.utils.data import DataLoader, Dataset
from factgpt.common.signals import leave_stop_signals_to_the_main_process

class Failing(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise ValueError("item 5 cannot be read")
        return torch.tensor(i)

loader = DataLoader(Failing(), num_workers=1, persistent_workers=True,
                    worker_init_fn=leave_stop_signals_to_the_main_process)
for batch in loader:
    pass
"""


def test_a_failing_worker_ends_the_run_with_its_error():
    """
    The error is said and the process ends: at exit, multiprocessing ends a worker with SIGTERM,
    which the worker must not ignore, or the exit waits for it forever.
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-c", FAILING_WORKER], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "item 5 cannot be read" in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_a_second_run_on_the_same_params_is_refused_while_the_first_lives(tiny_world, tmp_path, capsys, caplog):
    """The first run a process of its own, stopped while it holds its lock; the second and the resumed one run here."""
    params, ckpt, lock = tmp_path / "p.params", tmp_path / "p.params.ckpt", tmp_path / "p.params.lock"
    common = [*pretrain_args("vanilla", tiny_world["wiki.txt"], params), "--pretrain_epochs", 20, *TINY]
    first = subprocess.Popen([sys.executable, RUN_PY, *map(str, common)], cwd=RUNS_DIR, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not ckpt.exists() and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)  # alive, holding its lock, however slowly the second run starts
    alive = first.poll() is None
    try:
        err = one_line_error(capsys, *common)
    finally:
        first.kill()
        first.wait()
    assert alive, "the first run ended before its first checkpoint was seen"
    assert f"is being written by another run (process {first.pid})" in err
    assert ckpt.exists() and lock.exists(), "the first run's files are left alone"

    caplog.clear()
    assert main(*common, "--resume") == 0  # the killed run's lock file is stale: its lock died with it
    assert "resuming from" in caplog.text, caplog.text
    assert params.exists() and not lock.exists()


def test_checkpoint_is_removed_at_the_end_unless_kept(tiny_pretrained, tiny_world, tmp_path, capsys):
    """Without --keep_checkpoint no checkpoint is left; with it (tiny_pretrained's run), the last epoch's."""
    params = tmp_path / "p.params"
    assert main(*pretrain_args("vanilla", tiny_world["wiki.txt"], params), "--pretrain_epochs", 1, *TINY) == 0
    assert params.exists() and not (tmp_path / "p.params.ckpt").exists()
    kept = tiny_pretrained.parent
    checkpoint = torch.load(kept / "p.params.ckpt", weights_only=True)
    assert checkpoint["epoch"] == 1 and checkpoint["step"] == 6
    state = torch.load(tiny_pretrained, weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())  # .params stays a plain state_dict
    assert not [f for folder in (tmp_path, kept) for f in os.listdir(folder) if f.endswith(".tmp")]


def test_resuming_a_finished_run_trains_no_further(tiny_world, tmp_path, caplog):
    params = tmp_path / "p.params"
    args = [
        *finetune_args("vanilla", tiny_world["wiki.txt"], params, tiny_world["train.tsv"]),
        "--finetune_epochs_from_scratch",
        2,
        "--keep_checkpoint",
        *TINY,
    ]
    assert main(*args) == 0
    before = torch.load(params, weights_only=True)
    assert main(*args, "--resume") == 0
    assert "after 8 steps (2 epochs done)" in caplog.text
    after = torch.load(params, weights_only=True)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_resume_refuses_another_runs_checkpoint(tiny_pretrained, tiny_world, tmp_path, capsys):
    """tiny_pretrained's checkpoint, copied here, resumed with other settings: refused in one line, nothing trained."""
    params = copy_params(tiny_pretrained, tmp_path)
    ckpt, wiki = tmp_path / "p.params.ckpt", tiny_world["wiki.txt"]
    first = [*pretrain_args("vanilla", wiki, params), "--pretrain_epochs", 1, *TINY]
    resume = [*first, "--resume"]
    err = one_line_error(capsys, *pretrain_args("vanilla", wiki, params), "--pretrain_epochs", 2, "--resume", *TINY)
    assert "other settings" in err and "pretrain_epochs 1 there, 2 here" in err
    err = one_line_error(capsys, *resume, "--max_shift", 5)
    assert "other settings" in err and "max_shift" in err
    two_stages = "corpus+pairs; corpus+pairs epochs=1 lr=0.0006 max_shift=13 decay_epochs=1"
    err = one_line_error(capsys, *resume, "--pretrain_stages", two_stages)  # before the first stage trains, not after
    assert "other settings" in err and f"pretrain_stages 'corpus+pairs' there, '{two_stages}' here" in err
    assert torch.load(ckpt, weights_only=True)["step"] == 6, "the refused runs trained nothing"
    # the stages pass their params on in memory: the only params a run reads are an input, never its output
    err = one_line_error(capsys, *resume, "--pretrain_stages", two_stages, "--reading_params_path", params)
    assert "is also the --reading_params_path: an output never replaces an input" in err
    ckpt.write_bytes(b"not a checkpoint")  # one that cannot be read is set aside: the run starts over
    assert main(*resume) == 0
    assert (tmp_path / "p.params.ckpt.unreadable").read_bytes() == b"not a checkpoint"


TWO_STAGES = parse_stages("corpus+pairs epochs=2; corpus+pairs epochs=3 lr=0.0006 max_shift=13 decay_epochs=3")


@pytest.mark.parametrize("stopped", ["during stage 2", "after stage 1"])
def test_resume_goes_on_at_the_checkpoints_stage_and_ends_like_an_uninterrupted_run(tiny_world, tmp_path, stopped):
    """
    Two stages, one checkpoint <params>.ckpt (no files of stage 1's own). Interrupted (SIGINT) within
    stage 2, or killed as stage 2's first epoch ends, before its first checkpoint (so the checkpoint
    is stage 1's last): --resume goes on at the checkpoint's stage and ends with the uninterrupted run's params.
    """
    recipe = dataclasses.replace(
        HANDOUT, n_layer=2, n_head=2, n_embd=16, pretrain_batch_size=16, pretrain_stages=TWO_STAGES
    )

    def run(name, resume=False, hooks=()):
        cfg = RunConfig(
            "pretrain", "vanilla", tiny_world["wiki.txt"], writing_params_path=str(tmp_path / name), recipe=recipe,
            device="cpu", num_workers=0, resume=resume, keep_checkpoint=True, tensorboard_root=str(tmp_path / "expt"),
        )  # fmt: skip
        pipeline.pretrain(cfg, on_epoch_end=hooks)

    run("whole.params")
    epochs = []

    def stop(end):
        epochs.append(end.epoch)
        if stopped == "during stage 2" and end.epoch == 3:  # stage 2's first epoch: stop after the next step
            os.kill(os.getpid(), signal.SIGINT)
        if stopped == "after stage 1" and end.epoch == 3:  # as a kill would, before stage 2's first checkpoint
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted if stopped == "during stage 2" else KeyboardInterrupt):
        run("cut.params", hooks=[stop])
    assert epochs == [1, 2, 3] and not (tmp_path / "cut.params").exists()
    assert sorted(f.name for f in tmp_path.glob("cut.params*")) == ["cut.params.ckpt"]  # one checkpoint, nothing else
    interrupted = torch.load(tmp_path / "cut.params.ckpt", weights_only=True)
    where = interrupted["run_identity"]["stage"], interrupted["epoch"], interrupted["batches_done"]
    assert where == ((2, 1, 1) if stopped == "during stage 2" else (1, 2, 0))  # (stage, epochs done, batches done)

    epochs.clear()
    run("cut.params", resume=True, hooks=[epochs.append])
    assert [end.epoch for end in epochs] == ([4, 5] if stopped == "during stage 2" else [3, 4, 5])  # stage 1 not again
    a = torch.load(tmp_path / "whole.params.ckpt", weights_only=True)
    b = torch.load(tmp_path / "cut.params.ckpt", weights_only=True)
    assert a["run_identity"] == b["run_identity"] and a["run_identity"]["stage"] == 2
    assert a["step"] == b["step"] == 3 * 6 and a["epoch_losses"] == b["epoch_losses"]
    whole, cut = torch.load(tmp_path / "whole.params", weights_only=True), torch.load(tmp_path / "cut.params")
    assert all(torch.equal(whole[k], cut[k]) for k in whole)


def test_a_failed_checkpoint_write_is_one_line(tiny_pretrained, tiny_world, tmp_path, capsys):
    """
    A file-size limit that lets the params through but not the checkpoint (the params and AdamW's two
    moments): exit code 2, one line naming <params>.ckpt and the reason; no temporary file left. An
    earlier checkpoint is kept as it was, and --resume goes on from it.
    """
    sized = tiny_pretrained.parent  # this command's run, its checkpoint kept
    wiki, flags = tiny_world["wiki.txt"], ["--pretrain_epochs", 1, *TINY]
    params_size, checkpoint_size = (sized / "p.params").stat().st_size, (sized / "p.params.ckpt").stat().st_size
    assert checkpoint_size > 1.3 * params_size
    limit = (params_size + checkpoint_size) // 2

    def limit_file_sizes():  # in the child: a write past the limit fails with EFBIG instead of killing it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    def limited_run(params, *more):
        done = subprocess.run(
            [sys.executable, RUN_PY, *map(str, [*pretrain_args("vanilla", wiki, params), *flags]), *more],
            capture_output=True,
            text=True,
            cwd=RUNS_DIR,
            timeout=300,
            preexec_fn=limit_file_sizes,
        )
        said = [line for line in done.stderr.splitlines() if "error" in line]
        assert done.returncode == 2 and len(said) == 1 and "Traceback" not in done.stderr, done.stderr
        assert said[0].startswith("run.py: error: "), f"the error is a line of its own, not the bar's: {said[0]!r}"
        assert f"cannot write {params}.ckpt: File too large" in said[0], said
        return said[0]

    empty = tmp_path / "empty"
    empty.mkdir()
    said = limited_run(empty / "p.params")
    assert "no checkpoint was written" in said
    assert os.listdir(empty) == [], "no checkpoint, no params, no temporary file, no lock"

    earlier = tmp_path / "earlier"  # the same command's checkpoint, from a run that had room
    earlier.mkdir()
    shutil.copy(sized / "p.params.ckpt", earlier / "p.params.ckpt")
    said = limited_run(earlier / "p.params")
    assert "the last checkpoint is kept, and --resume goes on from it" in said, said
    assert os.listdir(earlier) == ["p.params.ckpt"]
    assert (earlier / "p.params.ckpt").read_bytes() == (sized / "p.params.ckpt").read_bytes()
    assert main(*pretrain_args("vanilla", wiki, earlier / "p.params"), *flags, "--resume") == 0
    resumed = torch.load(earlier / "p.params", weights_only=True)
    whole = torch.load(sized / "p.params", weights_only=True)
    assert all(torch.equal(resumed[k], whole[k]) for k in whole)


def test_a_non_finite_loss_stops_training_before_anything_is_written(tiny_world, tmp_path):
    """From step 6 on the loss is NaN: the run stops at epoch 2's end, naming step 6; epoch 1's files stay."""
    pre = corpus_of(tiny_world["wiki.txt"], 32)
    pre.data = pre.data[:64]  # 4 steps of 16 an epoch
    model = small_gpt(pre.vocab_size, 32, seed=0, n_layer=1)
    forwards = []

    def poison(module, args, output):
        forwards.append(1)
        logits, loss = output  # the step scores the logits itself (objective.Objective): they carry the NaN
        return (logits * float("nan"), loss) if len(forwards) >= 6 else output

    model.register_forward_hook(poison)
    params, checkpoint = tmp_path / "epoch.params", tmp_path / "run.ckpt"
    config = TrainerConfig(
        max_epochs=5,
        batch_size=16,
        learning_rate=1e-3,
        ckpt_path=str(params),
        device="cpu",
    )
    trainer = Trainer(model, pre, None, config, checkpoints=Checkpoints(str(checkpoint)))
    with pytest.raises(RunError, match=r"not finite at step 6 \(learning rate 0.001\)"):
        trainer.train()
    assert len(forwards) == 8 and trainer.step == 8, "it stops at the epoch's end, the first check after step 6"
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["step"] == 4 and saved["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in torch.load(params, weights_only=True).values())
    assert all(torch.isfinite(v).all() for v in saved["model"].values())


def test_divergence_is_one_line_and_writes_no_params(tiny_world, tmp_path, capsys):
    params = tmp_path / "p.params"
    capsys.readouterr()
    code = main(
        *pretrain_args("vanilla", tiny_world["wiki.txt"], params), "--pretrain_lr", "1e6", "--pretrain_epochs", 3, *TINY
    )
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert code == 2 and len(errors) == 1 and "loss is not finite at step" in errors[0], err
    assert "Traceback" not in err and not params.exists() and not (tmp_path / "p.params.ckpt").exists()


def test_resume_without_a_checkpoint_starts_over(tiny_world, tmp_path, capsys):
    params = tmp_path / "p.params"
    assert (
        main(*pretrain_args("vanilla", tiny_world["wiki.txt"], params), "--pretrain_epochs", 1, "--resume", *TINY) == 0
    )
    assert "starting from the beginning" in capsys.readouterr().err and params.exists()


def test_training_outlives_its_tensorboard_folder(tiny_world, tmp_path, caplog):
    """Removing expt/ under a running training costs its log, in one line, not the training."""
    removed = []

    def remove_the_log(end):
        if end.epoch == 1:
            end.writer.writer.flush()  # the writer's thread has nothing left to write while the folder goes
            shutil.rmtree(end.writer.log_dir)
            removed.append(end.writer.log_dir)

    recipe = dataclasses.replace(HANDOUT, pretrain_epochs=3, n_layer=2, n_head=2, n_embd=16, pretrain_batch_size=16)
    cfg = RunConfig(
        "pretrain", "vanilla", tiny_world["wiki.txt"], writing_params_path=str(tmp_path / "p.params"), recipe=recipe,
        device="cpu", tensorboard_root=str(tmp_path / "expt"),
    )  # fmt: skip
    pipeline.pretrain(cfg, on_epoch_end=[remove_the_log])
    assert removed and (tmp_path / "p.params").exists() and read_metadata(str(tmp_path / "p.params"))
    said = [r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith("training goes on without it") and removed[0] in said[0], said


@pytest.mark.parametrize("corrupt_by_epoch, rope", [(False, False), (True, False), (False, True)])
def test_trainer_resumes_mid_epoch_bit_for_bit(tiny_world, tmp_path, corrupt_by_epoch, rope):
    """The Trainer alone: a checkpoint written within an epoch continues exactly where the run was."""
    dataset = corpus_of(tiny_world["wiki.txt"], 64)

    def trainer(max_epochs, resume):
        model = small_gpt(dataset.vocab_size, 64, "rope" if rope else "vanilla", seed=0)
        config = TrainerConfig(
            max_epochs=max_epochs,
            batch_size=8,
            learning_rate=1e-3,
            lr_decay=True,
            warmup_tokens=100,
            final_tokens=20000,
            data_seed=5,
            device="cpu",
            corrupt_by_epoch=corrupt_by_epoch,
        )
        path = str(tmp_path / "c.ckpt")
        saved = checkpoint.read(path) if resume else None
        kept = Checkpoints(path, checkpoint_minutes=1e-9, resume_from=saved)
        return Trainer(model, dataset, None, config, checkpoints=kept)

    random.seed(1)
    whole = trainer(3, False)
    whole.train()
    reference = whole.model.state_dict()

    random.seed(1)
    first = trainer(3, False)
    original_save = first.save_checkpoint
    saved = []

    def save_then_stop(*args):  # stop (as a kill would) right after the 17th step's checkpoint
        original_save(*args)
        saved.append(first.step)
        if first.step == 17:
            raise KeyboardInterrupt

    first.save_checkpoint = save_then_stop
    with pytest.raises(KeyboardInterrupt):
        first.train()
    random.seed(99)  # the resumed run takes the random states from the checkpoint, not from here
    resumed = trainer(3, True)
    resumed.train()
    assert resumed.step == whole.step == 33
    assert resumed.epoch_losses == whole.epoch_losses
    assert all(torch.equal(reference[k], resumed.model.state_dict()[k]) for k in reference)


# --- tolerated input ---------------------------------------------------------------------------------------


def test_crlf_blank_lines_and_missing_final_newline_change_nothing(tiny_world, tmp_path):
    with open(tiny_world["wiki.txt"], encoding="utf-8") as f:
        wiki = f.read()
    with open(tiny_world["train.tsv"], encoding="utf-8") as f:
        pairs = f.read()
    messy_wiki = "\r\n" + wiki.replace("\n", "\r\n\r\n").rstrip("\r\n")
    messy_pairs = pairs.replace("\n", "\r\n\n").rstrip("\r\n")
    clean, messy = CharCorruptionDataset(wiki, 128), CharCorruptionDataset(messy_wiki, 128)
    assert clean.stoi == messy.stoi and clean.data == messy.data
    assert NameDataset(clean, pairs).data == NameDataset(messy, messy_pairs).data


def test_messy_files_run_end_to_end(tiny_world, tmp_path, capsys):
    with open(tiny_world["wiki.txt"], encoding="utf-8") as f:
        (tmp_path / "wiki.txt").write_bytes(f.read().replace("\n", "\r\n").rstrip("\r\n").encode("utf-8"))
    with open(tiny_world["dev.tsv"], encoding="utf-8") as f:
        (tmp_path / "dev.tsv").write_bytes(("\r\n" + f.read().replace("\n", "\r\n\r\n")).encode("utf-8"))
    params = tmp_path / "p.params"
    assert (
        main(
            *finetune_args("vanilla", tmp_path / "wiki.txt", params, tiny_world["train.tsv"]),
            "--finetune_epochs_from_scratch",
            1,
            *TINY,
        )
        == 0
    )
    outputs = tmp_path / "new" / "folder" / "dev.predictions"
    assert (
        main(
            *evaluate_args("vanilla", tmp_path / "wiki.txt", params, tmp_path / "dev.tsv", outputs),
            *TINY,
        )
        == 0
    )
    assert "out of 24" in capsys.readouterr().out
    assert len(outputs.read_text(encoding="utf-8").splitlines()) == 24


# --- torchrun --------------------------------------------------------------------------------------------


def test_torchrun_with_more_processes_than_gpus_is_one_line(monkeypatch, tmp_path):
    """--nproc_per_node 2 on a machine with one GPU: the second rank says so, before touching the GPU."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(start, "pick_device", lambda name: torch.device("cuda"))
    said = r"more processes on this machine than its 1 visible CUDA GPU\(s\): use --nproc_per_node 1, or --device cpu"
    with pytest.raises(RunError, match=said):
        start.start_device(RunConfig("pretrain", "vanilla", str(tmp_path)))


def train_on_ranks(rank, wiki, results, rope=False, pairs=None):
    """
    One rank of a DDP run (in a process group already started) or the single process, on the tiny
    world without dropout: pretraining, or with `pairs` finetuning with the auxiliary LM loss, in
    batches of 59 of the 60 pairs (the second batch's one row leaves rank 1 a placeholder row that
    must count for nothing).
    """
    random.seed(0)
    torch.manual_seed(0)
    dataset = CharCorruptionDataset(wiki, 64)
    vocab_size = dataset.vocab_size
    if pairs is not None:
        dataset = NameDataset(dataset, pairs)
    model = small_gpt(vocab_size, 64, "rope" if rope else "vanilla", dropout=0.0)
    config = TrainerConfig(
        max_epochs=2,
        batch_size=16 if pairs is None else 59,
        finetune_lm_weight=0.0 if pairs is None else 0.5,
        learning_rate=3e-3,
        lr_decay=True,
        warmup_tokens=100,
        final_tokens=10000,
        data_seed=3,
        device="cpu",
        micro_batch_size=4,
    )  # several passes a step, DDP syncing after the last one
    trainer = Trainer(model, dataset, None, config)
    trainer.train()
    if rank == 0:
        torch.save({"state": model.state_dict(), "step": trainer.step, "losses": trainer.epoch_losses}, results)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkpoint_on_ranks(rank, wiki, folder):
    """
    One of two gloo ranks pretraining with a checkpoint due every step by rank 0's clock and
    never by rank 1's, which stands still: how many checkpoints each rank took part in, to folder.
    """
    clock = time.monotonic
    if rank == 1:
        time.monotonic = lambda: 0.0
    try:
        dataset = CharCorruptionDataset(wiki, 64)
        model = small_gpt(dataset.vocab_size, 64, seed=0, n_layer=1)
        config = TrainerConfig(max_epochs=2, batch_size=8, data_seed=3, device="cpu", log_every=2)
        kept = Checkpoints(str(folder / "c.ckpt"), checkpoint_minutes=1e-9)
        trainer = Trainer(model, dataset, None, config, checkpoints=kept)
        saves = checkpoint_steps(trainer)
        trainer.train()
    finally:
        time.monotonic = clock
    torch.save(saves, folder / f"saves{rank}.pt")


TWO_RANK_CASES = [(False, False), (True, False), (False, True)]  # (rope, auxiliary)


def on_two_ranks(rank, world_size, port, wiki, pairs, folder):
    """
    One of two gloo ranks, in one process group for all the module's runs on two ranks (each
    spawn starts two fresh interpreters): every case of TWO_RANK_CASES, then the timed checkpoints.
    """
    import datetime

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # a collective one rank never joins fails in a minute instead of hanging the run
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60))
    for rope, auxiliary in TWO_RANK_CASES:
        train_on_ranks(rank, wiki, folder / f"two_{rope}_{auxiliary}.pt", rope, pairs if auxiliary else None)
    checkpoint_on_ranks(rank, wiki, folder)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tiny_world, tmp_path_factory):
    """The folder of what on_two_ranks wrote: the two-rank runs of the tests below, spawned once for them all."""
    folder = tmp_path_factory.mktemp("two_ranks")
    wiki, pairs = (open(tiny_world[name], encoding="utf-8").read() for name in ["wiki.txt", "train.tsv"])
    mp.start_processes(on_two_ranks, args=(2, free_port(), wiki, pairs, folder), nprocs=2, start_method="spawn")
    return folder


def test_ranks_take_the_timed_checkpoint_together(two_ranks):
    """Their clocks disagree on when checkpoint_minutes have passed: one decision, no mismatched collectives."""
    saves = [torch.load(two_ranks / f"saves{rank}.pt") for rank in (0, 1)]
    steps_per_epoch = math.ceil(84 / 8)
    assert saves[0] == saves[1]  # the same checkpoints, at the same steps
    timed = [step for step in saves[0] if step % steps_per_epoch]  # within an epoch: every second step, read back
    assert timed and all(step % 2 == 0 for step in timed)


@pytest.mark.parametrize("rope, auxiliary", TWO_RANK_CASES)
def test_two_ranks_train_like_one_process(two_ranks, tiny_world, tmp_path, rope, auxiliary):
    """Same global batches and schedule: two gloo ranks end where one process does (up to float rounding)."""
    with open(tiny_world["wiki.txt"], encoding="utf-8") as f:
        wiki = f.read()
    pairs = None
    if auxiliary:
        with open(tiny_world["train.tsv"], encoding="utf-8") as f:
            pairs = f.read()
    train_on_ranks(0, wiki, tmp_path / "one.pt", rope, pairs)
    one = torch.load(tmp_path / "one.pt", weights_only=True)
    two = torch.load(two_ranks / f"two_{rope}_{auxiliary}.pt", weights_only=True)
    assert one["step"] == two["step"] == (4 if auxiliary else 12)
    assert one["losses"] == pytest.approx(two["losses"], rel=1e-4)
    for key, value in one["state"].items():
        torch.testing.assert_close(two["state"][key], value, rtol=1e-3, atol=1e-5)


@pytest.mark.slow
def test_torchrun_cli(tiny_world, tmp_path, capsys):
    """torchrun with two CPU processes: pretrain, finetune and evaluate write one set of files and print one result."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    wiki = tiny_world["wiki.txt"]
    pre, ft, out = tmp_path / "pre.params", tmp_path / "ft.params", tmp_path / "dev.predictions"
    commands = [
        [
            *pretrain_args("vanilla", wiki, pre),
            "--pretrain_epochs",
            2,
            "--pretrain_stages",
            "corpus+pairs; corpus+pairs epochs=1 lr=0.0006 max_shift=13 decay_epochs=1",  # then shifted examples
        ],
        [
            "finetune",
            "vanilla",
            wiki,
            "--reading_params_path",
            pre,
            "--writing_params_path",
            ft,
            "--finetune_corpus_path",
            tiny_world["train.tsv"],
            "--finetune_epochs_from_pretrained",
            2,
        ],
        [
            *evaluate_args("vanilla", wiki, ft, tiny_world["dev.tsv"], out),
        ],
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for command in commands:
        done = run_process([*torchrun, RUN_PY, *map(str, command), *TINY], timeout=300, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
    assert pre.exists() and ft.exists() and not (tmp_path / "pre.params.ckpt").exists()
    assert sorted(p.name for p in tmp_path.glob("pre.params*")) == ["pre.params", "pre.params.json"]  # no stage's files
    assert done.stdout.count("Correct: ") == 1 and "out of 24" in done.stdout

    single = tmp_path / "single.predictions"
    assert (
        main(
            *evaluate_args("vanilla", wiki, ft, tiny_world["dev.tsv"], single),
            *TINY,
        )
        == 0
    )
    assert out.read_text(encoding="utf-8") == single.read_text(encoding="utf-8")
    assert capsys.readouterr().out.strip() == done.stdout.strip()
