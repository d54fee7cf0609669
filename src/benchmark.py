"""
Measures what the fast paths save, side by side in one run on this machine.

    python src/benchmark.py [--variants vanilla perceiver synthesizer] [--eval_questions 500] [--group_by_length]
                            [--sweep 128 256 512 1024] [--device auto] [--whole_process] [--data data]

For each variant, with the handout's model and batch sizes, it trains one epoch of
pretraining and one of finetuning and answers the dev questions, once the
straightforward way (every row padded to 128 characters, one question at a time
without a cache) and once the fast way (every batch cut after its last real target
and, on the CPU, passes of rows of similar length; with --group_by_length, pretraining
batches also grouped by length; questions decoded in batches with a KV cache), and
prints both figures and their ratio. Both ways use the same model, batch sizes and
optimizer (the fused AdamW on CUDA and the CPU). The answers of both decoders on the
same model are compared and must be identical.

Then it sweeps the block size and prints the time and peak memory of one training
step (forward, backward, AdamW) for each variant: the cost of vanilla and synthesizer
attention grows with L^2, the perceiver's inner blocks with m^2 and its projections
with L*m. Data: data/ (or --data) when it holds the assignment's files, else a generated
demo world.

With --whole_process it compares whole run.py processes instead, as a user meets them
(interpreter start-up, imports, reading the data and the params included): one epoch of
pretraining, one of finetuning from its params, and answering the dev questions, once
with --full_padding --sequential_decoding (the course's loops) and once with the defaults.
"""

import argparse
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from config import BLOCK_SIZE, HANDOUT, LENGTH_GROUPING_POOL, MODEL
from dataset import CharCorruptionDataset, NameDataset, read_questions
from decoding import predict_places
from distributed import pick_device
from files import DATA_DIR
from model import GPT, variant_config
from trainer import Trainer, TrainerConfig
from utils import set_seed
from world import FILES, write_world

PERCEIVER_BOTTLENECK = 64  # the handout's perceiver runs
SWEEP_STEPS = 3


def model_config(variant, vocab_size, block_size):
    """The handout's model of a variant (the perceiver with the handout's bottleneck)."""
    return variant_config(variant, vocab_size, block_size, bottleneck_dim=PERCEIVER_BOTTLENECK, **MODEL)


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
    """The four data files' texts (data_folder)."""
    folder = data_folder(folder)
    return {name: (folder / name).read_text(encoding="utf-8") for name in FILES}


