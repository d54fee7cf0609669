"""run.py's command line, end to end on a small model: every subcommand and variant."""

import json
import re
import shutil
import stat
import subprocess
import sys

import pytest
import torch

from conftest import (
    ROOT,
    RUNS_DIR,
    SMALL,
    TINY,
    cli,
    corpus_of,
    evaluate_args,
    finetune_args,
    pretrain_args,
    run_process,
    small_gpt,
)
from conftest import run_main as main
from factgpt.corpus.reading import BLOCK_SIZE
from factgpt.training.params import save_params
from model import VARIANTS


@pytest.mark.parametrize("variant", VARIANTS)
def test_pretrain_finetune_evaluate(variant, small_pretrained, tiny_world, tmp_path, capsys):
    """Each variant pretrains (small_pretrained runs the command), finetunes from those params and evaluates."""
    wiki = tiny_world["wiki.txt"]
    pretrained, finetuned = small_pretrained(variant), tmp_path / "ft.params"
    state = torch.load(pretrained, weights_only=True)
    assert isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())

    assert (
        main(
            "finetune",
            variant,
            wiki,
            "--reading_params_path",
            pretrained,
            "--writing_params_path",
            finetuned,
            "--finetune_corpus_path",
            tiny_world["train.tsv"],
            "--finetune_epochs_from_pretrained",
            1,
            *SMALL,
        )
        == 0
    )
    assert finetuned.exists()
    capsys.readouterr()

    outputs = tmp_path / "new" / "dev.predictions"
    assert (
        main(
            *evaluate_args(variant, wiki, finetuned, tiny_world["dev.tsv"], outputs),
            *SMALL,
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("Correct: ")
    assert len(outputs.read_text(encoding="utf-8").splitlines()) == 24

    outputs = tmp_path / "test.predictions"
    assert (
        main(
            *evaluate_args(variant, wiki, finetuned, tiny_world["test.tsv"], outputs),
            *SMALL,
        )
        == 0
    )
    assert "no targets provided" in capsys.readouterr().out
    assert len(outputs.read_text(encoding="utf-8").splitlines()) == 24

    (tmp_path / "opened").write_text("")  # params and predictions get the mode of any new file (0644 under umask 022)
    modes = {stat.S_IMODE(path.stat().st_mode) for path in [pretrained, finetuned, outputs, tmp_path / "opened"]}
    assert len(modes) == 1


def test_pretraining_continues_from_reading_params(small_pretrained, tiny_world, tmp_path):
    """pretrain --reading_params_path starts from those params (continued pretraining), not from a fresh model."""
    wiki, first, second = tiny_world["wiki.txt"], small_pretrained("vanilla"), tmp_path / "second.params"
    flags = ["--pretrain_epochs", 1, "--pretrain_lr", 1e-9, "--max_shift", 4, *SMALL]
    assert main(*pretrain_args("vanilla", wiki, second), "--reading_params_path", first, *flags) == 0
    start, end = torch.load(first, weights_only=True), torch.load(second, weights_only=True)
    assert all(torch.allclose(start[k], end[k], atol=1e-5) for k in start)
    fresh = tmp_path / "fresh.params"
    assert main(*pretrain_args("vanilla", wiki, fresh), *flags) == 0
    fresh = torch.load(fresh, weights_only=True)
    assert max((start[k] - fresh[k]).abs().max() for k in start) > 1e-3  # a fresh model is the first run's start


def test_answers_with_line_breaks_keep_one_prediction_per_line(tiny_world, tmp_path):
    """The corpus's newline is in the vocabulary; a model that writes it still gives one line per question."""
    vocabulary = corpus_of(tiny_world["wiki.txt"], BLOCK_SIZE)
    model = small_gpt(vocabulary.vocab_size, BLOCK_SIZE, n_layer=3, n_embd=32)
    with torch.no_grad():  # every position's most likely next character is the newline
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.head.weight.zero_()
        model.head.weight[vocabulary.stoi["\n"]] = 1.0
    params, outputs = tmp_path / "newline.params", tmp_path / "dev.predictions"
    save_params(model, params)
    assert (
        main(
            *evaluate_args("vanilla", tiny_world["wiki.txt"], params, tiny_world["dev.tsv"], outputs),
            *SMALL,
        )
        == 0
    )
    assert outputs.read_text(encoding="utf-8") == "\n" * 24


def test_finetune_from_scratch_then_evaluate_in_a_fresh_process(small_finetuned, tiny_world, tmp_path):
    """Params finetuned from scratch are evaluated by a fresh interpreter, as a user runs it: a score, no traceback."""
    params = small_finetuned
    code, out, err = cli(
        *evaluate_args("vanilla", tiny_world["wiki.txt"], params, tiny_world["dev.tsv"], tmp_path / "p.txt"),
        *SMALL,
    )
    assert code == 0, err
    assert out.startswith("Correct: ") and out.strip().endswith("%")
    assert "Traceback" not in err


def test_every_run_gets_its_own_tensorboard_folder(tiny_world, tmp_path, monkeypatch):
    """
    Two runs of the same command (run.sh finetunes vanilla twice) do not write into one folder:
    one in a fresh interpreter, the other in this process (another process, as the second run is).
    """
    args = [*finetune_args("vanilla", tiny_world["wiki.txt"], "m.params", tiny_world["train.tsv"]),
            "--finetune_epochs_from_scratch", "1", *SMALL]  # fmt: skip
    command = [sys.executable, str(ROOT / "src" / "run.py"), *args]
    assert subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=300).returncode == 0
    monkeypatch.chdir(tmp_path)  # expt/ under the working directory, as the first run's
    assert main(*args) == 0
    runs = list((tmp_path / "expt" / "finetune").iterdir())
    assert len(runs) == 2 and all(run.name.startswith("run_vanilla_16_pt_lr_0.006_ft_lr_0.0006_") for run in runs)


def test_help_names_each_subcommands_flags_and_the_model_sizes(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps --help to the terminal: the width of a pipe's fallback
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main("pretrain", "--help")
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0 and not err
    assert "evaluate: --reading_params_path --eval_corpus_path --outputs_path" in out
    assert "finetune: --writing_params_path --finetune_corpus_path" in out
    assert re.search(r"--n_layer \S+ +Transformer blocks\n", out) and "attention heads per block" in out
    sizes = "\n  --n_layer 4\n", "\n  --n_head 8 / 4 / 4 / 4\n"  # the sizes' defaults: handout / cpu / hour / demo
    assert all(size in out for size in sizes)


def test_pretraining_settings_pass_through_finetune_and_evaluate(tiny_world, tmp_path):
    """
    run.sh gives its overrides to every command: a pretraining-only setting is ignored by the others,
    whose params and predictions are byte for byte those of the command without it.
    """
    wiki = tiny_world["wiki.txt"]
    only_pretraining = ["--corrupt_by_epoch", "--max_shift", 4, "--pretrain_stages", "corpus+pairs; corpus epochs=1"]
    only_pretraining += ["--pretrain_epochs", 1]
    written = []
    for name, given in (("with", only_pretraining), ("without", [])):
        params, predictions = tmp_path / f"{name}.params", tmp_path / f"{name}.dev.predictions"
        finetune = finetune_args("vanilla", wiki, params, tiny_world["train.tsv"])
        assert main(*finetune, "--finetune_epochs_from_scratch", 1, *TINY, *given) == 0
        assert main(*evaluate_args("vanilla", wiki, params, tiny_world["dev.tsv"], predictions), *TINY, *given) == 0
        written.append((params.read_bytes(), predictions.read_bytes()))
    assert written[0] == written[1]


TOY_ATTENTION = '''

class ToyAttention(CausalSelfAttention):
    """A test's variant: causal self-attention whose output a learned gain scales."""

    def __init__(self, config):
        super().__init__(config)
        self.gain = nn.Parameter(torch.ones(()))

    def forward(self, x, cache=None, q_start=0):
        return self.gain * super().forward(x, cache, q_start)
'''


def edited(path, old, new):
    """Replace the one occurrence of `old` in the file at `path` with `new` (a step of README's, done by hand)."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path.name} no longer has {old!r}: README's steps for a new variant need updating"
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.mark.slow
def test_a_new_variant_is_a_class_and_its_name_as_readme_says(tiny_world, tmp_path):
    """
    README's steps for a new attention variant, followed in a copy of src/ with a toy one: it
    pretrains, finetunes from its params and evaluates, and its params are told from vanilla's.
    """
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`model.VARIANTS`" in readme and "`model.SELF_ATTENTION`" in readme
    (src / "attention.py").write_text((src / "attention.py").read_text(encoding="utf-8") + TOY_ATTENTION)
    edited(src / "model.py", '"synthesizer", "rope")', '"synthesizer", "rope", "toy")')
    edited(
        src / "model.py",
        '{"synthesizer": SynthesizerAttention}',
        '{"synthesizer": SynthesizerAttention, "toy": ToyAttention}',
    )
    edited(src / "model.py", "from attention import ", "from attention import ToyAttention, ")
    wiki, pre, ft = tiny_world["wiki.txt"], tmp_path / "pre.params", tmp_path / "ft.params"
    commands = [
        [*pretrain_args("toy", wiki, pre), "--pretrain_epochs", 1, *TINY],
        [*finetune_args("toy", wiki, ft, tiny_world["train.tsv"]), "--reading_params_path", pre, *TINY],
        [*evaluate_args("toy", wiki, ft, tiny_world["dev.tsv"], tmp_path / "dev.predictions"), *TINY],
        [*evaluate_args("vanilla", wiki, ft, tiny_world["dev.tsv"], tmp_path / "v.predictions"), *TINY],
    ]
    # the copy's run.main, a command after another, in one fresh interpreter: their exit statuses
    each = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import run\nprint(*map(run.main, json.loads(sys.argv[2])))"
    )
    argv = json.dumps([[str(arg) for arg in command] for command in commands])
    done = run_process([sys.executable, "-c", each, str(src), argv], timeout=300, cwd=RUNS_DIR)
    assert done.stdout.splitlines()[-1] == "0 0 0 2", done.stderr[-2000:]
    assert re.search(r"^Correct: \d+ out of 24", done.stdout, re.M), done.stdout
    gains = [key for key in torch.load(ft, weights_only=True) if key.endswith("attn.gain")]
    assert len(gains) == 2, "each block's toy attention is trained and saved"
    assert f"params file {ft} was trained as toy" in done.stderr, done.stderr
