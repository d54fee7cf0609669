"""sample, evaluate_places, the recall probe, set_seed and the file helpers."""

import os
import random
import stat

import pytest
import torch

from conftest import small_gpt
from dataset import MASK_CHAR, CharCorruptionDataset
from factgpt.common import files
from factgpt.common.questions import score_line
from factgpt.readout import decoding
from factgpt.readout.decoding import recalled_places
from factgpt.readout.recall import PROBES, probed_recall, recalled_pairs
from trainer import Trainer, TrainerConfig
from utils import evaluate_places, sample, set_seed


def tiny_model(variant="vanilla"):
    return small_gpt(30, 16, variant, seed=0)


def test_greedy_sampling_feeds_back_the_argmax():
    model = tiny_model()
    x = torch.randint(0, 30, (2, 5))
    out = sample(model, x, 6)
    assert out.shape == (2, 11) and torch.equal(out[:, :5], x)
    model.eval()
    manual = x
    for _ in range(6):
        manual = torch.cat([manual, model(manual)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, manual)
    assert torch.equal(sample(model, x, 6, sample=True, top_k=1), out), "top-1 sampling is greedy"


def test_sampling_restores_the_training_mode_and_draws_from_top_k():
    model = tiny_model().train()
    torch.manual_seed(1)
    out = sample(model, torch.zeros(4, 3, dtype=torch.long), 12, sample=True, top_k=3, temperature=2.0)
    assert model.training and out.shape == (4, 15)
    model.eval()
    logits, _ = model(out[:, :-1])
    top3 = logits[:, 2:].topk(3, dim=-1).indices  # the model's top 3 before every sampled token
    assert (top3 == out[:, 3:, None]).any(dim=-1).all()
    assert len(set(out[:, 3:].flatten().tolist())) > 3, "draws, not always the argmax"


@pytest.mark.parametrize("variant", ["vanilla", "synthesizer"])
def test_sampling_past_the_block_size_never_crashes(variant):
    model = tiny_model(variant)
    out = sample(model, torch.randint(0, 30, (2, 14)), 10)
    assert out.shape == (2, 24)


def test_evaluate_places(tmp_path):
    gold = tmp_path / "gold.tsv"
    gold.write_text("Where was A born?\tParis\n\nWhere was B born?\tLima\r\nWhere was C born?\tOslo", encoding="utf-8")
    assert evaluate_places(gold, ["Paris", "Lima", "Rome"]) == (3, 2)
    with pytest.raises(ValueError, match="3 questions but 2 predictions"):
        evaluate_places(gold, ["Paris", "Lima"])
    questions = tmp_path / "questions.tsv"
    questions.write_text("Where was A born?\nWhere was B born?\n", encoding="utf-8")
    assert evaluate_places(questions, ["x", "y"]) == (0, 0)


def test_set_seed_makes_runs_repeatable():
    set_seed(7)
    first = (random.random(), torch.rand(3))
    set_seed(7)
    second = (random.random(), torch.rand(3))
    assert first[0] == second[0] and torch.equal(first[1], second[1])


def test_bare_data_names_resolve_to_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "DATA_DIR", tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert files.resolve_data_path("wiki.txt") == "wiki.txt", "nothing to resolve to"
    (tmp_path / "data" / "wiki.txt").write_text("x")
    assert files.resolve_data_path("wiki.txt") == str(tmp_path / "data" / "wiki.txt")
    assert files.resolve_data_path("sub/wiki.txt") == "sub/wiki.txt", "only bare names resolve"
    (tmp_path / "wiki.txt").write_text("here")
    assert files.resolve_data_path("wiki.txt") == "wiki.txt", "the current directory wins"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_write_gives_the_mode_of_a_new_file(tmp_path, umask):
    old = os.umask(umask)
    try:
        files.atomic_write(tmp_path / "written", lambda f: f.write(b"x"))
        (tmp_path / "opened").write_bytes(b"x")
    finally:
        os.umask(old)
    modes = [stat.S_IMODE((tmp_path / name).stat().st_mode) for name in ["written", "opened"]]
    assert modes == [0o666 & ~umask] * 2


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "out" / "file.txt"
    files.atomic_write(target, lambda f: f.write(b"old"))

    def fail(f):
        f.write(b"half")
        raise RuntimeError("crash")

    with pytest.raises(RuntimeError):
        files.atomic_write(target, fail)
    assert target.read_bytes() == b"old"
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]


