"""
What a model's answers are worth: the answers to a question file with their score, and their
details as lines of JSON.
"""

import dataclasses
import json
import math


@dataclasses.dataclass
class Evaluation:
    predictions: list  # one place per question, in the file's order
    total: int  # questions with an answer in the file (0 for a file of questions alone)
    correct: int
    answers: list  # a decoding.Answer per question: the prediction and how sure the model was of it
    places: list  # the file's places (None for a file of questions alone)


def details_lines(questions, answers, places=None):
    """
    A line of JSON per question: the answer and how sure the model was of it (decoding.Answer),
    and whether it is right where the places are given. A score that is not finite becomes null.
    """
    lines = []
    for i, (question, answer) in enumerate(zip(questions, answers)):
        row = dict(
            question=question, answer=answer.text, logprob=answer.logprob, min_prob=answer.min_prob
        )
        row["closed"] = answer.closed
        row = {
            k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()
        }
        if places is not None:
            row["correct"] = answer.text == places[i]
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    return lines
