"""
The pace of vanilla's handout pretraining under each way of running its step, side by side in
one process on this machine: the straightforward loop (rows at full width), batches cut after
their last target (the CPU's default), fixed shapes eager, and the captured step each way
(capture.py: a CUDA graph, CUDA's default, and torch.compile's reduce-overhead), each in every
precision asked for.

    python experiments/step_pace.py [--epochs 3] [--precisions fp32 tf32 bf16] [--ways ...]
        [--data data] [--device auto] [--n_layer 4 --n_head 8 --n_embd 256]

Each setting trains the handout's model (or one of the --n_layer, --n_head, --n_embd given) from
the same initialisation for --epochs epochs. Its row: the first epoch's seconds (what compiling
and capturing cost), the fastest other epoch in steps/s, the main thread's CPU time a step over
those epochs (the host's share of a step), on CUDA the GPU's kernel time a step (one more epoch
under torch.profiler), the handout's 650 epochs projected (the first epoch, then 649 at the
fastest pace) and the run.py flags that give the setting, for a script to take up
(experiments/gpu_check.py's handout part, as --handout_flags).
The rows come as they are measured, the compiled step's (whose compiling takes longest) last.
"""

import argparse
import dataclasses

import src_path  # noqa: F401

# isort: split
import torch
from torch.profiler import ProfilerActivity, profile

from benchmark import STRAIGHTFORWARD, data_folder, load_data, model_config, timed_training
from dataset import CharCorruptionDataset
from factgpt.common.distributed import DEVICES, pick_device
from factgpt.common.files import DATA_DIR
from factgpt.corpus.reading import BLOCK_SIZE
from factgpt.settings.recipes import HANDOUT
from model import GPT
from utils import set_seed

SIZES = ("n_layer", "n_head", "n_embd")  # the model's, as run.py's flags
WAYS = {  # how the step runs: the Recipe fields that say so
    "straightforward": STRAIGHTFORWARD,
    "cut": dict(captured_step="off"),  # the CPU's default: batches cut after their last target
    "fixed_shapes": dict(fixed_shapes=True, captured_step="off"),
    "cuda_graph": dict(captured_step="cuda_graph"),  # CUDA's default (auto); batches of one shape, as fixed_shapes
    "compiled": dict(captured_step="compiled"),
}


def flags_of(fields):
    """run.py's flags for these Recipe fields."""
    return " ".join(f"--{name}" if value is True else f"--{name} {value}" for name, value in fields.items())


def pace(corpus, fields, device, epochs, sizes=None):
    """One setting's (first epoch s, steps/s, host ms a step, GPU ms a step or None, projected s), of a model of
    `sizes` (default the handout's)."""
    set_seed(0)
    model = GPT(model_config("vanilla", corpus.vocab_size, BLOCK_SIZE, sizes))
    recipe = dataclasses.replace(HANDOUT, **fields)
    clocks = []
    _, steps, trainer = timed_training(
        "pretrain", "vanilla", model, corpus, len(corpus), recipe, device, epochs, clocks
    )
    walls = [end - start for (start, _), (end, _) in zip(clocks, clocks[1:])]
    fastest = min(walls[1:] or walls)
    host = (clocks[-1][1] - clocks[1 if epochs > 1 else 0][1]) / (steps * max(1, epochs - 1))
    gpu = None
    if torch.device(device).type == "cuda":
        trainer.config.max_epochs += 1
        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            trainer.train()
        kernels = sum(event.self_device_time_total for event in profiler.key_averages())
        gpu = kernels / 1000 / steps
    projected = walls[0] + fastest * (HANDOUT.pretrain_epochs - 1)
    return walls[0], steps / fastest, 1000 * host, gpu, projected


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3, help="epochs each setting trains (default 3)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "tf32", "bf16"], choices=["fp32", "tf32", "bf16"])
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=list(WAYS))
    parser.add_argument("--data", default=str(DATA_DIR), help="folder of the four data files (default data/)")
    parser.add_argument("--device", choices=DEVICES, default="auto")
    for size in SIZES:  # a smaller model than the handout's measures the ways in less time
        parser.add_argument(f"--{size}", type=int, default=getattr(HANDOUT, size), help="default: the handout's")
    args = parser.parse_args(argv)
    sizes = {size: getattr(args, size) for size in SIZES}
    device = str(pick_device(args.device))
    corpus = CharCorruptionDataset(load_data(data_folder(args.data))["wiki.txt"], BLOCK_SIZE)
    name = torch.cuda.get_device_name() if device.startswith("cuda") else device
    model = "".join(f", {size} {value}" for size, value in sizes.items() if value != getattr(HANDOUT, size))
    model = f" (model: the handout's{model})" if model else ""
    print(f"vanilla's handout pretraining{model} on {name}, torch {torch.__version__}, {args.epochs} epochs a setting")
    print()
    print(
        "| way | precision | first epoch | steps/s | host ms a step | GPU ms a step | 650 epochs, projected | flags |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    runs = [(precision, way) for precision in args.precisions for way in args.ways if way != "compiled"]
    runs += [
        (precision, "compiled") for precision in args.precisions if "compiled" in args.ways
    ]  # the slow starts last
    for precision, way in runs:
        fields = {**WAYS[way], **({"precision": precision} if precision != "fp32" else {})}
        try:
            first, steps_per_s, host, gpu, projected = pace(corpus, fields, device, args.epochs, sizes)
        except Exception as error:  # one setting that fails leaves the others' rows
            print(
                f"| {way} | {precision} | failed: {type(error).__name__}: {str(error).splitlines()[0][:200]} |",
                flush=True,
            )
            continue
        gpu_text = "" if gpu is None else f"{gpu:.2f}"
        row = [way, precision, f"{first:.2f} s", f"{steps_per_s:.1f}", f"{host:.2f}", gpu_text, f"{projected:.0f} s"]
        print("| " + " | ".join(row + [f"`{flags_of(fields)}`"]) + " |", flush=True)


if __name__ == "__main__":
    main()
