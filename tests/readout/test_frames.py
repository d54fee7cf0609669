"""The frames readout (frames.py, ensemble.py, fitting.py): mining, reading places, scoring, fitting, evaluate."""

import collections
import contextlib
import dataclasses
import fcntl
import io
import json
import math
import os
import random
import shutil

import pytest
import torch

from conftest import (
    CPU_FLAGS,
    FIRST,
    LAST,
    PLACES,
    TINY,
    another_value,
    copy_params,
    evaluate_args,
    finetune_args,
    one_line_error,
    run_script,
    small_gpt,
)
from conftest import run_main as main
from dataset import MASK_CHAR, PAD_CHAR, known_characters
from factgpt import pipeline
from factgpt.common.errors import RunError
from factgpt.common.questions import biographies, name_of
from factgpt.corpus.reading import load_corpus
from factgpt.readout import choice, decoding, ensemble, fitting, frames
from factgpt.readout.decoding import Answer
from factgpt.readout.scores import details_lines
from factgpt.settings.recipes import HANDOUT
from factgpt.settings.run_config import RunConfig

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
    found = biographies(documents, ["John F. Kennedy", "John Fisher", "John Smith"])
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


def test_a_written_biography_names_its_places_after_born_a_bracket_or_in():
    """places_named: the first distinct places after the cues, dates skipped, nothing after the first mask."""
    skips = frozenset({"born", "in", "December"})
    text = f"Ada Lovelace (born 10 December 1815 in London, England) wrote in Paris{MASK_CHAR} in Rome"
    assert frames.places_named(text, skips) == ["London", "Paris"]
    assert frames.places_named(text, skips, most=1) == ["London"]
    assert frames.places_named("was a mathematician and a writer.", skips) == []


def test_a_question_of_another_form_is_named_with_its_line():
    assert frames.names_of([(1, "Where was Ada Berg born?"), (3, "Where was Håvard Rem born?")], "q.tsv") == [
        "Ada Berg",
        "Håvard Rem",
    ]
    with pytest.raises(RunError, match=r"^q.tsv, line 3: 'Who is Ada\?' is not of the form"):
        frames.names_of([(1, "Where was Ada Berg born?"), (3, "Who is Ada?", "Oslo")], "q.tsv")
    with pytest.raises(
        RunError, match=r"^q.tsv, line 3: the name 'Håvard Rem' has characters the corpus lacks: \['å'\]"
    ):
        frames.names_of([(1, "Where was Ada Berg born?"), (3, "Where was Håvard Rem born?")], "q.tsv", "AdaBergHvRm ")


class Vocabulary:
    def __init__(self, text):
        chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.itos = dict(enumerate(chars))


def test_scores_in_padded_batches_equal_one_text_at_a_time():
    corpus = Vocabulary("".join(BIOGRAPHIES) + ",")
    model = small_gpt(len(corpus.stoi), 128, seed=0, n_embd=32).eval()
    prompts = ["Ada Berg. Born in ", "Bruno Costa. Bruno Costa was born in ", "Elif Fischer. "]
    places = ["Oslo,", "New York City,", "Lagos,"]
    together = ensemble.text_logprobs(model, corpus, prompts, places, "cpu", batch_size=2)
    for prompt, place, score in zip(prompts, places, together):
        ids = torch.tensor([[corpus.stoi[c] for c in prompt + place]])
        logprobs = model(ids[:, :-1])[0].log_softmax(-1)[0, len(prompt) - 1 :]
        alone = sum(logprobs[i, ids[0, len(prompt) + i]].item() for i in range(len(place)))
        assert score == pytest.approx(alone, abs=1e-4)
    too_long = ensemble.text_logprobs(model, corpus, ["Ada Berg. " * 13], ["Oslo,"], "cpu")
    assert too_long == [-math.inf]  # a text beyond the block is not scored


WIDE = ["--n_layer", "2", "--n_head", "4", "--n_embd", "64", *CPU_FLAGS]  # learns the frames world in seconds
# a world whose biographies put the birthplace after three frames of their own, one person in three each
TEMPLATES = (
    "{name}. {name} was born in {place} and worked as a painter.",
    "{name}. Born in {place}, {last} worked as a painter.",
    "{name}. {name} (born 1900 in {place}) was a painter.",
)


