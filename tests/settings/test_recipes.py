"""Recipes and pretraining stages on the command line: what each sets, how stages go on, the research pretraining."""

import dataclasses
import os
import re

import pytest
import torch

from conftest import CPU_FLAGS, RUNS_DIR, SMALL, evaluate_args, pretrain_args, run_script
from conftest import run_main as main
from factgpt import pipeline
from factgpt.corpus.reading import BLOCK_SIZE
from factgpt.pipeline import trainings
from factgpt.settings import command_line as arguments
from factgpt.settings.recipe import Stage, parse_stages
from factgpt.settings.recipes import HANDOUT, RECIPES
from factgpt.training.params import read_metadata
from trainer import Trainer


class Stopped(Exception):
    """What stop_at's hook raises: a pretraining stopped at an epoch's end, before that epoch's checkpoint."""


def stop_at(epoch):
    """An on_epoch_end hook that stops pretraining after `epoch` epochs (counted on across the stages)."""

    def hook(end):
        if end.epoch == epoch:
            raise Stopped(epoch)

    return hook


class RecordingTrainer(Trainer):
    """A Trainer that records what every training (a stage) is given: its config, its data and its starting params."""

    made = []

    def __init__(self, model, train_dataset, test_dataset, config, *hooks_and_checkpoints):
        start = {k: v.detach().clone() for k, v in model.state_dict().items()}
        RecordingTrainer.made.append((config, train_dataset, start, hooks_and_checkpoints[-1]))
        super().__init__(model, train_dataset, test_dataset, config, *hooks_and_checkpoints)


