"""
The library API of a run: pretrain(cfg), finetune(cfg), evaluate(cfg) and recall(cfg) for a
run_config.RunConfig, with no argparse inside. run.py is a thin command line over these, and the
research scripts call them with their own configurations and on_epoch_end hooks.

Training keeps a resumable checkpoint at <writing_params_path>.ckpt. Under torchrun every
rank runs the same call, and rank 0 alone writes.
"""

import contextlib
import dataclasses
import json
import logging
import os
from typing import Sequence

import torch

import adapters
import checkpoint
from checkpoint import Checkpoints
from config import BLOCK_SIZE
from distributed import (
    gather_interleaved,
    launch_rank,
    pick_device,
    rank_and_world_size,
    start_distributed,
)
from errors import RunError
from evaluation import (
    PROBES,
    Evaluation,
    details_lines,
    probed_recall,
    rank_answers,
)
from files import PathInUse, atomic_write, exclusive_lock
from inputs import (
    answered_pairs,
    check_config,
    load_corpus,
    load_pairs,
    read_pairs,
    vocabulary,
)
from logs import EpochEnd, EpochHooks, Hook, TensorBoardLog
from model import GPT, variant_config
from params import (
    check_vocabulary,
    load_fitting_params,
    load_params,
    read_metadata,
    save_params_with_metadata,
)
from run_config import (
    CUDA_CHECKPOINT_MINUTES,
    INPUTS,
    RunConfig,
    default_num_workers,
    resolve_recipe,
)
from trainer import Trainer, TrainerConfig
from training_data import keep_recalled, stage_data
from utils import set_seed

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def checked_run(cfg):
    """
    What every function does first: check the run, resolve its recipe, take the writer's lock
    and start the device. Yields the resolved cfg, the metadata of the params read, and the device.
    """
    check_config(cfg)
    cfg, metadata = with_resolved_recipe(cfg)
    with writer_lock(cfg):
        yield cfg, metadata, start_device(cfg)


def with_resolved_recipe(cfg):
    """
    cfg with its recipe resolved against the metadata of the params it reads, and that metadata (or
    None).
    """
    metadata = read_metadata(cfg.reading_params_path) if cfg.reading_params_path else None
    return dataclasses.replace(cfg, recipe=resolve_recipe(cfg, metadata)), metadata


def start_device(cfg):
    """The run's device, with torchrun's process group joined when launched by torchrun."""
    try:
        return start_distributed(pick_device(cfg.device))
    except RuntimeError as e:
        raise RunError(str(e)) from None


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
        raise RunError(
            f"--writing_params_path {cfg.writing_params_path} is being written by another run "
            f"({e}); wait for it to end or choose another path"
        ) from None


@dataclasses.dataclass
class CorpusAndModel:
    """
    What a training or an evaluation starts from: the corpus (the vocabulary) and the seeded model.
    """

    corpus: object  # dataset.CharCorruptionDataset
    model: GPT


def build(cfg, metadata, max_shift=0, state=None):
    """
    The corpus and the seeded model of cfg's resolved recipe, holding `state` or else the params cfg
    reads.
    """
    corpus = load_corpus(cfg.pretrain_corpus_path, max_shift)
    r = cfg.recipe
    set_seed(cfg.seed)
    model = GPT(
        variant_config(
            cfg.variant, corpus.vocab_size, BLOCK_SIZE, dropout=r.dropout, **r.sizes(cfg.variant)
        )
    )
    if state is not None:
        load_params(model, state)
    elif cfg.reading_params_path:
        check_vocabulary(
            cfg.reading_params_path, metadata, vocabulary(corpus), cfg.pretrain_corpus_path
        )
        load_fitting_params(
            model, cfg.reading_params_path, cfg.variant, cfg.pretrain_corpus_path, cfg.function
        )
    return CorpusAndModel(corpus, model)


def load(cfg):
    """The corpus and model of cfg, its params read and the model on the device, and that device."""
    setup, device = build(*with_resolved_recipe(cfg)), start_device(cfg)
    setup.model.to(device)
    return setup, device


def params_metadata(cfg, corpus):
    """What a params file is: written beside it as <params>.json, and into the checkpoint."""
    metadata = dict(variant=cfg.variant, **cfg.recipe.sizes(cfg.variant), block_size=BLOCK_SIZE)
    return dict(
        metadata,
        vocabulary=vocabulary(corpus),
        recipe=cfg.recipe_name,
        function=cfg.function,
        command=cfg.command,
    )


