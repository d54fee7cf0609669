"""
A question file's answers by the recipe's readout: greedy after the handout's question, or the
frames readout, fitted on the training people or kept from an earlier fit.
"""

import functools
import logging

from factgpt.common.distributed import rank_and_world_size
from factgpt.common.files import resolve_data_path
from factgpt.common.questions import question_place_pairs
from factgpt.corpus.reading import encodable_questions, read_pairs
from factgpt.readout import fitting, frames
from factgpt.readout.decoding import predict_answers

logger = logging.getLogger(__name__)


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