@pytest.fixture(scope="session")
def frames_world(tmp_path_factory):
    """
    The tiny world's people and places in three templates, and params pretrained on it (120
    epochs), made once for the whole run: the first pytest-xdist worker to ask makes them,
    the others wait for them.
    """
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "frames_world"
    folder.mkdir(exist_ok=True)
    world = {name: str(folder / name) for name in ["wiki.txt", "train.tsv", "dev.tsv", "pre.params"]}
    world["params"] = world.pop("pre.params")
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(world["params"]):
            rng = random.Random(0)
            people = [(f"{first} {last}", rng.choice(PLACES)) for first in FIRST for last in LAST]
            rng.shuffle(people)
            last = [name.split()[-1] for name, _ in people]
            bios = [TEMPLATES[i % 3].format(name=n, last=last[i], place=p) for i, (n, p) in enumerate(people)]
            (folder / "wiki.txt").write_text("\n".join(bios) + "\n", encoding="utf-8")
            pairs = [f"Where was {name} born?\t{place}" for name, place in people]
            (folder / "train.tsv").write_text("\n".join(pairs[:60]) + "\n", encoding="utf-8")
            (folder / "dev.tsv").write_text("\n".join(pairs[60:]) + "\n", encoding="utf-8")
            pretrain = ["pretrain", "vanilla", world["wiki.txt"], "--writing_params_path", world["params"]]
            assert main(*pretrain, "--pretrain_epochs", 120, "--pretrain_lr", 6e-3, "--dropout", 0, *WIDE) == 0
    return world


def lines_of(path):
    return open(path, encoding="utf-8").read().splitlines()


@pytest.mark.slow  # the first test to ask for the frames world, which pretrains it
def test_evaluate_asks_in_the_frames_and_answers_each_name_as_if_asked_alone(frames_world, tmp_path, capsys):
    """
    Pretrained on the biographies alone, never on a question: `evaluate --readout frames`
    writes a place per question and the course's score line, above what one place for all
    would score; each answer is the one that name gets asked alone (the batches of prompts
    and of padded scores change nothing).
    """
    # a copy: evaluate keeps its fitted readout beside the params, which the other tests share
    wiki, params = frames_world["wiki.txt"], str(copy_params(frames_world["params"], tmp_path))
    dev = [line.split("\t") for line in lines_of(frames_world["dev.tsv"])]
    outputs = tmp_path / "dev.predictions"
    readout = ["--readout", "frames", "--finetune_corpus_path", frames_world["train.tsv"], *WIDE]
    capsys.readouterr()
    assert main(*evaluate_args("vanilla", wiki, params, frames_world["dev.tsv"], outputs), *readout) == 0
    predictions = lines_of(outputs)
    correct = sum(answer == place for answer, (_, place) in zip(predictions, dev))
    assert capsys.readouterr().out.strip() == f"Correct: {correct} out of 24: {round(correct / 24 * 100, 2)}%"
    assert len(predictions) == 24 and all(answer and frames.place_in(answer) == answer for answer in predictions)
    assert correct > max(collections.Counter(place for _, place in dev).values())

    cfg = RunConfig("evaluate", "vanilla", wiki, reading_params_path=params, device="cpu")
    setup, _ = pipeline.load(cfg)
    training = [tuple(line.split("\t")) for line in lines_of(frames_world["train.tsv"])]
    names = [name_of(question) for question, _ in dev[:6]]
    fitted = fitting.fitted_ensemble(setup.model, setup.corpus, training, HANDOUT.readout_frames, "cpu", learned=True)
    assert len(fitted.weights) == len(fitted.scorers) + len(fitted.writers) + 1
    together = fitted.answers(setup.model, setup.corpus, names, "cpu")
    assert [answer.text for answer in together] == predictions[:6]
    for name, answer in zip(names, together):
        [alone] = fitted.answers(setup.model, setup.corpus, [name], "cpu")
        assert (alone.text, alone.logprob) == pytest.approx((answer.text, answer.logprob), abs=1e-4)


