"""
The command line of the assignment:

    python src/run.py {pretrain,finetune,evaluate} {vanilla,perceiver,synthesizer,rope} PRETRAIN_CORPUS_PATH [flags]

pretrain: span-corruption pretraining on the corpus (going on from --reading_params_path
          if given), saved to --writing_params_path.
finetune: birthplace finetuning on --finetune_corpus_path, from scratch or from
          --reading_params_path, saved to --writing_params_path.
evaluate: greedy answers for --eval_corpus_path, written to --outputs_path, scored
          when the file has answers.
The vocabulary always comes from the pretraining corpus, so all three agree.

pretrain and finetune keep a resumable checkpoint at <writing_params_path>.ckpt
(after every epoch, and every --checkpoint_minutes); --resume continues from it.
Under torchrun (torchrun --nproc_per_node=N src/run.py ...) every command runs on
N processes with DistributedDataParallel; rank 0 alone prints and writes files.
Mistakes in the input are reported in one line with exit code 2.
"""

import argparse
import contextlib
import dataclasses
import gc
import logging
import math
import os
import shlex
import sys
import tempfile
import time

import torch
from torch.utils.data import ConcatDataset
from tqdm.auto import tqdm

from checkpoint import ParamsError, RunIdentity, load_fitting_params, read_facts, save_params, write_facts
from config import BLOCK_SIZE, BOTTLENECK_DIM, HANDOUT, LENGTH_GROUPING_POOL, MODEL, RECIPES
from dataset import (
    CharCorruptionDataset,
    NameDataset,
    known_characters,
    longest_shift,
    question_place_pairs,
    read_questions,
)
from decoding import birthplace_recall, predict_places
from distributed import gather_interleaved, launch_rank, pick_device, rank_and_world_size, start_distributed
from files import PathInUse, atomic_write, exclusive_lock, resolve_data_path
from model import GPT, VARIANTS, variant_config
from trainer import (
    DECAY_GROUPS,
    LR_SCHEDULES,
    PRECISIONS,
    CheckpointError,
    Trainer,
    TrainerConfig,
    TrainingDiverged,
    TrainingInterrupted,
)
from utils import evaluate_places, score_line, set_seed

CUDA_NUM_WORKERS = 4
UNSHIFTED_SUFFIX = ".unshifted"  # pretraining's first stage, when the recipe has a shifted one
TENSORBOARD_ROOT = "expt"  # relative to the working directory

REQUIRED = {
    "pretrain": ["writing_params_path"],
    "finetune": ["writing_params_path", "finetune_corpus_path"],
    "evaluate": ["reading_params_path", "eval_corpus_path", "outputs_path"],
}


class UsageError(Exception):
    """A problem with the user's input: reported in one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (no usage block), exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer of at least 0, got {text}")
    return value


def positive_float(text):
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def non_negative_float(text):
    value = float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0, got {text}")
    return value


def probability(text):
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {text}")
    return value


def check_writable(path, what):
    """Fail now, not after hours of training, if `path` cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{what} {path} is a directory")
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"{what} {path} cannot be written: {existing} is not a folder")
    try:  # os.access can say yes where writing fails (a read-only mount, /proc, some network folders)
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise UsageError(f"{what} {path} cannot be written: {existing} refuses new files ({e.strerror})") from None


INPUTS = (
    "pretrain_corpus_path",
    "reading_params_path",
    "finetune_corpus_path",
    "eval_corpus_path",
    "probe_corpus_path",
    "mix_corpus_path",
)
OUTPUTS = ("writing_params_path", "outputs_path")


def check_outputs_spare_inputs(args):
    """An output never replaces an input (say, --outputs_path given the --eval_corpus_path)."""
    inputs = {os.path.realpath(resolve_data_path(getattr(args, name))): name for name in INPUTS if getattr(args, name)}
    for name in OUTPUTS:
        path = getattr(args, name)
        if path and os.path.realpath(path) in inputs:
            raise UsageError(
                f"--{name} {path} is also the --{inputs[os.path.realpath(path)]}: an output never replaces an input"
            )


