"""
The assignment table's pace on this machine's cores, two ways taking turns on the same work: the
four variants' pretrainings one at a time with every thread, and N side by side with a share each.

    python experiments/jobs_pace.py [--rounds 3] [--epochs 4] [--jobs 2] [--corpus data/wiki.txt]

Each training is `run.py pretrain VARIANT --recipe cpu` cut to --epochs of its first stage, as
run.sh's table runs it (the perceiver at the handout's bottleneck). Prints each round's seconds per
way and the median ratio (one at a time / side by side: above 1, side by side is faster).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import src_path  # noqa: F401  (src/ on sys.path)
from factgpt.settings.recipes import HANDOUT_BOTTLENECK_DIM
from factgpt.settings.run_config import available_cores
from model import VARIANTS

RUN_PY = str(Path(__file__).resolve().parent.parent / "src" / "run.py")


def training(variant, corpus, epochs, folder):
    """The command of one cut pretraining of the cpu recipe."""
    command = [sys.executable, RUN_PY, "pretrain", variant, corpus, "--recipe", "cpu", "--device", "cpu"]
    command += ["--pretrain_stages", f"corpus epochs={epochs}", "--writing_params_path", f"{folder}/{variant}.params"]
    if variant == "perceiver":
        command += ["--bottleneck_dim", str(HANDOUT_BOTTLENECK_DIM)]
    return command


def timed(commands, jobs, threads):
    """Seconds to run the commands, `jobs` at a time, each with `threads` threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        runs = [pool.submit(subprocess.run, c, env=env, capture_output=True, text=True) for c in commands]
    for run in runs:
        if run.result().returncode:
            raise SystemExit(f"jobs_pace.py: a training failed: {run.result().stderr[-500:]}")
    return time.monotonic() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4, help="epochs of each cut pretraining")
    parser.add_argument("--jobs", type=int, default=2, help="trainings side by side in the second way")
    parser.add_argument("--corpus", default="data/wiki.txt")
    args = parser.parse_args(argv)
    cores = available_cores()
    ways = {
        f"one at a time, {cores} threads": (1, cores),
        f"{args.jobs} side by side, {max(1, cores // args.jobs)} thread(s) each": (
            args.jobs,
            max(1, cores // args.jobs),
        ),
    }
    seconds = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as folder:
        commands = [training(variant, args.corpus, args.epochs, folder) for variant in VARIANTS]
        for round_number in range(args.rounds):
            order = list(ways) if round_number % 2 == 0 else list(ways)[::-1]  # the ways take turns going first
            for way in order:
                seconds[way].append(timed(commands, *ways[way]))
                print(f"round {round_number + 1}: {way}: {seconds[way][-1]:.1f} s", flush=True)
    serial, side_by_side = (statistics.median(s) for s in seconds.values())
    print("| way | seconds, each round | median |")
    print("| --- | --- | --- |")
    for way, values in seconds.items():
        print(f"| {way} | {', '.join(f'{s:.1f}' for s in values)} | {statistics.median(values):.1f} |")
    print(f"ratio, one at a time / side by side: {serial / side_by_side:.2f}")


if __name__ == "__main__":
    main()
