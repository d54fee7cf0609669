"""The levers that key a stored fact to a name: views of the biographies, the pairs' share, lighter finetuning."""

import dataclasses
import random

import pytest
import torch

from conftest import SMALL, finetune_args, pretrain_args, run_main
from dataset import MASK_CHAR, CharCorruptionDataset
from factgpt.common.errors import RunError
from factgpt.corpus.reading import load_corpus
from factgpt.corpus.views import ClauseViews, PlainText, clause_view, full_named, viewed
from factgpt.settings.recipe import Recipe, Stage, parse_stages
from factgpt.settings.run_config import RunConfig
from factgpt.training import adapters, stage_data
from factgpt.training.params import read_metadata
from model import GPT, GPTConfig


def test_full_names_replace_a_lone_surname_and_a_sentence_starting_pronoun():
    assert full_named("Stanley Corrsin. Corrsin was born in Philadelphia .") == (
        "Stanley Corrsin. Stanley Corrsin was born in Philadelphia ."
    )
    assert full_named("Jeanne Deroin. Born in Paris, Deroin became a seamstress .") == (
        "Jeanne Deroin. Born in Paris, Jeanne Deroin became a seamstress ."
    )
    assert full_named("Ada Berg. She was born in Oslo . He met her there .") == (
        "Ada Berg. Ada Berg was born in Oslo . Ada Berg met her there ."
    )
    unchanged = [
        "Lucy Toulmin Smith. Lucy Toulmin Smith was born at Boston, of Joshua Toulmin Smith .",  # a relative
        "Peeter van Bredael. Pieter van Bredael was born at Antwerp .",  # a particle of the name
        "Madonna. Madonna was born in Bay City .",  # one word
        "Stephen Carter, Baron Carter of Barnes. Carter was born in London .",  # a title
        "Elfie W%C3%B6rner. Wörner was born in Hamburg .",  # the name spelt otherwise in the text
        "Joel Honig. Born in Chicago, where he studied .",  # a pronoun inside a sentence
    ]
    assert [full_named(document) for document in unchanged] == unchanged


def test_a_clause_view_keeps_the_name_and_draws_other_clauses_each_time():
    document = "Ada Berg. Born in Oslo, Ada Berg studied in Lima, then in Paris . She painted ."
    assert clause_view(document, 0.0) == document
    rng = random.Random(0)
    views = {clause_view(document, 0.5, rng) for _ in range(200)}
    assert len(views) > 5 and all(view.startswith("Ada Berg. ") for view in views)
    clauses = ["Born in Oslo,", "Ada Berg studied in Lima,", "then in Paris .", "She painted ."]
    for view in views:  # the clauses kept, in their order, at least one
        kept = view.removeprefix("Ada Berg. ").split(" ")
        assert " ".join(kept) in {" ".join(c for c, k in zip(clauses, mask) if k) for mask in masks(len(clauses))}
    assert all(len(clause_view(document, 0.999, rng)) > len("Ada Berg. ") for _ in range(50))


def masks(n):
    return [[(bits >> i) & 1 for i in range(n)] for bits in range(1, 2**n)]


def test_clause_views_are_span_corruptions_of_views():
    corpus = CharCorruptionDataset("Ada Berg. Born in Oslo, Ada Berg studied in Lima .\nBo Li. Li sang .\n", 128)
    views = ClauseViews(corpus, 0.5)
    assert len(views) == len(corpus)
    random.seed(0)
    for _ in range(20):
        x, y = views[0]
        assert x.shape == y.shape == (127,) and torch.equal(x[1:], y[:-1])
        text = "".join(corpus.itos[int(i)] for i in x)
        assert text.count(MASK_CHAR) == 2


