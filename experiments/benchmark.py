"""
Measures what the fast paths save, side by side in one run on this machine.

    python experiments/benchmark.py [--variants vanilla perceiver synthesizer rope] [--eval_questions 500]
        [--sweep 128 256 512 1024] [--device auto] [--whole_process] [--data data] [recipe flags]
    python experiments/benchmark.py --profile_steps 50 [--variants vanilla] [recipe flags]
    python experiments/benchmark.py --count_dispatches 20 [--variants vanilla] [recipe flags]
    python experiments/benchmark.py --matmul_rate [--matmul_seconds 2]
    python experiments/benchmark.py --peak_of "NVIDIA L40S" [...]

It starts with one core's fp32 matmul rate (GFLOP/s, the best of --matmul_seconds, default 2 s,
of 512 x 512 products): the figure to scale a CPU time measured on one machine to another
(--matmul_rate: only it).

For each variant, with the handout's model and batch sizes, it trains one epoch of
pretraining and one of finetuning and answers the dev questions, once the
straightforward way (every row padded to 128 characters, eager steps, one question at
a time without a cache) and once the fast way (every batch cut after its last real target
and, on the CPU, passes of rows of similar length; questions decoded in batches with a
KV cache), and prints both figures and their ratio. run.py's recipe flags set the fast
way's other settings, side by side with the same straightforward loop: e.g.
--group_by_length, --precision bf16, --compile. The size flags --n_layer, --n_head, --n_embd
and --bottleneck_dim instead set the model of both ways (default: the handout's, the
perceiver's m 64). --profile_steps N instead times drawing an epoch's batches
and N pretraining steps of the fast way on batches in memory (after one pass over them,
so that every batch width has been met), then prints torch.profiler's table of N more.
--count_dispatches N instead counts the aten operators N such steps dispatch (a
TorchDispatchMode), and those the host waits for (a scalar read back, nonzero: on a GPU
each a sync), with the rows cut, padded to the block size, and of one shape
(fixed_shapes), and those of reading the loss back.
Both ways use the same model, batch sizes and optimizer (the fused AdamW on CUDA and the
CPU). The answers of both decoders on the same model are compared and must be identical.

Then it sweeps the block size and prints the time and peak memory of one training
step (forward, backward, AdamW) for each variant: the cost of vanilla and synthesizer
attention grows with L^2, the perceiver's inner blocks with m^2 and its projections
with L*m. Data: data/ (or --data) when it holds the assignment's files, else a generated
demo world.

The pretraining rows include its pace as the handout's pretraining sees it: steps/s,
tokens/s (127 positions a row), the model's FLOPs per second (a full row's forward and
backward, counted once with torch.utils.flop_counter) and, on a GPU whose
peak this file knows (or with --peak_tflops; --peak_of NAME prints the peak it takes for a
GPU of that name, and exits), the model FLOPs utilisation; and the
projected time of the handout's 650 epochs. --epochs N trains N epochs each way and
keeps the fastest (the first pays for warm-up). --handout_pretraining also times the
whole handout pretraining, one run.py process with the defaults (minutes on a fast GPU,
hours on a CPU).

With --whole_process it compares whole run.py processes instead, as a user meets them
(interpreter start-up, imports, reading the data and the params included): one epoch of
pretraining, one of finetuning from its params, and answering the dev questions, once
with --full_padding --captured_step off --sequential_decoding (the course's loops) and once
with the defaults.
"""

import argparse
import copy
import dataclasses
import itertools
import math
import multiprocessing
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import src_path  # noqa: F401

# isort: split
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from dataset import CharCorruptionDataset, NameDataset, known_characters
from dispatches import DispatchCount
from factgpt.common.distributed import DEVICES, pick_device
from factgpt.common.files import DATA_DIR
from factgpt.common.questions import read_questions
from factgpt.corpus.reading import BLOCK_SIZE
from factgpt.pipeline.trainings import trainer_config
from factgpt.readout.decoding import predict_places
from factgpt.settings.command_line import OneLineParser, add_recipe_flags, given_recipe
from factgpt.settings.recipe import Stage
from factgpt.settings.recipes import HANDOUT, HANDOUT_BOTTLENECK_DIM
from factgpt.settings.run_config import RunConfig
from factgpt.table.world import FILES, write_world
from model import GPT, VARIANTS, variant_config
from trainer import CPU_MICRO_BATCH, Trainer
from utils import set_seed

