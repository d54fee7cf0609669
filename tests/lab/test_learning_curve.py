"""The research scripts in experiments/ on a small world: snapshots, scores, the picture, the recall probes."""

import csv
import dataclasses
import json

import pytest
import torch

from conftest import SMALL, run_script
from factgpt import pipeline
from factgpt.readout.recall import PROBES
from factgpt.settings.run_config import RunConfig
from factgpt.table.demo import DEMO_VARIANT
from factgpt.training.params import read_metadata

# the curve's columns, each the recall of a probe
PROBE_COLUMNS = {"recalled": "biography", "name_recalled": "name", "question_recalled": "question"}


def recalls_of(params, world, variant="vanilla", pairs="dev.tsv"):
    """How many of the world's people each probe's prompt completes with their place, by the curve's column."""
    cfg = RunConfig("evaluate", variant, str(world["wiki.txt"]), reading_params_path=str(params), device="cpu")
    cfg = dataclasses.replace(cfg, eval_corpus_path=str(world[pairs]))
    return {column: pipeline.recall(cfg, PROBES[probe])[0] for column, probe in PROBE_COLUMNS.items()}


@pytest.mark.slow
def test_learning_curve_scores_every_snapshot_and_draws_it(tiny_world, tmp_path, capsys):
    out = tmp_path / "curve"
    argv = [
        "pretrain",
        "vanilla",
        tiny_world["wiki.txt"],
        "--every",
        "1",
        "--finetune_corpus_path",
        tiny_world["train.tsv"],
        "--eval_corpus_path",
        tiny_world["dev.tsv"],
        "--out",
        str(out),
        "--pretrain_epochs",
        "2",
        *SMALL,
    ]
    assert run_script("learning_curve", *argv) == 0
    with open(out / "curve.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [int(row["epochs"]) for row in rows] == [1, 2]
    assert all(int(row["probed"]) == int(row["questions"]) == 24 for row in rows)
    for row, epochs in zip(rows, (1, 2)):  # each column is its probe's count of that snapshot, counted here again
        snapshot = out / f"pretrain.params.epoch{epochs}"
        assert {column: int(row[column]) for column in PROBE_COLUMNS} == recalls_of(snapshot, tiny_world)

    # the last snapshot is the finished pretraining; each snapshot's metadata says when it was taken, and the
    # curve's minutes are those seconds rounded (to 3 decimals: a fast machine's first epoch can round to 0)
    snapshots = [str(out / f"pretrain.params.epoch{epoch}") for epoch in (1, 2)]
    final = torch.load(out / "pretrain.params", weights_only=True)
    assert all(torch.equal(t, final[k]) for k, t in torch.load(snapshots[1], weights_only=True).items())
    metadata = [read_metadata(snapshot) for snapshot in snapshots]
    assert [m["epochs"] for m in metadata] == [1, 2]
    seconds = [m["training_seconds"] for m in metadata]
    assert 0 < seconds[0] < seconds[1]
    assert [float(row["training_minutes"]) for row in rows] == [round(s / 60, 3) for s in seconds]
    # the accuracy is that of the predictions left beside the curve
    places = [line.split("\t")[1] for line in open(tiny_world["dev.tsv"], encoding="utf-8").read().splitlines()]
    for row in rows:
        predictions = open(out / f"finetune.epoch{row['epochs']}.predictions", encoding="utf-8").read().splitlines()
        assert int(row["answered"]) == sum(p == q for p, q in zip(predictions, places))
    assert not list(out.glob("finetune.*.params"))

    # scoring again reuses the pretraining
    capsys.readouterr()
    assert run_script("learning_curve", *argv) == 0
    assert "scoring its snapshots without pretraining again" in capsys.readouterr().err

    picture = tmp_path / "docs" / "curve.png"
    assert run_script("plot_curves", out / "curve.csv", "--out", picture, "--title", "tiny") == 0
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with_baseline = tmp_path / "docs" / "baseline.png"
    flags = ["--title", "tiny", "--baseline", "10", "--baseline_label", "most frequent place"]
    assert run_script("plot_curves", out / "curve.csv", "--out", with_baseline, *flags) == 0
    assert with_baseline.read_bytes() != picture.read_bytes()  # the reference line is drawn

    # the probes: each recalls what the curve's last row says, and the position probe moves the biography
    capsys.readouterr()
    common = ["vanilla", tiny_world["wiki.txt"], "--eval_corpus_path", tiny_world["dev.tsv"]]
    assert run_script("recall_probes", *common, "--reading_params_path", out / "pretrain.params", "--positions") == 0
    lines = capsys.readouterr().out.splitlines()
    last = rows[-1]
    assert lines[0].startswith(f"from the biography: recalls {last['recalled']} of 24 ")
    assert lines[1].startswith(f"from the name: recalls {last['name_recalled']} of 24 ")
    assert lines[2].startswith(f"from the question: recalls {last['question_recalled']} of 24 ")
    moved = ["the biography after ' '", f"the biography after {' ' * 10!r}", "the biography after 'Where was '"]
    assert [line.split(":")[0] for line in lines[3:]] == moved
    assert all(" of 24 " in line for line in lines)
    assert run_script("recall_probes", *common, "--reading_params_path", out / "pretrain.params", "--prefix", "") == 0
    empty_prefix = capsys.readouterr().out.splitlines()[3]
    assert lines[0].split(":")[1] == empty_prefix.split(":")[1]  # nothing before the biography: the same prompts
    assert run_script("recall_probes", *common, "--reading_params_path", out / "missing.params") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("recall_probes.py: error: ") and err.endswith("missing.params does not exist"), err


def test_learning_curve_scores_a_pretraining_with_mixed_pairs(tiny_world, tmp_path):
    """The mixed pairs are pretraining's: finetuning and the probes of its snapshots run without them."""
    out = tmp_path / "mixed"
    data = ["--finetune_corpus_path", tiny_world["train.tsv"], "--eval_corpus_path", tiny_world["dev.tsv"]]
    mixed = ["--mix_corpus_path", tiny_world["train.tsv"], "--pretrain_stages", "corpus+pairs pair_copies=2"]
    argv = ["pretrain", "vanilla", tiny_world["wiki.txt"], *data, *mixed, "--every", "1", "--out", str(out)]
    assert run_script("learning_curve", *argv, "--pretrain_epochs", "1", *SMALL) == 0
    with open(out / "curve.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(row["epochs"], row["questions"]) for row in rows] == [("1", "24")]


def test_demo_study_takes_recipe_flags_and_names_what_differs_from_the_demo(tmp_path, capsys):
    argv = ["--split", "tune", "--world", "--n_train 30 --n_dev 20 --bios_per_person 3", "--out", str(tmp_path)]
    flags = ["--pretrain_epochs", "2", "--n_layer", "2", "--n_embd", "32", "--finetune_lora_rank", "2"]
    flags += ["--pretrain_stages", "corpus+pairs pair_copies=2", "--finetune_epochs_from_pretrained", "2"]
    flags += ["--readout", "question"]  # the demo's frames are zero-shot: the question finetunes the pretrained params
    assert run_script("demo_study", *argv, *flags) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["recipe"] == {
        "n_layer": 2,
        "n_embd": 32,
        "pretrain_epochs": 2,
        "pretrain_stages": "corpus+pairs pair_copies=2",
        "finetune_epochs_from_pretrained": 2,
        "finetune_lora_rank": 2,
        "readout": "question",
    }
    assert row["scored"] == 6 and row["finetune_only"] is None  # the last fifth of 30 training people
    # the probes' counts of the scored people, counted here again from the pretrained params
    world = {"wiki.txt": tmp_path / "world" / "wiki.txt", "scored.tsv": tmp_path / "scored.tsv"}
    counted = recalls_of(tmp_path / "pretrain.params", world, DEMO_VARIANT, "scored.tsv")
    assert [int(row[probe].split("/")[0]) for probe in ("recalled", "name_recalled")] == [
        counted["recalled"],
        counted["name_recalled"],
    ]
    assert all(row[probe].endswith("/6") for probe in ("recalled", "name_recalled"))
    # pretrain+finetune's score is that of the answers its details file holds
    details = (tmp_path / "finetune.params.details").read_text(encoding="utf-8").splitlines()
    assert len(details) == 6 and row["pretrain_finetune"] == sum(json.loads(line)["correct"] for line in details)
