"""
on_epoch_end hooks for pipeline.pretrain and pipeline.finetune (each gets a training.logs.EpochEnd
on rank 0 after every epoch): a birthplace-recall probe, and snapshots of the params.
"""

import os
import re
import sys

import src_path  # noqa: F401

# isort: split
from tqdm.auto import tqdm

from factgpt.corpus.reading import answered_pairs, encodable_questions
from factgpt.readout.decoding import predict_places
from factgpt.readout.recall import probed_recall
from factgpt.training.params import save_params_with_metadata


def recall_probe(pairs_path, every):
    """
    Every `every` epochs: how many birthplaces of the question<TAB>place file at `pairs_path`
    the model completes from their biographies in the corpus, and how many of its questions
    it answers (on the bar's stream, and in TensorBoard as probe/recall and probe/accuracy).
    """
    pairs = answered_pairs(pairs_path, "probe corpus")
    encoded = {}  # the questions over the corpus's vocabulary, encoded (and their dropped characters said) once

    def probe(end):
        if end.epoch % every:
            return
        corpus = end.corpus
        recalled, probed = probed_recall(end.model, corpus, pairs, end.device)
        if "questions" not in encoded:
            encoded["questions"] = encodable_questions(corpus, [question for question, _ in pairs], "probe questions")
        questions = encoded["questions"]
        answers = predict_places(end.model, questions, corpus, end.device)
        answered = sum(answer == place for answer, (_, place) in zip(answers, pairs))
        recall, accuracy = recalled / max(1, probed), answered / len(pairs)
        tqdm.write(
            f"epoch {end.epoch}: recalls {recalled} of {probed} birthplaces of {pairs_path} "
            f"({recall:.1%}), answers {answered} of its {len(pairs)} questions ({accuracy:.1%})",
            file=sys.stderr,
        )
        if end.writer is not None:
            end.writer.add_scalar("probe/recall", recall, end.epoch)
            end.writer.add_scalar("probe/accuracy", accuracy, end.epoch)

    return probe


def save_snapshots(every):
    """
    Every `every` epochs, the params as <params>.epoch<E>, their metadata holding the epochs
    (counted on over pretraining's stages) and the seconds spent training so far (for learning curves).
    """

    def snapshot(end):
        if end.epoch % every == 0:
            metadata = dict(end.metadata, epochs=end.epoch, training_seconds=round(end.training_seconds, 1))
            save_params_with_metadata(end.model, f"{end.params_path}.epoch{end.epoch}", metadata)

    return snapshot


def snapshots(params_path):
    """[(epochs, path)] of the snapshots save_snapshots wrote for params_path, by epoch."""
    folder, name = os.path.split(params_path)
    found = []
    for entry in os.listdir(folder or "."):
        match = re.fullmatch(re.escape(name) + r"\.epoch(\d+)", entry)
        if match:
            found.append((int(match.group(1)), os.path.join(folder, entry)))
    return sorted(found)