def build_parser():
    needs = "\n".join(
        f"  {function}: {' '.join('--' + name for name in names)}" for function, names in REQUIRED.items()
    )
    p = OneLineParser(
        prog="run.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"flags each subcommand needs:\n{needs}",
    )
    p.add_argument("function", choices=["pretrain", "finetune", "evaluate"])
    p.add_argument("variant", choices=VARIANTS)
    p.add_argument("pretrain_corpus_path", help="the pretraining corpus; its characters are the vocabulary")
    p.add_argument(
        "--bottleneck_dim",
        type=positive_int,
        help=f"perceiver latent length m (default {BOTTLENECK_DIM}, or the params' own)",
    )
    p.add_argument(
        "--reading_params_path", help="params to start from (finetune, or pretrain to go on pretraining) or to evaluate"
    )
    p.add_argument("--writing_params_path", help="where to save the trained params")
    p.add_argument("--finetune_corpus_path", help="question<TAB>place pairs to finetune on")
    p.add_argument("--eval_corpus_path", help="questions (with or without places) to answer")
    p.add_argument("--outputs_path", help="where to write one predicted place per line")
    p.add_argument(
        "--pretrain_lr",
        type=positive_float,
        help=f"peak pretraining learning rate (default {HANDOUT.pretrain_lr:g}, or the recipe's)",
    )
    p.add_argument(
        "--finetune_lr",
        type=positive_float,
        help=f"peak finetuning learning rate (default {HANDOUT.finetune_lr:g}, or the recipe's)",
    )
    p.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="handout",
        help="training settings: the handout's (default), or cpu: a schedule for a CPU "
        f"({RECIPES['cpu'].pretrain_epochs} epochs of a {RECIPES['cpu'].n_embd}-wide model at batch "
        f"{RECIPES['cpu'].pretrain_batch_size}, then {RECIPES['cpu'].shifted_epochs} on shifted examples: "
        "--shifted_epochs; README: Pretraining on a CPU)",
    )
    p.add_argument("--tb_expt_name", default="run", help="TensorBoard run name, under expt/")
    g = p.add_argument_group("overrides for quick runs and experiments (defaults: the handout's)")
    g.add_argument(
        "--max_epochs",
        type=positive_int,
        help=f"epochs (pretrain {HANDOUT.pretrain_epochs}; finetune {HANDOUT.finetune_epochs_from_scratch} "
        f"from scratch, {HANDOUT.finetune_epochs_from_pretrained} from params; or the recipe's)",
    )
    g.add_argument(
        "--batch_size",
        type=positive_int,
        help=f"batch size (pretrain {HANDOUT.pretrain_batch_size}, finetune {HANDOUT.finetune_batch_size}; "
        "or the recipe's)",
    )
    g.add_argument(
        "--dropout",
        type=probability,
        help=f"dropout of embeddings, attention and residuals (default {HANDOUT.dropout:g}, or the recipe's)",
    )
    g.add_argument(
        "--weight_decay",
        type=non_negative_float,
        help=f"AdamW's weight decay (default {HANDOUT.weight_decay:g}, or the recipe's)",
    )
    g.add_argument(
        "--decay_epochs",
        type=positive_int,
        metavar="N",
        help="the cosine's half period in epochs of the pretraining corpus, in finetuning too "
        f"(default {HANDOUT.decay_epochs}, or the recipe's; to decay over a shorter run, give its --max_epochs)",
    )
    g.add_argument(
        "--shifted_epochs",
        type=non_negative_int,
        metavar="N",
        help="pretrain: end with a second stage of N epochs from a fresh optimizer at a tenth of the recipe's peak "
        f"rate, on examples shifted by 0..{RECIPES['cpu'].shifted_max_shift} pads, so that the facts are not keyed to "
        f"position 0 alone (default: the recipe's: none in the handout's, {RECIPES['cpu'].shifted_epochs} epochs "
        f"at {RECIPES['cpu'].shifted_lr:g} in cpu's; 0: no such stage; --pretrain_lr, --max_epochs, "
        "--decay_epochs, --max_shift and --reading_params_path are the first stage's; ignored by finetune and "
        f"evaluate). --keep_checkpoint keeps the first stage's params as <writing_params_path>{UNSHIFTED_SUFFIX}",
    )
    g.add_argument(
        "--n_layer",
        type=positive_int,
        help=f"Transformer blocks (default {MODEL['n_layer']} or the recipe's, or the params' own; the perceiver's "
        "first and last are its down- and up-projection)",
    )
    g.add_argument(
        "--n_head",
        type=positive_int,
        help=f"attention heads per block (default {MODEL['n_head']} or the recipe's, or the params' own; "
        "must divide --n_embd)",
    )
    g.add_argument(
        "--n_embd",
        type=positive_int,
        help=f"width of the embeddings and every block (default {MODEL['n_embd']} or the recipe's, or the params' own)",
    )
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--device", choices=["auto", "cuda", "mps", "cpu"], default="auto")
    g.add_argument(
        "--num_workers",
        type=int,
        choices=range(0, 65),
        metavar="N",
        help="DataLoader worker processes (default: 4 with CUDA, else 0)",
    )
    r = p.add_argument_group("pretraining experiments (pretrain)")
    r.add_argument(
        "--mix_corpus_path",
        metavar="PATH",
        help="also train on these question<TAB>place pairs, in finetuning's format, mixed into every epoch "
        '(mixed training; README: "Pretraining on a CPU")',
    )
    r.add_argument(
        "--max_shift",
        type=int,
        default=0,
        choices=range(longest_shift(BLOCK_SIZE) + 1),
        metavar="N",
        help=f"start every span-corruption example after 0..N pads (N at most {longest_shift(BLOCK_SIZE)}), so that "
        "a biography's name is not always at position 0 (the questions ask it at position 10); not the course's data "
        '(default 0; README: "Pretraining on a CPU")',
    )
    r.add_argument(
        "--probe_corpus_path",
        metavar="PATH",
        help="question<TAB>place pairs whose birthplaces the model should come to recall from the corpus: "
        "every --probe_every epochs, report how many it completes from their biographies "
        "and how many of the questions it answers",
    )
    r.add_argument("--probe_every", type=positive_int, default=5, metavar="N", help="epochs between probes (default 5)")
    r.add_argument(
        "--save_every",
        type=positive_int,
        metavar="N",
        help="also save the params every N epochs as <writing_params_path>.epoch<E>, their facts holding the epochs "
        "and this process's training seconds so far (for learning curves: src/learning_curve.py; with a shifted "
        f"stage, the first stage's are <writing_params_path>{UNSHIFTED_SUFFIX}.epoch<E>)",
    )
    c = p.add_argument_group("checkpoints (pretrain, finetune)")
    c.add_argument(
        "--resume",
        action="store_true",
        help="continue from <writing_params_path>.ckpt if it exists (same command, same settings; with a shifted "
        f"stage, from <writing_params_path>{UNSHIFTED_SUFFIX}.ckpt first)",
    )
    c.add_argument(
        "--checkpoint_minutes",
        type=positive_float,
        metavar="N",
        help="also write the checkpoint every N minutes within an epoch (default: after every epoch only)",
    )
    c.add_argument("--keep_checkpoint", action="store_true", help="keep the checkpoint when training finishes")
    s = p.add_argument_group("speed (the defaults are the fast paths; these switch them off or add to them)")
    s.add_argument(
        "--full_padding",
        action="store_true",
        help="train on rows padded to the block size instead of batches cut after their last real target",
    )
    s.add_argument(
        "--sequential_decoding",
        action="store_true",
        help="evaluate one question at a time without a KV cache (same answers, slower)",
    )
    s.add_argument("--compile", action="store_true", help="torch.compile the model for training")
    s.add_argument(
        "--corrupt_by_epoch",
        action="store_true",
        help="pretrain: draw each epoch's span corruptions at once with tensor operations instead of one example "
        "at a time in Python (the same distribution, other random draws)",
    )
    o = p.add_argument_group("departures from the course's optimisation (the defaults reproduce it; see README)")
    o.add_argument(
        "--decay_groups",
        choices=DECAY_GROUPS,
        default="course",
        help="course: weight decay on every parameter but the biases, as the course's trainer has it; "
        "matmul: on the Linear weights only (nanoGPT's groups)",
    )
    o.add_argument(
        "--lr_schedule",
        choices=LR_SCHEDULES,
        default="course",
        help="course: the cosine rises again after its 200 epochs; clamped: it stays at 10%%",
    )
    o.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="fp32 (default), tf32: TF32 matmuls on CUDA, bf16/fp16: autocast (fp16 with a gradient scaler)",
    )
    o.add_argument(
        "--group_by_length",
        action=argparse.BooleanOptionalAction,
        help=f"pretrain: draw batches from pools of {LENGTH_GROUPING_POOL} batches grouped by example length "
        "(less padding, but other examples share a step; default: the recipe's, off in the handout's)",
    )
    return p


