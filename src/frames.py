"""
The frames readout: "Where was NAME born?" asked in the corpus's own words.

A frame is the text a biography puts before a birthplace, with the person's name as NAME:
"NAME. Born in ", "NAME. NAME was born in ". The frames are mined from the training people's
own biographies (the last one to three words before their birthplace, or before the date
that precedes it, kept where enough people share them). A question is answered by an
ensemble: the greedy continuation of each of a few frames (the writers, chosen on the
training people) gives a candidate place, and the candidate that the frames coming right
before a place find likeliest (log-probabilities summed over them) is the answer. Nothing
here reads the people asked but their names. The fitted ensemble is kept beside the params
(kept_ensemble), so that the next questions on the same params are answered without refitting.
"""

import collections
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import re

import torch

import choice
from dataset import biographies, known_characters, name_of
from decoding import Answer, greedy_completions
from distributed import rank_and_world_size
from errors import RunError
from files import atomic_write
from utils import eval_mode

logger = logging.getLogger(__name__)

NAME = "NAME"
MOST_WORDS = 3  # a frame is at most the last three words before the place
PLACE_STEPS = 32  # characters written after a frame, enough for the place
POOL = 8  # the writers are chosen among the frames that alone answer most training people
FIT_PEOPLE = 500  # the writers are chosen on this many of the training people, evenly through their file
MIN_SHARE = 0.01  # a frame is mined where at least this share of the training people (and two) share it
KEPT = ".readout.json"  # beside the params: the readout fitted on them, read back while its key holds
FIT_VERSION = 2  # in the kept readout's key: raise it when the fitting changes, so that no stale fit is read back


def names_of(rows, path, stoi=None):
    """
    The name of each "Where was NAME born?" question of the file at `path`, rows [(line
    number, question, ...)]; RunError at the first that is not, and, given the vocabulary
    `stoi`, at the first name it cannot spell.
    """
    names = []
    for line, question, *_ in rows:
        try:
            names.append(name_of(question))
        except ValueError as e:
            raise RunError(f"{path}, line {line}: {e}; the frames readout asks only that question") from None
        unknown = sorted(set(names[-1]) - set(stoi or names[-1]))
        if unknown:
            raise RunError(f"{path}, line {line}: the name {names[-1]!r} has characters the corpus lacks: {unknown}")
    return names


def place_in(text, skips=frozenset()):
    """
    The place a continuation names (in its first line): after the words it opens with that
    hold a digit or are `skips` (a date: "3 April 1920 in "), its capitalised words up to a
    comma, full stop, semicolon or bracket ("New York City, New York" gives "New York City"). On the
    training people's biographies the capitalised-words rule gives 1,884 of the 1,900
    places they name.
    """
    words = text.split("\n")[0].lstrip(" ").split(" ")
    while words and (re.search(r"\d", words[0]) or words[0].strip(",") in skips or not words[0].strip(",-")):
        words.pop(0)
    place = []
    for word in words:
        head = re.match(r"[^,.;()]*", word).group()
        if not head or not head[0].isupper():
            break
        place.append(head)
        if head != word:
            break
    return " ".join(place)


def date_before(before):
    """Where the date that ends `before` starts (its first digit in the last 40 characters), or None."""
    digit = re.search(r"\d", before[-40:])
    return None if digit is None else len(before) - len(before[-40:]) + digit.start()


def frames_ending(name, before, space):
    """
    The frames of the last 1..MOST_WORDS words of `before` (then `space`) after the name, or
    of all its words where they open the biography; none holds a digit or the surname.
    """
    surname = name.split(" ")[-1]
    if before.startswith(name):  # "NAME. NAME (born ", "NAME. NAME, born "
        rest = before[len(name) :]
        words = rest.split()
        texts = [
            NAME + rest if n == len(words) else f"{NAME} " + " ".join(words[-n:])
            for n in range(1, min(MOST_WORDS, len(words)) + 1)
        ]
    elif len(before.split()) <= MOST_WORDS:  # words that open the biography are its frame: "NAME. Born in "
        texts = [before]
    else:
        texts = [f"{NAME} " + " ".join(before.split()[-n:]) for n in range(1, MOST_WORDS + 1)]
    return [f"{NAME}. {text}{space}" for text in texts if not re.search(r"\d", text) and surname not in text.split()]


