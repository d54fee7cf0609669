"""
What every run starts from: the run checked, its recipe resolved against the params it reads, the
writer's lock, the device, and the corpus with the seeded model.
"""

import contextlib
import dataclasses

from factgpt.common.distributed import launch_rank, pick_device, start_distributed
from factgpt.common.errors import RunError
from factgpt.common.files import PathInUse, exclusive_lock
from factgpt.corpus.reading import BLOCK_SIZE, load_corpus, vocabulary
from factgpt.pipeline.checks import check_config
from factgpt.settings.run_config import resolve_recipe
from factgpt.training.params import (
    check_vocabulary,
    load_fitting_params,
    load_params,
    read_metadata,
)
from model import GPT, variant_config
from utils import set_seed


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
