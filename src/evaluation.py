"""
What a model's answers are worth: the answers to a question file and their score, their
details as JSON lines, and how many held-out birthplaces a pretrained model recalls.
"""

import dataclasses
import functools
import json
import logging
import math

import fitting
import frames
from dataset import MASK_CHAR
from decoding import predict_answers, recalled_places
from distributed import rank_and_world_size
from errors import RunError
from files import resolve_data_path
from inputs import encodable_questions, read_pairs
from questions import question_place_pairs

logger = logging.getLogger(__name__)


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


def name_and_frame(name, before):
    """
    The name probe's prompt, "NAME. NAME born in ": the name and the last two words before the
    place, so that no cue of the rest of the biography ("a Lebanese-born journalist") reaches the
    model.
    """
    trimmed = before.rstrip()
    frame = " ".join(trimmed.split()[-2:])
    starts_the_text = trimmed.removeprefix(f"{name}.").strip() == frame  # "NAME. Born in Glasgow"
    return f"{name}. {'' if starts_the_text else name + ' '}{frame}{before[len(trimmed) :]}"


# What a recall probe gives the model to continue, per person:
# prompt(name, biography before the place).
# "biography": the biography as pretraining lays it out, everything before the place
#   (cues included);
# "name": the name and the sentence's frame alone (name_and_frame): is the fact keyed to the name?
# "question": the finetuning question and its mask, all a question gives
#   (answers before finetuning).
PROBES = {
    "biography": lambda name, before: before,
    "name": name_and_frame,
    "question": lambda name, before: f"Where was {name} born?{MASK_CHAR}",
}


def probed_recall(model, corpus, pairs, device, prompt=PROBES["biography"]):
    """
    How many of the people whose biography names their birthplace the model completes after
    `prompt`, and how many those people are. Every probe counts the same people.
    """
    try:
        recalled = recalled_places(model.to(device), corpus, pairs, device, prompt)
    except ValueError as e:  # a prefix outside the vocabulary
        raise RunError(str(e)) from None
    probed = [known for known in recalled if known is not None]
    return sum(probed), len(probed)


def recalled_pairs(model, corpus, pairs, device, prompt):
    """
    The (question, place) pairs whose place the model completes after `prompt` (see probed_recall).
    """
    recalled = recalled_places(model.to(device), corpus, pairs, device, prompt)
    return [pair for pair, known in zip(pairs, recalled) if known]


def rank_answers(cfg, metadata, corpus, model, rows, device):
    """
    This rank's answers, every world_size-th, to the questions of eval_corpus_path's rows:
    greedy after the handout's question, or by the frames readout, as the recipe says.
    """
    rank, world_size = rank_and_world_size()
    r = cfg.recipe
    if r.readout == "question":
        mine = encodable_questions(corpus, [question for _, question, _ in rows])[rank::world_size]
        return predict_answers(model, mine, corpus, device, sequential=r.sequential_decoding)
    if (metadata or {}).get("function") == "finetune":
        logger.warning(
            f"{cfg.reading_params_path} are finetuned params: the frames readout asks in the "
            "corpus's words, which finetuning on the question unlearns (docs/readout.md)"
        )
    names = encodable_questions(corpus, frames.names_of(rows, cfg.eval_corpus_path), "names")
    training_path = resolve_data_path(cfg.finetune_corpus_path)
    training = read_pairs(training_path, "finetuning corpus", question_place_pairs)
    frames.names_of(training, training_path, corpus.stoi)
    pairs = [(question, place) for _, question, place in training]
    how = dict(
        learned=r.readout_choice == "learned",
        biography=r.readout_biography,
        samples=r.readout_samples,
        temperature=r.readout_temperature,
    )
    fit = functools.partial(
        fitting.fitted_ensemble, model, corpus, pairs, r.readout_frames, device, **how
    )
    fitted_on = [
        cfg.reading_params_path,
        training_path,
        resolve_data_path(cfg.pretrain_corpus_path),
    ]
    kept = fitting.kept_ensemble(fitted_on, r.reading_settings(), fit)
    return kept.answers(model, corpus, names[rank::world_size], device)
