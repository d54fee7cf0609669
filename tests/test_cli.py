"""The command line, end to end on a small model: every subcommand and variant, and its errors."""

import argparse
import dataclasses
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import zipfile

import pytest
import torch

import arguments
import benchmark
import hooks
import pipeline
import probed_pretraining
import step_pace
from config import BLOCK_SIZE, HANDOUT, RECIPES, Stage, parse_stages
from conftest import CPU_FLAGS, ROOT, RUNS_DIR, SMALL, TINY, cli, evaluate_args, finetune_args, run_process
from conftest import run_main as main
from dataset import CharCorruptionDataset
from model import GPT, GPTConfig, variant_config
from params import read_metadata, save_params
from trainer import Trainer
from world import PLACE_SUFFIXES, write_world


@pytest.mark.parametrize("variant", ["vanilla", "perceiver", "synthesizer", "rope"])
def test_pretrain_finetune_evaluate(variant, tiny_world, tmp_path, capsys):
    wiki = tiny_world["wiki.txt"]
    pretrained, finetuned = tmp_path / "pre.params", tmp_path / "ft.params"
    assert main("pretrain", variant, wiki, "--writing_params_path", pretrained, "--pretrain_epochs", 1, *SMALL) == 0
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


def test_pretraining_continues_from_reading_params(tiny_world, tmp_path):
    """pretrain --reading_params_path starts from those params (continued pretraining), not from a fresh model."""
    wiki, first, second = tiny_world["wiki.txt"], tmp_path / "first.params", tmp_path / "second.params"
    assert main("pretrain", "vanilla", wiki, "--writing_params_path", first, "--pretrain_epochs", 1, *SMALL) == 0
    flags = ["--pretrain_epochs", 1, "--pretrain_lr", 1e-9, "--max_shift", 4, *SMALL]
    assert (
        main("pretrain", "vanilla", wiki, "--reading_params_path", first, "--writing_params_path", second, *flags) == 0
    )
    start, end = torch.load(first, weights_only=True), torch.load(second, weights_only=True)
    assert all(torch.allclose(start[k], end[k], atol=1e-5) for k in start)
    fresh = tmp_path / "fresh.params"
    assert main("pretrain", "vanilla", wiki, "--writing_params_path", fresh, *flags) == 0
    fresh = torch.load(fresh, weights_only=True)
    assert max((start[k] - fresh[k]).abs().max() for k in start) > 1e-3  # a fresh model is the first run's start


class Stopped(Exception):
    """What stop_at's hook raises: a pretraining stopped at an epoch's end, before that epoch's checkpoint."""


def stop_at(epoch):
    """An on_epoch_end hook that stops pretraining after `epoch` epochs (counted on across the stages)."""

    def hook(end):
        if end.epoch == epoch:
            raise Stopped(epoch)

    return hook


class RecordingTrainer(Trainer):
    """A Trainer that records what every training (a stage) is given: its config, its data and its starting params."""

    made = []

    def __init__(self, model, train_dataset, test_dataset, config):
        start = {k: v.detach().clone() for k, v in model.state_dict().items()}
        RecordingTrainer.made.append((config, train_dataset, start))
        super().__init__(model, train_dataset, test_dataset, config)