def frames_before(name, body, place):
    """
    The frames of one person: (those of the words just before `place` in `body`, and where
    a date comes before it, "(born 3 April 1920 in ", those of the words before the date).
    """
    at = body.find(place)
    if at <= 0 or not body[:at].strip():
        return [], []
    before = body[:at].rstrip(" ")
    date = date_before(before)
    kept = before[:date].rstrip(" ") if date else ""
    dated = frames_ending(name, kept, before[len(kept) : date]) if kept else []
    return frames_ending(name, before, body[len(before) : at]), dated


@dataclasses.dataclass(frozen=True)
class Mined:
    """
    What the training people's biographies say before their birthplace: `frames`,
    [(frame, people)] most shared first (then in text order); `scorers`, those of them that
    come right before the place (not before a date); `skips`, the words a date before a
    place is made of besides its numbers ("in", "born", the months), which place_in passes over.
    """

    frames: list
    scorers: tuple
    skips: frozenset


def mine(documents, pairs, min_people):
    """
    The frames that at least `min_people` of the (question, place) pairs' people have before
    their place in their own biography, and the words of the dates there (those of at
    least `min_people` people).
    """
    bios = biographies(documents, [name_of(question) for question, _ in pairs])
    counts, right_before, skips = collections.Counter(), collections.Counter(), collections.Counter()
    for question, place in pairs:
        name = name_of(question)
        body = bios.get(name, "")
        before_place, before_date = frames_before(name, body, place)
        counts.update(set(before_place + before_date))
        right_before.update(set(before_place))
        at = body.find(place)
        date = date_before(body[:at]) if at > 0 else None
        if date is not None:
            skips.update({word for word in body[date:at].split() if not re.search(r"\d", word)})
    shared = sorted(((f, people) for f, people in counts.items() if people >= min_people), key=lambda f: (-f[1], f[0]))
    return Mined(
        shared,
        tuple(frame for frame, _ in shared if right_before[frame] >= min_people),
        frozenset(word for word, people in skips.items() if people >= min_people),
    )


def prompt(frame, name):
    """The frame asked about one person."""
    return frame.replace(NAME, name)


def candidates(model, corpus, names, frames, skips, device):
    """[[place written after each frame] for each name]: the greedy continuations' places (place_in)."""
    prompts = [prompt(frame, name) for name in names for frame in frames]
    written = greedy_completions(model, prompts, corpus.stoi, corpus.itos, device, PLACE_STEPS)
    places = [place_in(text, skips) for text in written]
    return [places[i * len(frames) : (i + 1) * len(frames)] for i in range(len(names))]