def test_the_learned_choice_weighs_what_tells_the_right_candidate():
    """
    choice.py on people described by three features: a log-probability that is noise, whether
    a reliable writer wrote it (right nine times in ten), a length that is noise; the fitted
    weights lean on the writer and pick the right candidate of new people as it does. People
    whose place is not among their candidates are left out of the fit; with none left, no weights.
    """
    generator = torch.Generator().manual_seed(0)

    def people(count):
        described, rights = [], []
        for _ in range(count):
            right = int(torch.randint(4, (), generator=generator))
            reliable = right if torch.rand((), generator=generator) < 0.9 else (right + 1) % 4
            scores = [(float(s),) for s in -5 * torch.rand(4, generator=generator)]
            places = [chr(ord("A") + k) * int(torch.randint(1, 9, (), generator=generator)) for k in range(4)]
            described.append(choice.features(scores, [places[reliable]], places))
            rights.append(right)
        return described, rights

    described, rights = people(200)
    weights = choice.fitted_weights(described + described[:5], rights + [None] * 5)
    assert abs(weights[1]) > 5 * max(abs(weights[0]), abs(weights[2])), weights
    fresh, _ = people(100)
    picked = [choice.chosen(f, weights) for f in fresh]
    assert picked == [int(f[:, 1].argmax()) for f in fresh]
    assert choice.chosen(choice.features([], ["A"], []), weights) is None
    assert choice.fitted_weights(described[:3], [None] * 3) == (), "nothing to learn from: the summed score chooses"


def test_the_writers_are_chosen_by_what_they_answer_on_the_training_people(frames_world):
    """Of the mined frames (more than the writers), the one writer chosen is the frame that alone answers most."""
    cfg = RunConfig("evaluate", "vanilla", frames_world["wiki.txt"], reading_params_path=frames_world["params"])
    setup, _ = pipeline.load(dataclasses.replace(cfg, device="cpu"))
    training = [tuple(line.split("\t")) for line in lines_of(frames_world["train.tsv"])]
    mined = frames.mine(setup.corpus.data, training, frames.least_people(training))
    names, places = frames.names_in(training), [p for _, p in training]
    mined_frames = [f for f, _ in mined.frames]
    written = ensemble.written_places(setup.model, setup.corpus, names, mined_frames, mined.skips, "cpu")
    alone = [sum(row[i] == place for row, place in zip(written, places)) for i in range(len(mined.frames))]
    assert len(mined.frames) > 3 and len(set(alone)) > 1, alone  # a choice, and one that matters
    [writer] = fitting.fitted_ensemble(setup.model, setup.corpus, training, 1, "cpu").writers
    assert writer == mined.frames[alone.index(max(alone))][0]


def test_the_fitted_readout_is_kept_and_answers_do_not_depend_on_the_questions_file(
    frames_world, tmp_path, capsys, monkeypatch
):
    """
    The first evaluate keeps its fitted readout beside the params (with the written biography's
    first place among the candidates, weighed as a writer, and two sampled biographies' places,
    counted); later ones read it back: the dev file reversed, its places shuffled, gets the same
    answers in its own order. Other training pairs refit it, said in one line.
    """
    wiki, params = frames_world["wiki.txt"], tmp_path / "pre.params"
    shutil.copy(frames_world["params"], params)
    readout = ["--readout", "frames", "--finetune_corpus_path", frames_world["train.tsv"], *WIDE]
    readout += ["--readout_biography", "1", "--readout_samples", "2", "--readout_temperature", "0.8"]
    assert main(*evaluate_args("vanilla", wiki, params, frames_world["dev.tsv"], tmp_path / "a"), *readout) == 0
    kept = json.loads((tmp_path / "pre.params.readout.json").read_text(encoding="utf-8"))
    assert len(kept["ensemble"]["writers"]) == HANDOUT.readout_frames and kept["key"]["readout_choice"] == "learned"
    assert kept["ensemble"]["biography"] == 1 and kept["key"]["readout_biography"] == 1
    assert (kept["ensemble"]["samples"], kept["ensemble"]["temperature"]) == (2, 0.8)
    # a weight per scorer, writer and the biography's place, then the length and the samples' count
    assert len(kept["ensemble"]["weights"]) == len(kept["ensemble"]["scorers"]) + HANDOUT.readout_frames + 1 + 2
    assert kept["key"]["params"] == fitting.file_digest(params)

    dev = [line.split("\t") for line in lines_of(frames_world["dev.tsv"])]
    places = [place for _, place in dev]
    random.Random(1).shuffle(places)
    reordered = tmp_path / "reordered.tsv"
    reordered.write_text("".join(f"{q}\t{p}\n" for (q, _), p in zip(dev[::-1], places)), encoding="utf-8")
    monkeypatch.setattr(fitting, "fitted_ensemble", lambda *a, **k: pytest.fail("the kept readout was fitted again"))
    assert main(*evaluate_args("vanilla", wiki, params, reordered, tmp_path / "b"), *readout) == 0
    assert lines_of(tmp_path / "b")[::-1] == lines_of(tmp_path / "a")
    monkeypatch.undo()

    fewer = tmp_path / "fewer.tsv"
    fewer.write_text("".join(line + "\n" for line in lines_of(frames_world["train.tsv"])[:-1]), encoding="utf-8")
    capsys.readouterr()
    fewer_readout = ["--readout", "frames", "--finetune_corpus_path", fewer, *WIDE]
    assert main(*evaluate_args("vanilla", wiki, params, frames_world["dev.tsv"], tmp_path / "c"), *fewer_readout) == 0
    said = capsys.readouterr().err
    assert "pre.params.readout.json was fitted on other files or settings: fitting the readout again" in said
    kept = json.loads((tmp_path / "pre.params.readout.json").read_text(encoding="utf-8"))
    assert kept["key"]["training"] == fitting.file_digest(fewer)