SWEEP_STEPS = 3
MATMUL_SECONDS = 2.0  # how long the matmul rate is measured (--matmul_seconds)
STRAIGHTFORWARD = dict(full_padding=True, captured_step="off")  # the course's loop: rows at full width, eager steps
# the batch shapes whose dispatches are counted: (recipe fields, rows a forward pass, None: all)
BATCH_SHAPES = {
    f"cut, passes of {CPU_MICRO_BATCH} rows (the CPU's)": ({}, CPU_MICRO_BATCH),
    "cut, one pass (CUDA's)": ({}, None),
    "full_padding": (dict(full_padding=True), None),
    "fixed_shapes": (dict(fixed_shapes=True), None),
}
# Dense peak TFLOP/s without tensor cores (fp32, the handout's precision), from the vendors' data sheets,
# by a part of torch.cuda.get_device_name(); the first match wins.
PEAK_FP32_TFLOPS = {
    "H100 PCIe": 51.0,
    "H100": 67.0,
    "H200": 67.0,
    "A100": 19.5,
    "L40S": 91.6,
    "L40": 90.5,
    "L4": 30.3,
    "T4": 8.1,
}


SIZES = ("n_layer", "n_head", "n_embd", "bottleneck_dim")  # the recipe flags that set the model of both ways


def model_config(variant, vocab_size, block_size, sizes=None):
    """The handout's model of a variant (the perceiver with the handout's bottleneck), with `sizes` ({SIZES field:
    value}) put in."""
    handout = dict(n_layer=HANDOUT.n_layer, n_head=HANDOUT.n_head, n_embd=HANDOUT.n_embd)
    handout.update(bottleneck_dim=HANDOUT_BOTTLENECK_DIM, **(sizes or {}))
    return variant_config(variant, vocab_size, block_size, **handout)


def data_folder(folder=DATA_DIR):
    """The folder of the four data files: `folder` when it holds them, else a fresh demo world."""
    folder = Path(folder)
    if not all((folder / name).exists() for name in FILES):
        folder = Path(tempfile.mkdtemp(prefix="demo_world_"))
        write_world(folder)
        print(f"data: a generated demo world ({folder}); put the assignment's files in data/ to use them")
    else:
        print(f"data: {folder}")
    return folder


def load_data(folder):
    """The four data files' texts from `folder` (as data_folder returned it)."""
    return {name: (folder / name).read_text(encoding="utf-8") for name in FILES}


