"""Bad input on the command line: one line naming what is wrong and where, exit code 2, nothing written."""

import dataclasses
import json
import os
import re
import shutil

import pytest
import torch

import dataset
import london_baseline
from conftest import (
    CPU_FLAGS,
    SMALL,
    TINY,
    another_value,
    copy_params,
    corpus_of,
    evaluate_args,
    finetune_args,
    one_line_error,
    pretrain_args,
    run_main_exit,
    run_script,
    small_gpt,
)
from conftest import run_main as main
from dataset import NameDataset
from factgpt.settings import command_line as arguments
from factgpt.settings.fields import setting
from factgpt.settings.recipe import Recipe
from factgpt.settings.recipes import HANDOUT, RECIPES


def test_a_setting_declared_with_a_rule_no_check_reads_is_refused_at_once():
    with pytest.raises(TypeError, match="setting\\(\\) has no rule trainr"):
        setting(0.0, trainr="training")


def test_input_errors_are_one_line(small_finetuned, tiny_world, tmp_path, capsys):
    params = tmp_path / "v.params"
    bad_tsv = tmp_path / "bad.tsv"
    bad_tsv.write_text("Where was A born?\tParis\nWhere was B born? Lima\n", encoding="utf-8")
    err = one_line_error(capsys, *finetune_args("vanilla", tiny_world["wiki.txt"], params, bad_tsv), *SMALL)
    assert str(bad_tsv) in err and "line 2" in err
    assert not params.exists()

    err = one_line_error(capsys, *pretrain_args("vanilla", tmp_path / "missing.txt", params), *SMALL)
    assert "missing.txt" in err

    outputs = tmp_path / "p.txt"
    asked = evaluate_args("perceiver", tiny_world["wiki.txt"], small_finetuned, tiny_world["dev.tsv"], outputs)
    assert "was trained as vanilla" in one_line_error(capsys, *asked, *SMALL)
    assert not outputs.exists()


@pytest.fixture
def inputs(small_finetuned, tiny_world, tmp_path):
    """A bad setting's inputs by name: the tiny world's files, trained params, two bad pair files and their folder."""
    long_pair = tmp_path / "long.tsv"
    long_pair.write_text("Where was " + "A" * 200 + " born?\tParis\n", encoding="utf-8")
    mixed = tmp_path / "mixed.tsv"
    mixed.write_text("Where was Ada Berg born?\tParis\nWhere was Ada Costa born?\n", encoding="utf-8")
    return dict(tiny_world, params=small_finetuned, long=long_pair, mixed=mixed, folder=tmp_path)


def nothing_written(inputs):
    """Whether the inputs' folder holds only the two pair files that `inputs` wrote there."""
    return sorted(path.name for path in inputs["folder"].iterdir()) == ["long.tsv", "mixed.tsv"]


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(
            lambda i: pretrain_args("vanilla", i["wiki.txt"], i["folder"]),
            "is a directory",
            id="params path a folder",
        ),
        pytest.param(
            lambda i: finetune_args("vanilla", i["wiki.txt"], i["folder"] / "x.params", i["long"]),
            "line 1: question and place are longer than the block size",
            id="pair longer than the block",
        ),
        pytest.param(
            lambda i: evaluate_args("vanilla", i["wiki.txt"], i["params"], i["mixed"], i["folder"] / "x.predictions"),
            "line 2: expected 'question' on every line",
            id="questions with and without places",
        ),
        pytest.param(
            lambda i: [*pretrain_args("vanilla", i["wiki.txt"], i["folder"] / "x.params"), "--n_head", "3"],
            "must be a multiple of --n_head 3",
            id="n_embd not a multiple of n_head",
        ),
        pytest.param(
            lambda i: [
                *finetune_args("vanilla", i["wiki.txt"], i["folder"] / "x.params", i["train.tsv"]),
                "--mix_corpus_path",
                i["train.tsv"],
            ],
            "mixed pairs (--mix_corpus_path) are for pretrain",
            id="mixed pairs to finetune",
        ),
        pytest.param(
            lambda i: evaluate_args("vanilla", i["wiki.txt"], i["params"], i["dev.tsv"], "/proc/dev.predictions"),
            "/proc refuses new files",
            id="outputs in a folder that refuses files",
            # a folder that os.access calls writable (for root) but that refuses files
            marks=pytest.mark.skipif(not os.access("/proc", os.W_OK), reason="/proc is not writable to os.access"),
        ),
        pytest.param(
            lambda i: [*pretrain_args("vanilla", i["wiki.txt"], i["folder"] / "x.params"), "--device", "cuda"],
            "device cuda is not available",
            id="cuda without a gpu",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available"),
        ),
    ],
)
def test_bad_settings_fail_before_any_work(args, message, inputs, capsys):
    args = args(inputs)
    capsys.readouterr()
    assert main(*args[:3], *SMALL, *args[3:]) == 2, args  # the case's own flags come last and win
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert nothing_written(inputs)


