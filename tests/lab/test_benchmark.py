"""experiments/benchmark.py and experiments/step_pace.py: what they measure and print, on the tiny world."""

import dataclasses
import math
import re

import pytest

from conftest import run_script
from factgpt.settings import command_line as arguments
from factgpt.settings.recipes import HANDOUT

# benchmark.py measures one core's matmul rate for 2 s before anything else; these tests ask that it
# is measured and printed, not how precisely: 0.1 s of it.
QUICK_MATMUL = ["--matmul_seconds", 0.1]


def benchmark_main(capsys, *argv):
    """benchmark.py run in this process (its measurements run where a fresh interpreter's would): its output."""
    capsys.readouterr()
    assert run_script("benchmark", *QUICK_MATMUL, *argv) == 0
    return capsys.readouterr().out


def test_benchmark_sweep_runs(capsys):
    """The block-size sweep: a row per variant (each measured in a process of its own), after the matmul rate."""
    out = benchmark_main(capsys, "--skip_comparison", "--sweep", 32, "--sweep_batch", 2, "--variants", "vanilla",
                         "perceiver", "--device", "cpu")  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| 32 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["vanilla", "perceiver"]
    assert re.search(r"^one core's fp32 matmul \(512 x 512\): \d+\.\d GFLOP/s$", out, re.M), out


def test_benchmark_names_the_peak_of_the_gpu_named_in_full(capsys):
    """--peak_of: the fp32 peak that the MFU row takes for each GPU name, and nothing measured."""
    known = {"NVIDIA L4": 30.3, "NVIDIA L40S": 91.6, "NVIDIA H100 PCIe": 51.0, "NVIDIA H100 80GB HBM3": 67.0}
    known["NVIDIA A100-SXM4-80GB"] = 19.5  # and an L40S is not an L4
    out = benchmark_main(capsys, "--peak_of", *known, "NVIDIA GeForce RTX 4090")
    said = dict(line.rsplit(": ", 1) for line in out.splitlines())
    assert {name: float(peak.split()[0]) for name, peak in said.items() if peak.endswith(" TFLOP/s")} == known
    assert said["NVIDIA GeForce RTX 4090"] == "not known (give --peak_tflops)" and len(said) == len(known) + 1
    assert "GFLOP/s" not in out  # not even the matmul rate


def test_benchmark_matmul_rate_alone(capsys):
    lines = benchmark_main(capsys, "--matmul_rate").splitlines()
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


def benchmark_output(tiny_world, tmp_path, capsys, *flags):
    """What benchmark.py prints for vanilla on the tiny world, on the CPU, with these flags."""
    data = benchmark_data(tiny_world, tmp_path / "data")
    return benchmark_main(capsys, "--data", data, "--variants", "vanilla", *flags, "--device", "cpu")


def printed_interval(text):
    """The values that benchmark.py prints as `text` (with "%.3g", three significant figures): (lowest, highest)."""
    value = float(text)
    half = 0.5 * 10 ** (math.floor(math.log10(abs(value))) - 2)
    return value - half, value + half


def assert_printed_ratio(ratio, numerator, denominator):
    """`ratio` (printed "%.1f") is numerator / denominator (each printed "%.3g") within the rounding of all three."""
    (top_low, top_high), (bottom_low, bottom_high) = printed_interval(numerator), printed_interval(denominator)
    assert top_low / bottom_high - 0.05 <= float(ratio) <= top_high / bottom_low + 0.05, (ratio, numerator, denominator)


def benchmark_rows(tiny_world, tmp_path, capsys, *flags):
    """benchmark.py's vanilla rows on the tiny world, without the sweep: [(measure, straightforward, fast, ratio)]."""
    output = benchmark_output(tiny_world, tmp_path, capsys, "--sweep", *flags)
    lines = [line.split("|")[2:-1] for line in output.splitlines() if line.startswith("| vanilla |")]
    return [tuple(cell.strip() for cell in cells) for cells in lines]


