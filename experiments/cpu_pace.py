"""
The pace of a recipe's pretraining step on this CPU under other ways of running it, side by side
in one process: today's step (fp32, eager, passes of 16 rows, SDPA's CPU flash kernel), bf16
autocast, torch.compile (inductor's kernels), both, passes of other sizes, SDPA's math kernels,
and one thread.

    python experiments/cpu_pace.py [--recipe cpu] [--ways fp32 bf16 compile ...] [--rounds 5]
        [--steps 92] [--profile_steps 20] [--data data/wiki.txt]

Every way trains vanilla from the same initialisation on the same batches (the recipe's first
stage, as pretrain draws them). Each first takes --check_steps steps, which also compile, and
its losses are compared with today's step's. Then the ways take turns, --steps steps each per
round for --rounds rounds, so that a machine whose speed drifts slows all of them alike; a row
gives each way's median steps/s over the rounds and its ratio to today's step. With
--profile_steps, torch.profiler's table of today's step follows, by each operator's own time.
"""

import argparse
import dataclasses
import itertools
import platform
import statistics
import time

import src_path  # noqa: F401

# isort: split
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from factgpt.common.files import resolve_data_path
from factgpt.pipeline.start import build
from factgpt.pipeline.trainings import trainer_config
from factgpt.settings.recipes import RECIPES
from factgpt.settings.run_config import RunConfig
from factgpt.training.stage_data import stage_data
from trainer import Trainer

WAYS = {  # Recipe fields, and the passes' rows, the threads and the attention kernels where a way changes them
    "fp32": {},
    "bf16": dict(precision="bf16"),
    "compile": dict(compile=True),
    "compile_bf16": dict(compile=True, precision="bf16"),
    "passes32": dict(micro_batch_size=32),
    "passes8": dict(micro_batch_size=8),
    "one_thread": dict(threads=1),
    "math_attention": dict(attention="math"),  # SDPA's matmul-and-softmax kernels instead of its CPU flash kernel
    "passes32_math_attention": dict(micro_batch_size=32, attention="math"),
}
TRAINER_ONLY = ("micro_batch_size", "threads", "attention")
ATTENTION = {"flash": [SDPBackend.FLASH_ATTENTION], "math": [SDPBackend.MATH]}


def trainer_for(way, recipe_name, corpus_path):
    """A Trainer of vanilla's first pretraining stage under the recipe with the way's changes."""
    fields = {k: v for k, v in WAYS[way].items() if k not in TRAINER_ONLY}
    recipe = dataclasses.replace(RECIPES[recipe_name], **fields)
    cfg = RunConfig("pretrain", "vanilla", corpus_path, recipe=recipe, recipe_name=recipe_name, device="cpu")
    setup = build(cfg, None)
    stage = recipe.stages()[0]
    dataset, _ = stage_data(cfg, setup.corpus, stage, ())
    config = trainer_config(cfg, torch.device("cpu"), stage, True, len(dataset))
    config.micro_batch_size = WAYS[way].get("micro_batch_size")
    trainer = Trainer(setup.model, dataset, None, config)
    trainer.model.train()
    return trainer


def steps(trainer, batches, n, way, threads):
    """n steps on the next batches, with the way's threads and attention kernels; their losses."""
    torch.set_num_threads(WAYS[way].get("threads", threads))
    with sdpa_kernel(ATTENTION[WAYS[way].get("attention", "flash")]):
        return [float(loss) for loss in [trainer.train_step(*next(batches))[1] for _ in range(n)]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="cpu", choices=list(RECIPES))
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=list(WAYS))
    parser.add_argument("--rounds", type=int, default=5, help="turns each way takes (default 5)")
    parser.add_argument("--steps", type=int, default=92, help="steps a turn (default 92: an epoch of the cpu recipe)")
    parser.add_argument("--check_steps", type=int, default=20, help="first steps whose losses are compared")
    parser.add_argument("--profile_steps", type=int, default=0, help="steps of today's step under torch.profiler")
    parser.add_argument("--data", default="wiki.txt", help="the pretraining corpus (default: data/wiki.txt)")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    ways = ["fp32"] + [way for way in args.ways if way != "fp32"]
    corpus_path = resolve_data_path(args.data)
    print(f"{args.recipe} recipe, vanilla, {platform.processor() or platform.machine()}, torch {torch.__version__},")
    print(f"{threads} threads; {args.rounds} rounds of {args.steps} steps a way\n")
    trainers, batches, first_losses = {}, {}, {}
    for way in ways:
        trainers[way] = trainer_for(way, args.recipe, corpus_path)
        epoch = list(trainers[way].batches.epoch(trainers[way].data_seed))
        batches[way] = itertools.cycle(epoch)
        start = time.perf_counter()
        first_losses[way] = steps(trainers[way], batches[way], args.check_steps, way, threads)
        print(f"{way}: first {args.check_steps} steps {time.perf_counter() - start:.1f} s", flush=True)
    paces = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way in ways:
            start = time.perf_counter()
            steps(trainers[way], batches[way], args.steps, way, threads)
            paces[way].append(args.steps / (time.perf_counter() - start))
    print("\n| way | steps/s (median of rounds) | range | against fp32 | largest loss difference, first steps |")
    print("| --- | --- | --- | --- | --- |")
    base = statistics.median(paces["fp32"])
    for way in ways:
        pace = statistics.median(paces[way])
        gap = max(abs(a - b) for a, b in zip(first_losses[way], first_losses["fp32"]))
        row = [way, f"{pace:.2f}", f"{min(paces[way]):.2f}–{max(paces[way]):.2f}", f"{pace / base:.2f}", f"{gap:.2e}"]
        print("| " + " | ".join(row) + " |", flush=True)
    if args.profile_steps:
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            steps(trainers["fp32"], batches["fp32"], args.profile_steps, "fp32", threads)
        print("\n" + profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