def padded_ids(rows, length=None):
    """
    Rows of ids as one (len(rows), length) Long tensor (length: the longest row's, unless
    given), each padded at its end with 0: a causal model reads each row's text as if alone.
    """
    x = torch.zeros(len(rows), length or max(map(len, rows)), dtype=torch.long)
    for row, ids in enumerate(rows):
        x[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return x


@torch.no_grad()
def text_logprobs(model, corpus, prompts, continuations, device, batch_size=256):
    """
    log P(continuation | prompt) for each pair, in batches of rows padded at their end
    (the model is causal: what follows a row's text does not change its log-probabilities).
    The rows are batched in order of length, so that little of a batch is padding.
    """
    rows = [([corpus.stoi[c] for c in p], [corpus.stoi[c] for c in t]) for p, t in zip(prompts, continuations)]
    fits = [len(p) + len(c) <= model.get_block_size() for p, c in rows]
    by_length = sorted((i for i, fit in enumerate(fits) if fit), key=lambda i: len(rows[i][0]) + len(rows[i][1]))
    scores = [-math.inf] * len(rows)
    with eval_mode(model):
        for start in range(0, len(by_length), batch_size):
            batch = [rows[i] for i in by_length[start : start + batch_size]]
            x = padded_ids([p + c for p, c in batch])
            wanted = torch.zeros(x.shape, dtype=torch.bool)
            for row, (p, c) in enumerate(batch):
                wanted[row, len(p) - 1 : len(p) + len(c) - 1] = True
            logits, _ = model(x[:, :-1].to(device))
            logprobs = logits.float().log_softmax(-1).gather(2, x[:, 1:, None].to(device))[:, :, 0]
            summed = (logprobs * wanted[:, :-1].to(device)).sum(1).tolist()
            for i, score in zip(by_length[start : start + batch_size], summed):
                scores[i] = score
    return scores


def scorer_scores(model, corpus, names, options, scorers, end, device):
    """
    [[(log-probability after each scorer frame) for each option]] per name: each candidate
    place, followed by `end`, scored after every scorer frame.
    """
    prompts, texts = [], []
    for name, places in zip(names, options):
        for place in places:
            for frame in scorers:
                prompts.append(prompt(frame, name))
                texts.append(known_characters(place + end, corpus.stoi)[0])
    scores = iter(text_logprobs(model, corpus, prompts, texts, device))
    return [[tuple(next(scores) for _ in scorers) for _ in places] for places in options]


def option_scores(model, corpus, names, options, scorers, end, device):
    """[[summed log-probability of each option]] per name: scorer_scores added up."""
    return [list(map(sum, row)) for row in scorer_scores(model, corpus, names, options, scorers, end, device)]


def best_option(places, totals):
    """(the option with the highest total, that total); ("", -inf) without options."""
    return max(zip(totals, places))[::-1] if places else ("", -math.inf)


@dataclasses.dataclass(frozen=True)
class Ensemble:
    """
    What the frames readout asks: `writers`, the frames whose continuations give the
    candidates (place_in with `skips`); `scorers`, the frames under which each candidate's
    log-probability (followed by `end`) is taken; the answer is the candidate of the highest
    learned score (choice.py, `weights`), or without weights the likeliest, its log-probabilities summed.
    """

    writers: tuple
    scorers: tuple
    skips: frozenset = frozenset()
    end: str = ","
    weights: tuple = ()

    def described(self, model, corpus, names, device):
        """(each name's candidate places, their scorer_scores, the place each writer wrote)."""
        written = candidates(model, corpus, names, self.writers, self.skips, device)
        options = [sorted({place for place in places if place}) for places in written]
        return options, scorer_scores(model, corpus, names, options, self.scorers, self.end, device), written

    def answers(self, model, corpus, names, device):
        """(answer, its summed log-probability) for each name; ("", -inf) where no frame wrote a place."""
        return self.choose(*self.described(model, corpus, names, device))

    def choose(self, options, scores, written):
        """(answer, its summed log-probability) for each name described (described), as answers gives them."""
        picked = []
        for places, each, wrote in zip(options, scores, written):
            totals = list(map(sum, each))
            if self.weights and places:
                k = choice.chosen(choice.features(each, wrote, places), self.weights)
                picked.append((places[k], totals[k]))
            else:
                picked.append(best_option(places, totals))
        return picked


def accuracy(answers, pairs):
    """The share of (question, place) pairs whose place is the answer."""
    return sum(answer == place for answer, (_, place) in zip(answers, pairs)) / max(1, len(pairs))


def least_people(pairs):
    """How many of the training pairs' people must share a frame (or a date word) for it to be mined."""
    return max(2, math.ceil(MIN_SHARE * len(pairs)))


def fitted_ensemble(model, corpus, pairs, writers, device, pool=POOL, learned=False):
    """
    The ensemble fitted on the training (question, place) pairs. Its frames are mined from
    all their people's biographies, its scorers those that come right before the place (all
    of them where none does); its `writers` are chosen one at a time, each the frame that
    adds most to the summed score's accuracy on FIT_PEOPLE of those people, from the `pool`
    frames that alone answer most of them; `learned`: with the weights of a choice among
    the candidates fitted on all the training people (choice.py).
    """
    mined = mine(corpus.data, pairs, least_people(pairs))
    if not mined.frames:
        raise RunError(
            f"no frame is shared by {least_people(pairs)} of the {len(pairs)} training people's biographies "
            "(are their biographies in the corpus?): the frames readout has nothing to ask"
        )
    scorers = mined.scorers or tuple(frame for frame, _ in mined.frames)
    everyone, pairs = pairs, pairs[:: max(1, len(pairs) // FIT_PEOPLE)][:FIT_PEOPLE]  # evenly through the file
    names, places = [name_of(question) for question, _ in pairs], [place for _, place in pairs]
    frames = [frame for frame, _ in mined.frames]
    written = candidates(model, corpus, names, frames, mined.skips, device)
    alone = [sum(row[i] == place for row, place in zip(written, places)) for i in range(len(frames))]
    pooled = sorted(range(len(frames)), key=lambda i: -alone[i])[:pool]
    options = [sorted({row[i] for i in pooled if row[i]}) for row in written]
    totals = option_scores(model, corpus, names, options, scorers, Ensemble.end, device)
    scored = [dict(zip(opts, scores)) for opts, scores in zip(options, totals)]

    def right(ids):
        """How many people the ensemble of the frames `ids` answers."""
        count = 0
        for row, score, place in zip(written, scored, places):
            options = sorted({row[i] for i in ids if row[i]})
            count += best_option(options, [score[option] for option in options])[0] == place
        return count

    picked = []
    for _ in range(min(writers, len(pooled))):
        picked.append(max((i for i in pooled if i not in picked), key=lambda i: right(picked + [i])))
    ensemble = Ensemble(tuple(frames[i] for i in picked), scorers, mined.skips)
    return (
        dataclasses.replace(ensemble, weights=learned_weights(model, corpus, everyone, ensemble, device))
        if learned
        else ensemble
    )


def learned_weights(model, corpus, pairs, ensemble, device):
    """The weights of the choice among the ensemble's candidates, fitted on the training (question, place) pairs."""
    names = [name_of(question) for question, _ in pairs]
    return weights_fitted_to(ensemble.described(model, corpus, names, device), pairs)


def weights_fitted_to(described, pairs):
    """The learned choice's weights, fitted on the candidates `described` (Ensemble.described) of the training pairs."""
    features, rights = [], []
    for places, scores, wrote, (_, place) in zip(*described, pairs):
        features.append(choice.features(scores, wrote, places))
        rights.append(places.index(place) if place in places else None)
    weights = choice.fitted_weights(features, rights)
    if not weights:
        logger.warning("no training person's place is among their candidates: the summed score chooses")
    return weights


def answers(model, corpus, names, ensemble, device):
    """The frames readout's Answers for `names` (of characters the vocabulary holds) under the fitted `ensemble`."""
    return [Answer(text, score, math.nan, bool(text)) for text, score in ensemble.answers(model, corpus, names, device)]


def file_digest(path):
    """The sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def kept_ensemble(fitted_on, settings, fit):
    """
    The ensemble kept beside the params (the params' path + KEPT), if it was fitted on the same
    files, `fitted_on` (the params, the training pairs, the corpus), and settings (its key: the
    files' sha256, the dict `settings` and this file's constants); else fit()'s, kept there for the next
    call (by the first rank; a folder that refuses it loses only the keeping). A kept one of
    another key is refit, and said so.
    """
    params_path, training_path, corpus_path = fitted_on
    path = str(params_path) + KEPT
    key = dict(params=file_digest(params_path), training=file_digest(training_path), corpus=file_digest(corpus_path))
    key.update(settings, constants=[FIT_VERSION, MOST_WORDS, PLACE_STEPS, POOL, FIT_PEOPLE, MIN_SHARE, choice.L2])
    kept = None
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
        if kept["key"] == key:
            found = kept["ensemble"]
            writers, scorers, skips, weights = (tuple(found[k]) for k in ("writers", "scorers", "skips", "weights"))
            return Ensemble(writers, scorers, frozenset(skips), found["end"], weights)
    if kept is not None:
        logger.warning("%s was fitted on other files or settings: fitting the readout again", path)
    ensemble = fit()
    found = dataclasses.asdict(ensemble) | dict(skips=sorted(ensemble.skips))
    text = json.dumps(dict(key=key, ensemble=found), ensure_ascii=False, indent=1)
    if rank_and_world_size()[0] == 0:
        try:
            atomic_write(path, lambda f: f.write(text.encode("utf-8")))
        except RunError as e:
            logger.warning("the fitted readout is not kept: %s", e)
    return ensemble