def test_the_kept_readouts_key_changes_with_every_setting_and_constant_of_the_fit(tmp_path, monkeypatch):
    """
    A kept readout is read back only under the key it was fitted with: changing any reading
    setting of the recipe, or any constant of the readout's modules, changes the key.
    """
    files = []
    for name in ("p.params", "train.tsv", "wiki.txt"):
        (tmp_path / name).write_text(name, encoding="utf-8")
        files.append(tmp_path / name)
    settings = HANDOUT.reading_settings()
    key = fitting.kept_key(files, settings)
    for path in files:  # each file it was fitted on (the params, the training pairs, the corpus), rewritten in turn
        original = path.read_bytes()
        path.write_bytes(original + b"!")
        assert fitting.kept_key(files, settings) != key, f"a rewritten {path.name} would not refit the readout"
        path.write_bytes(original)
    # every field that only evaluate reads (their list: test_checkpoint.py)
    assert set(settings) == {field.name for field in dataclasses.fields(HANDOUT) if field.metadata.get("reading")}
    for field in dataclasses.fields(HANDOUT):
        if field.name in settings:
            changed = dataclasses.replace(HANDOUT, **{field.name: another_value(field, settings[field.name])})
            assert fitting.kept_key(files, changed.reading_settings()) != key, field.name
    constants = fitting.fit_constants()
    known = {"choice.FLOOR", "choice.L2", "choice.LBFGS_STEPS", "ensemble.PLACE_STEPS", "frames.MOST_WORDS"}
    known |= {"ensemble.BIOGRAPHY_STEPS", "ensemble.SAMPLED_PLACES", "frames.PLACE_CUE"}
    assert known | {"frames.MIN_SHARE", "fitting.POOL", "fitting.FIT_PEOPLE", "fitting.FIT_VERSION"} < set(constants)
    modules = dict(choice=choice, ensemble=ensemble, frames=frames, fitting=fitting)
    for name, value in constants.items():
        module, constant = name.split(".")
        with monkeypatch.context() as patched:
            patched.setattr(modules[module], constant, value * 2 if not isinstance(value, str) else value + "!")
            assert fitting.kept_key(files, settings) != key, name
    assert fitting.kept_key(files, settings) == key


def test_gumbel_noise_draws_from_the_softmax_at_the_temperature_never_a_banned_id():
    """
    The argmax of logits plus decoding.gumbel_noise is a draw from softmax(logits / temperature)
    over the ids not banned: its shares over 20,000 draws, each seeded row its own, match it.
    """
    logits = torch.tensor([2.0, 1.0, 0.0, 3.0])
    for temperature in (0.5, 2.0):
        noise = decoding.gumbel_noise(7, 20_000, 4, temperature, banned=[3])
        shares = torch.bincount((logits + noise).argmax(1), minlength=4) / 20_000
        assert shares[3] == 0
        assert shares[:3].tolist() == pytest.approx((logits[:3] / temperature).softmax(0).tolist(), abs=0.015)
    assert torch.equal(decoding.gumbel_noise(7, 5, 4, 1.0), decoding.gumbel_noise(7, 5, 4, 1.0))
    assert not torch.equal(decoding.gumbel_noise(7, 5, 4, 1.0), decoding.gumbel_noise(8, 5, 4, 1.0))


