"""
A run's inputs and their checks: the corpus, whose characters are the vocabulary, the
question<TAB>place files, the function's paths and outputs, and the held-out documents. Each problem
is a one-line RunError.
"""

import filecmp
import logging
import os
import tempfile

import torch

from config import BLOCK_SIZE, HELD_OUT_SEED
from dataset import CharCorruptionDataset, NameDataset, known_characters
from distributed import launch_rank
from errors import RunError
from files import resolve_data_path
from model import VARIANTS
from questions import question_place_pairs, read_questions
from run_config import INPUTS, OUTPUTS, REQUIRED

logger = logging.getLogger(__name__)


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


def check_config(cfg):
    """
    Check what can be checked before anything is read: the function's paths, their sense, the
    stages' data.
    """
    if cfg.function not in REQUIRED:
        raise RunError(f"function must be pretrain, finetune or evaluate, got {cfg.function!r}")
    if cfg.variant not in VARIANTS:
        raise RunError(f"variant must be one of {', '.join(VARIANTS)}, got {cfg.variant!r}")
    missing = [f"--{name}" for name in REQUIRED[cfg.function] if not getattr(cfg, name)]
    if missing:
        raise RunError(f"{cfg.function} needs {' and '.join(missing)}")
    if cfg.mix_corpus_path and cfg.function != "pretrain":
        raise RunError("mixed pairs (--mix_corpus_path) are for pretrain")
    if cfg.function == "pretrain":
        check_stages(cfg)
    if cfg.function == "evaluate" and cfg.recipe.readout == "frames":
        check_frames_inputs(cfg)
    inputs = {
        os.path.realpath(resolve_data_path(getattr(cfg, n))): n for n in INPUTS if getattr(cfg, n)
    }
    outputs = [os.path.realpath(getattr(cfg, n)) for n in OUTPUTS if getattr(cfg, n)]
    if len(set(outputs)) < len(outputs):
        raise RunError(f"two outputs are one file ({', '.join(OUTPUTS)} must differ)")
    for name in OUTPUTS:
        path = getattr(cfg, name)
        if path and os.path.realpath(path) in inputs:
            raise RunError(
                f"--{name} {path} is also the --{inputs[os.path.realpath(path)]}: "
                "an output never replaces an input"
            )
        if path:
            check_writable(path, "--" + name)


def check_frames_inputs(cfg):
    """
    The frames readout is fitted on the training pairs: they must be given, and not be the questions
    it answers.
    """
    if not cfg.finetune_corpus_path:
        raise RunError(
            "the frames readout mines its frames from the training people: "
            "give --finetune_corpus_path"
        )
    training, asked = (
        resolve_data_path(p) for p in (cfg.finetune_corpus_path, cfg.eval_corpus_path)
    )
    same = os.path.realpath(training) == os.path.realpath(asked)
    if same or (
        os.path.isfile(training)
        and os.path.isfile(asked)
        and filecmp.cmp(training, asked, shallow=False)
    ):
        raise RunError(
            f"--finetune_corpus_path {cfg.finetune_corpus_path} is the --eval_corpus_path: "
            "the frames readout would be fitted on the answers it is scored on"
        )


def check_stages(cfg):
    """
    Every stage has its data: the pairs need --mix_corpus_path; corrupt_by_epoch draws span
    corruptions only.
    """
    if cfg.mix_corpus_path and not cfg.recipe.trains_on_pairs():
        raise RunError(
            "--mix_corpus_path: no pretraining stage trains on the pairs (see --pretrain_stages)"
        )
    for number, stage in enumerate(cfg.recipe.pretrain_stages, 1):
        if stage.data == "pairs" and not cfg.mix_corpus_path:
            raise RunError(
                f"pretraining stage {number} trains on the pairs alone: give --mix_corpus_path"
            )
        if cfg.recipe.corrupt_by_epoch and cfg.mix_corpus_path and stage.uses_pairs:
            raise RunError(
                "corrupt_by_epoch draws span corruptions only: "
                "it cannot be combined with mixed pairs"
            )


def check_writable(path, what):
    """Fail now, not after hours of training, if `path` cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise RunError(f"{what} {path} is a directory")
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise RunError(f"{what} {path} cannot be written: {existing} is not a folder")
    try:
        # os.access can say yes where writing fails (a read-only mount, /proc, some network folders)
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise RunError(
            f"{what} {path} cannot be written: {existing} refuses new files ({e.strerror})"
        ) from None


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
