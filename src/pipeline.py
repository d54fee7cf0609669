"""
The library API of a run: pretrain(cfg), finetune(cfg) and evaluate(cfg) for a
config.RunConfig, with no argparse inside. run.py is a thin command line over these;
the research scripts in experiments/ call them with their own configurations and
on_epoch_end hooks (probes, snapshots).

Every problem with the user's input (a missing file, params that do not fit, an output
that would replace an input) is a ConfigError whose message is one line.

pretrain and finetune keep a resumable checkpoint at <writing_params_path>.ckpt (after
every epoch, and every checkpoint_minutes); resume=True continues from it. Under
torchrun every rank runs the same call with DistributedDataParallel; rank 0 alone writes.
"""

import contextlib
import dataclasses
import gc
import json
import logging
import math
import os
import tempfile
import time
from typing import Callable, Optional, Sequence

import torch
from torch.utils.data import ConcatDataset

from checkpoint import ParamsError, RunIdentity, load_fitting_params, read_facts, save_params_with_facts
from config import (
    BLOCK_SIZE,
    BOTTLENECK_DIM,
    CUDA_NUM_WORKERS,
    HELD_OUT_SEED,
    LENGTH_GROUPING_POOL,
    RECIPES,
    RunConfig,
)
from dataset import CharCorruptionDataset, NameDataset, known_characters, read_questions
from decoding import predict_answers
from distributed import gather_interleaved, launch_rank, pick_device, rank_and_world_size, start_distributed
from files import PathInUse, atomic_write, exclusive_lock, resolve_data_path
from model import GPT, VARIANTS, variant_config
from perplexity import bits_per_character, corruption_loss
from trainer import CheckpointError, Trainer, TrainerConfig, TrainingDiverged
from utils import evaluate_places, set_seed

logger = logging.getLogger(__name__)

UNSHIFTED_SUFFIX = ".unshifted"  # pretraining's first stage, when the recipe has a shifted one
SIZES = ("n_layer", "n_head", "n_embd", "bottleneck_dim")


class ConfigError(Exception):
    """A problem with the run's input, said in one line (run.py: exit code 2)."""


# ---------------------------------------------------------------------------- inputs