def test_the_second_stage_is_pretraining_continued_with_its_flags(tiny_world, tmp_path, monkeypatch):
    """
    A recipe's second stage ends pretraining exactly as a second command going on from the
    first stage's params, with the stage's settings as flags, would. The stages keep one
    checkpoint, of the stage it was written in, and --resume goes on at that stage; nothing of
    the first stage is left beside the params; snapshots count epochs and seconds on across the stages.
    """
    cpu, wiki = RECIPES["cpu"], tiny_world["wiki.txt"]
    second = dataclasses.replace(cpu.pretrain_stages[1], epochs=2, decay_epochs=2)  # the cpu recipe's, shorter
    assert (second.lr, second.max_shift) == (3e-4, 13) and cpu.pretrain_stages[0] == Stage()
    stages = ["--pretrain_stages", f"corpus+pairs; {second}"]
    common = ["pretrain", "vanilla", wiki, "--recipe", "cpu", "--pretrain_epochs", 2, *SMALL]
    one, two = tmp_path / "one" / "p.params", tmp_path / "two" / "p.params"
    assert main(*common, *stages, "--writing_params_path", one) == 0
    assert sorted(os.listdir(one.parent)) == ["p.params", "p.params.json"]

    stage = tmp_path / "stage.params"
    assert main(*common, "--pretrain_stages", "corpus+pairs", "--writing_params_path", stage) == 0
    continued = ["--pretrain_epochs", 2, "--decay_epochs", 2, "--pretrain_lr", second.lr]
    continued += ["--max_shift", second.max_shift, "--pretrain_stages", "corpus+pairs", "--reading_params_path", stage]
    assert main(*common, *continued, "--writing_params_path", two) == 0
    a, b = torch.load(one, weights_only=True), torch.load(two, weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    fresh = torch.load(stage, weights_only=True)
    assert max((a[k] - fresh[k]).abs().max() for k in a) > 1e-4

    # each stage trains with its own settings, the second from the first's params; one checkpoint, the second stage's
    monkeypatch.setattr(pipeline, "Trainer", RecordingTrainer)
    monkeypatch.setattr(RecordingTrainer, "made", [])
    kept = tmp_path / "kept" / "p.params"
    flags = ["--save_every", 2, "--tb_expt_name", "two_stages", "--keep_checkpoint", "--writing_params_path", kept]
    assert probed_pretraining.main([str(x) for x in [*common, *stages, *flags]]) == 0
    assert sorted(os.listdir(kept.parent)) == [
        "p.params",
        "p.params.ckpt",
        "p.params.epoch2",
        "p.params.epoch2.json",
        "p.params.epoch4",
        "p.params.epoch4.json",
        "p.params.json",
    ]
    (first, first_data, _), (closing, closing_data, closing_start) = RecordingTrainer.made
    assert all(torch.equal(closing_start[k], fresh[k]) for k in fresh)  # the first stage's params, carried in memory
    assert (first.learning_rate, first_data.max_shift, first.max_epochs) == (cpu.pretrain_lr, 0, 2)
    assert first.final_tokens == cpu.decay_epochs * len(first_data) * BLOCK_SIZE
    assert (closing.learning_rate, closing_data.max_shift, closing.max_epochs) == (second.lr, second.max_shift, 2)
    assert closing.final_tokens == 2 * len(closing_data) * BLOCK_SIZE
    assert (first.run_identity["stage"], closing.run_identity["stage"]) == (1, 2)
    ckpt = torch.load(f"{kept}.ckpt", weights_only=True)
    assert ckpt["run_identity"] == closing.run_identity and ckpt["epoch"] == 2
    assert ckpt["run_identity"]["pretrain_stages"] == f"corpus+pairs; {second}"
    assert all(torch.equal(ckpt["model"][k], a[k]) for k in a)
    logs = os.listdir(RUNS_DIR / "expt" / "pretrain")  # TensorBoard's: a folder per stage
    assert any(name.startswith("two_stages_vanilla_") for name in logs)
    assert any(name.startswith("two_stages_stage2_vanilla_") for name in logs)
    # snapshots beside the params, their epochs and seconds counted on from the first stage's
    assert hooks.snapshots(str(kept)) == [(2, f"{kept}.epoch2"), (4, f"{kept}.epoch4")]
    early, late = read_metadata(f"{kept}.epoch2"), read_metadata(f"{kept}.epoch4")
    assert (early["epochs"], late["epochs"]) == (2, 4) and early["training_seconds"] <= late["training_seconds"]
    assert all(torch.equal(t, fresh[k]) for k, t in torch.load(f"{kept}.epoch2", weights_only=True).items())

    # stopped between the stages, then within the second: --resume goes on at the checkpoint's stage
    for stopped_at, stage_epochs_done in [(3, 2), (4, 1)]:
        stopped = tmp_path / f"stopped{stopped_at}" / "p.params"
        argv = [str(x) for x in [*common, *stages, "--writing_params_path", stopped]]
        with pytest.raises(Stopped):
            pipeline.pretrain(arguments.parse(argv, arguments.build_parser())[0], [stop_at(stopped_at)])
        assert torch.load(f"{stopped}.ckpt", weights_only=True)["run_identity"]["stage"] == 1 + (stopped_at == 4)
        code, _, err = cli(*argv, "--resume")
        assert code == 0 and f"resuming from {stopped}.ckpt" in err and f"({stage_epochs_done} epochs done)" in err, err
        resumed = torch.load(stopped, weights_only=True)
        assert all(torch.equal(a[k], resumed[k]) for k in a)
        assert sorted(os.listdir(stopped.parent)) == ["p.params", "p.params.json"]


def test_answers_with_line_breaks_keep_one_prediction_per_line(tiny_world, tmp_path):
    """The corpus's newline is in the vocabulary; a model that writes it still gives one line per question."""
    with open(tiny_world["wiki.txt"], encoding="utf-8") as f:
        vocabulary = CharCorruptionDataset(f.read(), BLOCK_SIZE)
    model = GPT(GPTConfig(vocabulary.vocab_size, BLOCK_SIZE, n_layer=3, n_head=2, n_embd=32))
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


def test_finetune_from_scratch_then_evaluate_in_a_fresh_process(tiny_world, tmp_path):
    params = tmp_path / "model.params"
    code, _, err = cli(
        *finetune_args("vanilla", tiny_world["wiki.txt"], params, tiny_world["train.tsv"]),
        "--finetune_epochs_from_scratch",
        2,
        *SMALL,
    )
    assert code == 0, err
    code, out, err = cli(
        *evaluate_args("vanilla", tiny_world["wiki.txt"], params, tiny_world["dev.tsv"], tmp_path / "p.txt"),
        *SMALL,
    )
    assert code == 0, err
    assert out.startswith("Correct: ") and out.strip().endswith("%")
    assert "Traceback" not in err


def test_every_run_gets_its_own_tensorboard_folder(tiny_world, tmp_path):
    """Two runs of the same command (run.sh finetunes vanilla twice) do not write into one folder."""
    command = [
        sys.executable,
        str(ROOT / "src" / "run.py"),
        *finetune_args("vanilla", tiny_world["wiki.txt"], "m.params", tiny_world["train.tsv"]),
        "--finetune_epochs_from_scratch",
        "1",
        *SMALL,
    ]
    for _ in range(2):
        assert subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=300).returncode == 0
    runs = list((tmp_path / "expt" / "finetune").iterdir())
    assert len(runs) == 2 and all(run.name.startswith("run_vanilla_16_pt_lr_0.006_ft_lr_0.0006_") for run in runs)


def test_help_names_each_subcommands_flags_and_the_model_sizes():
    code, out, err = cli("pretrain", "--help")
    assert code == 0 and not err
    assert "evaluate: --reading_params_path --eval_corpus_path --outputs_path" in out
    assert "finetune: --writing_params_path --finetune_corpus_path" in out
    assert re.search(r"--n_layer \S+ +Transformer blocks\n", out) and "attention heads per block" in out
    assert "\n  --n_layer 4\n" in out and "\n  --n_head 8 / 4 / 4\n" in out  # the sizes' defaults: handout / cpu / demo


def test_dataset_module_prints_examples(tiny_world):
    for kind in ["charcorruption", "namedata"]:
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "src" / "dataset.py"),
                kind,
                "--pretrain_corpus_path",
                tiny_world["wiki.txt"],
                "--finetune_corpus_path",
                tiny_world["train.tsv"],
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and done.stdout.count("x: ") == 4 and "\u2047" in done.stdout