def timed_process(argv):
    """Seconds that `python src/run.py argv` takes from start to exit (SystemExit if it fails)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(src_path.SRC / "run.py"), *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"run.py {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return seconds


def compare_processes(variant, args):
    """
    Rows of (what, straightforward, fast, unit, lower is better) for whole run.py processes:
    one epoch of pretraining, one of finetuning from its params, and answering the dev
    questions, with --full_padding --captured_step off --sequential_decoding (the course's loops) and without,
    each of the handout's model or the sizes given.
    """
    folder, work = args.data, Path(tempfile.mkdtemp(prefix="benchmark_"))
    sizes = [text for name, value in args.sizes.items() for text in (f"--{name}", str(value))]
    corpus = [variant, str(folder / "wiki.txt"), "--device", args.device, "--seed", "0", *sizes]
    seconds = {}
    for fast in (False, True):
        ways = [] if fast else ["--full_padding", "--captured_step", "off", "--sequential_decoding"]
        pretrained, finetuned = str(work / f"pre{fast}.params"), str(work / f"fine{fast}.params")
        pretrain = ["pretrain", *corpus, "--writing_params_path", pretrained, "--pretrain_epochs", "1"]
        seconds[fast, "pretrain"] = timed_process([*pretrain, *ways])
        finetune = ["finetune", *corpus, "--reading_params_path", pretrained, "--writing_params_path", finetuned]
        questions = str(folder / "birth_places_train.tsv")
        seconds[fast, "finetune"] = timed_process(
            [*finetune, "--finetune_corpus_path", questions, "--finetune_epochs_from_pretrained", "1", *ways]
        )
    for fast in (False, True):  # both decoders answer with the same params
        ways = [] if fast else ["--sequential_decoding"]
        evaluate = ["evaluate", *corpus, "--reading_params_path", str(work / "fineTrue.params")]
        outputs = [
            "--eval_corpus_path",
            str(folder / "birth_dev.tsv"),
            "--outputs_path",
            str(work / f"{fast}.predictions"),
        ]
        seconds[fast, "evaluate"] = timed_process([*evaluate, *outputs, *ways])
    if (work / "False.predictions").read_text() != (work / "True.predictions").read_text():
        raise SystemExit(f"{variant}: batched decoding answered differently from one-at-a-time decoding")
    shutil.rmtree(work)
    return [
        ("pretraining epoch, whole process", seconds[False, "pretrain"], seconds[True, "pretrain"], "s", True),
        ("finetuning epoch, whole process", seconds[False, "finetune"], seconds[True, "finetune"], "s", True),
        (
            "evaluating the dev questions, whole process",
            seconds[False, "evaluate"],
            seconds[True, "evaluate"],
            "s",
            True,
        ),
    ]


def timed_training(function, variant, model, dataset, schedule_examples, recipe, device, epochs=1, ends=None):
    """
    `epochs` epochs of the dataset with pipeline's trainer settings for `recipe`, the fast
    way's or the straightforward one's (the cosine over decay_epochs epochs of
    schedule_examples examples): (seconds of the fastest epoch, steps per epoch, trainer).
    `ends`, a list, gets the start's and every epoch end's (wall clock, this thread's CPU time).
    """
    ends, clocks = [], ends if ends is not None else []

    def epoch_end(epochs_done):
        sync(device)
        ends.append(time.perf_counter())
        clocks.append((ends[-1], time.thread_time()))

    cfg = RunConfig(function, variant, "", recipe=recipe)  # the DataLoader workers of run.py's default
    pretraining = function == "pretrain"
    stage = Stage(
        max_epochs=epochs,
        batch_size=recipe.pretrain_batch_size if pretraining else recipe.finetune_batch_size,
        learning_rate=recipe.pretrain_lr if pretraining else recipe.finetune_lr,
        decay_epochs=recipe.decay_epochs,
    )
    config = trainer_config(cfg, torch.device(device), stage, pretraining, schedule_examples)
    trainer = Trainer(model, dataset, None, config, epoch_end=epoch_end)
    sync(trainer.device)
    ends.append(time.perf_counter())
    clocks.append((ends[-1], time.thread_time()))
    trainer.train()
    fastest = min(end - start for start, end in zip(ends, ends[1:]))
    return fastest, trainer.step // epochs, trainer


def pretraining_trainer(variant, files, recipe, device, sizes=None):
    """A Trainer of the handout's model (`sizes` put in) for pretraining on the corpus under `recipe`, as run.py
    makes it."""
    pretrain = CharCorruptionDataset(files["wiki.txt"], BLOCK_SIZE)
    set_seed(0)
    model = GPT(model_config(variant, pretrain.vocab_size, BLOCK_SIZE, sizes))
    cfg = RunConfig("pretrain", variant, "", recipe=recipe)
    stage = Stage(max_epochs=1, batch_size=recipe.pretrain_batch_size, learning_rate=recipe.pretrain_lr, decay_epochs=1)
    config = trainer_config(cfg, torch.device(device), stage, True, len(pretrain))
    return Trainer(model, pretrain, None, config)


def profile_steps(variant, files, args):
    """
    The time to draw a pretraining epoch's batches (the workers started), the time of
    args.profile_steps steps on batches in memory after one pass over them, then
    torch.profiler's table of as many.
    """
    trainer = pretraining_trainer(variant, files, args.fast_recipe, args.device, args.sizes)
    list(trainer.batches.epoch(0))  # the workers started
    start = time.perf_counter()
    epoch = list(trainer.batches.epoch(1))
    drawn = time.perf_counter() - start
    batches = itertools.cycle(epoch)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.device(args.device).type == "cuda" else [])
    for _ in range(len(epoch)):  # every batch (and width) once, unmeasured
        trainer.train_step(*next(batches))
    sync(args.device)
    start = time.perf_counter()
    for _ in range(args.profile_steps):
        trainer.train_step(*next(batches))
    sync(args.device)
    stepped = time.perf_counter() - start
    with profile(activities=activities) as profiler:
        for _ in range(args.profile_steps):
            trainer.train_step(*next(batches))
        sync(args.device)
    sort = "cuda_time_total" if ProfilerActivity.CUDA in activities else "cpu_time_total"
    return (
        f"drawing an epoch's {len(epoch)} batches: {drawn * 1000 / len(epoch):.2f} ms a batch\n"
        f"{args.profile_steps} steps on batches in memory, unprofiled: {stepped * 1000 / args.profile_steps:.2f} ms "
        f"a step ({args.profile_steps / stepped:.1f} steps/s)\n"
        + profiler.key_averages().table(sort_by=sort, row_limit=25)
    )


def count_dispatches(variant, files, args):
    """
    Rows (batch shape, operators a step, host reads a step, operators of a loss read-back,
    its host reads) of args.count_dispatches pretraining steps on batches in memory, after one
    unmeasured step, for each batch shape under the fast way's recipe.
    """
    rows = []
    for label, (shape, pass_rows) in BATCH_SHAPES.items():
        recipe = dataclasses.replace(args.fast_recipe, **shape, captured_step="off")  # the step as it dispatches
        trainer = pretraining_trainer(variant, files, recipe, args.device, args.sizes)
        trainer.micro_batch_size = pass_rows
        batches = itertools.cycle(list(trainer.batches.epoch(0)))
        trainer.train_step(*next(batches))
        with DispatchCount() as steps:
            for _ in range(args.count_dispatches):
                trainer.train_step(*next(batches))
        with DispatchCount() as read_back:
            trainer.tally.epoch_sum()
        per_step = sum(steps.calls.values()) / args.count_dispatches
        reads = steps.host_reads() / args.count_dispatches
        rows.append((label, per_step, reads, sum(read_back.calls.values()), read_back.host_reads()))
    return rows


def training_flops_per_row(model):
    """Model FLOPs of training on one row of block_size-1 tokens, forward and backward (torch.utils.flop_counter)."""
    counted = copy.deepcopy(model).cpu().train()
    x = torch.randint(2, counted.config.vocab_size, (1, counted.get_block_size() - 1))
    with FlopCounterMode(display=False) as counter:
        _, loss = counted(x, x)
        loss.backward()
    return counter.get_total_flops()


def peak_flops(args):
    """The device's peak FLOP/s for fp32 (--peak_tflops, else PEAK_FP32_TFLOPS by the CUDA device's name), or None."""
    if args.peak_tflops:
        return args.peak_tflops * 1e12
    if torch.device(args.device).type != "cuda":
        return None
    tflops = peak_tflops_of(torch.cuda.get_device_name(torch.device(args.device)))
    return tflops and tflops * 1e12


def peak_tflops_of(device_name):
    """PEAK_FP32_TFLOPS of the first model named in full in device_name ("NVIDIA L40S" is not an L4), or None."""
    words = re.findall(r"[A-Za-z0-9]+", device_name)
    return next((tflops for part, tflops in PEAK_FP32_TFLOPS.items() if f" {part} " in f" {' '.join(words)} "), None)


def single_core_matmul_gflops(size=512, seconds=MATMUL_SECONDS):
    """One core's fp32 matmul rate in GFLOP/s (size x size by size x size, the best of repeated runs):
    the figure that scales a CPU time measured here to another machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        for _ in range(3):
            a @ b  # warm-up
        best, start = math.inf, time.perf_counter()
        while time.perf_counter() - start < seconds:
            began = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - began)
        return 2 * size**3 / best / 1e9
    finally:
        torch.set_num_threads(threads)


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def compare_variant(variant, files, args):
    """Rows of (what, straightforward, fast, unit) for one variant."""
    pretrain = CharCorruptionDataset(files["wiki.txt"], BLOCK_SIZE)
    names = NameDataset(pretrain, files["birth_places_train.tsv"])
    rows = read_questions(files["birth_dev.tsv"])[: args.eval_questions]
    questions = [known_characters(question, pretrain.stoi)[0] for _, question, _ in rows]  # as run.py evaluate
    results, recipes = {}, {False: dataclasses.replace(HANDOUT, **STRAIGHTFORWARD), True: args.fast_recipe}
    for fast in (False, True):
        set_seed(0)
        model = GPT(model_config(variant, pretrain.vocab_size, BLOCK_SIZE, args.sizes))
        row_flops = training_flops_per_row(model)
        seconds, steps, trainer = timed_training(
            "pretrain", variant, model, pretrain, len(pretrain), recipes[fast], args.device, args.epochs
        )
        results[fast, "steps"] = steps / seconds
        results[fast, "tokens"] = len(pretrain) * (BLOCK_SIZE - 1) / seconds  # every row at its full length
        results[fast, "flops"] = len(pretrain) * row_flops / seconds
        results[fast, "handout"] = seconds * HANDOUT.pretrain_epochs
        results[fast, "finetune"], _, trainer = timed_training(
            "finetune", variant, model, names, len(pretrain), recipes[fast], args.device
        )
    answers = {}
    for fast in (False, True):
        start = time.perf_counter()
        answers[fast] = predict_places(model, questions, pretrain, trainer.device, sequential=not fast)
        sync(trainer.device)
        results[fast, "eval"] = len(questions) / (time.perf_counter() - start)
    if answers[False] != answers[True]:
        raise SystemExit(f"{variant}: batched decoding answered differently from one-at-a-time decoding")

    def both(key, scale=1.0):
        return results[False, key] * scale, results[True, key] * scale

    epochs, peak = HANDOUT.pretrain_epochs, peak_flops(args)
    rows = [
        ("pretraining steps/s", *both("steps"), "", False),
        (f"pretraining tokens/s ({BLOCK_SIZE - 1} a row)", *both("tokens"), "", False),
        ("pretraining model FLOP/s", *both("flops"), "", False),
    ]
    if peak:
        rows.append(("pretraining MFU (fp32 peak)", *both("flops", 100 / peak), "%", False))
    rows.append((f"handout pretraining ({epochs} epochs), projected", *both("handout"), "s", True))
    if args.handout_pretraining:
        measured = handout_pretraining(variant, args)
        rows.append((f"handout pretraining ({epochs} epochs), whole process", math.nan, measured, "s", True))
    return rows + [
        ("finetuning epoch", *both("finetune"), "s", True),
        (f"evaluation questions/s ({len(questions)}, identical answers)", *both("eval"), "", False),
    ]


