"""checkpoint.py: the run identity a checkpoint is resumed under, and the facts beside a params file."""

import dataclasses

import pytest
import torch

import checkpoint
from checkpoint import ParamsError, RunIdentity, read_facts, save_params_with_facts, write_facts

IDENTITY = RunIdentity(
    function="pretrain", variant="vanilla", n_layer=4, n_head=8, n_embd=256, bottleneck_dim=None, vocab_size=256,
    examples=2937, max_epochs=650, batch_size=128, learning_rate=6e-3, full_padding=False, seed=0, recipe="handout",
    dropout=0.1, decay_groups="course", lr_schedule="course", group_by_length=False, precision="fp32",
)  # fmt: skip


def test_the_identity_is_stored_as_checkpoints_have_always_stored_it():
    stored = IDENTITY.as_dict()
    assert "mix_corpus_path" not in stored  # only runs that mix pairs in have the key
    assert len(stored) == 19 and stored["bottleneck_dim"] is None and stored["learning_rate"] == 6e-3
    mixed = dataclasses.replace(IDENTITY, mix_corpus_path="train.tsv").as_dict()
    assert mixed == dict(stored, mix_corpus_path="train.tsv")


def test_facts_round_trip_and_a_broken_facts_file_is_one_line(tmp_path):
    params = str(tmp_path / "p.params")
    assert read_facts(params) is None  # params of the course's code have no facts
    write_facts(params, {"variant": "perceiver", "bottleneck_dim": 64, "vocabulary": "aé\t"})
    assert read_facts(params) == {"variant": "perceiver", "bottleneck_dim": 64, "vocabulary": "aé\t"}
    (tmp_path / "p.params.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ParamsError, match=r"p.params.json \(what .* is\) cannot be read: not a JSON object"):
        read_facts(params)


def test_params_never_keep_another_runs_facts(tmp_path, monkeypatch):
    """A crash while the params are written leaves params without facts, not with the earlier run's."""
    params = str(tmp_path / "p.params")
    model = torch.nn.Linear(2, 2)
    save_params_with_facts(model, params, {"variant": "vanilla", "run": 1})
    assert read_facts(params) == {"variant": "vanilla", "run": 1}

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save_params", crash)
    with pytest.raises(OSError):
        save_params_with_facts(model, params, {"variant": "vanilla", "run": 2})
    assert read_facts(params) is None