@pytest.mark.parametrize(
    "flags, message",
    [
        pytest.param(
            lambda i: ["--mix_corpus_path", i["mixed"]],
            "{mixed}: line 2: expected 'question<TAB>place'",
            id="mixed pairs without a place",
        ),
        pytest.param(
            lambda i: ["--probe_corpus_path", i["mixed"]],
            "{mixed}: line 2: expected 'question<TAB>place'",
            id="probe pairs without a place",
        ),
        pytest.param(
            lambda i: ["--mix_corpus_path", i["train.tsv"], "--corrupt_by_epoch"],
            "cannot be combined with mixed pairs",
            id="mixed pairs with corrupt_by_epoch",
        ),
    ],
)
def test_the_research_pretrainings_own_inputs_fail_before_any_work(flags, message, inputs, capsys):
    """experiments/probed_pretraining.py's own inputs: the same one-line errors, before any work."""
    argv = [*pretrain_args("vanilla", inputs["wiki.txt"], inputs["folder"] / "x.params"), *SMALL, *flags(inputs)]
    capsys.readouterr()
    assert run_script("probed_pretraining", *argv) == 2, argv
    err = capsys.readouterr().err
    assert message.format_map(inputs) in err and len(err.strip().splitlines()) == 1, err
    assert nothing_written(inputs)


# --- params, corpora, question files and outputs --------------------------------------------------------