def run_identity(cfg, dataset, vocab_size, stage=1):
    """
    What a checkpoint belongs to: the whole recipe, the function, variant and seed, the inputs and
    the stage.
    """
    recipe = cfg.recipe.training_settings()
    run = dict(function=cfg.function, variant=cfg.variant, seed=cfg.seed, stage=stage)
    inputs = {name: getattr(cfg, name) for name in INPUTS} | dict(
        examples=len(dataset), vocab_size=vocab_size
    )
    return json.loads(json.dumps(recipe | run | inputs))


def trainer_config(cfg, device, stage, pretraining, decay_examples):
    """
    The TrainerConfig of one training: the Recipe fields the Trainer reads, under their names, and
    the stage's under the course's. The cosine's half period is decay_epochs epochs of
    decay_examples.
    """
    return TrainerConfig(
        **cfg.recipe.trainer_settings(pretraining),
        max_epochs=stage.epochs,
        batch_size=stage.batch_size,
        learning_rate=stage.lr,
        lr_decay=True,
        final_tokens=stage.decay_epochs * decay_examples * BLOCK_SIZE,
        num_workers=cfg.num_workers if cfg.num_workers is not None else default_num_workers(device),
        device=device,
        data_seed=cfg.seed,
    )


def checkpoints(cfg, device, identity, metadata, saved):
    """
    Where and when the training keeps its checkpoint: <writing_params_path>.ckpt, after every epoch
    on the CPU, every CUDA_CHECKPOINT_MINUTES on CUDA (an epoch there takes a fraction of a second),
    or every --checkpoint_minutes.
    """
    cuda = device.type == "cuda"
    return Checkpoints(
        cfg.writing_params_path + ".ckpt",
        identity,
        metadata,
        checkpoint_minutes=cfg.checkpoint_minutes or (CUDA_CHECKPOINT_MINUTES if cuda else None),
        checkpoint_every_epoch=not cuda,
        resume_from=saved,
    )


def train(
    cfg, setup, dataset, device, hooks, stage, pretraining, number=1, saved=None, before=(0, 0.0)
):
    """
    Train the setup's model on the dataset as stage `number` says, going on from the `saved`
    checkpoint if given. Returns the epochs and seconds trained, counted on from those `before` it:
    where the next stage goes on.
    """
    rank, world_size = rank_and_world_size()
    if world_size > 1:  # every rank draws the same data (seeded with the model) but its own dropout
        torch.manual_seed(cfg.seed + 1 + rank)
    writer = TensorBoardLog(cfg, f"_stage{number}" if number > 1 else "") if rank == 0 else None
    metadata = params_metadata(cfg, setup.corpus)
    epochs_before, seconds_before = before
    stage_start = EpochEnd(
        epochs_before,
        setup.model,
        setup.corpus,
        device,
        writer,
        cfg.writing_params_path,
        metadata,
        seconds_before,
    )
    epoch_hooks = EpochHooks(hooks, stage_start)
    identity = run_identity(cfg, dataset, setup.corpus.vocab_size, number)
    # finetuning's decay_epochs count epochs of the pretraining corpus, as in the course's code
    decay_examples = len(dataset) if pretraining else len(setup.corpus)
    config = trainer_config(cfg, device, stage, pretraining, decay_examples)
    kept = checkpoints(cfg, device, identity, metadata, saved)
    try:
        Trainer(setup.model, dataset, None, config, writer, epoch_hooks, kept).train()
    finally:
        if writer is not None:
            writer.close()
    return epochs_before + stage.epochs, epoch_hooks.training_seconds()


def saved_checkpoint(cfg):
    """
    The checkpoint a resumed run goes on from, read once (None when not resuming or there is none).
    """
    path = cfg.writing_params_path + ".ckpt"
    saved = checkpoint.read(path) if cfg.resume else None
    if launch_rank() == 0 and cfg.resume and saved is None:
        logger.warning("no checkpoint at %s: starting from the beginning", path)
    elif launch_rank() == 0 and not cfg.resume and os.path.exists(path):
        logger.warning(
            "replacing the earlier run's checkpoint %s (--resume continues it instead)", path
        )
    return saved


def write_params(cfg, setup):
    """Write the params and their metadata (rank 0); the checkpoint goes unless keep_checkpoint."""
    if launch_rank() == 0:
        save_params_with_metadata(
            setup.model, cfg.writing_params_path, params_metadata(cfg, setup.corpus)
        )
        if not cfg.keep_checkpoint:
            os.remove(cfg.writing_params_path + ".ckpt")