def test_sampled_biographies_differ_never_mask_and_each_persons_draws_are_their_own(frames_world):
    """
    Each person's sampled biographies are drawn from seeds of their own: asked alone or with
    others, or for fewer samples, a person gets the same places; the samples differ from one
    another, and none holds the mask or pad character, so each goes on as a biography.
    """
    cfg = RunConfig("evaluate", "vanilla", frames_world["wiki.txt"], reading_params_path=frames_world["params"],
                    device="cpu")  # fmt: skip
    setup, _ = pipeline.load(cfg)
    names = [name_of(line.split("\t")[0]) for line in lines_of(frames_world["dev.tsv"])[:5]]
    together = ensemble.sampled_places(setup.model, setup.corpus, names, frozenset(), "cpu", 3, 1.0)
    alone = [ensemble.sampled_places(setup.model, setup.corpus, [name], frozenset(), "cpu", 3, 1.0)[0]
             for name in names]  # fmt: skip
    assert together == alone and any(place for person in together for sample in person for place in sample)
    fewer = ensemble.sampled_places(setup.model, setup.corpus, names, frozenset(), "cpu", 2, 1.0)
    assert fewer == [person[:2] for person in together]
    openings = [f"{name}. " for name in names for _ in range(3)]
    texts = decoding.sampled_completions(setup.model, openings, list(range(len(openings))), setup.corpus, "cpu", 60,
                                         1.0, banned=(MASK_CHAR, PAD_CHAR))  # fmt: skip
    assert all(len(text) == 60 and MASK_CHAR not in text and PAD_CHAR not in text for text in texts)
    assert len(set(texts)) > len(names)


def test_a_persons_candidates_give_the_summed_and_the_learned_choice():
    """The summed choice adds a candidate's scores; of_writers keeps the scores of the writers asked; weights choose."""
    person = ensemble.Candidates(("Oslo", "", "Lima"), ("Lima", "Oslo"), ((-1.0, -4.0), (-2.0, -2.5)))
    assert person.summed() == ("Oslo", -4.5)
    assert person.of_writers([2]) == ensemble.Candidates(("Lima",), ("Lima",), ((-1.0, -4.0),))
    assert person.of_writers([1]).summed() == ("", -math.inf)
    assert person.chosen() == person.summed()
    # a weight per scorer, per writer, then the length: here trusting only the third writer
    assert person.chosen((0.0, 0.0, 0.0, 0.0, 1.0, 0.0)) == ("Lima", -5.0)
    assert ensemble.candidate_set(["Oslo", "", "Lima", "Oslo"]) == ("Lima", "Oslo")