def handout_pretraining(variant, args):
    """Seconds of one whole `run.py pretrain` process with the handout's defaults (the perceiver's bottleneck 64)."""
    work = Path(tempfile.mkdtemp(prefix="benchmark_"))
    flags = ["--bottleneck_dim", str(HANDOUT_BOTTLENECK_DIM)] if variant == "perceiver" else []
    corpus = str(args.data / "wiki.txt")
    seconds = timed_process(
        ["pretrain", variant, corpus, *flags, "--device", args.device, "--writing_params_path", str(work / "p.params")]
    )
    shutil.rmtree(work)
    return seconds


def measure_step(variant, block_size, batch_size, device, sizes, queue):
    """Time and peak memory of one training step at this block size, in a fresh process.
    On CPU the memory is the growth of the resident size (Linux), on CUDA of allocated memory."""
    torch.manual_seed(0)
    device = torch.device(device)
    model = GPT(model_config(variant, 256, block_size, sizes)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(2, 256, (batch_size, block_size - 1), device=device)

    def step():
        _, loss = model(x, x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident size (VmHWM)
        base = memory_status("VmRSS")
    step()
    sync(device)
    start = time.perf_counter()
    for _ in range(SWEEP_STEPS):
        step()
    sync(device)
    seconds = (time.perf_counter() - start) / SWEEP_STEPS
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = memory_status("VmHWM") - base
    queue.put((seconds, peak))


def memory_status(field):
    """A field of /proc/self/status in bytes (Linux): VmRSS now, VmHWM its peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def sweep(args):
    context = multiprocessing.get_context("spawn")
    rows = []
    for block_size in args.sweep:
        for variant in args.variants:
            queue = context.Queue()
            worker = context.Process(
                target=measure_step, args=(variant, block_size, args.sweep_batch, args.device, args.sizes, queue)
            )
            worker.start()
            seconds, peak = queue.get()
            worker.join()
            rows.append((block_size, variant, seconds, peak))
    return rows


def main(argv=None):
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["vanilla", "perceiver", "synthesizer"],
        choices=VARIANTS,
    )
    parser.add_argument("--eval_questions", type=int, default=500, help="dev questions to answer (default 500)")
    parser.add_argument("--sweep", type=int, nargs="*", default=[128, 256, 512, 1024], help="block sizes to sweep")
    parser.add_argument("--sweep_batch", type=int, default=8, help="batch size of the sweep's steps")
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--skip_comparison", action="store_true", help="only run the block-size sweep")
    parser.add_argument("--matmul_rate", action="store_true", help="only measure one core's fp32 matmul rate")
    parser.add_argument(
        "--matmul_seconds",
        type=float,
        default=MATMUL_SECONDS,
        help=f"how long the matmul rate is measured (default {MATMUL_SECONDS:g} s)",
    )
    parser.add_argument(
        "--peak_of",
        nargs="+",
        metavar="NAME",
        help="only print the fp32 peak the MFU row takes for a GPU of each name (torch.cuda.get_device_name's)",
    )
    parser.add_argument(
        "--epochs", type=int, default=1, help="pretraining epochs each way; the fastest is reported (default 1)"
    )
    parser.add_argument("--peak_tflops", type=float, help="the device's peak fp32 TFLOP/s, for the MFU row")
    parser.add_argument(
        "--profile_steps",
        type=int,
        help="only the first variant's pretraining steps: N timed on batches in memory, then N profiled",
    )
    parser.add_argument(
        "--count_dispatches",
        type=int,
        help="only the first variant's pretraining steps: the operators N of them dispatch, for each batch shape",
    )
    parser.add_argument(
        "--handout_pretraining",
        action="store_true",
        help="also time a whole handout pretraining (run.py pretrain with the defaults) of every variant",
    )
    parser.add_argument(
        "--data",
        default=str(DATA_DIR),
        help="folder of the four data files (default data/; a generated demo world where they are missing)",
    )
    parser.add_argument(
        "--whole_process",
        action="store_true",
        help="compare whole run.py processes (start-up, imports and data included) instead: one pretraining epoch, "
        "one finetuning epoch, the dev questions; with --full_padding --sequential_decoding and without; "
        "of the handout's model, or of the sizes given (--n_layer, --n_head, --n_embd, --bottleneck_dim)",
    )
    add_recipe_flags(parser)  # run.py's recipe flags: the fast way's settings (e.g. --precision bf16 --compile)
    args = parser.parse_args(argv)
    args.fast_recipe, given = given_recipe(parser, args, HANDOUT)
    args.sizes = {name: given.pop(name) for name in SIZES if name in given}  # the model's, not the fast way's
    if given and args.whole_process:
        parser.error("recipe flags set the in-process fast way; --whole_process takes the model's sizes alone")
    if args.peak_of:
        for name in args.peak_of:
            tflops = peak_tflops_of(name)
            print(f"{name}: " + (f"{tflops:g} TFLOP/s" if tflops else "not known (give --peak_tflops)"))
        return
    args.device = str(pick_device(args.device))
    print(f"device: {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"one core's fp32 matmul (512 x 512): {single_core_matmul_gflops(seconds=args.matmul_seconds):.1f} GFLOP/s")
    if args.matmul_rate:
        return

    if args.profile_steps:
        print(profile_steps(args.variants[0], load_data(data_folder(args.data)), args))
        return
    if args.count_dispatches:
        print(f"\n{args.variants[0]} pretraining, {args.count_dispatches} steps on batches in memory, aten operators:")
        print("\n| batches | operators a step | host reads a step | a loss read-back | its host reads |")
        print("| --- | --- | --- | --- | --- |")
        for label, per_step, reads, read_back, read_back_reads in count_dispatches(
            args.variants[0], load_data(data_folder(args.data)), args
        ):
            print(f"| {label} | {per_step:.1f} | {reads:.1f} | {read_back} | {read_back_reads} |")
        return
    if not args.skip_comparison:
        args.data = data_folder(args.data)  # once: without the data, one demo world serves every measurement
        files = None if args.whole_process else load_data(args.data)
        if args.sizes:
            print("\nmodel: the handout's" + "".join(f", {name} {value}" for name, value in args.sizes.items()))
        print("\nfast way: the handout's recipe" + "".join(f", {name} {value}" for name, value in given.items()))
        print("\n| variant | measure | straightforward | fast | ratio |")
        print("| --- | --- | --- | --- | --- |")
        for variant in args.variants:
            rows = compare_processes(variant, args) if args.whole_process else compare_variant(variant, files, args)
            for what, slow, fast, unit, lower_is_better in rows:
                ratio = slow / fast if lower_is_better else fast / slow
                slow_text = "" if math.isnan(slow) else f"{slow:.3g}{unit}"
                ratio_text = "" if math.isnan(ratio) else f"{ratio:.1f}x"
                print(f"| {variant} | {what} | {slow_text} | {fast:.3g}{unit} | {ratio_text} |", flush=True)

    if args.sweep:
        print(
            f"\nOne training step, batch {args.sweep_batch}, sequences of block_size-1 tokens "
            f"(perceiver m={HANDOUT_BOTTLENECK_DIM}):"
        )
        print("\n| block size | variant | step time | peak memory |")
        print("| --- | --- | --- | --- |")
        for block_size, variant, seconds, peak in sweep(args):
            print(f"| {block_size} | {variant} | {seconds * 1000:.0f} ms | {peak / 2**20:.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