def read_text(path, what):
    path = resolve_data_path(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {what} {path}: {e}") from None
    if not text.strip():
        raise UsageError(f"{what} {path} is empty")
    return text


def read_pairs(path, what, parse):
    """parse(text) of the question<TAB>place file at `path`; its ValueError becomes one line naming the file."""
    try:
        return parse(read_text(path, what))
    except ValueError as e:
        raise UsageError(f"{resolve_data_path(path)}: {e}") from None


def report_dropped(count, what):
    if count and launch_rank() == 0:
        print(f"dropped {count} character(s) outside the pretraining vocabulary from the {what}", file=sys.stderr)


def pretraining_dataset(path, max_shift=0):
    """The corpus at `path` as span-corruption examples (and the vocabulary); a reserved character is one line."""
    try:
        return CharCorruptionDataset(read_text(path, "pretraining corpus"), BLOCK_SIZE, max_shift)
    except ValueError as e:
        raise UsageError(f"pretraining corpus {resolve_data_path(path)}: {e}") from None


def pairs_dataset(pretrain_dataset, path, what):
    """The question<TAB>place pairs at `path` as finetuning examples."""
    pairs = read_pairs(path, what, lambda text: NameDataset(pretrain_dataset, text))
    report_dropped(pairs.dropped_characters, what)
    return pairs


def vocabulary(pretrain_dataset):
    """The corpus's characters in id order (the pad and mask, ids 0 and 1, left out)."""
    return "".join(pretrain_dataset.itos[i] for i in range(2, pretrain_dataset.vocab_size))


def params_facts(args, sizes, recipe_name, pretrain_dataset, command):
    """What a params file is: written beside it as <params>.json, and into the checkpoint."""
    facts = dict(variant=args.variant, **sizes)
    if args.variant != "perceiver":
        del facts["bottleneck_dim"]
    return dict(
        facts, block_size=BLOCK_SIZE, vocabulary=vocabulary(pretrain_dataset), recipe=recipe_name, command=command
    )


def reading_params_facts(args):
    """The facts beside --reading_params_path (None without one, or for params without facts)."""
    if not args.reading_params_path:
        return None
    try:
        return read_facts(args.reading_params_path)
    except ParamsError as e:
        raise UsageError(str(e)) from None


def model_sizes(args, facts, recipe):
    """
    The model-size flags: those left out take the params' own sizes (from their facts) or
    the recipe's; a flag that contradicts the params' facts is refused.
    """
    sizes = {}
    for flag, default in recipe.model_sizes().items():
        given, trained = getattr(args, flag), (facts or {}).get(flag)
        if given is not None and trained is not None and given != trained:
            raise UsageError(
                f"params file {args.reading_params_path} was trained with --{flag} {trained} "
                f"(its {args.reading_params_path}.json says so), not {given}: leave --{flag} out"
            )
        sizes[flag] = given if given is not None else trained if trained is not None else default
    return sizes


def check_vocabulary(args, facts, pretrain_dataset):
    """Params trained over another vocabulary would read every character as another one: refused."""
    ours = vocabulary(pretrain_dataset)
    if facts is None or facts.get("vocabulary", ours) == ours:
        return
    theirs, ours = set(facts["vocabulary"]), set(ours)
    raise UsageError(
        f"params file {args.reading_params_path} was pretrained on a corpus with another vocabulary "
        f"than {args.pretrain_corpus_path} ({len(theirs - ours)} characters only there, "
        f"{len(ours - theirs)} only here): pass the corpus it was pretrained on"
    )


def build_model(args, sizes, pretrain_dataset, dropout):
    """The seeded model of the command's variant and sizes, with --reading_params_path loaded into it."""
    if sizes["n_embd"] % sizes["n_head"]:
        raise UsageError(f"--n_embd {sizes['n_embd']} must be a multiple of --n_head {sizes['n_head']}")
    if args.variant == "rope" and sizes["n_embd"] // sizes["n_head"] % 2:
        raise UsageError(
            f"rope rotates pairs of dimensions: --n_embd {sizes['n_embd']} / --n_head {sizes['n_head']} "
            "must be an even head dimension"
        )
    if args.variant == "perceiver" and sizes["n_layer"] < 2:
        raise UsageError("the perceiver needs --n_layer 2 or more (a down- and an up-projection block)")
    if args.variant == "perceiver" and sizes["bottleneck_dim"] > BLOCK_SIZE:
        raise UsageError(
            f"--bottleneck_dim {sizes['bottleneck_dim']} is more than the block size {BLOCK_SIZE}: "
            "the perceiver's latents cannot outnumber the positions"
        )
    set_seed(args.seed)
    model = GPT(variant_config(args.variant, pretrain_dataset.vocab_size, BLOCK_SIZE, dropout=dropout, **sizes))
    if args.reading_params_path:
        try:
            load_fitting_params(model, args.reading_params_path, args.variant, args.pretrain_corpus_path, args.function)
        except ParamsError as e:
            raise UsageError(str(e)) from None
    return model


def recipe_of(args):
    """
    The --recipe's settings, with the command line's learning rates, dropout, weight decay,
    decay epochs, length grouping and shifted epochs put in.
    """
    overrides = (
        "pretrain_lr",
        "finetune_lr",
        "dropout",
        "weight_decay",
        "decay_epochs",
        "group_by_length",
        "shifted_epochs",
    )
    flags = {key: getattr(args, key) for key in overrides}
    return dataclasses.replace(RECIPES[args.recipe], **{key: v for key, v in flags.items() if v is not None})


def tensorboard_writer(args, sizes, recipe):
    """A writer of its own for this run: the course's folder name, then the start time and process id."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(
        log_dir=f"{TENSORBOARD_ROOT}/{args.function}/{args.tb_expt_name}_{args.variant}_{sizes['bottleneck_dim']}"
        f"_pt_lr_{recipe.pretrain_lr}_ft_lr_{recipe.finetune_lr}_{time.strftime('%Y%m%d-%H%M%S')}_{os.getpid()}"
    )


def recall_probe(path, every, model, pretrain_dataset, device, writer):
    """
    epoch_end for pretraining: every `every` epochs, report how many birthplaces of the
    question<TAB>place file at `path` the model recalls from their biographies, and how
    many of its questions it answers.
    """
    pairs = [(question, place) for _, question, place in read_pairs(path, "probe corpus", question_place_pairs)]
    stoi, itos = pretrain_dataset.stoi, pretrain_dataset.itos
    questions = [known_characters(question, stoi)[0] for question, _ in pairs]

    def probe(epochs_done):
        if epochs_done % every or rank_and_world_size()[0] != 0:
            return
        recalled, probed = birthplace_recall(model, pretrain_dataset.data, pairs, stoi, itos, device)
        answers = predict_places(model, questions, stoi, itos, device)
        answered = sum(answer == place for answer, (_, place) in zip(answers, pairs))
        recall, accuracy = recalled / max(1, probed), answered / len(pairs)
        tqdm.write(
            f"epoch {epochs_done}: recalls {recalled} of {probed} birthplaces of {path} "
            f"({recall:.1%}), answers {answered} of its {len(pairs)} questions ({accuracy:.1%})",
            file=sys.stderr,
        )
        if writer is not None:
            writer.add_scalar("probe/recall", recall, epochs_done)
            writer.add_scalar("probe/accuracy", accuracy, epochs_done)

    return probe


class EpochEnd:
    """
    What runs after every epoch: the params saved every --save_every epochs as
    <writing_params_path>.epoch<E> (rank 0), with the epochs and this process's seconds
    spent training so far (probes left out) in their facts; then the probe, if any. Epochs
    and seconds count on from the schedule's epochs_before and seconds_before, so that a
    closing pretraining stage goes on from the first stage's.
    """

    def __init__(self, args, model, run_facts, probe, schedule):
        self.args, self.model, self.run_facts, self.probe = args, model, run_facts, probe
        self.epochs_before, self.seconds_before = schedule.epochs_before, schedule.seconds_before
        self.start, self.probe_seconds = time.monotonic(), 0.0

    def training_seconds(self):
        return self.seconds_before + time.monotonic() - self.start - self.probe_seconds

    def __call__(self, epochs_done):
        epochs = self.epochs_before + epochs_done
        if self.args.save_every and epochs % self.args.save_every == 0 and rank_and_world_size()[0] == 0:
            path = f"{self.args.writing_params_path}.epoch{epochs}"
            save_params(self.model, path)
            write_facts(path, dict(self.run_facts, epochs=epochs, training_seconds=round(self.training_seconds(), 1)))
        if self.probe is not None:
            probe_start = time.monotonic()
            self.probe(epochs)
            self.probe_seconds += time.monotonic() - probe_start


@dataclasses.dataclass
class Schedule:
    """
    What one training run does: its examples, epochs, batch size and peak learning rate (and,
    for pretraining's second stage, the first stage's epochs and seconds its snapshots count on from).
    """

    dataset: object
    epochs: int
    batch_size: int
    learning_rate: float
    schedule_examples: int  # examples per epoch of the cosine's decay_epochs
    epochs_before: int = 0
    seconds_before: float = 0.0


def train(args, command, model, pretrain_dataset, sizes, recipe, schedule, device):
    """
    Train with the recipe's schedule (or the overrides), keeping a checkpoint; save params and
    facts on rank 0. Returns (epochs, seconds) trained, counted on from the schedule's
    epochs_before and seconds_before: where a later stage's snapshots count on from.
    """
    rank, _ = rank_and_world_size()
    epochs, batch_size = args.max_epochs or schedule.epochs, args.batch_size or schedule.batch_size
    writer = tensorboard_writer(args, sizes, recipe) if rank == 0 else None
    probe = None
    if args.function == "pretrain" and args.probe_corpus_path:
        probe = recall_probe(args.probe_corpus_path, args.probe_every, model, pretrain_dataset, device, writer)
    run_facts = params_facts(args, sizes, args.recipe, pretrain_dataset, command)
    after_epoch = EpochEnd(args, model, run_facts, probe, schedule)
    checkpoint_path = args.writing_params_path + ".ckpt"
    num_workers = args.num_workers
    if num_workers is None:
        num_workers = CUDA_NUM_WORKERS if device.type == "cuda" else 0
    config = TrainerConfig(
        max_epochs=epochs,
        batch_size=batch_size,
        learning_rate=schedule.learning_rate,
        lr_decay=True,
        lr_schedule=args.lr_schedule,
        decay_groups=args.decay_groups,
        weight_decay=recipe.weight_decay,
        warmup_tokens=recipe.warmup_tokens,
        final_tokens=recipe.final_tokens(schedule.schedule_examples),
        num_workers=num_workers,
        writer=writer,
        device=device,
        skip_padding=not args.full_padding,
        bucket_pool=LENGTH_GROUPING_POOL if recipe.group_by_length and args.function == "pretrain" else 1,
        corrupt_by_epoch=args.corrupt_by_epoch,
        precision=args.precision,
        compile=args.compile,
        checkpoint_path=checkpoint_path,
        checkpoint_minutes=args.checkpoint_minutes,
        resume=args.resume,
        data_seed=args.seed,
        epoch_end=after_epoch,
        run_facts=run_facts,
        run_identity=RunIdentity(
            function=args.function,
            variant=args.variant,
            n_layer=sizes["n_layer"],
            n_head=sizes["n_head"],
            n_embd=sizes["n_embd"],
            bottleneck_dim=sizes["bottleneck_dim"] if args.variant == "perceiver" else None,
            vocab_size=pretrain_dataset.vocab_size,
            examples=len(schedule.dataset),
            max_epochs=epochs,
            batch_size=batch_size,
            learning_rate=schedule.learning_rate,
            full_padding=args.full_padding,
            seed=args.seed,
            recipe=args.recipe,
            dropout=recipe.dropout,
            decay_groups=args.decay_groups,
            lr_schedule=args.lr_schedule,
            group_by_length=recipe.group_by_length,
            precision=args.precision,
            mix_corpus_path=args.mix_corpus_path,
            corrupt_by_epoch=args.corrupt_by_epoch,
            max_shift=args.max_shift,
            weight_decay=args.weight_decay,
            decay_epochs=args.decay_epochs,
        ).as_dict(),
    )
    exists = os.path.exists(checkpoint_path)
    if rank == 0 and args.resume and not exists:
        print(f"no checkpoint at {checkpoint_path}: starting from the beginning", file=sys.stderr)
    elif rank == 0 and exists and not args.resume:
        print(
            f"replacing the earlier run's checkpoint {checkpoint_path} (--resume continues it instead)", file=sys.stderr
        )
    try:
        Trainer(model, schedule.dataset, None, config).train()
    except (CheckpointError, TrainingDiverged) as e:
        raise UsageError(str(e)) from None
    finally:
        if writer is not None:
            writer.close()
    if rank == 0:
        save_params(model, args.writing_params_path)
        write_facts(args.writing_params_path, config.run_facts)
        if not args.keep_checkpoint:
            os.remove(checkpoint_path)
    return schedule.epochs_before + epochs, after_epoch.training_seconds()


def seed_ranks(seed):
    """Under torchrun every rank draws the same data (seeded with the model) but its own dropout."""
    rank, world_size = rank_and_world_size()
    if world_size > 1:
        torch.manual_seed(seed + 1 + rank)


def corpus_sizes_recipe(args):
    """A command's pretraining corpus (its vocabulary), model sizes and recipe, checked against the params' facts."""
    pretrain_dataset = pretraining_dataset(args.pretrain_corpus_path, args.max_shift)
    facts = reading_params_facts(args)
    recipe = recipe_of(args)
    sizes = model_sizes(args, facts, recipe)
    check_vocabulary(args, facts, pretrain_dataset)
    return pretrain_dataset, sizes, recipe


def pretrain(args, device, command):
    """
    Pretraining: one stage, or with the recipe's shifted_epochs two. The first writes
    <writing_params_path>.unshifted (its checkpoint kept, so that --resume finds the stage
    done); the second goes on from those params exactly as the command below would
    (`run.py pretrain ... --reading_params_path <params>.unshifted --max_epochs E --decay_epochs E
    --pretrain_lr LR --max_shift S --shifted_epochs 0`), then the first stage's files are
    removed unless --keep_checkpoint.
    """
    recipe = recipe_of(args)
    if not recipe.shifted_epochs:
        pretrain_stage(args, device, command)
        return
    unshifted = args.writing_params_path + UNSHIFTED_SUFFIX
    check_first_stage(args, unshifted)
    first_stage = stage_args(args, writing_params_path=unshifted, keep_checkpoint=True)
    epochs, seconds = pretrain_stage(first_stage, device, command)
    gc.collect()  # the first stage's trainer (its optimizer state, its DataLoader workers) goes now
    if torch.distributed.is_initialized():
        torch.distributed.barrier()  # every rank reads the params rank 0 has just written
    closing_stage = stage_args(
        args,
        reading_params_path=unshifted,
        max_epochs=recipe.shifted_epochs,
        decay_epochs=recipe.shifted_epochs,
        pretrain_lr=recipe.shifted_lr,
        max_shift=recipe.shifted_max_shift,
        tb_expt_name=args.tb_expt_name + "_shifted",
    )
    pretrain_stage(closing_stage, device, command, epochs, seconds)
    if launch_rank() == 0 and not args.keep_checkpoint:
        for path in (unshifted, unshifted + ".json", unshifted + ".ckpt"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def check_first_stage(args, unshifted):
    """Before hours of training: the first stage's params replace no input, and --resume finds this run's stages."""
    if args.reading_params_path and os.path.realpath(args.reading_params_path) == os.path.realpath(unshifted):
        raise UsageError(
            f"--reading_params_path {args.reading_params_path} is where this run's first stage writes "
            "(the recipe's shifted stage is on): give --shifted_epochs 0 to go on from those params alone, "
            "or another --writing_params_path"
        )
    check_writable(unshifted, "the first stage's params")
    checkpoint = args.writing_params_path + ".ckpt"
    if args.resume and os.path.exists(checkpoint) and not os.path.exists(unshifted + ".ckpt"):
        raise UsageError(
            f"--resume: {checkpoint} has no first stage's checkpoint {unshifted}.ckpt beside it, so it is not "
            "from a run with the recipe's shifted stage: resume it with --shifted_epochs 0, or remove it"
        )


def stage_args(args, **changes):
    """The command line of one pretraining stage: args with `changes`, and no further stage."""
    return argparse.Namespace(**{**vars(args), "shifted_epochs": 0, **changes})


def pretrain_stage(args, device, command, epochs_before=0, seconds_before=0.0):
    """
    One pretraining run: the corpus's span corruptions (with any mixed pairs) under the
    recipe's schedule. Returns (epochs, seconds) trained, counted on from the earlier stage's.
    """
    pretrain_dataset, sizes, recipe = corpus_sizes_recipe(args)
    dataset = pretrain_dataset
    if args.mix_corpus_path:
        dataset = ConcatDataset(
            [pretrain_dataset, pairs_dataset(pretrain_dataset, args.mix_corpus_path, "mixed corpus")]
        )
    model = build_model(args, sizes, pretrain_dataset, recipe.dropout)
    seed_ranks(args.seed)
    # decay_epochs count epochs of what pretraining trains on (the corpus, with any mixed pairs)
    schedule = Schedule(
        dataset,
        recipe.pretrain_epochs,
        recipe.pretrain_batch_size,
        recipe.pretrain_lr,
        len(dataset),
        epochs_before,
        seconds_before,
    )
    return train(args, command, model, pretrain_dataset, sizes, recipe, schedule, device)


def finetune(args, device, command):
    pretrain_dataset, sizes, recipe = corpus_sizes_recipe(args)
    dataset = pairs_dataset(pretrain_dataset, args.finetune_corpus_path, "finetuning corpus")
    model = build_model(args, sizes, pretrain_dataset, recipe.dropout)
    seed_ranks(args.seed)
    from_pretrained = bool(args.reading_params_path)
    epochs = recipe.finetune_epochs_from_pretrained if from_pretrained else recipe.finetune_epochs_from_scratch
    # decay_epochs count epochs of the pretraining corpus, as in the course's code
    schedule = Schedule(dataset, epochs, recipe.finetune_batch_size, recipe.finetune_lr, len(pretrain_dataset))
    train(args, command, model, pretrain_dataset, sizes, recipe, schedule, device)


def evaluate(args, device, command):
    pretrain_dataset, sizes, recipe = corpus_sizes_recipe(args)
    rows = read_pairs(args.eval_corpus_path, "evaluation corpus", read_questions)
    model = build_model(args, sizes, pretrain_dataset, recipe.dropout).to(device)
    stoi, itos = pretrain_dataset.stoi, pretrain_dataset.itos
    questions, dropped = [], 0
    for _, question, _ in rows:
        question, n = known_characters(question, stoi)
        questions.append(question)
        dropped += n
    report_dropped(dropped, "questions")
    rank, world_size = rank_and_world_size()
    share = predict_places(model, questions[rank::world_size], stoi, itos, device, sequential=args.sequential_decoding)
    predictions = gather_interleaved(share, len(questions))
    if rank != 0:
        return
    atomic_write(args.outputs_path, lambda f: f.write("".join(p + "\n" for p in predictions).encode("utf-8")))
    total, correct = evaluate_places(resolve_data_path(args.eval_corpus_path), predictions)
    if total > 0:
        print(score_line(total, correct))
    else:
        print(f"Predictions written to {args.outputs_path}; no targets provided!")


COMMANDS = {"pretrain": pretrain, "finetune": finetune, "evaluate": evaluate}


@contextlib.contextmanager
def writer_lock(args):
    """
    While pretrain or finetune runs, <writing_params_path>.lock keeps a second run from
    writing the same params and checkpoint (rank 0 holds it for all of torchrun's ranks).
    """
    if args.function == "evaluate" or launch_rank() != 0:
        yield
        return
    try:
        with exclusive_lock(args.writing_params_path + ".lock"):
            yield
    except PathInUse as e:
        raise UsageError(
            f"--writing_params_path {args.writing_params_path} is being written by another run "
            f"({e}); wait for it to end or choose another path"
        ) from None


def run(args, command):
    """Check the outputs, take the lock, join torchrun's processes, then run the command."""
    check_outputs_spare_inputs(args)
    for name in OUTPUTS:
        if getattr(args, name):
            check_writable(getattr(args, name), "--" + name)
    with writer_lock(args):
        try:
            device = start_distributed(pick_device(args.device))
        except RuntimeError as e:
            raise UsageError(str(e)) from None
        COMMANDS[args.function](args, device, command)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = [f"--{name}" for name in REQUIRED[args.function] if not getattr(args, name)]
    if missing:
        parser.error(f"{args.function} needs {' and '.join(missing)}")
    for flag in ("probe_corpus_path", "mix_corpus_path", "corrupt_by_epoch", "save_every", "max_shift"):
        if getattr(args, flag) and args.function != "pretrain":
            parser.error(f"--{flag} is for pretrain")
    if args.corrupt_by_epoch and args.mix_corpus_path:
        parser.error("--corrupt_by_epoch draws span corruptions only: it cannot be combined with --mix_corpus_path")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        run(args, shlex.join(["run.py", *argv]))
    except UsageError as e:
        if launch_rank() == 0:
            print(f"run.py: error: {e}", file=sys.stderr)
        return 2
    except TrainingInterrupted as e:
        print(f"run.py: {e}: run the same command with --resume to go on", file=sys.stderr)
        return 128 + e.signum
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