def read_text(path, what):
    """The text of the file at `path` (found in data/ too), which must not be empty."""
    path = resolve_data_path(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {what} {path}: {e}") from None
    if not text.strip():
        raise ConfigError(f"{what} {path} is empty")
    return text


def read_pairs(path, what, parse=read_questions):
    """parse(text) of the question<TAB>place file at `path`; its ValueError becomes one line naming the file."""
    try:
        return parse(read_text(path, what))
    except ValueError as e:
        raise ConfigError(f"{resolve_data_path(path)}: {e}") from None


def load_corpus(path, max_shift=0):
    """The pretraining corpus at `path` as span-corruption examples; its characters are the vocabulary."""
    try:
        return CharCorruptionDataset(read_text(path, "pretraining corpus"), BLOCK_SIZE, max_shift)
    except ValueError as e:
        raise ConfigError(f"pretraining corpus {resolve_data_path(path)}: {e}") from None


def report_dropped(count, what):
    if count and launch_rank() == 0:
        logger.warning("dropped %d character(s) outside the pretraining vocabulary from the %s", count, what)


def load_pairs(corpus, path, what):
    """The question<TAB>place pairs at `path` as finetuning examples over the corpus's vocabulary."""
    pairs = read_pairs(path, what, lambda text: NameDataset(corpus, text))
    report_dropped(pairs.dropped_characters, what)
    return pairs


def encodable_questions(corpus, questions, what="questions"):
    """The questions with the characters outside the corpus's vocabulary dropped (and reported)."""
    kept, dropped = [], 0
    for question in questions:
        question, n = known_characters(question, corpus.stoi)
        kept.append(question)
        dropped += n
    report_dropped(dropped, what)
    return kept


def vocabulary(corpus):
    """The corpus's characters in id order (the pad and mask, ids 0 and 1, left out)."""
    return "".join(corpus.itos[i] for i in range(2, corpus.vocab_size))


# ---------------------------------------------------------------------------- checks


def check_config(cfg):
    """What can be said wrong before anything is read: the function's required paths and their sense."""
    if cfg.function not in cfg.REQUIRED:
        raise ConfigError(f"function must be pretrain, finetune or evaluate, got {cfg.function!r}")
    if cfg.variant not in VARIANTS:
        raise ConfigError(f"variant must be one of {', '.join(VARIANTS)}, got {cfg.variant!r}")
    missing = [f"--{name}" for name in cfg.REQUIRED[cfg.function] if not getattr(cfg, name)]
    if missing:
        raise ConfigError(f"{cfg.function} needs {' and '.join(missing)}")
    if cfg.mix_corpus_path and cfg.function != "pretrain":
        raise ConfigError("mixed pairs (mix_corpus_path) are for pretrain")
    if cfg.recipe.corrupt_by_epoch and cfg.mix_corpus_path:
        raise ConfigError("corrupt_by_epoch draws span corruptions only: it cannot be combined with mixed pairs")
    inputs = {os.path.realpath(resolve_data_path(getattr(cfg, n))): n for n in cfg.INPUTS if getattr(cfg, n)}
    outputs = [os.path.realpath(getattr(cfg, n)) for n in cfg.OUTPUTS if getattr(cfg, n)]
    if len(set(outputs)) < len(outputs):
        raise ConfigError(f"two outputs are one file ({', '.join(cfg.OUTPUTS)} must differ)")
    for name in cfg.OUTPUTS:
        path = getattr(cfg, name)
        if path and os.path.realpath(path) in inputs:
            raise ConfigError(
                f"--{name} {path} is also the --{inputs[os.path.realpath(path)]}: an output never replaces an input"
            )
        if path:
            check_writable(path, "--" + name)


def check_writable(path, what):
    """Fail now, not after hours of training, if `path` cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ConfigError(f"{what} {path} is a directory")
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"{what} {path} cannot be written: {existing} is not a folder")
    try:  # os.access can say yes where writing fails (a read-only mount, /proc, some network folders)
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be written: {existing} refuses new files ({e.strerror})") from None


@contextlib.contextmanager
def writer_lock(cfg):
    """
    While pretrain or finetune runs, <writing_params_path>.lock keeps a second run from
    writing the same params and checkpoint (rank 0 holds it for all of torchrun's ranks).
    """
    if cfg.function == "evaluate" or launch_rank() != 0:
        yield
        return
    try:
        with exclusive_lock(cfg.writing_params_path + ".lock"):
            yield
    except PathInUse as e:
        raise ConfigError(
            f"--writing_params_path {cfg.writing_params_path} is being written by another run "
            f"({e}); wait for it to end or choose another path"
        ) from None


def start_device(cfg):
    """The run's device, with torchrun's process group joined when launched by torchrun."""
    try:
        return start_distributed(pick_device(cfg.device))
    except RuntimeError as e:
        raise ConfigError(str(e)) from None


# ---------------------------------------------------------------------------- the model


def reading_params_facts(cfg):
    """The facts beside reading_params_path (None without one, or for params without facts)."""
    if not cfg.reading_params_path:
        return None
    try:
        return read_facts(cfg.reading_params_path)
    except ParamsError as e:
        raise ConfigError(str(e)) from None


def model_sizes(cfg, facts):
    """
    The model's sizes: those the config leaves None are the params' own (from their facts),
    or the recipe's; a size that contradicts the params' facts is refused.
    """
    defaults = dict(n_layer=cfg.recipe.n_layer, n_head=cfg.recipe.n_head, n_embd=cfg.recipe.n_embd)
    sizes = {}
    for name in SIZES:
        given, trained = getattr(cfg, name), (facts or {}).get(name)
        if given is not None and trained is not None and given != trained:
            raise ConfigError(
                f"params file {cfg.reading_params_path} was trained with --{name} {trained} "
                f"(its {cfg.reading_params_path}.json says so), not {given}: leave --{name} out"
            )
        sizes[name] = given if given is not None else trained if trained is not None else defaults.get(name)
    if sizes["bottleneck_dim"] is None:
        sizes["bottleneck_dim"] = BOTTLENECK_DIM
    return sizes


def check_sizes(variant, sizes):
    if sizes["n_embd"] % sizes["n_head"]:
        raise ConfigError(f"--n_embd {sizes['n_embd']} must be a multiple of --n_head {sizes['n_head']}")
    if variant == "rope" and sizes["n_embd"] // sizes["n_head"] % 2:
        raise ConfigError(
            f"rope rotates pairs of dimensions: --n_embd {sizes['n_embd']} / --n_head {sizes['n_head']} "
            "must be an even head dimension"
        )
    if variant == "perceiver" and sizes["n_layer"] < 2:
        raise ConfigError("the perceiver needs --n_layer 2 or more (a down- and an up-projection block)")
    if variant == "perceiver" and sizes["bottleneck_dim"] > BLOCK_SIZE:
        raise ConfigError(
            f"--bottleneck_dim {sizes['bottleneck_dim']} is more than the block size {BLOCK_SIZE}: "
            "the perceiver's latents cannot outnumber the positions"
        )


def check_vocabulary(cfg, facts, corpus):
    """Params trained over another vocabulary would read every character as another one: refused."""
    ours = vocabulary(corpus)
    if facts is None or facts.get("vocabulary", ours) == ours:
        return
    theirs, ours = set(facts["vocabulary"]), set(ours)
    raise ConfigError(
        f"params file {cfg.reading_params_path} was pretrained on a corpus with another vocabulary "
        f"than {cfg.pretrain_corpus_path} ({len(theirs - ours)} characters only there, "
        f"{len(ours - theirs)} only here): pass the corpus it was pretrained on"
    )


@dataclasses.dataclass
class Setup:
    """What every function starts from: the corpus (the vocabulary), the model's sizes and the seeded model."""

    corpus: CharCorruptionDataset
    sizes: dict
    model: GPT


def build(cfg, max_shift=0):
    """The corpus, the sizes checked against the params' facts, and the seeded model with reading_params_path in it."""
    corpus = load_corpus(cfg.pretrain_corpus_path, max_shift)
    facts = reading_params_facts(cfg)
    sizes = model_sizes(cfg, facts)
    check_sizes(cfg.variant, sizes)
    check_vocabulary(cfg, facts, corpus)
    set_seed(cfg.seed)
    model = GPT(variant_config(cfg.variant, corpus.vocab_size, BLOCK_SIZE, dropout=cfg.recipe.dropout, **sizes))
    if cfg.reading_params_path:
        try:
            load_fitting_params(model, cfg.reading_params_path, cfg.variant, cfg.pretrain_corpus_path, cfg.function)
        except ParamsError as e:
            raise ConfigError(str(e)) from None
    return Setup(corpus, sizes, model)


def params_facts(cfg, sizes, corpus):
    """What a params file is: written beside it as <params>.json, and into the checkpoint."""
    facts = dict(variant=cfg.variant, **sizes)
    if cfg.variant != "perceiver":
        del facts["bottleneck_dim"]
    return dict(
        facts, block_size=BLOCK_SIZE, vocabulary=vocabulary(corpus), recipe=cfg.recipe_name, command=cfg.command
    )


# ---------------------------------------------------------------------------- training


class TensorBoardLog:
    """
    A SummaryWriter of its own for this run (the course's folder name, then the start time
    and process id) that never stops the training: if its folder goes away or cannot be
    written, it says so once and logs nothing more.
    """

    def __init__(self, cfg, sizes):
        from torch.utils.tensorboard import SummaryWriter

        r = cfg.recipe
        self.log_dir = (
            f"{cfg.tensorboard_root}/{cfg.function}/{cfg.tb_expt_name}_{cfg.variant}_{sizes['bottleneck_dim']}"
            f"_pt_lr_{r.pretrain_lr}_ft_lr_{r.finetune_lr}_{time.strftime('%Y%m%d-%H%M%S')}_{os.getpid()}"
        )
        self.writer = SummaryWriter(log_dir=self.log_dir)

    def call(self, method, *args):
        if self.writer is None:
            return
        try:
            if not os.path.isdir(self.log_dir):  # checked first: the writer's thread would die on it with a traceback
                raise FileNotFoundError(f"{self.log_dir} was removed")
            getattr(self.writer, method)(*args)
        except Exception as e:  # a full disk, the folder removed: the training matters more than its log
            logger.warning("TensorBoard log %s stopped (%s); training goes on without it", self.log_dir, e)
            self.writer = None

    def add_scalar(self, *args):
        self.call("add_scalar", *args)

    def close(self):
        self.call("close")


@dataclasses.dataclass
class EpochEnd:
    """What an on_epoch_end hook is given, on rank 0 after every epoch."""

    epoch: int  # epochs done, counted on over pretraining's stages
    model: GPT
    corpus: CharCorruptionDataset  # the pretraining corpus (its vocabulary, its documents)
    device: torch.device
    writer: Optional[TensorBoardLog]
    params_path: str  # where this stage writes its params
    facts: dict  # what the params are
    training_seconds: float  # spent training so far, the hooks' own time left out


Hook = Callable[[EpochEnd], None]


@dataclasses.dataclass
class Stage:
    """One training run's data and schedule."""

    dataset: object
    epochs: int
    batch_size: int
    learning_rate: float
    schedule_examples: int  # examples per epoch of the cosine's decay_epochs
    epochs_before: int = 0  # a closing stage counts epochs and seconds on from the first stage's
    seconds_before: float = 0.0


class EpochHooks:
    """The trainer's epoch_end: the hooks on rank 0, timed so that training_seconds leaves them out."""

    def __init__(self, hooks, stage, make_info):
        self.hooks, self.stage, self.make_info = list(hooks), stage, make_info
        self.start, self.hook_seconds = time.monotonic(), 0.0

    def training_seconds(self):
        return self.stage.seconds_before + time.monotonic() - self.start - self.hook_seconds

    def __call__(self, epochs_done):
        if not self.hooks or rank_and_world_size()[0] != 0:
            return
        hooks_start = time.monotonic()
        info = self.make_info(self.stage.epochs_before + epochs_done, self.training_seconds())
        for hook in self.hooks:
            hook(info)
        self.hook_seconds += time.monotonic() - hooks_start


def device_workers(cfg, device):
    if cfg.num_workers is not None:
        return cfg.num_workers
    return CUDA_NUM_WORKERS if device.type == "cuda" else 0


def recipe_changes(cfg):
    """The recipe's fields that differ from its named recipe's (for the checkpoint's identity)."""
    named = RECIPES.get(cfg.recipe_name)
    if named is None:
        return dataclasses.asdict(cfg.recipe)
    return {k: v for k, v in dataclasses.asdict(cfg.recipe).items() if getattr(named, k) != v}


def run_identity(cfg, setup, stage, max_shift):
    """What the run's checkpoint belongs to: resuming under another identity is refused."""
    r, sizes, changes = cfg.recipe, setup.sizes, recipe_changes(cfg)
    covered = ("dropout", "decay_groups", "lr_schedule", "group_by_length", "precision", "corrupt_by_epoch")
    covered += ("full_padding", "max_shift", "weight_decay", "decay_epochs", "n_layer", "n_head", "n_embd")
    covered += ("pretrain_lr", "finetune_lr", "pretrain_epochs", "pretrain_batch_size", "finetune_batch_size")
    covered += ("finetune_epochs_from_scratch", "finetune_epochs_from_pretrained")  # as learning_rate, max_epochs, ...
    untouched = ("shifted_epochs", "shifted_lr", "shifted_max_shift", "compile", "sequential_decoding")
    rest = {k: v for k, v in changes.items() if k not in covered + untouched}
    return RunIdentity(
        function=cfg.function,
        variant=cfg.variant,
        n_layer=sizes["n_layer"],
        n_head=sizes["n_head"],
        n_embd=sizes["n_embd"],
        bottleneck_dim=sizes["bottleneck_dim"] if cfg.variant == "perceiver" else None,
        vocab_size=setup.corpus.vocab_size,
        examples=len(stage.dataset),
        max_epochs=stage.epochs,
        batch_size=stage.batch_size,
        learning_rate=stage.learning_rate,
        full_padding=r.full_padding,
        seed=cfg.seed,
        recipe=cfg.recipe_name,
        dropout=r.dropout,
        decay_groups=r.decay_groups,
        lr_schedule=r.lr_schedule,
        group_by_length=r.group_by_length,
        precision=r.precision,
        mix_corpus_path=cfg.mix_corpus_path,
        corrupt_by_epoch=r.corrupt_by_epoch,
        max_shift=max_shift,
        weight_decay=changes.get("weight_decay"),
        decay_epochs=changes.get("decay_epochs"),
        other_settings=json.dumps(rest, sort_keys=True) if rest else None,
    ).as_dict()


def trainer_config(cfg, stage, device, **more):
    """The TrainerConfig of a stage under the config's recipe (the benchmark times exactly this)."""
    r = cfg.recipe
    return TrainerConfig(
        max_epochs=stage.epochs,
        batch_size=stage.batch_size,
        learning_rate=stage.learning_rate,
        lr_decay=True,
        lr_schedule=r.lr_schedule,
        decay_groups=r.decay_groups,
        weight_decay=r.weight_decay,
        warmup_tokens=r.warmup_tokens,
        final_tokens=r.final_tokens(stage.schedule_examples),
        num_workers=device_workers(cfg, device),
        device=device,
        skip_padding=not r.full_padding,
        bucket_pool=LENGTH_GROUPING_POOL if r.group_by_length and cfg.function == "pretrain" else 1,
        corrupt_by_epoch=r.corrupt_by_epoch and cfg.function == "pretrain",
        aux_lm_weight=r.finetune_lm_weight if cfg.function == "finetune" else 0.0,
        precision=r.precision,
        compile=r.compile,
        data_seed=cfg.seed,
        **more,
    )


def train(cfg, setup, stage, device, hooks=(), max_shift=0):
    """
    Train the setup's model on the stage, keeping a checkpoint; save the params and their
    facts on rank 0. Returns (epochs, seconds) trained, counted on from the stage's
    epochs_before and seconds_before: where a later stage goes on from.
    """
    rank, world_size = rank_and_world_size()
    if world_size > 1:  # every rank draws the same data (seeded with the model) but its own dropout
        torch.manual_seed(cfg.seed + 1 + rank)
    writer = TensorBoardLog(cfg, setup.sizes) if rank == 0 else None
    facts = params_facts(cfg, setup.sizes, setup.corpus)

    def info(epoch, seconds):
        return EpochEnd(epoch, setup.model, setup.corpus, device, writer, cfg.writing_params_path, facts, seconds)

    epoch_hooks = EpochHooks(hooks, stage, info)
    checkpoint_path = cfg.writing_params_path + ".ckpt"
    config = trainer_config(
        cfg,
        stage,
        device,
        writer=writer,
        checkpoint_path=checkpoint_path,
        checkpoint_minutes=cfg.checkpoint_minutes,
        resume=cfg.resume,
        epoch_end=epoch_hooks,
        run_facts=facts,
        run_identity=run_identity(cfg, setup, stage, max_shift),
    )
    exists = os.path.exists(checkpoint_path)
    if rank == 0 and cfg.resume and not exists:
        logger.warning("no checkpoint at %s: starting from the beginning", checkpoint_path)
    elif rank == 0 and exists and not cfg.resume:
        logger.warning("replacing the earlier run's checkpoint %s (--resume continues it instead)", checkpoint_path)
    try:
        Trainer(setup.model, stage.dataset, None, config).train()
    except (CheckpointError, TrainingDiverged) as e:
        raise ConfigError(str(e)) from None
    finally:
        if writer is not None:
            writer.close()
    if rank == 0:
        save_params_with_facts(setup.model, cfg.writing_params_path, facts)
        if not cfg.keep_checkpoint:
            os.remove(checkpoint_path)
    return stage.epochs_before + stage.epochs, epoch_hooks.training_seconds()


@contextlib.contextmanager
def started(cfg):
    """The checks, the writer's lock and the device: what every function does first."""
    check_config(cfg)
    with writer_lock(cfg):
        yield start_device(cfg)


# ---------------------------------------------------------------------------- the three functions


def pretrain(cfg: RunConfig, on_epoch_end: Sequence[Hook] = ()):
    """
    Span-corruption pretraining on the corpus (with any mixed pairs), going on from
    reading_params_path if given; the params go to writing_params_path. With the recipe's
    shifted_epochs, in two stages: the first writes <writing_params_path>.unshifted (its
    checkpoint kept, so that resume finds the stage done); the second goes on from those
    params with a fresh optimizer, as a run with reading_params_path=<params>.unshifted,
    max_epochs=decay_epochs=shifted_epochs, pretrain_lr=shifted_lr and
    max_shift=shifted_max_shift would; the first stage's files are then removed unless
    keep_checkpoint. on_epoch_end hooks run on rank 0 after every epoch of both stages.
    """
    with started(cfg) as device:
        r = cfg.recipe
        if not r.shifted_epochs:
            pretrain_stage(cfg, device, on_epoch_end)
            return
        unshifted = cfg.writing_params_path + UNSHIFTED_SUFFIX
        check_first_stage(cfg, unshifted)
        first = dataclasses.replace(cfg, writing_params_path=unshifted, keep_checkpoint=True)
        epochs, seconds = pretrain_stage(first, device, on_epoch_end)
        gc.collect()  # the first stage's trainer (its optimizer state, its DataLoader workers) goes now
        if torch.distributed.is_initialized():
            torch.distributed.barrier()  # every rank reads the params rank 0 has just written
        closing = dataclasses.replace(
            cfg,
            reading_params_path=unshifted,
            max_epochs=r.shifted_epochs,
            recipe=dataclasses.replace(r, decay_epochs=r.shifted_epochs, pretrain_lr=r.shifted_lr),
            tb_expt_name=cfg.tb_expt_name + "_shifted",
        )
        pretrain_stage(closing, device, on_epoch_end, r.shifted_max_shift, epochs, seconds)
        if launch_rank() == 0 and not cfg.keep_checkpoint:
            for path in (unshifted, unshifted + ".json", unshifted + ".ckpt"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)


def check_first_stage(cfg, unshifted):
    """Before hours of training: the first stage's params replace no input, and resume finds this run's stages."""
    if cfg.reading_params_path and os.path.realpath(cfg.reading_params_path) == os.path.realpath(unshifted):
        raise ConfigError(
            f"--reading_params_path {cfg.reading_params_path} is where this run's first stage writes "
            "(the recipe's shifted stage is on): give --shifted_epochs 0 to go on from those params alone, "
            "or another --writing_params_path"
        )
    check_writable(unshifted, "the first stage's params")
    checkpoint = cfg.writing_params_path + ".ckpt"
    if cfg.resume and os.path.exists(checkpoint) and not os.path.exists(unshifted + ".ckpt"):
        raise ConfigError(
            f"--resume: {checkpoint} has no first stage's checkpoint {unshifted}.ckpt beside it, so it is not "
            "from a run with the recipe's shifted stage: resume it with --shifted_epochs 0, or remove it"
        )


def held_out_split(corpus, fraction, path):
    """
    (the documents trained on, the held-out ones) of the corpus: round(fraction * documents)
    of them, at least one, chosen with HELD_OUT_SEED, so the same for every run and stage;
    the held-out ones in the course's layout (no shift).
    """
    if len(corpus) < 2:
        raise ConfigError(f"--held_out_fraction needs a corpus of 2 documents or more; {path} has {len(corpus)}")
    count = min(len(corpus) - 1, max(1, round(fraction * len(corpus))))
    order = torch.randperm(len(corpus), generator=torch.Generator().manual_seed(HELD_OUT_SEED)).tolist()
    held_out = set(order[:count])
    kept = [document for i, document in enumerate(corpus.data) if i not in held_out]
    held = [corpus.data[i] for i in sorted(held_out)]
    return corpus.with_documents(kept, corpus.max_shift), corpus.with_documents(held)


class HeldOutLoss:
    """
    An epoch hook: the held-out documents' span-corruption loss (perplexity.corruption_loss,
    the same examples every epoch), logged and written to TensorBoard by epoch.
    """

    def __init__(self, documents):
        self.documents = documents

    def __call__(self, end: EpochEnd):
        nats, targets = corruption_loss(end.model, self.documents, end.device, HELD_OUT_SEED)
        loss, bits = nats / max(1, targets), bits_per_character(nats, targets)
        logger.info("epoch %d: held-out loss %.4f, %.3f bits per character", end.epoch, loss, bits)
        if end.writer is not None:
            end.writer.add_scalar("held_out/loss_by_epoch", loss, end.epoch)
            end.writer.add_scalar("held_out/bits_per_character_by_epoch", bits, end.epoch)


def pretrain_stage(cfg, device, hooks, max_shift=None, epochs_before=0, seconds_before=0.0):
    """One pretraining run under the recipe: (epochs, seconds) trained, counted on from the earlier stage's."""
    max_shift = cfg.recipe.max_shift if max_shift is None else max_shift
    setup = build(cfg, max_shift)
    dataset = setup.corpus
    if cfg.recipe.held_out_fraction:
        dataset, held_out = held_out_split(setup.corpus, cfg.recipe.held_out_fraction, cfg.pretrain_corpus_path)
        hooks = [HeldOutLoss(held_out), *hooks]
    if cfg.mix_corpus_path:
        dataset = ConcatDataset([dataset, load_pairs(setup.corpus, cfg.mix_corpus_path, "mixed corpus")])
    r = cfg.recipe
    # decay_epochs count epochs of what pretraining trains on (the corpus, with any mixed pairs)
    stage = Stage(
        dataset,
        cfg.max_epochs or r.pretrain_epochs,
        cfg.batch_size or r.pretrain_batch_size,
        r.pretrain_lr,
        len(dataset),
        epochs_before,
        seconds_before,
    )
    return train(cfg, setup, stage, device, hooks, max_shift)


def finetune(cfg: RunConfig, on_epoch_end: Sequence[Hook] = ()):
    """Birthplace finetuning on finetune_corpus_path, from scratch or from reading_params_path."""
    with started(cfg) as device:
        setup = build(cfg)
        freeze(setup.model, cfg.recipe.frozen_parts())
        dataset = load_pairs(setup.corpus, cfg.finetune_corpus_path, "finetuning corpus")
        r = cfg.recipe
        epochs = r.finetune_epochs_from_pretrained if cfg.reading_params_path else r.finetune_epochs_from_scratch
        # decay_epochs count epochs of the pretraining corpus, as in the course's code
        stage = Stage(
            dataset, cfg.max_epochs or epochs, cfg.batch_size or r.finetune_batch_size, r.finetune_lr, len(setup.corpus)
        )
        train(cfg, setup, stage, device, on_epoch_end)


def freeze(model, parts):
    """
    Leave the model's parameters in `parts` (config.FREEZABLE names: a parameter belongs to
    "ln" when a part of its dotted name starts with ln, to the others when one equals it) out
    of training: they get no gradient, so AdamW neither moves nor decays them.
    """
    for name, parameter in model.named_parameters():
        components = name.split(".")
        if any(c == part or (part == "ln" and c.startswith("ln")) for part in parts for c in components):
            parameter.requires_grad_(False)


@dataclasses.dataclass
class Evaluation:
    predictions: list  # one place per question, in the file's order
    total: int  # questions with an answer in the file (0 for a file of questions alone)
    correct: int
    answers: list  # a decoding.Answer per question: the prediction and how sure the model was of it
    places: list  # the file's places (None for a file of questions alone)


def evaluate(cfg: RunConfig) -> "Evaluation":
    """
    Greedy answers to eval_corpus_path, written to outputs_path (rank 0), scored where the
    file has answers; with details_path, also a line of JSON per question (details_lines).
    """
    with started(cfg) as device:
        setup = build(cfg)
        rows = read_pairs(cfg.eval_corpus_path, "evaluation corpus")
        questions = encodable_questions(setup.corpus, [question for _, question, _ in rows])
        model = setup.model.to(device)
        rank, world_size = rank_and_world_size()
        share = predict_answers(
            model,
            questions[rank::world_size],
            setup.corpus.stoi,
            setup.corpus.itos,
            device,
            sequential=cfg.recipe.sequential_decoding,
        )
        answers = gather_interleaved(share, len(questions))
        predictions = [answer.text for answer in answers]
        places = [place for _, _, place in rows] if rows and rows[0][2] is not None else None
        if rank == 0:
            atomic_write(cfg.outputs_path, lambda f: f.write("".join(p + "\n" for p in predictions).encode("utf-8")))
            if cfg.details_path:
                lines = details_lines([question for _, question, _ in rows], answers, places)
                atomic_write(cfg.details_path, lambda f: f.write("".join(lines).encode("utf-8")))
        total, correct = evaluate_places(resolve_data_path(cfg.eval_corpus_path), predictions)
        return Evaluation(predictions, total, correct, answers, places)


def details_lines(questions, answers, places=None):
    """
    A line of JSON per question: the question, the answer, its log-probability (the
    characters and the closing MASK), its lowest character probability, whether the model
    closed it, and, with the file's places, whether it is right (NaN scores become null).
    """
    lines = []
    for i, (question, answer) in enumerate(zip(questions, answers)):
        row = dict(question=question, answer=answer.text, logprob=answer.logprob, min_prob=answer.min_prob)
        row["closed"] = answer.closed
        row = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        if places is not None:
            row["correct"] = answer.text == places[i]
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    return lines
