"""
The corpus and the question files as a run reads them: the biographies as span-corruption examples
(their characters are the vocabulary), the question<TAB>place pairs as finetuning examples, and the
documents held out of pretraining. Each problem is a one-line RunError.
"""

import logging

import torch

from dataset import CharCorruptionDataset, NameDataset, known_characters
from factgpt.common.distributed import launch_rank
from factgpt.common.errors import RunError
from factgpt.common.files import resolve_data_path
from factgpt.common.questions import question_place_pairs, read_questions

logger = logging.getLogger(__name__)

BLOCK_SIZE = 128  # characters a model reads at once: the handout's block
HELD_OUT_SEED = 0  # which documents held_out_fraction holds out, and their span corruptions


def read_text(path, what):
    """The text of the file at `path` (found in data/ too), which must not be empty."""
    path = resolve_data_path(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise RunError(f"cannot read {what} {path}: {e}") from None
    if not text.strip():
        raise RunError(f"{what} {path} is empty")
    return text


def read_pairs(path, what, parse=read_questions):
    """
    parse(text) of the question<TAB>place file at `path`; its ValueError becomes one line naming the
    file.
    """
    try:
        return parse(read_text(path, what))
    except ValueError as e:
        raise RunError(f"{resolve_data_path(path)}: {e}") from None


def answered_pairs(path, what="pairs"):
    """
    The question<TAB>place file at `path` as (question, place) pairs; every line must have its
    place.
    """
    return [
        (question, place) for _, question, place in read_pairs(path, what, question_place_pairs)
    ]


def load_corpus(path, max_shift=0):
    """
    The pretraining corpus at `path` as span-corruption examples; its characters are the vocabulary.
    """
    try:
        return CharCorruptionDataset(read_text(path, "pretraining corpus"), BLOCK_SIZE, max_shift)
    except ValueError as e:
        raise RunError(f"pretraining corpus {resolve_data_path(path)}: {e}") from None


def report_dropped(count, what):
    if count and launch_rank() == 0:
        logger.warning(
            "dropped %d character(s) outside the pretraining vocabulary from the %s", count, what
        )


def load_pairs(corpus, path, what):
    """
    The question<TAB>place pairs at `path` as finetuning examples over the corpus's vocabulary.
    """
    pairs = read_pairs(path, what, lambda text: NameDataset(corpus, text))
    report_dropped(pairs.dropped_characters, what)
    return pairs


def encodable_questions(corpus, questions, what="questions"):
    """The questions with the characters outside the corpus's vocabulary dropped (and reported)."""
    kept = [known_characters(question, corpus.stoi) for question in questions]
    report_dropped(sum(dropped for _, dropped in kept), what)
    return [question for question, _ in kept]


def vocabulary(corpus):
    """The corpus's characters in id order (the pad and mask, ids 0 and 1, left out)."""
    return "".join(corpus.itos[i] for i in range(2, corpus.vocab_size))


def held_out_split(corpus, fraction, path):
    """
    The corpus split into the documents trained on and round(fraction * documents) held out (one at
    least), the same for every run and stage (HELD_OUT_SEED); the held-out ones unshifted, as the
    course's.
    """
    if len(corpus) < 2:
        raise RunError(
            f"--held_out_fraction needs a corpus of 2 documents or more; {path} has {len(corpus)}"
        )
    count = min(len(corpus) - 1, max(1, round(fraction * len(corpus))))
    order = torch.randperm(
        len(corpus), generator=torch.Generator().manual_seed(HELD_OUT_SEED)
    ).tolist()
    held_out = set(order[:count])
    kept = [document for i, document in enumerate(corpus.data) if i not in held_out]
    held = [corpus.data[i] for i in sorted(held_out)]
    return corpus.with_documents(kept, corpus.max_shift), corpus.with_documents(held)
