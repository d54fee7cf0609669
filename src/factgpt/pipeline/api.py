"""
The library API of a run: pretrain(cfg), finetune(cfg), evaluate(cfg) and recall(cfg) for a
settings.run_config.RunConfig, with no argparse inside. run.py is a thin command line over these,
and the research scripts call them with their own configurations and on_epoch_end hooks.

Training keeps a resumable checkpoint at <writing_params_path>.ckpt. Under torchrun every
rank runs the same call, and rank 0 alone writes.
"""

import dataclasses
import logging
from typing import Sequence

from factgpt.common.distributed import gather_interleaved, launch_rank, rank_and_world_size
from factgpt.common.errors import RunError
from factgpt.common.files import atomic_write
from factgpt.corpus.reading import answered_pairs, load_pairs, read_pairs
from factgpt.pipeline.start import build, checked_run, load
from factgpt.pipeline.trainings import saved_checkpoint, train, write_params
from factgpt.readout.answers import rank_answers
from factgpt.readout.recall import PROBES, probed_recall, recalled_pairs
from factgpt.readout.scores import Evaluation, details_lines
from factgpt.settings.run_config import RunConfig
from factgpt.training import adapters
from factgpt.training.logs import Hook
from factgpt.training.stage_data import stage_data

logger = logging.getLogger(__name__)


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
                epochs += stage.max_epochs
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
    (readout.recall.PROBES), and how many people were probed.
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


def keep_recalled(setup, dataset, prompt, device):
    """
    Leave in the finetuning dataset the pairs whose place the model completes after `prompt` alone.
    """
    kept = recalled_pairs(setup.model, setup.corpus, dataset.data, device, prompt)
    if not kept:
        raise RunError(
            "finetune_people: the params recall none of the finetuning people's birthplaces"
        )
    if launch_rank() == 0:
        logger.info(
            "finetuning on the %d of %d people the params recall", len(kept), len(dataset.data)
        )
    dataset.data = kept