def test_birthplace_recall_counts_the_places_a_model_has_memorised():
    people = [
        ("Ada Berg", "Paris"),
        ("Bruno Costa", "Lagos"),
        ("Clara Duval", "Oslo"),
        ("Dmitri Egan", "Lima"),
        ("Elif Garza", "Kyoto"),
        ("Farid Abbott", "Perth"),
    ]
    documents = [f"{name}. {name} was born in {place} and worked as a painter." for name, place in people]
    documents.append("Greta Fischer. Greta Fischer was a painter.")  # her place is not in her document
    pairs = [(f"Where was {name} born?", place) for name, place in people]
    pairs += [("Where was Greta Fischer born?", "Rome"), ("Where was Hugo Nobody born?", "Oslo")]  # no document
    set_seed(0)
    corpus = CharCorruptionDataset("\n".join(documents), 128)
    model = small_gpt(corpus.vocab_size, 128, n_embd=64, dropout=0.0)
    before = probed_recall(model, corpus, pairs, "cpu")
    Trainer(model, corpus, None, TrainerConfig(max_epochs=300, batch_size=8, learning_rate=3e-3, device="cpu")).train()
    after = probed_recall(model, corpus, pairs, "cpu")
    assert before == (0, 6) and after == (6, 6)
    per_pair = recalled_places(model, corpus, pairs, "cpu")
    assert per_pair == [True] * 6 + [None, None]  # Greta's place is not in her document; Hugo has none
    for prompt in (PROBES["biography"], lambda name, _: f"{name}. {name} was born in "):
        assert probed_recall(model, corpus, pairs, "cpu", prompt) == (6, 6)
    assert recalled_pairs(model, corpus, pairs, "cpu", PROBES["biography"]) == pairs[:6]  # finetune_people's choice
    names = [name for name, _ in people]
    neighbour = dict(zip(names, names[1:] + names[:1]))  # every prompt names another person, born elsewhere
    swapped = probed_recall(
        model,
        corpus,
        pairs,
        "cpu",
        prompt=lambda name, _: f"{neighbour[name]}. {neighbour[name]} was born in ",
    )
    assert swapped == (0, 6)


def test_the_name_probe_keeps_the_name_and_the_words_before_the_place_alone():
    before = "Khatchig Mouradian. Khatchig Mouradian is a Lebanese-born journalist born in "
    assert PROBES["name"]("Khatchig Mouradian", before) == "Khatchig Mouradian. Khatchig Mouradian born in "
    assert PROBES["name"]("John Stephen", "John Stephen. Born in ") == "John Stephen. Born in "
    assert PROBES["name"]("Iago Deka", "Iago Deka. Iago Deka (born in 1951 in ") == "Iago Deka. Iago Deka 1951 in "
    assert PROBES["biography"]("Ada Berg", "Ada Berg. Ada Berg was born in ") == "Ada Berg. Ada Berg was born in "


def test_the_question_probe_asks_the_question_with_its_mask(monkeypatch):
    corpus = CharCorruptionDataset("Ada Berg. Ada Berg was born in Oslo .\nWhere? Here.\n", 128)
    asked = []

    def completions(model, prompts, *args, **kwargs):
        asked.extend(prompts)
        return ["Oslo" for _ in prompts]

    monkeypatch.setattr(decoding, "greedy_completions", completions)
    pairs = [("Where was Ada Berg born?", "Oslo")]
    model = small_gpt(corpus.vocab_size, 128, n_layer=1, n_head=1, n_embd=8)
    assert probed_recall(model, corpus, pairs, "cpu", PROBES["question"]) == (1, 1)
    assert asked == [f"Where was Ada Berg born?{MASK_CHAR}"]


def test_score_line_keeps_the_course_format_with_a_readable_percentage():
    assert score_line(500, 18) == "Correct: 18 out of 500: 3.6%"  # 18 / 500 * 100 is 3.5999999999999996
    assert score_line(500, 25) == "Correct: 25 out of 500: 5.0%"
    assert score_line(3, 1) == "Correct: 1 out of 3: 33.33%"
