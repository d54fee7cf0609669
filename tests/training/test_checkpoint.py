"""
checkpoint.py: what a checkpoint belongs to (its identity) and the checkpoints it refuses;
params.py: the metadata beside a params file.
"""

import dataclasses

import pytest
import torch

from conftest import (
    TINY,
    another_value,
    checkpoint_steps,
    corpus_of,
    pretrain_args,
    run_main,
    small_gpt,
)
from factgpt.common.errors import RunError
from factgpt.pipeline import trainings
from factgpt.settings.recipe import Recipe
from factgpt.settings.recipes import HANDOUT
from factgpt.settings.run_config import CUDA_CHECKPOINT_MINUTES, INPUTS, RunConfig
from factgpt.training import checkpoint, params
from factgpt.training.params import read_metadata, save_params_with_metadata, write_metadata
from trainer import Trainer, TrainerConfig

CFG = RunConfig("pretrain", "vanilla", "wiki.txt", writing_params_path="p.params")
DATASET = range(2937)  # run_identity needs only the number of examples


def test_the_identity_covers_every_recipe_field_by_construction():
    """
    A recipe that differs from the handout's in any one field that pretraining reads, a new one
    too, is another run's; one that only evaluate reads (the readout), or only finetuning, is the
    same pretraining's.
    """
    base = trainings.run_identity(CFG, DATASET, vocab_size=256)
    fields = dataclasses.fields(Recipe)
    reading = {field.name for field in fields if field.metadata.get("reading")}
    finetuning = {field.name for field in fields if field.metadata["training"] == "finetuning"}
    assert {"finetune_lr", "finetune_epochs_from_pretrained", "finetune_lm_weight"} <= finetuning
    assert reading == {
        "readout",
        "readout_frames",
        "readout_choice",
        "readout_biography",
        "readout_samples",
        "readout_temperature",
    }
    for field in fields:
        value = another_value(field, getattr(HANDOUT, field.name))
        other = trainings.run_identity(
            dataclasses.replace(CFG, recipe=dataclasses.replace(HANDOUT, **{field.name: value})), DATASET, 256
        )
        changed = {key for key in base if other[key] != base[key]}
        assert changed == (set() if field.name in reading | finetuning else {field.name}), field.name
    run = {"function", "variant", "seed", "stage", "examples", "vocab_size", *INPUTS}
    assert set(base) == {f.name for f in fields} - reading - finetuning | run
    # a finetuning's identity: the fields finetuning reads, none that only pretraining reads
    finetune = trainings.run_identity(dataclasses.replace(CFG, function="finetune"), DATASET, 256)
    pretraining = {field.name for field in fields if field.metadata["training"] == "pretraining"}
    assert set(finetune) == {f.name for f in fields} - reading - pretraining | run
    assert {"pretrain_lr", "pretrain_stages", "held_out_fraction"} <= pretraining
    assert base["pretrain_stages"] == "corpus+pairs" and base["stage"] == 1 and base["examples"] == 2937
    # the run's own: the function, variant and seed, the inputs and data, the stage
    for other in [
        trainings.run_identity(dataclasses.replace(CFG, function="finetune"), DATASET, 256),
        trainings.run_identity(dataclasses.replace(CFG, variant="rope"), DATASET, 256),
        trainings.run_identity(dataclasses.replace(CFG, seed=1), DATASET, 256),
        trainings.run_identity(CFG, range(2936), 256),
        trainings.run_identity(CFG, DATASET, 255),
        trainings.run_identity(CFG, DATASET, 256, stage=2),
        trainings.run_identity(dataclasses.replace(CFG, mix_corpus_path="other.tsv"), DATASET, 256),
    ]:
        assert other != base


def save_checkpoint(path, identity, **more):
    torch.save({"format": checkpoint.FORMAT, "run_identity": identity, **more}, path)


def test_a_checkpoint_resumes_under_its_own_identity_only(tmp_path):
    path = str(tmp_path / "p.params.ckpt")
    identity = trainings.run_identity(CFG, DATASET, 256)
    assert checkpoint.read(path) is None  # none yet: the run starts from the beginning
    save_checkpoint(path, identity, epoch=3)
    assert checkpoint.verified(checkpoint.read(path), path, identity)["epoch"] == 3
    other = trainings.run_identity(
        dataclasses.replace(CFG, recipe=dataclasses.replace(HANDOUT, pretrain_lr=3e-3)), DATASET, 256
    )
    with pytest.raises(RunError) as refused:
        checkpoint.verified(checkpoint.read(path), path, other)
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and path in message and "pretrain_lr 0.006 there, 0.003 here" in message


