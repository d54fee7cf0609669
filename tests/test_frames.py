"""The frames readout (frames.py): mining the training people's frames, reading places, scoring, evaluate."""

import math

import pytest
import torch

import frames
import pipeline
import readout
from config import RunConfig
from conftest import SMALL, TINY, evaluate_args, one_line_error
from conftest import run_main as main
from errors import RunError
from model import GPT, GPTConfig

BIOGRAPHIES = [
    "Ada Berg. Born in Oslo, Berg became a painter .",
    "Bruno Costa. Bruno Costa was born in Lima and moved to Paris .",
    "Clara Duval. Clara Duval (born 3 March 1901 in Kyoto) was a poet .",
    "Dmitri Egan. Dmitri Egan (born 12 May 1950 in Perth) was a singer .",
    "Elif Fischer. Elif Fischer was born in Lagos .",
    "Farid Garza. Garza was born in New York City, New York .",
    "Greta Abbott. Greta Abbott is a writer .",
]
PAIRS = [
    ("Where was Ada Berg born?", "Oslo"),
    ("Where was Bruno Costa born?", "Lima"),
    ("Where was Clara Duval born?", "Kyoto"),
    ("Where was Dmitri Egan born?", "Perth"),
    ("Where was Elif Fischer born?", "Lagos"),
    ("Where was Farid Garza born?", "New York City"),
    ("Where was Greta Abbott born?", "Paris"),  # her biography does not name it
]


def test_frames_are_the_words_before_the_place_or_its_date_with_the_name_as_name():
    assert frames.frames_before("Ada Berg", "Born in Oslo, Berg became a painter .", "Oslo") == (["NAME. Born in "], [])
    right_before, before_date = frames.frames_before(
        "Clara Duval", "Clara Duval (born 3 March 1901 in Kyoto) was a poet .", "Kyoto"
    )
    assert right_before == ["NAME. NAME in "]  # "1901 in" and "March 1901 in" hold a digit
    assert before_date == ["NAME. NAME (born "]  # "Duval (born" holds the surname
    # the surname is never part of a frame, and a biography that does not name the place has none
    assert frames.frames_before("Farid Garza", "Garza was born in New York City, New York .", "New York City") == (
        ["NAME. NAME in ", "NAME. NAME born in ", "NAME. NAME was born in "],
        [],
    )
    assert frames.frames_before("Greta Abbott", "Greta Abbott is a writer .", "Paris") == ([], [])


def test_mining_counts_people_and_keeps_the_shared_frames_and_date_words():
    mined = frames.mine(BIOGRAPHIES, PAIRS, min_people=2)
    shared = dict(mined.frames)
    assert shared == {
        "NAME. NAME in ": 5,
        "NAME. NAME born in ": 3,
        "NAME. NAME was born in ": 3,
        "NAME. NAME (born ": 2,
    }
    assert mined.scorers == ("NAME. NAME in ", "NAME. NAME born in ", "NAME. NAME was born in ")
    assert "in" in mined.skips and not {"March", "May"} & mined.skips  # each month is one person's
    assert frames.mine(BIOGRAPHIES, PAIRS, min_people=1).skips >= {"in", "March", "May"}
    assert frames.mine(BIOGRAPHIES, PAIRS, min_people=6).frames == []


def test_a_biography_is_found_by_the_whole_name_initials_and_all():
    documents = ["John F. Kennedy. Born in Brookline, Kennedy ...", "John Fisher. Born in Glasgow ."]
    found = frames.biographies(documents, ["John F. Kennedy", "John Fisher", "John Smith"])
    assert found == {"John F. Kennedy": "Born in Brookline, Kennedy ...", "John Fisher": "Born in Glasgow ."}