def test_a_text_stage_reads_whole_documents_next_character_by_character():
    long = "Ada Berg. " + "Ada Berg painted in Oslo, then in Lima. " * 6  # longer than the block
    short = "Bo Li. Born in Oslo, Bo Li sang in Lima, then in Paris ."
    corpus = CharCorruptionDataset(f"{short}\n{long}\n", 128)
    text = PlainText(corpus)

    def decoded(ids):
        return "".join(corpus.itos[int(i)] for i in ids if i)  # the pads, id 0, left out

    x, y = text[0]
    assert x.shape == y.shape == (127,) and torch.equal(x[1:], y[:-1])
    assert decoded(x) == short and decoded(y) == short[1:]  # every next character a target
    random.seed(0)
    windows = set()
    for _ in range(50):
        x, y = text[1]
        window = decoded(x) + decoded(y)[-1:]
        assert len(window) == 128 and window.startswith("Ada Berg. ")  # the name, then a window of the rest
        assert window.removeprefix("Ada Berg. ") in long.removeprefix("Ada Berg. ")
        windows.add(window)
    assert len(windows) > 10  # drawn afresh each time, not always the document's start
    random.seed(0)
    clauses = viewed(corpus, False, 0.5, plain_text=True)
    views = [decoded(clauses[0][0]) for _ in range(20)]
    assert all(view.startswith("Bo Li. ") and MASK_CHAR not in view for view in views)  # clause views, not corrupted
    assert any(len(view) < len(short) for view in views)


def test_a_text_stage_mixes_with_the_pairs_and_pretrains(tiny_world, tmp_path):
    cfg = RunConfig("pretrain", "vanilla", tiny_world["wiki.txt"], mix_corpus_path=tiny_world["train.tsv"])
    corpus = load_corpus(tiny_world["wiki.txt"])
    text, mixed = (stage_data.stage_data(cfg, corpus, Stage(data), [])[0] for data in ("text", "text+pairs"))
    assert isinstance(text, PlainText) and len(text) == len(corpus) and len(mixed) == len(corpus) + 60
    # from the command line: a first stage of plain text trains other params than one of span corruption
    written = []
    for first in ("text", "corpus"):
        params = tmp_path / f"{first}.params"
        stages = ["--pretrain_stages", f"{first}; corpus epochs=1"]
        assert (
            run_main(
                *pretrain_args("vanilla", tiny_world["wiki.txt"], params), *stages, "--pretrain_epochs", "1", *SMALL
            )
            == 0
        )
        written.append(torch.load(params, weights_only=True))
    assert any(not torch.equal(written[0][name], written[1][name]) for name in written[0])


def test_pair_copies_set_the_pairs_share_of_a_stage(tiny_world):
    stages = parse_stages("pairs pair_copies=3; corpus+pairs epochs=2 pair_copies=2; corpus")
    assert stages[0] == Stage("pairs", pair_copies=3) and str(stages[1]) == "corpus+pairs epochs=2 pair_copies=2"
    assert str(stages[2]) == "corpus"
    cfg = RunConfig("pretrain", "vanilla", tiny_world["wiki.txt"], mix_corpus_path=tiny_world["train.tsv"])
    corpus = load_corpus(tiny_world["wiki.txt"])
    sizes = [len(stage_data.stage_data(cfg, corpus, stage, [])[0]) for stage in stages]
    assert sizes == [3 * 60, len(corpus) + 2 * 60, len(corpus)]


def test_a_stage_can_train_on_a_fixed_share_of_the_biographies(tiny_world):
    stage = Stage.parse("corpus documents=0.25")
    assert str(stage) == "corpus documents=0.25" and str(Stage("corpus")) == "corpus"
    cfg = RunConfig("pretrain", "vanilla", tiny_world["wiki.txt"])
    corpus = load_corpus(tiny_world["wiki.txt"])
    subset = stage_data.stage_data(cfg, corpus, stage, [])[0]
    assert len(subset) == round(len(corpus) / 4) and set(subset.data) < set(corpus.data)
    # the same people every epoch and run
    assert stage_data.stage_data(cfg, corpus, stage, [])[0].data == subset.data
    other_seed = stage_data.stage_data(dataclasses.replace(cfg, seed=1), corpus, stage, [])[0]
    assert other_seed.data != subset.data
    with pytest.raises(RunError, match=r"documents must be at most 1, got 2.0"):
        Recipe(pretrain_stages=parse_stages("corpus documents=2"))


def test_a_stage_can_name_its_people_in_full_where_the_recipe_does_not(tmp_path):
    wiki = tmp_path / "wiki.txt"
    wiki.write_text("Stanley Corrsin. Corrsin was born in Baltimore.\nAda Lovelace. She was born in London.\n", "utf-8")
    recipe = Recipe(pretrain_stages=parse_stages("corpus; corpus epochs=20 full_names=yes"))
    cfg = RunConfig("pretrain", "vanilla", str(wiki), recipe=recipe)
    corpus = load_corpus(str(wiki))
    plain, named = (stage_data.stage_data(cfg, corpus, stage, [])[0].data for stage in recipe.stages())
    assert plain == corpus.data
    assert named == [
        "Stanley Corrsin. Stanley Corrsin was born in Baltimore.",
        "Ada Lovelace. Ada Lovelace was born in London.",
    ]
    # a stage that says nothing takes the recipe's full_names; one that does wins
    recipe = Recipe(full_names=True, pretrain_stages=parse_stages("corpus; corpus full_names=no"))
    assert [stage.full_names for stage in recipe.stages()] == [True, False]
    assert str(Stage.parse("corpus full_names=1")) == "corpus full_names=True"
    with pytest.raises(RunError, match=r"full_names: 'maybe' is not a bool \(yes, no, true, false, 1, 0\)$"):
        Stage.parse("corpus full_names=maybe")