# ---------------------------------------------------------------------------- the functions


def pretrain(cfg: RunConfig, on_epoch_end: Sequence[Hook] = ()):
    """
    Pretraining (span corruption, plain text or pairs), stage after stage of the recipe's
    pretrain_stages, going on from reading_params_path if given. Each stage trains a fresh optimizer
    on the params the stage before left; on_epoch_end hooks run on rank 0 after every epoch.
    """
    with checked_run(cfg) as (cfg, metadata, device):
        stages, saved = cfg.recipe.stages(), saved_checkpoint(cfg)
        first = (
            min(max(1, int((saved["run_identity"] or {}).get("stage", 1))), len(stages))
            if saved
            else 1
        )
        state, epochs, seconds = None, 0, 0.0
        for number, stage in enumerate(stages, 1):
            if number < first:
                epochs += stage.epochs
                continue
            setup = build(cfg, metadata, stage.max_shift, state)
            dataset, hooks = stage_data(cfg, setup.corpus, stage, on_epoch_end)
            resumed = saved if number == first else None
            epochs, seconds = train(
                cfg, setup, dataset, device, hooks, stage, True, number, resumed, (epochs, seconds)
            )
            state = setup.model.state_dict()
        write_params(cfg, setup)


def finetune(cfg: RunConfig, on_epoch_end: Sequence[Hook] = (), examples=None):
    """
    Birthplace finetuning on finetune_corpus_path, from scratch or from reading_params_path.
    `examples(corpus, pairs)`, if given, makes the (x, y) examples it trains on from the pairs.
    """
    with checked_run(cfg) as (cfg, metadata, device):
        setup = build(cfg, metadata)
        r = cfg.recipe
        adapters.freeze(setup.model, r.frozen_parts())
        dataset = load_pairs(setup.corpus, cfg.finetune_corpus_path, "finetuning corpus")
        pretrained = bool(cfg.reading_params_path)
        if pretrained and r.finetune_people != "all":
            keep_recalled(setup, dataset, PROBES[r.finetune_people], device)
        dataset = examples(setup.corpus, dataset.data) if examples else dataset
        if pretrained and r.finetune_lora_rank:
            adapters.add(setup.model, r.finetune_lora_rank)
        stage, saved = r.finetuning(pretrained), saved_checkpoint(cfg)
        train(cfg, setup, dataset, device, on_epoch_end, stage, False, saved=saved)
        adapters.merge(setup.model)
        write_params(cfg, setup)


def evaluate(cfg: RunConfig) -> Evaluation:
    """
    Answer eval_corpus_path's questions by the recipe's readout and write them to outputs_path,
    with a line of JSON per answer to details_path if given; scored where the file has answers.
    """
    with checked_run(cfg) as (cfg, metadata, device):
        setup = build(cfg, metadata)
        rows = read_pairs(cfg.eval_corpus_path, "evaluation corpus")
        this_rank = rank_answers(cfg, metadata, setup.corpus, setup.model.to(device), rows, device)
        answers = gather_interleaved(this_rank, len(rows))
        predictions = [answer.text for answer in answers]
        places = [place for _, _, place in rows] if rows and rows[0][2] is not None else None
        if rank_and_world_size()[0] == 0:
            atomic_write(
                cfg.outputs_path,
                lambda f: f.write("".join(p + "\n" for p in predictions).encode("utf-8")),
            )
            if cfg.details_path:
                lines = details_lines([question for _, question, _ in rows], answers, places)
                atomic_write(cfg.details_path, lambda f: f.write("".join(lines).encode("utf-8")))
        correct = sum(p == place for p, place in zip(predictions, places or []))
        return Evaluation(predictions, len(places or []), correct, answers, places)


def recall(cfg: RunConfig, prompt=PROBES["biography"]):
    """
    How many birthplaces of eval_corpus_path's people the params complete after `prompt`
    (evaluation.PROBES), and how many people were probed.
    """
    missing = [
        f"--{name}"
        for name in ("reading_params_path", "eval_corpus_path")
        if not getattr(cfg, name)
    ]
    if missing:
        raise RunError(f"recall needs {' and '.join(missing)}")
    pairs = answered_pairs(cfg.eval_corpus_path, "held-out pairs")
    setup, device = load(dataclasses.replace(cfg, function="evaluate"))
    return probed_recall(setup.model, setup.corpus, pairs, device, prompt)
