"""
The instruments on small trained models: confidence per answer (the details file), the
next-character view, held-out perplexity, and GPT-1's auxiliary language-model loss.
"""

import ast
import dataclasses
import json
import math
import random
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import run_script
from dataset import MASK_CHAR, NameDataset
from factgpt import pipeline
from factgpt.common.errors import RunError
from factgpt.corpus.reading import held_out_split, load_corpus
from factgpt.readout.decoding import greedy_completions
from factgpt.settings.recipe import Recipe
from factgpt.settings.run_config import RunConfig
from factgpt.table.world import build_world
from factgpt.training.step import Objective, forward_passes, question_lm_targets, rank_rows
from model import GPT, variant_config
from trainer import Trainer, TrainerConfig

SIZES = dict(n_layer=2, n_head=2, n_embd=32)
RECIPE = Recipe(dropout=0.0, pretrain_lr=3e-3, pretrain_batch_size=16, finetune_batch_size=16, **SIZES)


def cfg(function, folder, recipe=RECIPE, **more):
    return RunConfig(
        function,
        "vanilla",
        str(folder / "wiki.txt"),
        recipe=recipe,
        device="cpu",
        num_workers=0,
        tensorboard_root=str(folder / "expt"),
        **more,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small world, a model pretrained on its biographies, and a copy finetuned on its training questions."""
    folder = tmp_path_factory.mktemp("instruments")
    for name, text in build_world(n_train=60, n_dev=30, n_test=5, n_places=8, seed=5).items():
        (folder / name).write_text(text, encoding="utf-8")
    pretraining = dataclasses.replace(RECIPE, pretrain_epochs=30)
    pipeline.pretrain(cfg("pretrain", folder, pretraining, writing_params_path=str(folder / "pre.params")))
    pipeline.finetune(
        cfg(
            "finetune",
            folder,
            dataclasses.replace(RECIPE, finetune_epochs_from_pretrained=20),
            reading_params_path=str(folder / "pre.params"),
            writing_params_path=str(folder / "ft.params"),
            finetune_corpus_path=str(folder / "birth_places_train.tsv"),
        )
    )
    return folder


def load(folder, params):
    setup, _ = pipeline.load(cfg("evaluate", folder, reading_params_path=str(folder / params)))
    return setup.model.eval(), setup.corpus


# ---------------------------------------------------------------------------- confidence


def direct_logprob(model, corpus, prompt, written):
    """Σ log p(written[i] | prompt + written[:i]) from one forward pass of the whole text."""
    ids = torch.tensor([[corpus.stoi[c] for c in prompt + written]])
    with torch.no_grad():
        logits, _ = model(ids[:, :-1])
    logprobs = logits[0, len(prompt) - 1 :].log_softmax(-1)
    return [float(logprobs[i, ids[0, len(prompt) + i]]) for i in range(len(written))]


@pytest.mark.parametrize("sequential", [False, True])
def test_the_details_file_agrees_with_the_predictions_and_a_direct_forward(trained, sequential):
    details, outputs = trained / f"dev{sequential}.details", trained / f"dev{sequential}.predictions"
    result = pipeline.evaluate(
        cfg(
            "evaluate",
            trained,
            dataclasses.replace(RECIPE, sequential_decoding=sequential),
            reading_params_path=str(trained / "ft.params"),
            eval_corpus_path=str(trained / "birth_dev.tsv"),
            outputs_path=str(outputs),
            details_path=str(details),
        )
    )
    rows = [json.loads(line) for line in details.read_text(encoding="utf-8").splitlines()]
    predictions = outputs.read_text(encoding="utf-8").splitlines()
    places = [line.split("\t")[1] for line in (trained / "birth_dev.tsv").read_text(encoding="utf-8").splitlines()]
    assert [row["answer"] for row in rows] == predictions == result.predictions
    assert [row["correct"] for row in rows] == [p == a for p, a in zip(places, predictions)]
    assert sum(row["correct"] for row in rows) == result.correct
    model, corpus = load(trained, "ft.params")
    closed = [row for row in rows if row["closed"]]
    assert len(closed) >= len(rows) // 2  # the finetuned model closes its answers: the test reads the closing mask
    for row in rows:
        written = row["answer"] + MASK_CHAR if row["closed"] else row["answer"]
        if not row["closed"] and len(row["answer"]) < 32:
            continue  # cut at a line break: which one is not in the file
        direct = direct_logprob(model, corpus, row["question"] + MASK_CHAR, written)
        assert row["logprob"] == pytest.approx(sum(direct), abs=1e-3)
        assert row["min_prob"] == pytest.approx(math.exp(min(direct)), rel=1e-3)


def confidence_summary(capsys, path, rows):
    """What `confidence.py --summarise` prints for a details file of these (log-probability, right) rows."""
    path.write_text("".join(json.dumps(dict(logprob=p, correct=c)) + "\n" for p, c in rows), encoding="utf-8")
    capsys.readouterr()
    assert run_script("confidence", "--summarise", path) == 0
    return capsys.readouterr().out.splitlines()


def test_the_confidence_summary_ranks_answers_by_log_probability(tmp_path, capsys):
    """confidence.py --summarise on a details file: the answers ranked by log-probability, not by the file's order."""
    rows = [(-0.1, True), (-0.2, True), (-0.5, False), (-1.0, True), (-2.0, False), (-3.0, False)]
    shuffled = [rows[i] for i in (4, 1, 5, 3, 0, 2)]
    said = confidence_summary(capsys, tmp_path / "six.details", shuffled)
    assert said[0] == "6 answers, 3 right (50.0%)"
    # the accuracy of the k most confident, k = 1..6: 1, 1, 2/3, 3/4, 3/5, 3/6, averaged
    area = (1 + 1 + 2 / 3 + 3 / 4 + 3 / 5 + 3 / 6) / 6
    assert f"area under the accuracy-coverage curve: {area:.3f}" in said
    assert f"AUROC (right vs wrong by log-probability): {8 / 9:.3f}" in said  # right beat 3, 3 and 2 of 3 wrong
    tie = confidence_summary(capsys, tmp_path / "tie.details", [(-1.0, True), (-1.0, False)])
    assert "AUROC (right vs wrong by log-probability): 0.500" in tie
    groups = confidence_summary(capsys, tmp_path / "thirty.details", shuffled * 5)
    assert groups[1] == "confidence quintile | log-probability | right"
    quintiles = [re.fullmatch(r"\d \| (\S+) to (\S+) \| (\d+) of (\d+) \(.*\)", line) for line in groups[2:7]]
    assert sum(int(q.group(4)) for q in quintiles) == 30 and float(quintiles[0].group(2)) == -0.1
    assert [q.group(3) for q in quintiles] == ["6", "4", "3", "2", "0"]  # most confident first


def test_confidence_py_writes_details_and_prints_the_summary(trained, tmp_path, capsys):
    details = tmp_path / "dev.details.jsonl"
    answering = ["vanilla", trained / "wiki.txt", "--reading_params_path", trained / "ft.params", "--eval_corpus_path",
                 trained / "birth_dev.tsv", "--details_path", details, "--device", "cpu"]  # fmt: skip
    capsys.readouterr()
    code = run_script("confidence", *answering)
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("Correct: ") and "AUROC" in out
    assert len(details.read_text(encoding="utf-8").splitlines()) == 30
    assert run_script("confidence", "--summarise", details) == 0
    assert capsys.readouterr().out == out.split("\n", 1)[1]
    assert run_script("confidence", *answering, "--pretrained_params", trained / "pre.params") == 0
    table = capsys.readouterr().out.split("the pretrained model, continuing the biography")[1].splitlines()[1:]
    assert table and sum(int(line.split(" | ")[1]) for line in table) == 30  # every dev person in one row
    right = sum(int(line.split(" | ")[2].split()[0]) for line in table)
    assert f", {right} right" in out


# ---------------------------------------------------------------------------- the next characters


def printed_choices(line):
    """A line of next_chars.py's view: [(character, probability)], the written character first, then the others."""
    written, probability, others = line.split(" | ", 2)  # a character's repr holds no " | "
    shown = re.findall(r"""('(?:\\.|[^'\\])+'|"[^"]+") (\d\.\d+)""", others)
    return [(ast.literal_eval(written), float(probability))] + [(ast.literal_eval(c), float(p)) for c, p in shown]


def test_the_next_character_view_follows_the_greedy_answer(trained, capsys):
    """
    next_chars.py --question: the greedy answer, and for each character it writes the 5 likeliest
    (the written one first), with the probabilities a forward pass of the text so far gives.
    """
    model, corpus = load(trained, "ft.params")
    question = (trained / "birth_dev.tsv").read_text(encoding="utf-8").split("\t")[0]
    capsys.readouterr()
    assert run_script("next_chars", "vanilla", trained / "wiki.txt", "--reading_params_path", trained / "ft.params",
                      "--question", question, "--device", "cpu", "--decimals", 7) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    prompt = question + MASK_CHAR
    assert lines[0].startswith(prompt) and lines[1] == "character | probability | alternatives"
    written = lines[0][len(prompt) :]
    greedy = greedy_completions(model, [prompt], corpus, "cpu", 32, MASK_CHAR)[0]
    assert greedy.startswith(written) and written.endswith(MASK_CHAR) and len(lines) == 2 + len(written)
    for i, line in enumerate(lines[2:]):
        alternatives = printed_choices(line)
        probabilities = [p for _, p in alternatives]
        assert alternatives[0][0] == written[i] and len(alternatives) == 5
        assert sum(probabilities) <= 1 + 1e-6 and probabilities[0] >= max(probabilities[1:])
        assert probabilities[1:] == sorted(probabilities[1:], reverse=True)
        direct = direct_softmax(model, corpus, prompt + written[:i])
        for alternative, p in alternatives:
            assert p == pytest.approx(float(direct[corpus.stoi[alternative]]), abs=1e-5)
        shown = {corpus.stoi[alternative] for alternative, _ in alternatives}
        left_out = [float(q) for j, q in enumerate(direct) if j not in shown]
        assert max(left_out) <= min(probabilities) + 1e-5  # the likeliest five are the ones shown


def direct_softmax(model, corpus, prompt):
    with torch.no_grad():
        logits, _ = model(torch.tensor([[corpus.stoi[c] for c in prompt]]))
    return logits[0, -1].softmax(-1)


# ---------------------------------------------------------------------------- perplexity


def shuffled_lines(text, seed=0):
    rng = random.Random(seed)
    return "\n".join("".join(rng.sample(line, len(line))) for line in text.splitlines()) + "\n"


def test_a_model_predicts_its_own_text_better_than_the_same_characters_shuffled(trained, tmp_path, capsys):
    """text_loss.py: the loss a target character of the pretraining text, against its lines' characters shuffled."""
    shuffled = tmp_path / "shuffled.txt"
    shuffled.write_text(shuffled_lines((trained / "wiki.txt").read_text(encoding="utf-8")), encoding="utf-8")

    def scored(text_path):
        """(nats a target character, target characters, documents) that text_loss.py prints for the text."""
        capsys.readouterr()
        assert run_script("text_loss", "vanilla", trained / "wiki.txt", "--reading_params_path",
                          trained / "pre.params", "--text_path", text_path, "--device", "cpu") == 0  # fmt: skip
        said = capsys.readouterr().out.strip()
        found = re.fullmatch(r".*: loss (\S+) nats, \S+ bits per character \((\d+) target characters of (\d+) "
                             r"documents, seed 0\)", said)  # fmt: skip
        assert found, said
        return float(found.group(1)), int(found.group(2)), int(found.group(3))

    own, own_targets, documents = scored(trained / "wiki.txt")
    other, _, _ = scored(shuffled)
    assert own < other - 0.5
    assert documents == len((trained / "wiki.txt").read_text(encoding="utf-8").splitlines())
    assert scored(trained / "wiki.txt") == (own, own_targets, documents)  # the seed fixes the span corruptions


def test_held_out_documents_are_left_out_of_pretraining_and_scored_every_epoch(trained, tmp_path, caplog):
    corpus = load_corpus(str(trained / "wiki.txt"))
    kept, held_out = held_out_split(corpus, 0.2, "wiki.txt")
    assert len(held_out) == round(0.2 * len(corpus)) and len(kept) + len(held_out) == len(corpus)
    assert sorted(kept.data + held_out.data) == sorted(corpus.data)
    assert held_out_split(corpus, 0.2, "wiki.txt")[1].data == held_out.data  # the same every run
    assert held_out.stoi == corpus.stoi
    recipe = dataclasses.replace(RECIPE, held_out_fraction=0.2, pretrain_epochs=2)
    caplog.set_level("INFO", logger="factgpt.training.logs")
    pipeline.pretrain(cfg("pretrain", trained, recipe, writing_params_path=str(tmp_path / "p.params")))
    lines = [r.getMessage() for r in caplog.records if "held-out loss" in r.getMessage()]
    assert [line.split(":")[0] for line in lines] == ["epoch 1", "epoch 2"]


# ---------------------------------------------------------------------------- GPT-1's auxiliary loss


def finetuning_batch(trained, rows=12):
    corpus = load_corpus(str(trained / "wiki.txt"))
    names = NameDataset(corpus, (trained / "birth_places_train.tsv").read_text(encoding="utf-8"))
    x, y = map(torch.stack, zip(*[names[i] for i in range(rows)]))
    return corpus, names, x, y


def test_the_auxiliary_targets_are_the_question_after_its_first_character(trained):
    corpus, names, x, y = finetuning_batch(trained)
    targets = question_lm_targets(x, y)
    for row, (question, _) in enumerate(names.data[: len(x)]):
        expected = [corpus.stoi[c] for c in question[1:]]
        assert targets[row, : len(question) - 1].tolist() == expected
        assert not targets[row, len(question) - 1 :].any()


def test_the_auxiliary_objective_is_the_task_loss_plus_lambda_times_the_question_loss(trained):
    corpus, _, x, y = finetuning_batch(trained)
    torch.manual_seed(0)
    model = GPT(variant_config("vanilla", corpus.vocab_size, 128, **SIZES, dropout=0.0))
    with torch.no_grad():
        logits, task_loss = model(x, y)
    lm_loss = F.cross_entropy(logits.flatten(0, 1), question_lm_targets(x, y).flatten(), ignore_index=0)
    course = Objective(0.0)
    assert course.targets(x, y) == [y]
    one = torch.ones((), dtype=torch.float64)
    assert float(course.loss(logits, [y], [one])) == pytest.approx(float(task_loss), abs=1e-6)
    objective = Objective(0.5)
    targets = objective.targets(x, y)
    assert len(targets) == 2 and targets[0] is y and torch.equal(targets[1], question_lm_targets(x, y))
    whole = float(objective.loss(logits, targets, [one, one]))  # one pass of the whole batch
    assert whole == pytest.approx(float(task_loss + 0.5 * lm_loss), abs=1e-6)

    # passes and ranks add up: every pass's loss times its shares (its targets of each kind / the global
    # batch's, times the ranks), the ranks averaged as DistributedDataParallel does
    totals = objective.counts(x, y)
    for world_size, size in [(1, 5), (2, None), (2, 4), (3, 2), (5, None)]:
        rank_sums = []
        for rank in range(world_size):
            xr, yr, counted = rank_rows(x, y, rank, world_size)
            rank_sum = 0.0
            for xp, yp in forward_passes(xr, yr, size):
                pass_targets = objective.targets(xp, yp)
                shares = objective.shares(pass_targets, totals, counted * world_size)
                with torch.no_grad():
                    rank_sum += float(objective.loss(model(xp)[0], pass_targets, shares))
            rank_sums.append(rank_sum)
        assert sum(rank_sums) / world_size == pytest.approx(whole, abs=1e-5), (world_size, size)


def test_a_zero_weight_takes_the_course_step_and_a_positive_one_another(trained):
    corpus, names, _, _ = finetuning_batch(trained)
    params = {}
    for weight in (0.0, 0.5):
        torch.manual_seed(0)
        model = GPT(variant_config("vanilla", corpus.vocab_size, 128, **SIZES, dropout=0.0))
        config = TrainerConfig(max_epochs=1, batch_size=16, learning_rate=1e-3, device="cpu", data_seed=0,
                               finetune_lm_weight=weight)  # fmt: skip
        Trainer(model, names, None, config).train()
        params[weight] = model.state_dict()
    torch.manual_seed(0)
    model = GPT(variant_config("vanilla", corpus.vocab_size, 128, **SIZES, dropout=0.0))
    Trainer(model, names, None, TrainerConfig(max_epochs=1, batch_size=16, learning_rate=1e-3, device="cpu",
                                              data_seed=0)).train()  # fmt: skip
    assert all(torch.equal(model.state_dict()[k], params[0.0][k]) for k in params[0.0])
    assert not all(torch.equal(params[0.5][k], params[0.0][k]) for k in params[0.0])


def test_the_instruments_refuse_bad_input_in_one_line(trained, tmp_path, capsys):
    same = str(tmp_path / "dev.out")
    with pytest.raises(RunError, match="two outputs are one file"):
        pipeline.evaluate(
            cfg("evaluate", trained, reading_params_path=str(trained / "ft.params"),
                eval_corpus_path=str(trained / "birth_dev.tsv"), outputs_path=same, details_path=same)
        )  # fmt: skip
    unanswered = tmp_path / "test.details"
    unanswered.write_text(json.dumps(dict(question="Where was A born?", answer="B", logprob=-1.0)) + "\n")
    for script, args in [
        ("confidence", ["--summarise", unanswered]),
        ("confidence", ["--summarise", tmp_path / "missing.details"]),
        ("next_chars", ["vanilla", trained / "wiki.txt", "--reading_params_path", trained / "pre.params",
                        "--prompt", "a" * 200]),
        ("text_loss", ["vanilla", trained / "wiki.txt", "--reading_params_path", tmp_path / "none.params",
                       "--text_path", trained / "wiki.txt"]),
    ]:  # fmt: skip
        capsys.readouterr()
        assert run_script(script, *args) == 2, args
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err


# ---------------------------------------------------------------------------- lighter finetuning


def test_frozen_parts_leave_finetuning_as_they_were_pretrained(trained, tmp_path, capsys):
    frozen = dataclasses.replace(RECIPE, finetune_frozen="mlp,tok_emb", finetune_epochs_from_pretrained=2)
    params = tmp_path / "frozen.params"
    pipeline.finetune(
        cfg("finetune", trained, frozen, reading_params_path=str(trained / "pre.params"),
            writing_params_path=str(params), finetune_corpus_path=str(trained / "birth_places_train.tsv"))
    )  # fmt: skip
    before, after = torch.load(trained / "pre.params"), torch.load(params)
    moved = {name for name in before if not torch.equal(before[name], after[name])}
    assert moved and not any(".mlp." in name or name.startswith("tok_emb") for name in moved)
    assert any(".attn." in name for name in moved) and any(".ln1." in name for name in moved)
    with pytest.raises(RunError, match="finetune_frozen: mpl is not one of"):
        dataclasses.replace(RECIPE, finetune_frozen="mpl")