def test_the_details_are_valid_json_where_no_frame_wrote_a_place():
    lines = details_lines(["Where was Ada Berg born?"], [Answer("", -math.inf, math.nan, False)], ["Oslo"])
    row = json.loads(lines[0], parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert row == dict(question="Where was Ada Berg born?", answer="", logprob=None, min_prob=None, closed=False,
                       correct=False)  # fmt: skip


def test_the_frames_readout_needs_the_training_pairs_and_its_questions(tiny_pretrained, tiny_world, tmp_path, capsys):
    """What the frames readout cannot use is one line naming the file and its own line number; nothing written."""
    wiki, params = tiny_world["wiki.txt"], tiny_pretrained
    out = tmp_path / "out"
    evaluate = evaluate_args("vanilla", wiki, params, tiny_world["dev.tsv"], out)
    said = one_line_error(capsys, *evaluate, "--readout", "frames", *TINY)
    assert "the frames readout mines its frames from the training people: give --finetune_corpus_path" in said

    def error_with(training, asked=tiny_world["dev.tsv"]):
        readout = ["--readout", "frames", "--finetune_corpus_path", training, *TINY]
        said = one_line_error(capsys, *evaluate_args("vanilla", wiki, params, asked, out), *readout)
        assert not out.exists()
        return said

    odd = tmp_path / "odd.tsv"
    odd.write_text("Where was Ada Berg born?\tOslo\n\nWho painted it?\tAda\n", encoding="utf-8")
    said = error_with(tiny_world["train.tsv"], odd)
    assert f"{odd}, line 3: 'Who painted it?' is not of the form 'Where was NAME born?'" in said
    assert f"{odd}, line 3: 'Who painted it?' is not of the form" in error_with(odd)
    accented = tmp_path / "accented.tsv"
    accented.write_text("Where was Åsa Berg born?\tOslo\n", encoding="utf-8")
    assert f"{accented}, line 1: the name 'Åsa Berg' has characters the corpus lacks: ['Å']" in error_with(accented)
    strangers = tmp_path / "strangers.tsv"
    swapped = [f"Where was {last} {first} born?\tOslo\n" for first, last in zip(FIRST[:5], LAST)]  # none in the corpus
    strangers.write_text("".join(swapped), encoding="utf-8")
    assert "no frame is shared by 2 of the 5 training people's biographies" in error_with(strangers)
    copy = tmp_path / "dev_copy.tsv"
    shutil.copy(tiny_world["dev.tsv"], copy)
    for training in (tiny_world["dev.tsv"], copy):
        assert "would be fitted on the answers it is scored on" in error_with(training)


def test_the_frames_readout_of_finetuned_params_says_what_finetuning_unlearned(
    tiny_pretrained, tiny_world, tmp_path, capsys
):
    """Finetuned params read out in frames answer almost nothing (docs/readout.md): evaluate says why, and answers."""
    # a copy: evaluate keeps its fitted readout beside the params, where later copies of tiny_pretrained would carry it
    wiki, pretrained, finetuned = tiny_world["wiki.txt"], copy_params(tiny_pretrained, tmp_path), tmp_path / "f.params"
    finetune = [
        *finetune_args("vanilla", wiki, finetuned, tiny_world["train.tsv"]),
        "--reading_params_path",
        pretrained,
    ]
    assert main(*finetune, "--finetune_epochs_from_pretrained", 1, *TINY) == 0
    readout = ["--readout", "frames", "--finetune_corpus_path", tiny_world["train.tsv"], *TINY]
    for params, warned in [(pretrained, False), (finetuned, True)]:
        capsys.readouterr()
        assert main(*evaluate_args("vanilla", wiki, params, tiny_world["dev.tsv"], tmp_path / "out"), *readout) == 0
        said = capsys.readouterr()
        assert said.out.startswith("Correct: ") and (f"{finetuned} are finetuned params: " in said.err) == warned
        assert ("which finetuning on the question unlearns" in said.err) == warned


def test_branching_where_the_place_starts_keeps_each_greedy_place_first(frames_world, capsys):
    """
    experiments/readout.py --first_chars: K=1 is the greedy candidates (the ensemble's own score);
    K=3 adds at most two branches after each writer's place, and loses none of the greedy places.
    """
    argv = ["vanilla", frames_world["wiki.txt"], "--reading_params_path", frames_world["params"], "--device", "cpu"]
    argv += ["--finetune_corpus_path", frames_world["train.tsv"], "--sizes", "2", "--first_chars", "1", "3"]
    capsys.readouterr()
    assert run_script("readout", *argv) == 0
    rows = [line.strip("| ").split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    ensembles = {row[0]: row[2:] for row in rows if "`" in row[1]}  # frames writing, chosen, first 1,600, last 400
    (_, one_candidates, one_among, one_right, _), (_, three_candidates, three_among, _, _) = [
        row for row in rows if row[0] in ("1", "3") and row[-1].endswith(" s")
    ]
    assert one_right == ensembles["2"][1]  # the greedy candidates, scored as the ensemble scores them
    assert 0 < float(one_candidates) <= 2 and float(one_candidates) <= float(three_candidates) <= 3 * 2
    assert float(three_among[:-1]) >= float(one_among[:-1])  # every greedy place still among the candidates


def test_a_choice_learned_on_the_training_people_is_fitted_and_checked(frames_world, capsys):
    """
    experiments/rerank.py: a row per writers and part (no choice beats the candidates), a weight
    per feature; branching at one first character is the greedy ensemble, at two it adds candidates.
    """
    argv = ["vanilla", frames_world["wiki.txt"], "--reading_params_path", frames_world["params"], "--device", "cpu"]
    argv += ["--finetune_corpus_path", frames_world["train.tsv"], "--writers", "2", "3", "--first_chars", "1", "2"]
    capsys.readouterr()
    assert run_script("rerank", *argv, "--biography", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.strip("| ").split(" | ") for line in lines if line.startswith(("| 2", "| 3"))]
    parts = ("first 1,600", "last 400")
    firsts = ["2", "3", "3, 1 first characters", "3, 2 first characters", "3 and the biography's 2"]
    assert [row[0].split(" (")[0] for row in rows[::2]] == firsts
    assert [row[1] for row in rows] == list(parts) * 5
    assert all(float(grown[2][:-1]) >= float(greedy[2][:-1]) for grown, greedy in zip(rows[8:], rows[2:4]))
    rows = rows[:8]
    for _, _, among, summed, learned in rows:
        assert float(summed[:-1]) <= float(among[:-1]) and float(learned[:-1]) <= float(among[:-1])
    assert [row[2:] for row in rows[4:6]] == [row[2:] for row in rows[2:4]]  # one first character: the greedy paths
    assert all(float(grown[2][:-1]) >= float(greedy[2][:-1]) for grown, greedy in zip(rows[6:], rows[4:6]))
    weights = [line for line in lines if line.startswith("| scorer") or line.startswith("| written by")]
    assert len([w for w in weights if w.startswith("| written by")]) == 3 and len(weights) > 3
    assert [line.split(" | ")[0] for line in lines if "the biography's place" in line] == [
        "| the biography's place 1",
        "| the biography's place 2",
    ]
    assert any(line.startswith("| length | ") for line in lines)


FINETUNING_RUNS = ["zero-shot", "lora", "rehearsal"]


@pytest.fixture(scope="module")
def finetuning_study(frames_world, tmp_path_factory):
    """experiments/readout_finetune.py run once on the frames world: (exit status, output, its rehearsal rows)."""
    rows = tmp_path_factory.mktemp("finetuning_study") / "rehearsal.rows"
    argv = ["vanilla", frames_world["wiki.txt"], "--reading_params_path", frames_world["params"], "--device", "cpu"]
    argv += ["--finetune_corpus_path", frames_world["train.tsv"], "--writers", "2", "--runs", *FINETUNING_RUNS]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = run_script("readout_finetune", *argv, "--rehearsal_rows", rows)
    return code, out.getvalue(), rows


def test_the_finetuning_study_reads_out_each_way_of_finetuning(finetuning_study, frames_world, tmp_path):
    """experiments/readout_finetune.py: a row per run, adapters and rehearsal among them, under the learned choice."""
    code, out, _ = finetuning_study
    lines = out.splitlines()
    assert code == 0 and "choice: learned" in lines
    rows = [line.strip("| ").split(" | ") for line in lines if line.startswith("| ") and line.endswith(" |")][2:]
    assert [row[0] for row in rows] == FINETUNING_RUNS
    # the checked people are the world's 60 training people (the last 400 of them): each cell is k of 60
    assert all(cell in {f"{k / 60:.1%}" for k in range(61)} for row in rows for cell in row[1:3])
    # the zero-shot run is the pretrained params: its question column is evaluate's, asked the same questions
    asked = tmp_path / "zero_shot.predictions"
    cfg = RunConfig("evaluate", "vanilla", frames_world["wiki.txt"], reading_params_path=frames_world["params"])
    cfg = dataclasses.replace(cfg, eval_corpus_path=frames_world["train.tsv"], outputs_path=str(asked), device="cpu")
    evaluation = pipeline.evaluate(cfg)
    assert evaluation.total == 60 and rows[0][2] == f"{evaluation.correct / 60:.1%}"


def test_rehearsal_mixes_the_questions_with_as_many_span_corrupted_documents(frames_world, finetuning_study):
    """
    experiments/readout_finetune.py --rehearsal_rows: each training pair's question row, then as
    many rows, each a corruption of a corpus document.
    """
    corpus = load_corpus(frames_world["wiki.txt"])
    pairs = [tuple(line.split("\t")) for line in lines_of(frames_world["train.tsv"])]
    code, _, rows = finetuning_study
    texts = lines_of(rows)
    assert code == 0 and len(texts) == 2 * len(pairs)
    spelled = [[known_characters(text, corpus.stoi)[0] for text in pair] for pair in pairs]  # as NameDataset does
    assert [text.split(MASK_CHAR)[:2] for text in texts[: len(pairs)]] == spelled
    for text in texts[len(pairs) :]:
        prefix, suffix, content = text.split(MASK_CHAR)
        assert any(document.startswith(prefix + content + suffix) for document in corpus.data)


def test_the_controls_split_the_answers_by_whether_the_biography_names_the_place(frames_world, tmp_path, capsys):
    """
    experiments/controls.py: right answers counted in each part, beside an untrained model's and
    London's; the untrained model is asked with the recipe flags given (here the biography's place).
    The params' answers stay the same with the held-out places shuffled.
    """
    held_out = [line.split("\t") for line in lines_of(frames_world["dev.tsv"])]
    held_out.append([held_out[0][0], "London"])  # a place the person's biography does not name
    asked = tmp_path / "dev.tsv"
    asked.write_text("".join(f"{question}\t{place}\n" for question, place in held_out), encoding="utf-8")
    answers = ["nowhere"] + [place for _, place in held_out[1:]]
    predictions = tmp_path / "dev.predictions"
    predictions.write_text("".join(f"{answer}\n" for answer in answers), encoding="utf-8")
    # a copy: the gold control keeps its fitted readout beside the params, which the other tests share
    params = str(copy_params(frames_world["params"], tmp_path))
    argv = ["vanilla", frames_world["wiki.txt"], "--reading_params_path", params, "--device", "cpu"]
    argv += ["--predictions", str(predictions), "--eval_corpus_path", str(asked), "--readout_biography", "1"]
    capsys.readouterr()
    assert run_script("controls", *argv, "--finetune_corpus_path", frames_world["train.tsv"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"the held-out places shuffled: {len(held_out)} of {len(held_out)} answers unchanged"
    rows = [line.strip("| ").split(" | ") for line in out.splitlines() if line.startswith("| ")]
    assert rows[0] == ["held-out people", "`dev.predictions`", "never pretrained", "London for all"]
    people = len(held_out)
    assert [row[0] for row in rows[2:]] == [
        f"all ({people})",
        f"biography names the place ({people - 1})",
        "biography does not name it (1)",
    ]
    counts = [[int(cell.split(" ")[0]) for cell in row[1:]] for row in rows[2:]]
    assert counts[0] == [a + b for a, b in zip(counts[1], counts[2])]
    assert [counts[0][0], counts[1][0], counts[2][0]] == [people - 1, people - 2, 1]
    assert [counts[0][2], counts[1][2], counts[2][2]] == [1, 0, 1]


def test_the_candidates_study_adds_up_each_source_and_checks_the_choice_among_them(frames_world, capsys):
    """
    experiments/candidates.py: a row per source of candidates and the sources added up, each
    holding at least the places of the rows before; --choose: the learned choice with and without
    the sampled biographies, never answering more than the candidates hold.
    """
    argv = ["vanilla", frames_world["wiki.txt"], "--reading_params_path", frames_world["params"], "--device", "cpu"]
    argv += ["--finetune_corpus_path", frames_world["train.tsv"], "--writers", "2", "--biography_places", "2"]
    argv += ["--samples", "2", "--temperatures", "0.5"]
    capsys.readouterr()
    assert run_script("candidates", *argv) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.strip("| ").split(" | ") for line in lines if line.startswith("| ") and "%" in line]
    sources = ["2 writers, greedy", "greedy biography, first 2", "greedy biography without masks, first 2"]
    sources += [f"2 biographies sampled at 0.5{unmasked}, first 2 each" for unmasked in ("", " without masks")]
    assert [row[0] for row in rows] == sources * 2
    added = [(float(row[1][:-1]), float(row[2])) for row in rows[len(sources) :]]
    assert added == sorted(added) and all(a >= float(row[1][:-1]) for a, row in zip([a for a, _ in added], rows))
    assert run_script("candidates", *argv, "--choose", "30", "--least", "1", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.strip("| ").split(" | ") for line in lines if line.startswith("| ") and "%" in line]
    assert [row[0] for row in rows] == [
        "writers and greedy biography",
        "writers and greedy biography, the samples' count a feature",
        "and the places 1 of 2 samples name",
        "and the places 2 of 2 samples name",
    ]
    for _, among, answered, where in rows:
        assert float(answered[:-1]) <= float(among[:-1]) and 0 <= float(where[:-1]) <= 100
    among = [float(row[1][:-1]) for row in rows]
    assert among[0] == among[1] <= among[3] <= among[2]  # fewer samples naming a place keep more places


def test_the_choice_features_study_checks_each_number_of_samples_and_features(frames_world, capsys):
    """
    experiments/choice_features.py: for each number of samples, a row per set of features; more
    samples never hold fewer places, one set of candidates holds the same places under every set of
    features, and no row answers more than its candidates hold.
    """
    argv = ["vanilla", frames_world["wiki.txt"], "--reading_params_path", frames_world["params"], "--device", "cpu"]
    argv += ["--finetune_corpus_path", frames_world["train.tsv"], "--writers", "2", "--samples", "2"]
    capsys.readouterr()
    assert run_script("choice_features", *argv, "--counts", "0", "1", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.strip("| ").split(" | ") for line in lines if line.startswith("| ") and "%" in line]
    readouts = ["the readout's", "log count", "prior"]
    assert [row[:2] for row in rows] == [
        *(["writers and greedy biography", f] for f in ["the readout's", "prior"]),
        *(["writers and greedy biography, 1 samples", f] for f in readouts),
        *(["writers and greedy biography, 2 samples", f] for f in readouts),
    ]
    among = [float(row[2][:-1]) for row in rows]
    assert among[:2] == [among[0]] * 2 and among[2:5] == [among[2]] * 3 and among[5:] == [among[5]] * 3
    assert among[0] <= among[2] <= among[5]
    assert all(float(row[3][:-1]) <= float(row[2][:-1]) for row in rows)