@pytest.mark.parametrize(
    "written, place",
    [
        ("Oslo, Norway, in 1900", "Oslo"),
        ("New York City, New York .", "New York City"),
        ("Kyoto) was a poet", "Kyoto"),
        ("3 March 1901 in Kyoto) was", "Kyoto"),
        ("12 May 1950, Perth .", "Perth"),
        ("a small village", ""),
        ("Lima and moved", "Lima"),
    ],
)
def test_the_place_is_the_capitalised_words_after_a_date(written, place):
    assert frames.place_in(written, skips=frozenset({"in", "March", "May"})) == place


def test_a_question_of_another_form_is_named_with_its_line():
    assert frames.names_of(["Where was Ada Berg born?", "Where was Håvard Rem born?"], "q.tsv") == [
        "Ada Berg",
        "Håvard Rem",
    ]
    with pytest.raises(RunError, match=r"^q.tsv, line 2: 'Who is Ada\?' is not of the form"):
        frames.names_of(["Where was Ada Berg born?", "Who is Ada?"], "q.tsv")


class Vocabulary:
    def __init__(self, text):
        chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.itos = dict(enumerate(chars))


def test_scores_in_padded_batches_equal_one_text_at_a_time():
    corpus = Vocabulary("".join(BIOGRAPHIES) + ",")
    torch.manual_seed(0)
    model = GPT(GPTConfig(len(corpus.stoi), 128, n_layer=2, n_head=2, n_embd=32)).eval()
    prompts = ["Ada Berg. Born in ", "Bruno Costa. Bruno Costa was born in ", "Elif Fischer. "]
    places = ["Oslo,", "New York City,", "Lagos,"]
    together = frames.text_logprobs(model, corpus, prompts, places, "cpu", batch_size=2)
    for prompt, place, score in zip(prompts, places, together):
        ids = torch.tensor([[corpus.stoi[c] for c in prompt + place]])
        logprobs = model(ids[:, :-1])[0].log_softmax(-1)[0, len(prompt) - 1 :]
        alone = sum(logprobs[i, ids[0, len(prompt) + i]].item() for i in range(len(place)))
        assert score == pytest.approx(alone, abs=1e-4)
    too_long = frames.text_logprobs(model, corpus, ["Ada Berg. " * 13], ["Oslo,"], "cpu")
    assert too_long == [-math.inf]  # a text beyond the block is not scored


def test_branching_where_the_place_starts_keeps_each_greedy_place_first():
    """experiments/readout.py --first_chars: K=1 is the greedy candidates; K=3 adds two branches after each."""
    corpus = Vocabulary("".join(BIOGRAPHIES) + ",")
    torch.manual_seed(0)
    model = GPT(GPTConfig(len(corpus.stoi), 128, n_layer=2, n_head=2, n_embd=32)).eval()
    ensemble = frames.Ensemble(("NAME. Born in ", "NAME. NAME was born in "), ("NAME. Born in ",))
    names = ["Ada Berg", "Bruno Costa", "Elif Fischer"]
    greedy = frames.candidates(model, corpus, names, ensemble.writers, ensemble.skips, "cpu")
    assert readout.branched_places(model, corpus, ensemble, names, 1, "cpu") == greedy
    branched = readout.branched_places(model, corpus, ensemble, names, 3, "cpu")
    assert [len(row) for row in branched] == [6] * 3 and [row[::3] for row in branched] == greedy