def test_the_second_stage_is_pretraining_continued_with_its_flags(tiny_world, tmp_path, monkeypatch, caplog):
    """
    A recipe's second stage ends pretraining exactly as a second command going on from the
    first stage's params, with the stage's settings as flags, would. The stages keep one
    checkpoint, of the stage it was written in, and --resume goes on at that stage; nothing of
    the first stage is left beside the params; snapshots count epochs and seconds on across the stages.
    """
    cpu, wiki = RECIPES["cpu"], tiny_world["wiki.txt"]
    second = dataclasses.replace(cpu.pretrain_stages[1], max_epochs=2, decay_epochs=2)  # the cpu recipe's, shorter
    assert (second.learning_rate, second.max_shift) == (3e-4, 13) and cpu.pretrain_stages[0] == Stage()
    stages = ["--pretrain_stages", f"corpus+pairs; {second}"]
    cpu_run = ["--recipe", "cpu", "--pretrain_epochs", 2, *SMALL]
    one, two = tmp_path / "one" / "p.params", tmp_path / "two" / "p.params"
    assert main(*pretrain_args("vanilla", wiki, one), *cpu_run, *stages) == 0
    assert sorted(os.listdir(one.parent)) == ["p.params", "p.params.json"]

    stage = tmp_path / "stage.params"
    assert main(*pretrain_args("vanilla", wiki, stage), *cpu_run, "--pretrain_stages", "corpus+pairs") == 0
    continued = ["--pretrain_epochs", 2, "--decay_epochs", 2, "--pretrain_lr", second.learning_rate]
    continued += ["--max_shift", second.max_shift, "--pretrain_stages", "corpus+pairs", "--reading_params_path", stage]
    assert main(*pretrain_args("vanilla", wiki, two), *cpu_run, *continued) == 0
    a, b = torch.load(one, weights_only=True), torch.load(two, weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    fresh = torch.load(stage, weights_only=True)
    assert max((a[k] - fresh[k]).abs().max() for k in a) > 1e-4

    # each stage trains with its own settings, the second from the first's params; one checkpoint, the second stage's
    monkeypatch.setattr(trainings, "Trainer", RecordingTrainer)
    monkeypatch.setattr(RecordingTrainer, "made", [])
    kept = tmp_path / "kept" / "p.params"
    flags = ["--save_every", 2, "--tb_expt_name", "two_stages", "--keep_checkpoint"]
    assert run_script("probed_pretraining", *pretrain_args("vanilla", wiki, kept), *cpu_run, *stages, *flags) == 0
    assert sorted(os.listdir(kept.parent)) == [
        "p.params",
        "p.params.ckpt",
        "p.params.epoch2",
        "p.params.epoch2.json",
        "p.params.epoch4",
        "p.params.epoch4.json",
        "p.params.json",
    ]
    (first, first_data, _, first_kept), (closing, closing_data, closing_start, kept_then) = RecordingTrainer.made
    assert all(torch.equal(closing_start[k], fresh[k]) for k in fresh)  # the first stage's params, carried in memory
    assert (first.learning_rate, first_data.max_shift, first.max_epochs) == (cpu.pretrain_lr, 0, 2)
    assert first.final_tokens == cpu.decay_epochs * len(first_data) * BLOCK_SIZE
    assert (closing.learning_rate, closing_data.max_shift, closing.max_epochs) == (
        second.learning_rate,
        second.max_shift,
        2,
    )
    assert closing.final_tokens == 2 * len(closing_data) * BLOCK_SIZE
    assert (first_kept.identity["stage"], kept_then.identity["stage"]) == (1, 2)
    ckpt = torch.load(f"{kept}.ckpt", weights_only=True)
    assert ckpt["run_identity"] == kept_then.identity and ckpt["epoch"] == 2
    assert ckpt["run_identity"]["pretrain_stages"] == f"corpus+pairs; {second}"
    assert all(torch.equal(ckpt["model"][k], a[k]) for k in a)
    logs = os.listdir(RUNS_DIR / "expt" / "pretrain")  # TensorBoard's: a folder per stage
    assert any(name.startswith("two_stages_vanilla_") for name in logs)
    assert any(name.startswith("two_stages_stage2_vanilla_") for name in logs)
    # the snapshots beside the params (listed above), their epochs and seconds counted on from the first stage's
    early, late = read_metadata(f"{kept}.epoch2"), read_metadata(f"{kept}.epoch4")
    assert (early["epochs"], late["epochs"]) == (2, 4) and early["training_seconds"] <= late["training_seconds"]
    assert all(torch.equal(t, fresh[k]) for k, t in torch.load(f"{kept}.epoch2", weights_only=True).items())

    # stopped between the stages, then within the second: --resume goes on at the checkpoint's stage
    for stopped_at, stage_epochs_done in [(3, 2), (4, 1)]:
        stopped = tmp_path / f"stopped{stopped_at}" / "p.params"
        argv = [str(x) for x in [*pretrain_args("vanilla", wiki, stopped), *cpu_run, *stages]]
        with pytest.raises(Stopped):
            pipeline.pretrain(arguments.parse(argv, arguments.build_parser())[0], [stop_at(stopped_at)])
        assert torch.load(f"{stopped}.ckpt", weights_only=True)["run_identity"]["stage"] == 1 + (stopped_at == 4)
        caplog.clear()
        assert main(*argv, "--resume") == 0
        said = caplog.text
        assert f"resuming from {stopped}.ckpt" in said and f"({stage_epochs_done} epochs done)" in said, said
        resumed = torch.load(stopped, weights_only=True)
        assert all(torch.equal(a[k], resumed[k]) for k in a)
        assert sorted(os.listdir(stopped.parent)) == ["p.params", "p.params.json"]


def test_recipes_fill_in_the_settings_and_flags_win():
    def recipe(*argv):
        return arguments.parse(list(argv), arguments.build_parser())[0].recipe

    handout = recipe("pretrain", "vanilla", "w.txt")
    assert handout == HANDOUT and handout.pretrain_lr == 6e-3 and handout.dropout == 0.1
    cpu = recipe("pretrain", "vanilla", "w.txt", "--recipe", "cpu")
    assert cpu == RECIPES["cpu"] and cpu.pretrain_batch_size < handout.pretrain_batch_size
    overridden = recipe("pretrain", "vanilla", "w.txt", "--recipe", "cpu", "--pretrain_lr", "5e-4", "--dropout=0.2")
    assert overridden == dataclasses.replace(cpu, pretrain_lr=5e-4, dropout=0.2)
    assert len(cpu.pretrain_stages) == 2 and handout.pretrain_stages == (Stage(),)
    cpu_stages = "; ".join(map(str, cpu.pretrain_stages))  # the stages' text (--help's) reads back as they are
    assert cpu_stages == "corpus+pairs; corpus+pairs epochs=20 lr=0.0003 max_shift=13 decay_epochs=20"
    assert recipe("pretrain", "vanilla", "w.txt", "--pretrain_stages", cpu_stages) == (
        dataclasses.replace(HANDOUT, pretrain_stages=cpu.pretrain_stages)
    )
    assert parse_stages(cpu_stages) == cpu.pretrain_stages
    one_stage = recipe("finetune", "vanilla", "w.txt", "--recipe", "cpu", "--pretrain_stages", "corpus+pairs")
    assert one_stage == dataclasses.replace(cpu, pretrain_stages=(Stage(),))
    # every field of a recipe is a flag; a yes/no one is on alone and off with no-
    switched = recipe("pretrain", "vanilla", "w.txt", "--recipe", "cpu", "--no-group_by_length", "--full_padding")
    assert switched == dataclasses.replace(cpu, group_by_length=False, full_padding=True)
    assert recipe("pretrain", "vanilla", "w.txt", "--warmup_tokens", "7", "--decay_groups", "matmul") == (
        dataclasses.replace(HANDOUT, warmup_tokens=7, decay_groups="matmul")
    )
    # the hour's recipe is the cpu recipe with the flags its runs were measured with (docs/readout.md)
    measured = ["--pretrain_epochs", "170", "--decay_epochs", "170"]
    measured += ["--pretrain_stages", "text;text epochs=20 lr=0.0003 decay_epochs=20"]
    assert recipe("pretrain", "vanilla", "w.txt", "--recipe", "hour") == recipe(
        "pretrain", "vanilla", "w.txt", "--recipe", "cpu", *measured
    )


def test_a_recipe_sets_the_model_size_length_grouping_and_optimisation_and_flags_win(tiny_world, tmp_path, monkeypatch):
    recipe = dataclasses.replace(HANDOUT, n_layer=2, n_head=2, n_embd=24, group_by_length=True, weight_decay=0.0)
    monkeypatch.setitem(RECIPES, "narrow", recipe)
    wiki, narrow = tiny_world["wiki.txt"], ["--recipe", "narrow", "--pretrain_epochs", 1, *CPU_FLAGS]
    assert main(*pretrain_args("vanilla", wiki, tmp_path / "a.params"), *narrow, "--keep_checkpoint") == 0
    metadata = read_metadata(str(tmp_path / "a.params"))
    assert (metadata["n_layer"], metadata["n_head"], metadata["n_embd"]) == (2, 2, 24)
    checkpoint = torch.load(tmp_path / "a.params.ckpt", weights_only=True)
    assert checkpoint["run_identity"]["group_by_length"] is True
    assert [group["weight_decay"] for group in checkpoint["optimizer"]["param_groups"]] == [0.0, 0.0]
    assert checkpoint["optimizer"]["param_groups"][0]["lr"] > 0.9 * recipe.pretrain_lr  # a 200-epoch half period
    flags = ["--n_embd", 16, "--no-group_by_length", "--weight_decay", 0.05, "--decay_epochs", 1, "--keep_checkpoint"]
    assert main(*pretrain_args("vanilla", wiki, tmp_path / "b.params"), *narrow, *flags) == 0
    assert read_metadata(str(tmp_path / "b.params"))["n_embd"] == 16
    checkpoint = torch.load(tmp_path / "b.params.ckpt", weights_only=True)
    assert checkpoint["run_identity"]["group_by_length"] is False
    assert [group["weight_decay"] for group in checkpoint["optimizer"]["param_groups"]] == [0.05, 0.0]
    assert checkpoint["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.1 * recipe.pretrain_lr)  # on the floor
    assert (checkpoint["run_identity"]["weight_decay"], checkpoint["run_identity"]["decay_epochs"]) == (0.05, 1)


@pytest.mark.parametrize("corrupt_by_epoch", [False, True])
def test_pretraining_with_the_cpu_recipe_reports_recall(tiny_world, tmp_path, corrupt_by_epoch, capsys):
    """experiments/probed_pretraining.py: the recall probe through both stages of the cpu recipe."""
    params = tmp_path / "pre.params"
    argv = [
        *pretrain_args("vanilla", tiny_world["wiki.txt"], params),
        "--recipe",
        "cpu",
        "--pretrain_epochs",
        2,
        "--probe_corpus_path",
        tiny_world["dev.tsv"],
        "--probe_every",
        1,
        "--pretrain_stages",
        f"corpus+pairs; {dataclasses.replace(RECIPES['cpu'].pretrain_stages[1], max_epochs=1)}",
        "--keep_checkpoint",
        *SMALL,
        *(["--corrupt_by_epoch"] if corrupt_by_epoch else []),
    ]
    capsys.readouterr()
    assert run_script("probed_pretraining", *argv) == 0
    err = capsys.readouterr().err
    reports = [line for line in err.replace("\r", "\n").splitlines() if "birthplaces of" in line]
    assert [r.split(":")[0] for r in reports] == ["epoch 1", "epoch 2", "epoch 3"]  # the second stage's epoch 3
    assert all(" of 24 birthplaces of " in r for r in reports)  # every dev person's document names the place
    assert all(re.search(r"answers \d+ of its 24 questions", r) for r in reports)
    checkpoint = torch.load(f"{params}.ckpt", weights_only=True)  # the second stage's, the one checkpoint
    written = torch.load(params, weights_only=True)  # the params: the model its last checkpoint holds
    assert sorted(written) == sorted(checkpoint["model"])
    assert all(torch.equal(value, checkpoint["model"][name]) for name, value in written.items())
    identity = checkpoint["run_identity"]
    assert checkpoint["params_metadata"]["recipe"] == "cpu" and identity["dropout"] == 0.0 and identity["stage"] == 2
    assert identity["corrupt_by_epoch"] == corrupt_by_epoch
    assert identity["pretrain_lr"] == RECIPES["cpu"].pretrain_lr  # the first stage's, which gives none of its own
    assert sorted(os.listdir(tmp_path)) == ["pre.params", "pre.params.ckpt", "pre.params.json"]


@pytest.mark.slow
def test_mixed_pairs_are_learned_in_pretraining(tiny_world, tmp_path, capsys, monkeypatch):
    """
    probed_pretraining.py --mix_corpus_path trains on the pairs in finetuning's format: the
    pretrained model already answers them.
    """
    configs = []

    class RecordingTrainer(Trainer):
        def __init__(self, model, train_dataset, test_dataset, config, *hooks_and_checkpoints):
            configs.append(config)
            super().__init__(model, train_dataset, test_dataset, config, *hooks_and_checkpoints)

    monkeypatch.setattr(trainings, "Trainer", RecordingTrainer)
    wiki, train = tiny_world["wiki.txt"], tiny_world["train.tsv"]
    params, outputs = tmp_path / "pre.params", tmp_path / "train.predictions"
    argv = [
        *pretrain_args("vanilla", wiki, params),
        "--pretrain_epochs",
        60,
        "--pretrain_lr",
        3e-3,
        "--dropout",
        0,
        "--mix_corpus_path",
        train,
        "--keep_checkpoint",
        "--probe_corpus_path",
        train,
        "--probe_every",
        60,
        *SMALL,
    ]
    assert run_script("probed_pretraining", *argv) == 0
    probe = capsys.readouterr().err.replace("\r", "\n")
    probe_answered = int(re.search(r"epoch 60: .* answers (\d+) of its 60 questions", probe).group(1))
    checkpoint = torch.load(f"{params}.ckpt", weights_only=True)
    assert checkpoint["run_identity"]["examples"] == 84 + 60
    assert f"--mix_corpus_path {train}" in checkpoint["params_metadata"]["command"]
    # the cosine decays over decay_epochs epochs of corpus and pairs; without pairs, of the corpus alone
    assert configs[0].final_tokens == HANDOUT.decay_epochs * (84 + 60) * BLOCK_SIZE
    plain = pretrain_args("vanilla", wiki, tmp_path / "plain.params")
    assert main(*plain, "--pretrain_epochs", 1, *SMALL) == 0
    assert configs[1].final_tokens == HANDOUT.decay_epochs * 84 * BLOCK_SIZE

    capsys.readouterr()
    assert (
        main(
            *evaluate_args("vanilla", wiki, params, train, outputs),
            *SMALL,
        )
        == 0
    )
    correct = int(re.match(r"Correct: (\d+) out of 60", capsys.readouterr().out).group(1))
    assert correct >= 10  # 17 with one thread and with two; span corruption alone answers none of them
    assert probe_answered == correct
