"""
What a model's answers are worth: the Evaluation of a question file (its predictions,
their score and confidence), its details as JSON lines, and how many held-out
birthplaces a pretrained model recalls from their biographies.
"""

import dataclasses
import json
import math

from dataset import question_place_pairs
from decoding import birthplace_recall
from errors import RunError
from inputs import read_pairs


@dataclasses.dataclass
class Evaluation:
    predictions: list  # one place per question, in the file's order
    total: int  # questions with an answer in the file (0 for a file of questions alone)
    correct: int
    answers: list  # a decoding.Answer per question: the prediction and how sure the model was of it
    places: list  # the file's places (None for a file of questions alone)


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


def held_out_pairs(path):
    """[(question, place)] of a question<TAB>place file whose every line has its place."""
    return [(question, place) for _, question, place in read_pairs(path, "held-out pairs", question_place_pairs)]


def recall(model, corpus, pairs, device, prefix=None):
    """
    (recalled, probed): of the pairs' people whose biography in the corpus names their
    birthplace, how many the model completes from the biography (decoding.birthplace_recall),
    the biography put after `prefix` if given.
    """
    prompt = None if prefix is None else (lambda name, before: prefix + before)
    try:
        return birthplace_recall(model.to(device), corpus.data, pairs, corpus.stoi, corpus.itos, device, prompt)
    except ValueError as e:  # a prefix outside the vocabulary
        raise RunError(str(e)) from None


def recall_line(recalled, probed):
    """The figure a command prints, in the course's score-line format."""
    return f"Recalled: {recalled} out of {probed}: {round(recalled / max(1, probed) * 100, 2)}%"