@pytest.mark.slow
def test_benchmark_reports_the_pace_of_the_handout_pretraining(tiny_world, tmp_path, capsys):
    rows = {
        measure: cells
        for measure, *cells in benchmark_rows(tiny_world, tmp_path, capsys, "--peak_tflops", 1, "--epochs", 2)
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
    assert_printed_ratio(steps[2][:-1], steps[1], steps[0])  # the fast way's steps/s over the straightforward's


@pytest.mark.slow
def test_benchmark_compares_whole_processes(tiny_world, tmp_path, capsys):
    """
    --whole_process: run.py processes timed from start to exit (benchmark.py starts them; it runs
    here), of the model that the size flags give.
    """
    narrow = ["--n_layer", 1, "--n_head", 2, "--n_embd", 32]
    rows = benchmark_rows(tiny_world, tmp_path, capsys, "--whole_process", *narrow)
    assert [row[0] for row in rows] == [
        "pretraining epoch, whole process",
        "finetuning epoch, whole process",
        "evaluating the dev questions, whole process",
    ]
    for _, slow, fast, ratio in rows:
        assert_printed_ratio(ratio[:-1], slow[:-1], fast[:-1])  # seconds: the straightforward over the fast


def test_benchmark_profiles_pretraining_steps(tiny_world, tmp_path, capsys):
    output = benchmark_output(tiny_world, tmp_path, capsys, "--profile_steps", 2)
    # the tiny world's 24 biographies make one batch of the handout's 128
    assert re.search(r"^drawing an epoch's 1 batches: [\d.]+ ms a batch$", output, re.M), output
    stepped = r"^2 steps on batches in memory, unprofiled: [\d.]+ ms a step \([\d.]+ steps/s\)$"
    assert re.search(stepped, output, re.M)
    assert "aten::mm" in output and "Self CPU time total" in output


def test_benchmark_counts_what_a_step_dispatches(tiny_world, tmp_path, capsys):
    """
    --count_dispatches: a row per batch shape. The CPU's passes of 16 rows dispatch more than one
    pass; a cut batch needs its rows' lengths on the host, fixed shapes nothing between read-backs.
    """
    # two blocks, narrower than the handout's model: the same operators, in less time
    narrow = ["--n_layer", 2, "--n_head", 2, "--n_embd", 32]
    output = benchmark_output(tiny_world, tmp_path, capsys, "--count_dispatches", 1, *narrow)
    assert re.search(r"^vanilla pretraining, 1 steps on batches in memory, aten operators:$", output, re.M), output
    cells = [line.strip("| ").split(" | ") for line in output.splitlines() if line.startswith("| ")][2:]
    rows = {label: [float(number) for number in numbers] for label, *numbers in cells}
    passes, one_pass = rows.pop("cut, passes of 16 rows (the CPU's)"), rows.pop("cut, one pass (CUDA's)")
    assert list(rows) == ["full_padding", "fixed_shapes"]
    assert passes[0] > one_pass[0] > 0  # the tiny world's 24 rows: passes of 16 and 8 rows against one
    assert rows["full_padding"][0] == rows["fixed_shapes"][0] > 0
    assert passes[1] > one_pass[1] >= 1 and rows["fixed_shapes"][1] == 0
    assert all(row[3] >= 1 for row in [passes, one_pass, *rows.values()])  # a read-back reads the loss on the host


# step_pace.py's ways, in the order it measures them by default, and the Recipe fields that say how each runs its step
STEP_PACE_WAYS = {
    "straightforward": dict(full_padding=True, captured_step="off"),
    "cut": dict(captured_step="off"),
    "fixed_shapes": dict(fixed_shapes=True, captured_step="off"),
    "cuda_graph": dict(captured_step="cuda_graph"),
    "compiled": dict(captured_step="compiled"),
}


def test_step_pace_rows_each_way_with_the_flags_that_give_it(tiny_world, tmp_path, capsys):
    """experiments/step_pace.py: a row per way and precision, its projection from its epochs, the flags run.py takes."""
    narrow = ["--n_layer", 1, "--n_head", 2, "--n_embd", 32]
    argv = ["--data", benchmark_data(tiny_world, tmp_path / "data"), "--device", "cpu", "--epochs", 2]
    capsys.readouterr()
    assert run_script("step_pace", *argv, "--precisions", "fp32", *narrow) == 0
    out = capsys.readouterr().out
    assert "\nvanilla's handout pretraining (model: the handout's, n_layer 1, n_head 2, n_embd 32) on cpu, " in out
    rows = [line.split(" | ") for line in out.splitlines() if re.match(r"^\| [a-z_]+ \| fp32", line)]
    assert [row[0][2:] for row in rows] == list(STEP_PACE_WAYS)
    for way, _, first, steps, host, gpu, projected, flags in rows:
        assert gpu == "" and float(host) > 0  # no GPU time on the CPU
        # the first epoch, then 649 at the fastest pace: one step an epoch (fewer people than a batch)
        assert float(projected[:-2]) == pytest.approx(float(first[:-2]) + 649 / float(steps), rel=0.05, abs=1)
        argv = ["pretrain", "vanilla", "w.txt", *flags.strip(" |`").split()]
        recipe = arguments.parse(argv, arguments.build_parser())[0].recipe
        assert recipe == dataclasses.replace(HANDOUT, **STEP_PACE_WAYS[way[2:]])


def test_cpu_pace_gives_every_way_a_row_against_todays_step(tiny_world, capsys):
    """experiments/cpu_pace.py: a row per way, today's step its own baseline; exact ways lose nothing on the way."""
    ways = ["fp32", "passes8", "math_attention", "one_thread"]
    argv = ["--recipe", "demo", "--ways", *ways, "--rounds", "1", "--steps", "2", "--check_steps", "2"]
    capsys.readouterr()
    assert run_script("cpu_pace", *argv, "--data", tiny_world["wiki.txt"]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][2:]
    assert [row[0][2:] for row in rows] == ways
    assert rows[0][3] == "1.00" and float(rows[0][4].rstrip(" |")) == 0  # fp32 is today's step
    assert all(float(row[1]) > 0 and float(row[4].rstrip(" |")) < 1e-3 for row in rows)  # fp32's loss, to rounding