def test_london_baseline(a5_dir):
    done = subprocess.run(
        [sys.executable, str(ROOT / "src" / "london_baseline.py"), str(a5_dir / "birth_dev.tsv")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "Correct: 25 out of 500: 5.0%"


def test_most_frequent_place_baseline(tiny_world, tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("Where was A born?\tLima\nWhere was B born?\tOslo\nWhere was C born?\tOslo\n", encoding="utf-8")
    dev = tmp_path / "dev.tsv"
    dev.write_text("Where was D born?\tOslo\nWhere was E born?\tParis\nWhere was F born?\tLima\n", encoding="utf-8")
    script = str(ROOT / "src" / "london_baseline.py")
    done = subprocess.run(
        [sys.executable, script, str(dev), "--most_frequent_in", str(train)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "Correct: 1 out of 3: 33.33%"
    done = subprocess.run([sys.executable, script, str(dev)], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "Correct: 0 out of 3: 0.0%"
    done = subprocess.run(
        [sys.executable, script, str(tmp_path / "none.tsv")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "none.tsv" in done.stderr and "Traceback" not in done.stderr


def test_benchmark_sweep_runs(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "benchmark.py"),
            "--skip_comparison",
            "--sweep",
            "32",
            "--sweep_batch",
            "2",
            "--variants",
            "vanilla",
            "perceiver",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 32 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["vanilla", "perceiver"]
    assert re.search(r"^one core's fp32 matmul \(512 x 512\): \d+\.\d GFLOP/s$", done.stdout, re.M), done.stdout


def test_benchmark_names_the_peak_of_the_gpu_named_in_full():
    from benchmark import peak_tflops_of

    assert peak_tflops_of("NVIDIA L4") == 30.3 and peak_tflops_of("NVIDIA L40S") == 91.6  # not an L4
    assert peak_tflops_of("NVIDIA H100 PCIe") == 51.0 and peak_tflops_of("NVIDIA H100 80GB HBM3") == 67.0
    assert peak_tflops_of("NVIDIA A100-SXM4-80GB") == 19.5 and peak_tflops_of("NVIDIA GeForce RTX 4090") is None


def test_benchmark_matmul_rate_alone():
    script = str(ROOT / "experiments" / "benchmark.py")
    done = subprocess.run([sys.executable, script, "--matmul_rate"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and float(re.search(r"([\d.]+) GFLOP/s", lines[1]).group(1)) > 0


BENCHMARK_LINES = {"wiki.txt": 24, "train.tsv": 20, "dev.tsv": 8, "test.tsv": 8}  # of the tiny world's files


def benchmark_data(tiny_world, folder):
    """Part of the tiny world under the assignment's file names, for benchmark.py --data."""
    folder.mkdir()
    names = {"wiki.txt": "wiki.txt", "train.tsv": "birth_places_train.tsv", "dev.tsv": "birth_dev.tsv"}
    for ours, lines in BENCHMARK_LINES.items():
        kept = open(tiny_world[ours], encoding="utf-8").read().splitlines(keepends=True)[:lines]
        (folder / names.get(ours, "birth_test_inputs.tsv")).write_text("".join(kept), encoding="utf-8")
    return folder


def benchmark_output(tiny_world, tmp_path, *flags):
    """What benchmark.py prints for vanilla on the tiny world, on the CPU, with these flags."""
    argv = ["--data", benchmark_data(tiny_world, tmp_path / "data"), "--variants", "vanilla", *flags]
    script = str(ROOT / "experiments" / "benchmark.py")
    done = run_process([sys.executable, script, *map(str, argv), "--device", "cpu"], timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def benchmark_rows(tiny_world, tmp_path, *flags):
    """benchmark.py's vanilla rows on the tiny world, without the sweep: [(measure, straightforward, fast, ratio)]."""
    output = benchmark_output(tiny_world, tmp_path, "--sweep", *flags)
    lines = [line.split("|")[2:-1] for line in output.splitlines() if line.startswith("| vanilla |")]
    return [tuple(cell.strip() for cell in cells) for cells in lines]


@pytest.mark.slow
def test_benchmark_reports_the_pace_of_the_handout_pretraining(tiny_world, tmp_path):
    rows = {
        measure: cells for measure, *cells in benchmark_rows(tiny_world, tmp_path, "--peak_tflops", 1, "--epochs", 2)
    }
    steps, tokens, flops, mfu, projected = (
        rows[name]
        for name in [
            "pretraining steps/s",
            "pretraining tokens/s (127 a row)",
            "pretraining model FLOP/s",
            "pretraining MFU (fp32 peak)",
            "handout pretraining (650 epochs), projected",
        ]
    )
    people = BENCHMARK_LINES["wiki.txt"]
    for way in (0, 1):  # the straightforward way, then the fast way
        # one step an epoch (fewer people than a batch): tokens, FLOPs and the projection follow from the steps/s
        assert float(tokens[way]) == pytest.approx(people * 127 * float(steps[way]), rel=0.01)
        assert float(projected[way][:-1]) == pytest.approx(650 / float(steps[way]), rel=0.01)
        # the handout's model: about 6 FLOPs per parameter and token, forward and backward (20.8M a token measured)
        assert float(flops[way]) / float(tokens[way]) == pytest.approx(20.8e6, rel=0.02)
        assert float(mfu[way][:-1]) == pytest.approx(100 * float(flops[way]) / 1e12, rel=0.01)
    assert float(steps[1]) / float(steps[0]) == pytest.approx(float(steps[2][:-1]), rel=0.1)


@pytest.mark.slow
def test_benchmark_compares_whole_processes(tiny_world, tmp_path):
    rows = benchmark_rows(tiny_world, tmp_path, "--whole_process")
    assert [row[0] for row in rows] == [
        "pretraining epoch, whole process",
        "finetuning epoch, whole process",
        "evaluating the dev questions, whole process",
    ]
    for _, slow, fast, ratio in rows:
        assert float(slow[:-1]) / float(fast[:-1]) == pytest.approx(float(ratio[:-1]), rel=0.1)


def test_benchmark_profiles_pretraining_steps(tiny_world, tmp_path):
    output = benchmark_output(tiny_world, tmp_path, "--profile_steps", 2)
    # the tiny world's 24 biographies make one batch of the handout's 128
    assert re.search(r"^drawing an epoch's 1 batches: [\d.]+ ms a batch$", output, re.M), output
    stepped = r"^2 steps on batches in memory, unprofiled: [\d.]+ ms a step \([\d.]+ steps/s\)$"
    assert re.search(stepped, output, re.M)
    assert "aten::mm" in output and "Self CPU time total" in output


def test_benchmark_counts_what_a_step_dispatches(tiny_world, tmp_path, monkeypatch):
    """
    --count_dispatches: a row per batch shape. The CPU's passes of 16 rows dispatch more than one
    pass; a cut batch needs its rows' lengths on the host, fixed shapes nothing between read-backs.
    """
    # two blocks, narrower than the handout's model: the same operators, in less time
    narrow = dict(n_layer=2, n_head=2, n_embd=32)
    monkeypatch.setattr(benchmark, "model_config", lambda v, vocab, block: variant_config(v, vocab, block, **narrow))
    files = benchmark.load_data(benchmark_data(tiny_world, tmp_path / "data"))
    args = argparse.Namespace(fast_recipe=HANDOUT, device="cpu", count_dispatches=1)
    rows = {label: numbers for label, *numbers in benchmark.count_dispatches("vanilla", files, args)}
    passes, one_pass = rows.pop("cut, passes of 16 rows (the CPU's)"), rows.pop("cut, one pass (CUDA's)")
    assert list(rows) == ["full_padding", "fixed_shapes"]
    assert passes[0] > one_pass[0] > 0  # the tiny world's 24 rows: passes of 16 and 8 rows against one
    assert rows["full_padding"][0] == rows["fixed_shapes"][0] > 0
    assert passes[1] > one_pass[1] >= 1 and rows["fixed_shapes"][1] == 0
    assert all(row[3] >= 1 for row in [passes, one_pass, *rows.values()])  # a read-back reads the loss on the host


def test_step_pace_rows_each_way_with_the_flags_that_give_it(tiny_world, tmp_path, monkeypatch, capsys):
    """experiments/step_pace.py: a row per way and precision, its projection from its epochs, the flags run.py takes."""
    narrow = dict(n_layer=1, n_head=2, n_embd=32)
    monkeypatch.setattr(step_pace, "model_config", lambda v, vocab, block: variant_config(v, vocab, block, **narrow))
    data = benchmark_data(tiny_world, tmp_path / "data")
    step_pace.main(["--data", str(data), "--device", "cpu", "--epochs", "2", "--precisions", "fp32"])
    rows = [
        line.split(" | ") for line in capsys.readouterr().out.splitlines() if re.match(r"^\| [a-z_]+ \| fp32", line)
    ]
    assert [row[0][2:] for row in rows] == list(step_pace.WAYS)
    for way, _, first, steps, host, gpu, projected, flags in rows:
        assert gpu == "" and float(host) > 0  # no GPU time on the CPU
        # the first epoch, then 649 at the fastest pace: one step an epoch (fewer people than a batch)
        assert float(projected[:-2]) == pytest.approx(float(first[:-2]) + 649 / float(steps), rel=0.05, abs=1)
        argv = ["pretrain", "vanilla", "w.txt", *flags.strip(" |`").split()]
        recipe = arguments.parse(argv, arguments.build_parser())[0].recipe
        assert {k: getattr(recipe, k) for k in step_pace.WAYS[way[2:]]} == step_pace.WAYS[way[2:]]


def test_pretraining_settings_pass_through_finetune_and_evaluate(tiny_world, tmp_path):
    """run.sh gives its overrides to every command: a pretraining-only setting is ignored by the others."""
    wiki, params = tiny_world["wiki.txt"], tmp_path / "ft.params"
    only_pretraining = ["--corrupt_by_epoch", "--max_shift", 4, "--pretrain_stages", "corpus+pairs; corpus epochs=1"]
    only_pretraining += ["--pretrain_epochs", 1]
    finetune = finetune_args("vanilla", wiki, params, tiny_world["train.tsv"])
    assert main(*finetune, "--finetune_epochs_from_scratch", 1, *TINY, *only_pretraining) == 0
    evaluate = evaluate_args("vanilla", wiki, params, tiny_world["dev.tsv"], tmp_path / "dev.predictions")
    assert main(*evaluate, *TINY, *only_pretraining) == 0


def test_recipes_fill_in_the_settings_and_flags_win():
    def recipe(*argv):
        return arguments.parse(list(argv), arguments.build_parser())[0].recipe

    handout = recipe("pretrain", "vanilla", "w.txt")
    assert handout == HANDOUT and handout.pretrain_lr == 6e-3 and handout.dropout == 0.1
    cpu = recipe("pretrain", "vanilla", "w.txt", "--recipe", "cpu")
    assert cpu == RECIPES["cpu"] and cpu.pretrain_batch_size < handout.pretrain_batch_size
    overridden = recipe("pretrain", "vanilla", "w.txt", "--recipe", "cpu", "--pretrain_lr", "5e-4", "--dropout=0.2")
    assert overridden == dataclasses.replace(cpu, pretrain_lr=5e-4, dropout=0.2)
    assert len(cpu.pretrain_stages) == 2 and handout.pretrain_stages == (Stage(),)
    cpu_stages = "; ".join(map(str, cpu.pretrain_stages))  # the stages' text (--help's) reads back as they are
    assert cpu_stages == "corpus+pairs; corpus+pairs epochs=20 lr=0.0003 max_shift=13 decay_epochs=20"
    assert recipe("pretrain", "vanilla", "w.txt", "--pretrain_stages", cpu_stages) == (
        dataclasses.replace(HANDOUT, pretrain_stages=cpu.pretrain_stages)
    )
    assert parse_stages(cpu_stages) == cpu.pretrain_stages
    one_stage = recipe("finetune", "vanilla", "w.txt", "--recipe", "cpu", "--pretrain_stages", "corpus+pairs")
    assert one_stage == dataclasses.replace(cpu, pretrain_stages=(Stage(),))
    # every field of a recipe is a flag; a yes/no one is on alone and off with no-
    switched = recipe("pretrain", "vanilla", "w.txt", "--recipe", "cpu", "--no-group_by_length", "--full_padding")
    assert switched == dataclasses.replace(cpu, group_by_length=False, full_padding=True)
    assert recipe("pretrain", "vanilla", "w.txt", "--warmup_tokens", "7", "--decay_groups", "matmul") == (
        dataclasses.replace(HANDOUT, warmup_tokens=7, decay_groups="matmul")
    )


def test_a_recipe_sets_the_model_size_length_grouping_and_optimisation_and_flags_win(tiny_world, tmp_path, monkeypatch):
    recipe = dataclasses.replace(HANDOUT, n_layer=2, n_head=2, n_embd=24, group_by_length=True, weight_decay=0.0)
    monkeypatch.setitem(RECIPES, "narrow", recipe)
    common = ["pretrain", "vanilla", tiny_world["wiki.txt"], "--recipe", "narrow", "--pretrain_epochs", 1, *CPU_FLAGS]
    assert main(*common, "--writing_params_path", tmp_path / "a.params", "--keep_checkpoint") == 0
    metadata = read_metadata(str(tmp_path / "a.params"))
    assert (metadata["n_layer"], metadata["n_head"], metadata["n_embd"]) == (2, 2, 24)
    checkpoint = torch.load(tmp_path / "a.params.ckpt", weights_only=True)
    assert checkpoint["run_identity"]["group_by_length"] is True
    assert [group["weight_decay"] for group in checkpoint["optimizer"]["param_groups"]] == [0.0, 0.0]
    assert checkpoint["optimizer"]["param_groups"][0]["lr"] > 0.9 * recipe.pretrain_lr  # a 200-epoch half period
    flags = ["--n_embd", 16, "--no-group_by_length", "--weight_decay", 0.05, "--decay_epochs", 1, "--keep_checkpoint"]
    assert main(*common, "--writing_params_path", tmp_path / "b.params", *flags) == 0
    assert read_metadata(str(tmp_path / "b.params"))["n_embd"] == 16
    checkpoint = torch.load(tmp_path / "b.params.ckpt", weights_only=True)
    assert checkpoint["run_identity"]["group_by_length"] is False
    assert [group["weight_decay"] for group in checkpoint["optimizer"]["param_groups"]] == [0.05, 0.0]
    assert checkpoint["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.1 * recipe.pretrain_lr)  # on the floor
    assert (checkpoint["run_identity"]["weight_decay"], checkpoint["run_identity"]["decay_epochs"]) == (0.05, 1)


@pytest.mark.parametrize("corrupt_by_epoch", [False, True])
def test_pretraining_with_the_cpu_recipe_reports_recall(tiny_world, tmp_path, corrupt_by_epoch, capsys):
    """experiments/probed_pretraining.py: the recall probe through both stages of the cpu recipe."""
    params = tmp_path / "pre.params"
    argv = [
        "pretrain",
        "vanilla",
        tiny_world["wiki.txt"],
        "--writing_params_path",
        params,
        "--recipe",
        "cpu",
        "--pretrain_epochs",
        2,
        "--probe_corpus_path",
        tiny_world["dev.tsv"],
        "--probe_every",
        1,
        "--pretrain_stages",
        f"corpus+pairs; {dataclasses.replace(RECIPES['cpu'].pretrain_stages[1], epochs=1)}",
        "--keep_checkpoint",
        *SMALL,
        *(["--corrupt_by_epoch"] if corrupt_by_epoch else []),
    ]
    capsys.readouterr()
    assert probed_pretraining.main([str(a) for a in argv]) == 0
    err = capsys.readouterr().err
    reports = [line for line in err.replace("\r", "\n").splitlines() if "birthplaces of" in line]
    assert [r.split(":")[0] for r in reports] == ["epoch 1", "epoch 2", "epoch 3"]  # the second stage's epoch 3
    assert all(" of 24 birthplaces of " in r for r in reports)  # every dev person's document names the place
    assert all(re.search(r"answers \d+ of its 24 questions", r) for r in reports)
    assert params.exists()
    checkpoint = torch.load(f"{params}.ckpt", weights_only=True)  # the second stage's, the one checkpoint
    identity = checkpoint["run_identity"]
    assert checkpoint["params_metadata"]["recipe"] == "cpu" and identity["dropout"] == 0.0 and identity["stage"] == 2
    assert identity["corrupt_by_epoch"] == corrupt_by_epoch
    assert identity["pretrain_lr"] == RECIPES["cpu"].pretrain_lr  # the first stage's, which gives none of its own
    assert sorted(os.listdir(tmp_path)) == ["pre.params", "pre.params.ckpt", "pre.params.json"]


@pytest.mark.slow
def test_mixed_pairs_are_learned_in_pretraining(tiny_world, tmp_path, capsys, monkeypatch):
    """
    probed_pretraining.py --mix_corpus_path trains on the pairs in finetuning's format: the
    pretrained model already answers them.
    """
    configs = []

    class RecordingTrainer(Trainer):
        def __init__(self, model, train_dataset, test_dataset, config):
            configs.append(config)
            super().__init__(model, train_dataset, test_dataset, config)

    monkeypatch.setattr(pipeline, "Trainer", RecordingTrainer)
    wiki, train = tiny_world["wiki.txt"], tiny_world["train.tsv"]
    params, outputs = tmp_path / "pre.params", tmp_path / "train.predictions"
    argv = [
        "pretrain",
        "vanilla",
        wiki,
        "--writing_params_path",
        params,
        "--pretrain_epochs",
        100,
        "--pretrain_lr",
        3e-3,
        "--dropout",
        0,
        "--mix_corpus_path",
        train,
        "--keep_checkpoint",
        "--probe_corpus_path",
        train,
        "--probe_every",
        100,
        *SMALL,
    ]
    assert probed_pretraining.main([str(a) for a in argv]) == 0
    probe = capsys.readouterr().err.replace("\r", "\n")
    probe_answered = int(re.search(r"epoch 100: .* answers (\d+) of its 60 questions", probe).group(1))
    checkpoint = torch.load(f"{params}.ckpt", weights_only=True)
    assert checkpoint["run_identity"]["examples"] == 84 + 60
    assert f"--mix_corpus_path {train}" in checkpoint["params_metadata"]["command"]
    # the cosine decays over decay_epochs epochs of corpus and pairs; without pairs, of the corpus alone
    assert configs[0].final_tokens == HANDOUT.decay_epochs * (84 + 60) * BLOCK_SIZE
    plain = ["pretrain", "vanilla", wiki, "--writing_params_path", tmp_path / "plain.params"]
    assert main(*plain, "--pretrain_epochs", 1, *SMALL) == 0
    assert configs[1].final_tokens == HANDOUT.decay_epochs * 84 * BLOCK_SIZE

    capsys.readouterr()
    assert (
        main(
            *evaluate_args("vanilla", wiki, params, train, outputs),
            *SMALL,
        )
        == 0
    )
    correct = int(re.match(r"Correct: (\d+) out of 60", capsys.readouterr().out).group(1))
    assert correct >= 20  # 27 with the course's decay groups; span corruption alone answers none of them
    assert probe_answered == correct


SMOKE_STAGES = "corpus+pairs; corpus+pairs epochs=1 lr=3e-4 max_shift=13 decay_epochs=1"
SMOKE_FINETUNING = ["--finetune_epochs_from_scratch", "1", "--finetune_epochs_from_pretrained", "1"]


def assignment_copy(folder):
    """A folder with run.sh, src/ and a small generated world as the assignment's four files."""
    folder.mkdir()
    shutil.copy(ROOT / "run.sh", folder)
    (folder / "src").symlink_to(ROOT / "src")
    write_world(folder, n_train=40, n_dev=10, n_test=10, n_places=8)
    return folder


def run_sh_command(*args, **env):
    """run.sh's smoke run (one epoch a stage, the small model) on a machine without CUDA, one thread a training."""
    smoke = ["--pretrain_epochs", "1", "--pretrain_stages", SMOKE_STAGES, *SMOKE_FINETUNING, *SMALL]
    environment = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **env}
    return ["bash", "run.sh", *smoke, *args], environment


def run_sh(folder, *args, **env):
    command, environment = run_sh_command(*args, **env)
    return run_process(command, timeout=600, cwd=folder, env=environment)


def run_sh_killed(folder, path, **env):
    """run.sh's smoke run killed with SIGKILL, as a dropped session kills it, as soon as `path` exists in the folder."""
    command, environment = run_sh_command(**env)
    with subprocess.Popen(command, cwd=folder, env=environment, start_new_session=True, **QUIET) as process:
        while not (folder / path).exists():
            assert process.poll() is None, f"run.sh ended before {path} was written"
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGKILL)


QUIET = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_run_sh_runs_the_whole_assignment_and_side_by_side_to_the_same_results(tmp_path):
    """
    run.sh from a copy of the repository whose data are a small world, one training after
    another (vanilla and rope: the assignment notebook's test runs all four variants); then
    killed and run again; then --jobs.
    """
    folder = assignment_copy(tmp_path / "sequential")
    done = run_sh(folder, VARIANTS="vanilla rope")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "training with --recipe cpu" in done.stderr
    assert "--readout frames: the pretrained models are asked in the corpus's words" in done.stderr
    commands = [line.split() for line in done.stderr.splitlines() if " src/run.py " in line]
    trainings = [c for c in commands if c[2] in ("pretrain", "finetune")]
    assert len(commands) == 9 and len(trainings) == 3  # the cpu recipe's pretrained models are not finetuned
    assert all(c[c.index("--recipe") + 1] == "cpu" for c in trainings)
    finetunings = [c for c in trainings if c[2] == "finetune"]
    assert len(finetunings) == 1 and "--reading_params_path" not in finetunings[0]  # vanilla without pretraining
    evaluations = [c for c in commands if c[2] == "evaluate"]
    assert [c[c.index("--readout") + 1] for c in evaluations if "--readout" in c] == ["question", "question"]
    assert sum(c[c.index("--reading_params_path") + 1].endswith(".pretrain.params") for c in evaluations) == 4
    stage_logs = [name for name in os.listdir(folder / "expt" / "pretrain") if name.startswith("run_stage2_")]
    assert sorted(name.split("_")[2] for name in stage_logs) == ["rope", "vanilla"]
    rows = (folder / "results.md").read_text(encoding="utf-8").splitlines()
    assert [row.split("|")[1].strip() for row in rows[3:7]] == [
        "London baseline",
        "vanilla without pretraining",
        "vanilla with pretraining",
        "rope with pretraining",
    ]
    assert all(re.fullmatch(r"\d+ out of 10: [\d.]+%", row.split("|")[2].strip()) for row in rows[4:7]), rows
    assert rows[7:] == [
        "",
        "With pretraining: asked zero-shot in the corpus's words (--readout frames); "
        "without: finetuned on the question.",
    ]
    for prefix in ["vanilla.nopretrain", "vanilla.pretrain", "rope.pretrain"]:
        assert (folder / f"{prefix}.test.predictions").read_text(encoding="utf-8").count("\n") == 10

    # Killed in vanilla's pretraining once it has a checkpoint, then run again: the first row is
    # skipped, vanilla's pretraining goes on from its checkpoint, and the table's rows are the ones above.
    sequential, folder = folder, assignment_copy(tmp_path / "killed")
    run_sh_killed(folder, "vanilla.pretrain.params.ckpt", VARIANTS="vanilla")
    done = run_sh(folder, VARIANTS="vanilla")
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stderr.splitlines()
    assert said.count("== vanilla without pretraining: skipped: its params and predictions were written earlier "
                      "with the same settings") == 1  # fmt: skip
    commands = [line.split() for line in said if " src/run.py " in line]
    assert [c[2] for c in commands] == ["pretrain", "evaluate", "evaluate"] and "--resume" in commands[0]
    rows = (folder / "results.md").read_text(encoding="utf-8").splitlines()
    assert rows[:6] == (sequential / "results.md").read_text(encoding="utf-8").splitlines()[:6]
    for name in ["vanilla.pretrain.dev.predictions", "vanilla.pretrain.test.predictions"]:
        assert (folder / name).read_bytes() == (sequential / name).read_bytes(), name

    # --jobs 2, one thread a training, the pretrained models finetuned and asked the question: a
    # latent length the block cannot hold fails the perceiver's pretraining (vanilla has no use for
    # it), named in one line with its log; vanilla without pretraining is the sequential run's, bit for bit
    # (in the killed run's folder: its rows' settings differ, so they are trained again)
    done = run_sh(
        folder, "--jobs", "2", "--bottleneck_dim", "200", "--readout", "question", VARIANTS="vanilla perceiver"
    )
    assert done.returncode == 1
    assert "the trainings, 2 at a time, 1 thread(s) each" in done.stderr
    assert "run.sh: perceiver with pretraining failed: see logs/perceiver.pretrain.log" in done.stderr.splitlines()
    assert " src/run.py " not in done.stderr  # each training's commands and bars went to its own log
    assert "bottleneck_dim 200" in (folder / "logs" / "perceiver.pretrain.log").read_text(encoding="utf-8")
    rows = (folder / "results.md").read_text(encoding="utf-8").splitlines()
    sequential_rows = (sequential / "results.md").read_text(encoding="utf-8").splitlines()
    assert rows[:5] == sequential_rows[:5]  # the heading, London, vanilla without pretraining
    assert re.fullmatch(r"\| vanilla with pretraining \| \d+ out of 10: [\d.]+% \|", rows[5]), rows
    assert rows[6:] == ["| perceiver with pretraining | failed: see logs/perceiver.pretrain.log |"], rows
    for split in ("dev", "test"):
        name = f"vanilla.nopretrain.{split}.predictions"
        assert (folder / name).read_bytes() == (sequential / name).read_bytes(), name
    vanilla = (folder / "logs" / "vanilla.pretrain.log").read_text(encoding="utf-8")
    assert " src/run.py finetune vanilla " in vanilla and " src/run.py evaluate " in vanilla
    assert (folder / "vanilla.finetune.params").exists() and not (sequential / "vanilla.finetune.params").exists()
    assert " src/run.py finetune vanilla " in (folder / "logs" / "vanilla.nopretrain.log").read_text(encoding="utf-8")


VARIANT_NAMES = "(vanilla, perceiver, synthesizer, rope)"


def test_run_sh_refuses_a_bad_jobs_count_or_variant():
    for args, env, said in [
        (["--jobs", "0"], {}, "run.sh: --jobs takes a positive number of trainings to run at once, got '0'"),
        (["--jobs"], {}, "run.sh: --jobs takes a positive number of trainings to run at once, got ''"),
        (
            [],
            {"VARIANTS": "vanilla gpt"},
            "run.sh: VARIANTS: unknown variant 'gpt' (vanilla, perceiver, synthesizer, rope)",
        ),
    ]:
        done = subprocess.run(["bash", str(ROOT / "run.sh"), *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})  # fmt: skip
        assert done.returncode == 2 and done.stderr.strip() == said, done.stderr


# ./run.sh demo made small: 27 people, the demo's model with two blocks, 150 epochs at batch 16 decayed
# over them (at 100 epochs of batch 8 it recalled 7 of 16 with one and two threads)
REDUCED_DEMO = dict(
    DEMO_WORLD="--n_train 10 --n_dev 16 --n_test 1 --n_places 10 --bios_per_person 3 --shuffle_sentences --full_names",
    DEMO_FLAGS="--n_layer 2 --pretrain_epochs 150 --decay_epochs 150 --pretrain_batch_size 16",
)


@pytest.mark.slow
def test_run_sh_demo_shows_memorised_facts_answered_through_the_real_pipeline(tmp_path):
    """
    ./run.sh demo at a reduced size (about a minute on two cores). Its margins are what a
    broken pipeline cannot reach: the pretrained model recalls most held-out birthplaces from
    their biographies; asked in the corpus's words, it answers at least half the dev people
    and nearly every answer is a place of the world (params that fail to load or a vocabulary
    that disagrees write fragments); the printed accuracies are those of the predictions
    files, and the handout's question and finetuning alone stay below half (an evaluation
    that read the answers would not).
    """
    shutil.copy(ROOT / "run.sh", tmp_path)  # run.sh works in its own folder: the demo's files stay out of the checkout
    (tmp_path / "src").symlink_to(ROOT / "src")  # src/ alone: the demo needs nothing of experiments/
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", **REDUCED_DEMO}
    done = run_process(["bash", "run.sh", "demo"], timeout=900, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    result = re.fullmatch(
        r"demo result: pretrained, asked in the corpus's words ([\d.]+)%, finetune only ([\d.]+)%, "
        r"most-frequent-place ([\d.]+)%",
        done.stdout.splitlines()[-1],
    )
    assert result, done.stdout
    assert "finetuning the pretrained model" not in done.stderr  # the frames readout is zero-shot
    recalled, probed = map(int, re.search(r"biographies: (\d+) of (\d+) birthplaces recalled", done.stdout).groups())
    assert recalled >= 0.4 * probed and probed >= 15  # 11 of 16 measured with one and two threads

    demo = tmp_path / "demo"
    world = demo / "world"
    dev = [line.split("\t") for line in (world / "birth_dev.tsv").read_text(encoding="utf-8").splitlines()]
    place_word = rf"[A-Z][a-z]*(?:{'|'.join(PLACE_SUFFIXES)})\b"
    places = set(re.findall(place_word, (world / "wiki.txt").read_text(encoding="utf-8")))
    question = re.search(r"the handout's question before any finetuning: \d+ out of \d+: ([\d.]+)%", done.stdout)
    assert question, done.stdout
    for name, printed in (("pretrained", result[1]), ("scratch", result[2]), ("before_finetuning", question[1])):
        answers = (demo / f"{name}.dev.predictions").read_text(encoding="utf-8").splitlines()
        assert len(answers) == len(dev) == 16
        assert float(printed) == pytest.approx(100 * sum(a == p for a, (_, p) in zip(answers, dev)) / len(dev))
    pretrained_answers = (demo / "pretrained.dev.predictions").read_text(encoding="utf-8").splitlines()
    # 16 of 16 measured with one and two threads, and 13 right; the question 0, finetuning alone 2
    assert sum(answer in places for answer in pretrained_answers) >= 10, pretrained_answers
    assert float(result[1]) >= 50 and float(question[1]) < 50 and float(result[2]) < 50


def test_run_sh_demo_takes_no_arguments():
    done = subprocess.run(
        ["bash", str(ROOT / "run.sh"), "demo", "--pretrain_epochs", "1"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "demo takes no arguments" in done.stderr


def collect(folder, *args):
    done = subprocess.run(
        ["bash", str(folder / "collect_submission.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return done.returncode, done.stdout, done.stderr


def test_collect_submission_zips_exactly_its_files_or_leaves_no_zip(tmp_path):
    shutil.copy(ROOT / "collect_submission.sh", tmp_path)
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    names = ["vanilla.model.params", "vanilla.nopretrain.dev.predictions", "vanilla.nopretrain.test.predictions"]
    names += [
        f"{v}.{kind}"
        for v in ["vanilla", "perceiver"]
        for kind in ["pretrain.params", "finetune.params", "pretrain.dev.predictions", "pretrain.test.predictions"]
    ]
    for name in names:
        (tmp_path / name).write_text(name)
    # the course's modules and what they import: everything in src/ but the demo world's generator
    course = [f"src/{p.name}" for p in (ROOT / "src").glob("*.py") if p.name != "world.py"]
    code, out, err = collect(tmp_path, "2023")
    assert code == 0 and "wrote assignment5.zip" in out, err
    with zipfile.ZipFile(tmp_path / "assignment5.zip") as z:
        assert sorted(z.namelist()) == sorted(names + course)
        z.extractall(tmp_path / "unzipped")
    help_text = subprocess.run(
        [sys.executable, str(tmp_path / "unzipped" / "src" / "run.py"), "--help"], capture_output=True, text=True
    )
    assert help_text.returncode == 0 and "pretrain_corpus_path" in help_text.stdout, help_text.stderr  # self-contained

    rope = [f"rope.{kind}" for kind in ["pretrain.params", "finetune.params", "pretrain.dev.predictions",
                                        "pretrain.test.predictions"]]  # fmt: skip
    for name in rope:
        (tmp_path / name).write_text(name)
    code, out, err = collect(tmp_path, "2024")  # the 2024 edition: vanilla's and rope's files
    assert code == 0, err
    with zipfile.ZipFile(tmp_path / "assignment5.zip") as z:
        assert sorted(z.namelist()) == sorted(names[:7] + rope + course)

    # read out in frames (results.md says so): the pretrained params made the predictions, no finetune.params
    (tmp_path / "results.md").write_text("| run | dev |\n\nWith pretraining: asked zero-shot (--readout frames)\n")
    for name in [n for n in names + rope if n.endswith("finetune.params")]:
        (tmp_path / name).unlink()
    code, out, err = collect(tmp_path, "2024")
    assert code == 0, err
    with zipfile.ZipFile(tmp_path / "assignment5.zip") as z:
        assert sorted(z.namelist()) == sorted([n for n in names[:7] + rope if "finetune" not in n] + course)
    (tmp_path / "results.md").write_text("| run | dev |\n")
    code, _, err = collect(tmp_path, "2024")  # asked the question: the finetuned params belong in the zip
    assert code == 1 and "vanilla.finetune.params" in err and "rope.finetune.params" in err

    code, _, err = collect(tmp_path, "2021")  # the synthesizer's files are missing
    assert code == 1 and "synthesizer.pretrain.params" in err and not (tmp_path / "assignment5.zip").exists()
    for args in [["2022"], ["2023", "extra"]]:
        (tmp_path / "assignment5.zip").write_text("an older zip")
        code, _, err = collect(tmp_path, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and not (tmp_path / "assignment5.zip").exists(), err


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
        ["pretrain", "toy", wiki, "--writing_params_path", pre, "--pretrain_epochs", 1, *TINY],
        [*finetune_args("toy", wiki, ft, tiny_world["train.tsv"]), "--reading_params_path", pre, *TINY],
        [*evaluate_args("toy", wiki, ft, tiny_world["dev.tsv"], tmp_path / "dev.predictions"), *TINY],
    ]
    for command in commands:
        done = run_process([sys.executable, str(src / "run.py"), *map(str, command)], timeout=300, cwd=RUNS_DIR)
        assert done.returncode == 0, done.stderr[-2000:]
    assert "Correct: " in done.stdout and "out of 24" in done.stdout
    gains = [key for key in torch.load(ft, weights_only=True) if key.endswith("attn.gain")]
    assert len(gains) == 2, "each block's toy attention is trained and saved"
    vanilla = evaluate_args("vanilla", wiki, ft, tiny_world["dev.tsv"], tmp_path / "v.predictions")
    done = run_process([sys.executable, str(src / "run.py"), *map(str, vanilla), *TINY], timeout=300, cwd=RUNS_DIR)
    assert done.returncode == 2 and f"params file {ft} was trained as toy" in done.stderr, done.stderr
