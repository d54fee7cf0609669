"""
The frames readout fitted on the training people, and kept beside the params so that the
next questions on the same params need no refit.
"""

import contextlib
import dataclasses
import hashlib
import json
import logging
import sys

from factgpt.common.distributed import rank_and_world_size
from factgpt.common.errors import RunError
from factgpt.common.files import atomic_write
from factgpt.readout import choice, ensemble, frames
from factgpt.readout.ensemble import Ensemble, scored_candidates, written_places
from factgpt.readout.frames import least_people, mine, names_in

logger = logging.getLogger(__name__)

POOL = 8  # the writers are chosen among the frames that alone answer most training people
# the writers are chosen on this many of the training people, evenly through their file
FIT_PEOPLE = 500
KEPT = ".readout.json"  # the kept readout's file: the params' path and this
# raise it when the fit changes in a way no constant shows, so that no stale fit is read back
FIT_VERSION = 3


def fitted_ensemble(model, corpus, pairs, writers, device, pool=POOL, learned=False, biography=0,
                    samples=0, temperature=1.0):  # fmt: skip
    """
    The ensemble of `writers` frames, the greedy biography's first `biography` places and those of
    `samples` biographies drawn at `temperature`, fitted on the training pairs, with the learned
    choice's weights if `learned`. Each writer is picked as the frame that adds most to the summed
    choice.
    """
    mined = mine(corpus.data, pairs, least_people(pairs))
    if not mined.frames:
        raise RunError(
            f"no frame is shared by {least_people(pairs)} of the {len(pairs)} training people's "
            "biographies (are their biographies in the corpus?): the frames readout has nothing "
            "to ask"
        )
    scorers = mined.scorers or tuple(frame for frame, _ in mined.frames)
    # evenly through the file
    everyone, pairs = pairs, pairs[:: max(1, len(pairs) // FIT_PEOPLE)][:FIT_PEOPLE]
    names, places = names_in(pairs), [place for _, place in pairs]
    mined_frames = [frame for frame, _ in mined.frames]
    written = written_places(model, corpus, names, mined_frames, mined.skips, device)
    alone = [
        sum(row[i] == place for row, place in zip(written, places))
        for i in range(len(mined_frames))
    ]
    pooled = sorted(range(len(mined_frames)), key=lambda i: -alone[i])[:pool]
    pooled_written = [[row[i] for i in pooled] for row in written]
    candidates = scored_candidates(
        model, corpus, names, pooled_written, scorers, Ensemble.end, device
    )

    def answered(ids):
        """How many people the pooled writers `ids` answer with the summed choice."""
        return sum(
            person.of_writers(ids).summed()[0] == place for person, place in zip(candidates, places)
        )

    picked = []
    for _ in range(min(writers, len(pooled))):
        picked.append(
            max(
                (j for j in range(len(pooled)) if j not in picked),
                key=lambda j: answered(picked + [j]),
            )
        )
    fitted = Ensemble(
        tuple(mined_frames[pooled[j]] for j in picked),
        scorers,
        mined.skips,
        biography=biography,
        samples=samples,
        temperature=temperature,
    )
    if not learned:
        return fitted
    return dataclasses.replace(
        fitted, weights=learned_weights(model, corpus, everyone, fitted, device)
    )


def learned_weights(model, corpus, pairs, fitted, device):
    """
    The learned choice's weights among the fitted ensemble's candidates, fitted on the training
    pairs.
    """
    return weights_fitted_to(fitted.candidates(model, corpus, names_in(pairs), device), pairs)


def weights_fitted_to(candidates, pairs):
    """The learned choice's weights, fitted on the training pairs' Candidates."""
    features = [person.features() for person in candidates]
    rights = [
        person.places.index(place) if place in person.places else None
        for person, (_, place) in zip(candidates, pairs)
    ]
    weights = choice.fitted_weights(features, rights)
    if not weights:
        logger.warning(
            "no training person's place is among their candidates: the summed score chooses"
        )
    return weights


def file_digest(path):
    """The sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fit_constants():
    """
    Every upper-case number or text of the readout's modules: what a fit depends on beside its files
    and settings.
    """
    modules = (frames, ensemble, choice, sys.modules[__name__])
    return {  # by the module's own name, so that a kept readout outlives a move of its package
        f"{module.__name__.rsplit('.', 1)[-1]}.{name}": value
        for module in modules
        for name, value in sorted(vars(module).items())
        if name.isupper() and isinstance(value, (int, float, str))
    }


def kept_key(fitted_on, settings):
    """
    What a kept readout was fitted on: the sha256 of the files `fitted_on` (the params, the
    training pairs, the corpus), the recipe's reading `settings`, and the fit's constants.
    """
    params_path, training_path, corpus_path = fitted_on
    files = dict(
        params=file_digest(params_path),
        training=file_digest(training_path),
        corpus=file_digest(corpus_path),
    )
    return json.loads(json.dumps(files | dict(settings) | dict(constants=fit_constants())))


def kept_ensemble(fitted_on, settings, fit):
    """
    The ensemble kept beside the params where its key holds; else fit()'s, kept there by the
    first rank. A folder that refuses the file loses only the keeping.
    """
    path = str(fitted_on[0]) + KEPT
    key = kept_key(fitted_on, settings)
    kept = None
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
        if kept["key"] == key:
            found = kept["ensemble"]
            lists = {k: tuple(found[k]) for k in ("writers", "scorers", "weights")}
            return Ensemble(**found | lists | dict(skips=frozenset(found["skips"])))
    if kept is not None:
        logger.warning("%s was fitted on other files or settings: fitting the readout again", path)
    fitted = fit()
    found = dataclasses.asdict(fitted) | dict(skips=sorted(fitted.skips))
    text = json.dumps(dict(key=key, ensemble=found), ensure_ascii=False, indent=1)
    if rank_and_world_size()[0] == 0:
        try:
            atomic_write(path, lambda f: f.write(text.encode("utf-8")))
        except RunError as e:
            logger.warning("the fitted readout is not kept: %s", e)
    return fitted