@pytest.fixture(scope="module")
def params_files(tiny_pretrained, tiny_world, tmp_path_factory):
    """
    Params of several kinds, trained for one epoch on the tiny world, without the metadata beside
    them (as the course's code writes params): the checks that read the weights alone.
    """
    folder = tmp_path_factory.mktemp("params")
    wiki = tiny_world["wiki.txt"]
    files = {"vanilla": folder / "vanilla.params"}
    shutil.copy(tiny_pretrained, files["vanilla"])  # the params alone
    for name, extra in [
        ("perceiver8", ["perceiver"]),
        ("wide", ["vanilla", "--n_embd", "32"]),
        ("rope", ["rope"]),
    ]:
        files[name] = folder / f"{name}.params"
        assert (
            main(
                *pretrain_args(extra[0], wiki, files[name]),
                "--pretrain_epochs",
                1,
                *TINY,
                *extra[1:],
            )
            == 0
        )
        (folder / f"{name}.params.json").unlink()
    data = files["vanilla"].read_bytes()
    files["truncated"] = folder / "truncated.params"
    files["truncated"].write_bytes(data[: len(data) // 2])
    files["text"] = folder / "text.params"
    files["text"].write_text("hello\n", encoding="utf-8")
    return files


@pytest.mark.parametrize(
    "case, variant, flags, message",
    [
        ("missing", "vanilla", [], "does not exist"),
        ("truncated", "vanilla", [], "cannot be read"),
        ("text", "vanilla", [], "cannot be read"),
        (
            "perceiver8",
            "vanilla",
            [],
            "was trained as perceiver with bottleneck_dim 8: evaluate it with the perceiver "
            "variant and --bottleneck_dim 8",
        ),
        ("perceiver8", "perceiver", ["--bottleneck_dim", "4"], "with the perceiver variant and --bottleneck_dim 8"),
        ("vanilla", "synthesizer", [], "was trained as vanilla: evaluate it with the vanilla variant"),
        ("vanilla", "rope", [], "was trained as vanilla: evaluate it with the vanilla variant"),
        ("rope", "vanilla", [], "was trained as rope: evaluate it with the rope variant"),
        ("rope", "rope", ["--n_head", "1"], "another size: evaluate it with --n_head 2"),
        ("wide", "vanilla", [], "another size: evaluate it with --n_embd 32"),
        ("other_vocabulary", "vanilla", [], "has a vocabulary of"),
    ],
)
def test_bad_params_files(case, variant, flags, message, params_files, tiny_world, tmp_path, capsys):
    wiki = tiny_world["wiki.txt"]
    path = params_files.get(case, tmp_path / "missing.params")
    if case == "other_vocabulary":
        path, wiki = params_files["vanilla"], tmp_path / "other.txt"
        (tmp_path / "other.txt").write_text("Quite another corpus, with other letters: xyz 0123.\n", encoding="utf-8")
    outputs = tmp_path / "out" / "dev.predictions"
    err = one_line_error(
        capsys,
        *evaluate_args(variant, wiki, path, tiny_world["dev.tsv"], outputs),
        *TINY,
        *flags,
    )
    assert message in err and str(path) in err
    assert not outputs.exists()


def test_params_know_what_they_are(tiny_pretrained, tiny_world, tmp_path, capsys):
    """The metadata beside params supplies the sizes left out; contradicting ones, another vocabulary: refused."""
    wiki, dev = tiny_world["wiki.txt"], tiny_world["dev.tsv"]
    params, outputs = copy_params(tiny_pretrained, tmp_path), tmp_path / "dev.predictions"
    metadata = json.loads((tmp_path / "p.params.json").read_text(encoding="utf-8"))
    text = open(wiki, encoding="utf-8").read()
    assert {k: metadata[k] for k in ["variant", "n_layer", "n_head", "n_embd", "block_size"]} == dict(
        variant="vanilla", n_layer=2, n_head=2, n_embd=16, block_size=128
    )
    assert metadata["vocabulary"] == "".join(sorted(set(text))) and "pretrain vanilla" in metadata["command"]
    assert torch.load(tmp_path / "p.params.ckpt", weights_only=True)["params_metadata"] == metadata
    assert set(torch.load(params, weights_only=True)) == set(
        small_gpt(len(metadata["vocabulary"]) + 2, 128, n_layer=2, n_head=2, n_embd=16).state_dict()
    )

    no_sizes = CPU_FLAGS
    assert (
        main(
            *evaluate_args("vanilla", wiki, params, dev, outputs),
            *no_sizes,
        )
        == 0
    ), "the sizes come from the metadata"
    err = one_line_error(
        capsys,
        *evaluate_args("vanilla", wiki, params, dev, tmp_path / "other"),
        *no_sizes,
        "--n_head",
        "8",
    )
    assert "was trained with --n_head 2" in err and "not 8" in err
    swapped = tmp_path / "swapped.txt"  # one character swapped for another: a vocabulary of the same size
    absent = next(c for c in "QXZqxz#@" if c not in text)
    swapped.write_text(text.replace(sorted(set(text) - {"\n", " "})[-1], absent), encoding="utf-8")
    err = one_line_error(
        capsys,
        *evaluate_args("vanilla", swapped, params, dev, tmp_path / "other"),
        *no_sizes,
    )
    assert "another vocabulary" in err and "1 characters only there, 1 only here" in err
    assert not (tmp_path / "other").exists()

    (tmp_path / "p.params.json").unlink()  # params without metadata (the course's): the flags decide, as before
    assert (
        main(
            *evaluate_args("vanilla", wiki, params, dev, outputs),
            *TINY[:2],
            "--n_head",
            "4",
            "--n_embd",
            "16",
            *no_sizes,
        )
        == 0
    )


@pytest.mark.parametrize("kind", ["missing", "directory", "not utf-8", "empty", "blank lines only"])
def test_unusable_corpus(kind, tmp_path, capsys):
    corpus = tmp_path / "wiki.txt"
    if kind == "directory":
        corpus.mkdir()
    elif kind == "not utf-8":
        corpus.write_bytes(b"Ada Berg was born in \xff\xfe.\n")
    elif kind == "empty":
        corpus.write_text("", encoding="utf-8")
    elif kind == "blank lines only":
        corpus.write_text("\n\r\n  \n", encoding="utf-8")
    params = tmp_path / "p.params"
    err = one_line_error(capsys, *pretrain_args("vanilla", corpus, params), *TINY)
    assert str(corpus) in err
    assert not params.exists()


@pytest.mark.parametrize("reserved", ["\u2047", "\u25a1"])  # the mask and the pad
@pytest.mark.parametrize("command", ["pretrain", "evaluate", "dataset.py"])
def test_a_corpus_with_a_reserved_character_is_refused_naming_its_line(
    reserved, command, params_files, tiny_world, tmp_path, capsys
):
    corpus = tmp_path / "wiki.txt"
    corpus.write_text(f"Ada Berg was born in Paris.\nBruno Costa{reserved} was born in Lima.\n", encoding="utf-8")
    output = tmp_path / "out"
    if command == "dataset.py":
        capsys.readouterr()
        code = dataset.main(["charcorruption", "--pretrain_corpus_path", str(corpus)])
        out, err = capsys.readouterr()
        assert code == 2 and len(err.strip().splitlines()) == 1 and not out, err
    elif command == "pretrain":
        err = one_line_error(capsys, *pretrain_args("vanilla", corpus, output), *TINY)
    else:
        err = one_line_error(
            capsys,
            *evaluate_args("vanilla", corpus, params_files["vanilla"], tiny_world["dev.tsv"], output),
            *TINY,
        )
    assert f"{corpus}: line 2 holds the" in err and f"U+{ord(reserved):04X}" in err
    assert not output.exists()


def test_reserved_characters_in_questions_are_dropped_and_counted(tiny_world, tmp_path, capsys):
    pretraining = corpus_of(tiny_world["wiki.txt"], 128)
    clean = NameDataset(pretraining, "Ada Berg\tParis\n")
    marked = NameDataset(pretraining, "Ada\u2047 Berg\tPa\u25a1ris\n")
    assert marked.data == clean.data == [("Ada Berg", "Paris")] and marked.dropped_characters == 2
    tsv = tmp_path / "train.tsv"
    tsv.write_text("Ada\u2047 Berg\tParis\n", encoding="utf-8")
    assert (
        main(
            *finetune_args("vanilla", tiny_world["wiki.txt"], tmp_path / "p.params", tsv),
            "--finetune_epochs_from_scratch",
            1,
            *TINY,
        )
        == 0
    )
    assert "dropped 1 character(s)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "line, problem",
    [
        ("Where was B born? Lima", "got 1 field(s)"),
        ("Where was B born?\tLima\textra", "got 3 field(s)"),
    ],
)
def test_bad_finetuning_lines_name_the_file_and_line(line, problem, tiny_world, tmp_path, capsys):
    tsv = tmp_path / "bad.tsv"
    tsv.write_text(f"Where was A born?\tParis\n\n{line}\n", encoding="utf-8")
    params = tmp_path / "p.params"
    err = one_line_error(
        capsys,
        *finetune_args("vanilla", tiny_world["wiki.txt"], params, tsv),
        *TINY,
    )
    assert f"{tsv}: line 3" in err and problem in err
    assert not params.exists()


def test_bad_evaluation_lines_name_the_file_and_line(params_files, tiny_world, tmp_path, capsys):
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("Where was A born?\tParis\nWhere was B born?\tLima\tPeru\n", encoding="utf-8")
    outputs = tmp_path / "p.txt"
    err = one_line_error(
        capsys,
        *evaluate_args("vanilla", tiny_world["wiki.txt"], params_files["vanilla"], tsv, outputs),
        *TINY,
    )
    assert f"{tsv}: line 2: expected 'question<TAB>place', got 3 field(s)" in err
    assert not outputs.exists()


@pytest.mark.parametrize("outputs", ["dev.tsv", "sub/../dev.tsv"], ids=["the same path", "another path to it"])
def test_an_output_never_replaces_an_input(outputs, params_files, tiny_world, tmp_path, capsys):
    dev = tmp_path / "dev.tsv"
    dev.write_text(open(tiny_world["dev.tsv"], encoding="utf-8").read(), encoding="utf-8")
    before = dev.read_bytes()
    (tmp_path / "sub").mkdir()
    err = one_line_error(
        capsys,
        *evaluate_args("vanilla", tiny_world["wiki.txt"], params_files["vanilla"], dev, tmp_path / outputs),
        *TINY,
    )
    assert "is also the --eval_corpus_path" in err
    assert dev.read_bytes() == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["pretrain", "vanilla", "WIKI"], "pretrain needs --writing_params_path"),
        (["finetune", "vanilla", "WIKI", "--writing_params_path", "x.params"], "--finetune_corpus_path"),
        (["evaluate", "vanilla", "WIKI", "--reading_params_path", "x"], "--eval_corpus_path and --outputs_path"),
        (pretrain_args("transformer", "WIKI", "x"), "invalid choice: 'transformer'"),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--checkpoint_minutes", "0"],
            "must be a positive finite number, got 0",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--dropout", "1"],
            "dropout must be below 1, got 1.0",
        ),
        ([*pretrain_args("vanilla", "WIKI", "x"), "--recipe", "gpu"], "invalid choice: 'gpu'"),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--decay_groups", "nanogpt"],
            "argument --decay_groups: invalid choice: 'nanogpt' (choose from 'course', 'matmul')",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_lr", "inf"],
            "pretrain_lr must be a finite number, got inf",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_lr", "nan"],
            "pretrain_lr must be a finite number, got nan",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--weight_decay", "-0.1"],
            "weight_decay must be at least 0, got -0.1",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--decay_epochs", "0"],
            "decay_epochs must be positive, got 0",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_epochs", "0"],
            "pretrain_epochs must be positive, got 0",
        ),
        (
            [*finetune_args("vanilla", "WIKI", "x", "WIKI"), "--finetune_lr_from_scratch", "-1"],
            "finetune_lr_from_scratch must be positive, got -1.0",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "corpus documents=0"],
            "documents=0.0 full_names=False batch_size=128): documents must be positive, got 0.0",
        ),
        (
            [*pretrain_args("perceiver", "WIKI", "x"), "--bottleneck_dim", "256"],
            "--bottleneck_dim 256 is more than the block size 128",
        ),
        (pretrain_args("vanilla", "WIKI", "WIKI"), "is also the --pretrain_corpus_path"),
        ([*finetune_args("vanilla", "WIKI", "x", "WIKI"), "--dropout", "x"], "'x' is not a float"),
        (
            [*finetune_args("vanilla", "WIKI", "x", "WIKI"), "--full_padding=maybe"],
            "argument --full_padding/--no-full_padding: ignored explicit argument 'maybe'",
        ),
        ([*finetune_args("vanilla", "WIKI", "x", "WIKI"), "--dropout"], "argument --dropout: expected one argument"),
        ([*pretrain_args("vanilla", "WIKI", "x"), "--max", "5"], "unrecognized arguments: --max"),
        ([*pretrain_args("vanilla", "WIKI", "x"), "--max_shift", "15"], "in 0..14, got 15"),
        (
            [
                *pretrain_args("vanilla", "WIKI", "x"),
                "--pretrain_stages",
                "corpus; corpus epochs=-1",
            ],
            "epochs must be positive, got -1",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "corpus max_shift=15"],
            "max_shift must be in 0..14, got 15",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "corpus epoch=3"],
            "stage 'corpus epoch=3': 'epoch' is not one of epochs, lr, max_shift, decay_epochs",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "corpus lr=fast"],
            "stage 'corpus lr=fast': lr: 'fast' is not a float",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "books"],
            "its data must be one of corpus, pairs, corpus+pairs, text, text+pairs, got 'books'",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "corpus; text max_shift=3"],
            "full_names=False batch_size=128): max_shift pads span corruptions; a text stage has none",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "text", "--corrupt_by_epoch"],
            "corrupt_by_epoch draws span corruptions: it cannot go with a text stage",
        ),
        ([*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", ";"], "at least one stage"),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "corpus; pairs"],
            "pretraining stage 2 trains on the pairs alone: give --mix_corpus_path",
        ),
        (
            [*pretrain_args("vanilla", "WIKI", "x"), "--pretrain_stages", "corpus"] + ["--mix_corpus_path", "WIKI"],
            "--mix_corpus_path: no pretraining stage trains on the pairs (see --pretrain_stages)",
        ),
    ],
)
def test_command_line_mistakes_are_one_line(args, message, tiny_world, capsys):
    code, err = run_main_exit(capsys, *[tiny_world["wiki.txt"] if a == "WIKI" else a for a in args])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    "script, args",
    [("benchmark", []), ("controls", ["vanilla", "WIKI", "--reading_params_path", "p.params", "--predictions", "x"])],
)
def test_the_research_scripts_refuse_a_bad_mix_of_recipe_flags_as_run_py_does(script, args, tiny_world, capsys):
    """A mix that no Recipe can hold is one line and exit code 2 before anything runs, not a traceback."""
    mix = ["--clause_dropout", "0.1", "--corrupt_by_epoch"]
    argv = [tiny_world["wiki.txt"] if a == "WIKI" else a for a in args] + mix
    capsys.readouterr()
    code = run_script(script, *argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "clause_dropout draws a view per example: it cannot go with corrupt_by_epoch" in err


@pytest.mark.parametrize(
    "flag, replacement",
    [
        (["--max_epochs", "1"], "use --pretrain_epochs (pretrain), or --finetune_epochs_from_scratch and "),
        (["--batch_size=64"], "use --pretrain_batch_size (pretrain) or --finetune_batch_size (finetune)"),
        (["--shifted_epochs", "20"], "use the second stage's epochs in --pretrain_stages, e.g. --pretrain_stages"),
        (["--shifted_lr", "3e-4"], "use the second stage's lr in --pretrain_stages"),
        (["--shifted_max_shift", "13"], "use the second stage's max_shift in --pretrain_stages"),
    ],
)
def test_the_flags_of_earlier_versions_point_to_their_replacements(flag, replacement, tiny_world, tmp_path, capsys):
    args = [*pretrain_args("vanilla", tiny_world["wiki.txt"], tmp_path / "p.params"), *flag]
    code, err = run_main_exit(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{flag[0].split('=')[0]} is gone: " in err, err
    assert replacement in err and not list(tmp_path.iterdir())


def parsed(*flags):
    """The RunConfig of `run.py pretrain vanilla w.txt FLAGS`."""
    return arguments.parse(["pretrain", "vanilla", "w.txt", *flags], arguments.build_parser())[0]


def test_every_recipe_field_is_a_flag_and_a_yes_no_one_has_its_no(capsys, monkeypatch):
    """run.py's recipe flags are generated from Recipe: a new field is a flag with its help, listed by --help."""
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps --help to the terminal: the width of a pipe's fallback
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main("--help")
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0 and not err
    options = {option: action for action in arguments.build_parser()._actions for option in action.option_strings}
    listing = "recipe settings, handout / cpu / hour / demo:"  # --help's end: every recipe's values
    recipes_listed = out.split(listing)[1]
    assert parsed().given == frozenset() and parsed().recipe == HANDOUT
    for field in dataclasses.fields(Recipe):
        flag = f"--{field.name}"
        assert flag in options and options[flag].dest == field.name, field.name
        assert options[flag].help, f"{flag} has no help: its field needs setting(..., help=...)"
        assert re.search(rf"^  {flag}\b", out, re.M) and re.search(rf"^  {flag} ", recipes_listed, re.M), flag
        if field.type is bool:  # --NAME and --no-NAME, whatever the recipe's value
            assert options[f"--no-{field.name}"] is options[flag]
            for recipe in RECIPES:
                if field.name == "corrupt_by_epoch" and any(s.plain_text for s in RECIPES[recipe].pretrain_stages):
                    continue  # refused with a text stage, in one line (test_command_line_mistakes_are_one_line)
                on, off = parsed("--recipe", recipe, flag), parsed("--recipe", recipe, f"--no-{field.name}")
                assert getattr(on.recipe, field.name) is True and getattr(off.recipe, field.name) is False
                assert on.given == off.given == {field.name}
            continue
        value = another_value(field, getattr(HANDOUT, field.name))
        text = "; ".join(map(str, value)) if isinstance(value, tuple) else str(value)
        cfg = parsed(flag, text)
        assert cfg.recipe == dataclasses.replace(HANDOUT, **{field.name: value}) and cfg.given == {field.name}
        assert parsed(f"{flag}={text}").recipe == cfg.recipe


def test_baseline_names_the_file_and_line_of_a_bad_question_file(tmp_path, capsys):
    mixed = tmp_path / "mixed.tsv"
    mixed.write_text("Where was A born?\tParis\nWhere was B born?\n", encoding="utf-8")
    assert london_baseline.main([str(mixed)]) == 2
    err = capsys.readouterr().err.strip()
    expected = "line 2: expected 'question' on every line or 'question<TAB>place' on every line"
    assert err == f"london_baseline.py: error: {mixed}: {expected}"