def timed_process(argv):
    """Seconds that `python src/run.py argv` takes from start to exit (SystemExit if it fails)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "run.py"), *argv], capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"run.py {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return seconds


def compare_processes(variant, args):
    """
    Rows of (what, straightforward, fast, unit, lower is better) for whole run.py processes:
    one epoch of pretraining, one of finetuning from its params, and answering the dev
    questions, with --full_padding --sequential_decoding (the course's loops) and without.
    """
    folder, work = data_folder(args.data), Path(tempfile.mkdtemp(prefix="benchmark_"))
    corpus = [variant, str(folder / "wiki.txt"), "--device", args.device, "--seed", "0"]
    seconds = {}
    for fast in (False, True):
        ways = [] if fast else ["--full_padding", "--sequential_decoding"]
        pretrained, finetuned = str(work / f"pre{fast}.params"), str(work / f"fine{fast}.params")
        pretrain = ["pretrain", *corpus, "--writing_params_path", pretrained, "--max_epochs", "1"]
        seconds[fast, "pretrain"] = timed_process([*pretrain, *ways])
        finetune = ["finetune", *corpus, "--reading_params_path", pretrained, "--writing_params_path", finetuned]
        questions = str(folder / "birth_places_train.tsv")
        seconds[fast, "finetune"] = timed_process(
            [*finetune, "--finetune_corpus_path", questions, "--max_epochs", "1", *ways]
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


def timed_training(model, dataset, batch_size, bucket_pool, learning_rate, skip_padding, device):
    """One epoch with run.py's settings: (seconds, trainer)."""
    config = TrainerConfig(
        max_epochs=1,
        batch_size=batch_size,
        learning_rate=learning_rate,
        lr_decay=True,
        warmup_tokens=HANDOUT.warmup_tokens,
        final_tokens=HANDOUT.final_tokens(len(dataset)),
        skip_padding=skip_padding,
        bucket_pool=bucket_pool,
        device=device,
    )
    trainer = Trainer(model, dataset, None, config)
    sync(trainer.device)
    start = time.perf_counter()
    trainer.train()
    sync(trainer.device)
    return time.perf_counter() - start, trainer


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def compare_variant(variant, files, args):
    """Rows of (what, straightforward, fast, unit) for one variant."""
    pretrain = CharCorruptionDataset(files["wiki.txt"], BLOCK_SIZE)
    names = NameDataset(pretrain, files["birth_places_train.tsv"])
    questions = [question for _, question, _ in read_questions(files["birth_dev.tsv"])][: args.eval_questions]
    results = {}
    for fast in (False, True):
        set_seed(0)
        model = GPT(model_config(variant, pretrain.vocab_size, BLOCK_SIZE))
        pool = LENGTH_GROUPING_POOL if args.group_by_length else 1
        seconds, trainer = timed_training(
            model, pretrain, HANDOUT.pretrain_batch_size, pool, HANDOUT.pretrain_lr, fast, args.device
        )
        results[fast, "step"] = seconds / trainer.step
        results[fast, "tokens"] = trainer.useful_tokens / seconds
        results[fast, "finetune"], trainer = timed_training(
            model, names, HANDOUT.finetune_batch_size, 1, HANDOUT.finetune_lr, fast, args.device
        )
    answers = {}
    for fast in (False, True):
        start = time.perf_counter()
        answers[fast] = predict_places(
            model, questions, pretrain.stoi, pretrain.itos, trainer.device, sequential=not fast
        )
        sync(trainer.device)
        results[fast, "eval"] = len(questions) / (time.perf_counter() - start)
    if answers[False] != answers[True]:
        raise SystemExit(f"{variant}: batched decoding answered differently from one-at-a-time decoding")
    return [
        ("pretraining step", results[False, "step"], results[True, "step"], "s", True),
        ("pretraining useful tokens/s", results[False, "tokens"], results[True, "tokens"], "", False),
        ("finetuning epoch", results[False, "finetune"], results[True, "finetune"], "s", True),
        (
            f"evaluation questions/s ({len(questions)}, identical answers)",
            results[False, "eval"],
            results[True, "eval"],
            "",
            False,
        ),
    ]


def measure_step(variant, block_size, batch_size, device, queue):
    """Time and peak memory of one training step at this block size, in a fresh process.
    On CPU the memory is the growth of the resident size (Linux), on CUDA of allocated memory."""
    torch.manual_seed(0)
    device = torch.device(device)
    model = GPT(model_config(variant, 256, block_size)).to(device)
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
                target=measure_step, args=(variant, block_size, args.sweep_batch, args.device, queue)
            )
            worker.start()
            seconds, peak = queue.get()
            worker.join()
            rows.append((block_size, variant, seconds, peak))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["vanilla", "perceiver", "synthesizer"],
        choices=["vanilla", "perceiver", "synthesizer"],
    )
    parser.add_argument("--eval_questions", type=int, default=500, help="dev questions to answer (default 500)")
    parser.add_argument("--sweep", type=int, nargs="*", default=[128, 256, 512, 1024], help="block sizes to sweep")
    parser.add_argument("--sweep_batch", type=int, default=8, help="batch size of the sweep's steps")
    parser.add_argument("--device", choices=["auto", "cuda", "mps", "cpu"], default="auto")
    parser.add_argument(
        "--group_by_length",
        action="store_true",
        help="the fast pretraining also groups examples by length, as run.py --group_by_length does",
    )
    parser.add_argument("--skip_comparison", action="store_true", help="only run the block-size sweep")
    parser.add_argument(
        "--data",
        default=str(DATA_DIR),
        help="folder of the four data files (default data/; a generated demo world where they are missing)",
    )
    parser.add_argument(
        "--whole_process",
        action="store_true",
        help="compare whole run.py processes (start-up, imports and data included) instead: one pretraining epoch, "
        "one finetuning epoch, the dev questions; with --full_padding --sequential_decoding and without",
    )
    args = parser.parse_args(argv)
    args.device = str(pick_device(args.device))
    print(f"device: {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads")

    if not args.skip_comparison:
        files = None if args.whole_process else load_data(args.data)
        print("\n| variant | measure | straightforward | fast | ratio |")
        print("| --- | --- | --- | --- | --- |")
        for variant in args.variants:
            rows = compare_processes(variant, args) if args.whole_process else compare_variant(variant, files, args)
            for what, slow, fast, unit, lower_is_better in rows:
                ratio = slow / fast if lower_is_better else fast / slow
                print(f"| {variant} | {what} | {slow:.3g}{unit} | {fast:.3g}{unit} | {ratio:.1f}x |", flush=True)

    if args.sweep:
        print(
            f"\nOne training step, batch {args.sweep_batch}, sequences of block_size-1 tokens "
            f"(perceiver m={PERCEIVER_BOTTLENECK}):"
        )
        print("\n| block size | variant | step time | peak memory |")
        print("| --- | --- | --- | --- |")
        for block_size, variant, seconds, peak in sweep(args):
            print(f"| {block_size} | {variant} | {seconds * 1000:.0f} ms | {peak / 2**20:.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