def test_low_rank_adapters_start_from_the_model_and_merge_into_plain_weights():
    torch.manual_seed(0)
    model = GPT(GPTConfig(30, 16, n_layer=2, n_head=2, n_embd=16))
    model.eval()
    x = torch.randint(0, 30, (2, 9))
    before = model(x)[0]
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    adapters.add(model, 4)
    assert torch.equal(model(x)[0], before)  # B starts at zero
    trained = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert trained and all(name.endswith((".A", ".B")) for name in trained)
    for name, parameter in model.named_parameters():
        if name.endswith(".B"):
            parameter.data.normal_()
    moved = model(x)[0]
    adapters.merge(model)
    assert sorted(model.state_dict()) == sorted(state)  # a plain state_dict again
    assert torch.allclose(model(x)[0], moved, atol=1e-5)
    changed = {name for name, tensor in model.state_dict().items() if not torch.equal(tensor, state[name])}
    linear = {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert changed == linear


def test_adapters_are_made_where_the_weights_are():
    """finetune_people moves the model to its device before the adapters come: they must follow the weights."""
    model = GPT(GPTConfig(30, 16, n_layer=1, n_head=2, n_embd=16)).to(device="meta", dtype=torch.float64)
    adapters.add(model, 2)
    made = [p for name, p in model.named_parameters() if name.endswith((".A", ".B"))]
    assert made and all(p.device.type == "meta" and p.dtype == torch.float64 for p in made)


@pytest.mark.slow
def test_finetuning_with_adapters_or_on_recalled_people_from_the_command_line(tiny_world, tmp_path, capsys):
    corpus, train = tiny_world["wiki.txt"], tiny_world["train.tsv"]
    pretrained = tmp_path / "pretrain.params"
    flags = ["--full_names", "--clause_dropout", "0.2", "--pretrain_stages", "pairs pair_copies=2; corpus+pairs"]
    args = [*pretrain_args("vanilla", corpus, pretrained), "--mix_corpus_path", train]
    assert run_main(*args, "--pretrain_epochs", "2", *flags, *SMALL) == 0
    assert read_metadata(str(pretrained))["command"].count("pair_copies=2") == 1

    finetuned = tmp_path / "lora.params"
    from_pretrained = ["--reading_params_path", pretrained, *SMALL]
    args = finetune_args("vanilla", corpus, finetuned, train)
    assert run_main(*args, *from_pretrained, "--finetune_lora_rank", "2") == 0
    before, after = torch.load(pretrained, weights_only=True), torch.load(finetuned, weights_only=True)
    assert sorted(before) == sorted(after)
    assert all(torch.equal(before[name], after[name]) for name in before if not name.endswith("weight"))

    # two epochs of pretraining store nobody's birthplace: said in one line, nothing written
    chosen = tmp_path / "chosen.params"
    capsys.readouterr()
    assert (
        run_main(*finetune_args("vanilla", corpus, chosen, train), *from_pretrained, "--finetune_people", "name") == 2
    )
    said = capsys.readouterr().err.strip().splitlines()[-1]  # after the warning about the tiny world's "?"
    assert said == "run.py: error: finetune_people: the params recall none of the finetuning people's birthplaces"
    assert not chosen.exists()
    # without params to recall from, every person is finetuned on (as run.sh's finetuning from scratch):
    # the params are those of finetuning on all of them
    scratch = []
    for people in ("name", "all"):
        params = tmp_path / f"scratch.{people}.params"
        from_scratch = finetune_args("vanilla", corpus, params, train)
        assert run_main(*from_scratch, "--finetune_epochs_from_scratch", "1", "--finetune_people", people, *SMALL) == 0
        scratch.append(params.read_bytes())
    assert scratch[0] == scratch[1]