@pytest.mark.parametrize("kind", ["the code before's", "cut short"])
def test_a_checkpoint_that_cannot_be_read_is_set_aside_and_the_run_starts_over(tmp_path, tiny_world, capsys, kind):
    """
    A checkpoint without "format" (the code before's), or one cut short, is moved to
    <path>.unreadable with one line, and --resume starts the training over: nobody is asked to
    delete a file.
    """
    path = str(tmp_path / "p.params.ckpt")
    identity = trainings.run_identity(CFG, DATASET, 256)
    torch.save({"model": {}, "epoch": 1, "run_identity": identity}, path)
    if kind == "cut short":
        data = (tmp_path / "p.params.ckpt").read_bytes()
        (tmp_path / "p.params.ckpt").write_bytes(data[: len(data) // 2])
    original = (tmp_path / "p.params.ckpt").read_bytes()
    argv = [*pretrain_args("vanilla", tiny_world["wiki.txt"], path[: -len(".ckpt")]), "--resume"]
    capsys.readouterr()
    assert run_main(*argv, "--pretrain_epochs", 1, *TINY) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if path in line]
    why = "was written by an earlier version of this code" if kind == "the code before's" else "cannot be read"
    assert len(said) == 1 and why in said[0] and "starting from the beginning" in said[0], said
    assert (tmp_path / "p.params.ckpt.unreadable").read_bytes() == original  # kept, aside
    assert (tmp_path / "p.params").exists() and not (tmp_path / "p.params.ckpt").exists()


def test_facts_round_trip_and_a_broken_facts_file_is_set_aside_in_one_line(tmp_path, caplog):
    params_path = str(tmp_path / "p.params")
    assert read_metadata(params_path) is None  # params of the course's code have no metadata
    write_metadata(params_path, {"variant": "perceiver", "bottleneck_dim": 64, "vocabulary": "aé\t"})
    assert read_metadata(params_path) == {"variant": "perceiver", "bottleneck_dim": 64, "vocabulary": "aé\t"}
    (tmp_path / "p.params.json").write_text("[1, 2]", encoding="utf-8")
    assert read_metadata(params_path) is None  # the run goes by its command line alone
    said = [record.getMessage() for record in caplog.records if "p.params.json" in record.getMessage()]
    assert len(said) == 1 and "cannot be read (not a JSON object)" in said[0] and "command line alone" in said[0]
    assert (tmp_path / "p.params.json.unreadable").read_text(encoding="utf-8") == "[1, 2]"
    assert not (tmp_path / "p.params.json").exists()


def test_params_never_keep_another_runs_facts(tmp_path, monkeypatch):
    """A crash while the params are written leaves params without metadata, not with the earlier run's."""
    params_path = str(tmp_path / "p.params")
    model = torch.nn.Linear(2, 2)
    save_params_with_metadata(model, params_path, {"variant": "vanilla", "run": 1})
    assert read_metadata(params_path) == {"variant": "vanilla", "run": 1}

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(params, "save_params", crash)
    with pytest.raises(OSError):
        save_params_with_metadata(model, params_path, {"variant": "vanilla", "run": 2})
    assert read_metadata(params_path) is None


def test_on_cuda_the_checkpoint_comes_every_few_minutes_and_at_the_end_not_every_epoch(tiny_world, tmp_path):
    """A handout epoch on a GPU takes a fraction of a second; a 40 MB checkpoint after each would be a large share."""
    cfg = dataclasses.replace(CFG, writing_params_path=str(tmp_path / "p.params"))
    cuda = trainings.checkpoints(cfg, torch.device("cuda"), {}, {}, None)
    assert cuda.path == cfg.writing_params_path + ".ckpt"
    assert (cuda.checkpoint_every_epoch, cuda.checkpoint_minutes) == (False, CUDA_CHECKPOINT_MINUTES)
    asked = trainings.checkpoints(dataclasses.replace(cfg, checkpoint_minutes=5), torch.device("cuda"), {}, {}, None)
    assert asked.checkpoint_minutes == 5
    cpu = trainings.checkpoints(cfg, torch.device("cpu"), {}, {}, None)
    assert (cpu.checkpoint_every_epoch, cpu.checkpoint_minutes) == (True, None)

    corpus = corpus_of(tiny_world["wiki.txt"], 32)
    for every_epoch, expected in [(True, [11, 22, 33]), (False, [33])]:  # 84 biographies, batch 8
        config = TrainerConfig(max_epochs=3, batch_size=8, device="cpu")
        path = str(tmp_path / "c.ckpt")
        kept = checkpoint.Checkpoints(path, checkpoint_minutes=1000, checkpoint_every_epoch=every_epoch)
        trainer = Trainer(small_gpt(corpus.vocab_size, 32, n_layer=1), corpus, None, config, checkpoints=kept)
        saves = checkpoint_steps(trainer)
        trainer.train()
        assert saves == expected