def test_evaluate_asks_in_the_frames_and_answers_each_name_as_if_asked_alone(tiny_world, tmp_path, capsys):
    """
    Pretrained on the biographies alone, never on a question: `evaluate --readout frames`
    writes a place per question and the course's score line; each answer is the one that
    name gets asked alone (the batches of prompts and of padded scores change nothing).
    """
    wiki, params = tiny_world["wiki.txt"], tmp_path / "pre.params"
    pretrain = ["pretrain", "vanilla", wiki, "--writing_params_path", params, "--pretrain_epochs", 60]
    assert main(*pretrain, "--pretrain_lr", 3e-3, "--dropout", 0, *SMALL) == 0
    dev = [line.split("\t") for line in open(tiny_world["dev.tsv"], encoding="utf-8").read().splitlines()]
    outputs = tmp_path / "dev.predictions"
    readout = ["--readout", "frames", "--finetune_corpus_path", tiny_world["train.tsv"], *SMALL]
    capsys.readouterr()
    assert main(*evaluate_args("vanilla", wiki, params, tiny_world["dev.tsv"], outputs), *readout) == 0
    predictions = outputs.read_text(encoding="utf-8").splitlines()
    correct = sum(answer == place for answer, (_, place) in zip(predictions, dev))
    assert capsys.readouterr().out.strip() == f"Correct: {correct} out of 24: {round(correct / 24 * 100, 2)}%"
    assert len(predictions) == 24 and all(answer and frames.place_in(answer) == answer for answer in predictions)

    cfg = RunConfig("evaluate", "vanilla", wiki, reading_params_path=str(params), device="cpu")
    setup, _ = pipeline.load(cfg)
    training = [tuple(line.split("\t")) for line in open(tiny_world["train.tsv"], encoding="utf-8").read().splitlines()]
    names = [frames.name_of(question) for question, _ in dev[:6]]
    together = frames.answers(setup.model, setup.corpus, names, training, 3, "cpu")
    assert [answer.text for answer in together] == predictions[:6]
    for name, answer in zip(names, together):
        [alone] = frames.answers(setup.model, setup.corpus, [name], training, 3, "cpu")
        assert (alone.text, alone.logprob) == pytest.approx((answer.text, answer.logprob), abs=1e-4)


def test_the_frames_readout_needs_the_training_pairs_and_its_questions(tiny_world, tmp_path, capsys):
    wiki, params = tiny_world["wiki.txt"], tmp_path / "p.params"
    assert main("pretrain", "vanilla", wiki, "--writing_params_path", params, "--pretrain_epochs", 1, *TINY) == 0
    evaluate = evaluate_args("vanilla", wiki, params, tiny_world["dev.tsv"], tmp_path / "out")
    said = one_line_error(capsys, *evaluate, "--readout", "frames", *TINY)
    assert "the frames readout mines its frames from the training people: give --finetune_corpus_path" in said
    odd = tmp_path / "odd.tsv"
    odd.write_text("Where was Ada Berg born?\tOslo\nWho painted it?\tAda\n", encoding="utf-8")
    training = ["--readout", "frames", "--finetune_corpus_path", tiny_world["train.tsv"], *TINY]
    said = one_line_error(capsys, *evaluate_args("vanilla", wiki, params, odd, tmp_path / "out"), *training)
    assert f"{odd}, line 2: 'Who painted it?' is not of the form 'Where was NAME born?'" in said
    assert not (tmp_path / "out").exists()


def test_the_frames_readout_of_finetuned_params_says_what_finetuning_unlearned(tiny_world, tmp_path, capsys):
    """Finetuned params read out in frames answer almost nothing (docs/readout.md): evaluate says why, and answers."""
    wiki, pretrained, finetuned = tiny_world["wiki.txt"], tmp_path / "p.params", tmp_path / "f.params"
    assert main("pretrain", "vanilla", wiki, "--writing_params_path", pretrained, "--pretrain_epochs", 1, *TINY) == 0
    finetune = ["finetune", "vanilla", wiki, "--reading_params_path", pretrained, "--writing_params_path", finetuned]
    pairs = ["--finetune_corpus_path", tiny_world["train.tsv"], "--finetune_epochs_from_pretrained", 1, *TINY]
    assert main(*finetune, *pairs) == 0
    readout = ["--readout", "frames", "--finetune_corpus_path", tiny_world["train.tsv"], *TINY]
    for params, warned in [(pretrained, False), (finetuned, True)]:
        capsys.readouterr()
        assert main(*evaluate_args("vanilla", wiki, params, tiny_world["dev.tsv"], tmp_path / "out"), *readout) == 0
        said = capsys.readouterr()
        assert said.out.startswith("Correct: ") and (f"{finetuned} are finetuned params: " in said.err) == warned
        assert ("which finetuning on the question unlearns" in said.err) == warned
