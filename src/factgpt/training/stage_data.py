"""
What a pretraining stage trains on: the corpus (less any held-out part, and its share of the
documents) in the stage's view, and the mixed pairs, with the stage's epoch hooks.
"""

import random

from torch.utils.data import ConcatDataset

from factgpt.corpus.reading import held_out_split, load_pairs
from factgpt.corpus.views import viewed
from factgpt.training.logs import HeldOutLoss


def stage_data(cfg, corpus, stage, hooks):
    """
    What the stage trains on, and its epoch hooks. The corpus loses any held-out part and
    keeps the stage's share of its documents; the mixed pairs come pair_copies times.
    """
    parts, hooks = [], list(hooks)
    if stage.reads_corpus and cfg.recipe.held_out_fraction:
        corpus, held_out = held_out_split(
            corpus, cfg.recipe.held_out_fraction, cfg.pretrain_corpus_path
        )
        hooks.insert(0, HeldOutLoss(held_out))
    if stage.reads_corpus and stage.documents < 1:
        kept = random.Random(cfg.seed).sample(
            corpus.data, max(1, round(stage.documents * len(corpus.data)))
        )
        corpus = corpus.with_documents(kept, corpus.max_shift)
    if stage.reads_corpus:
        parts.append(viewed(corpus, stage.full_names, cfg.recipe.clause_dropout, stage.plain_text))
    if stage.uses_pairs and cfg.mix_corpus_path:
        parts += [load_pairs(corpus, cfg.mix_corpus_path, "mixed corpus")] * stage.pair_copies
    return (parts[0] if len(parts) == 1 else ConcatDataset(parts)), hooks
