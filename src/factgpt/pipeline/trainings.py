"""
One training of a stage: its TrainerConfig, its checkpoint's identity and policy, and the params
written at its end.
"""

import json
import logging
import os

import torch

from factgpt.common.distributed import launch_rank, rank_and_world_size
from factgpt.pipeline.start import params_metadata
from factgpt.settings.run_config import CUDA_CHECKPOINT_MINUTES, INPUTS, default_num_workers
from factgpt.training import checkpoint
from factgpt.training.checkpoint import Checkpoints
from factgpt.training.logs import EpochEnd, EpochHooks, TensorBoardLog
from factgpt.training.params import save_params_with_metadata
from factgpt.training.step import decay_tokens
from trainer import Trainer, TrainerConfig

logger = logging.getLogger(__name__)


def run_identity(cfg, dataset, vocab_size, stage=1):
    """
    What a checkpoint belongs to: the recipe's fields its training reads, the function, variant and
    seed, the inputs and the stage.
    """
    recipe = cfg.recipe.training_settings(cfg.function)
    run = dict(function=cfg.function, variant=cfg.variant, seed=cfg.seed, stage=stage)
    inputs = {name: getattr(cfg, name) for name in INPUTS} | dict(
        examples=len(dataset), vocab_size=vocab_size
    )
    return json.loads(json.dumps(recipe | run | inputs))


def trainer_config(cfg, device, stage, pretraining, decay_examples):
    """
    The TrainerConfig of one training: the Recipe's fields and the stage's that the Trainer reads,
    each under its own name. The cosine's half period is decay_epochs epochs of decay_examples.
    """
    return TrainerConfig(
        **cfg.recipe.trainer_settings(pretraining),
        **stage.trainer_settings(),
        lr_decay=True,
        final_tokens=decay_tokens(stage.decay_epochs, decay_examples),
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
    return epochs_before + stage.max_epochs, epoch_hooks.training_seconds()


def saved_checkpoint(cfg):
    """
    The checkpoint a resumed run goes on from, read once (None when not resuming or there is none).
    """
    path = cfg.writing_params_path + ".ckpt"
    there = os.path.exists(path)  # one there that cannot be read is set aside, and said so
    saved = checkpoint.read(path) if cfg.resume else None
    if launch_rank() == 0 and cfg.resume and not there:
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
