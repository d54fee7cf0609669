"""
The frames readout's reading and choosing: "Where was NAME born?" asked in the corpus's own words.

The greedy continuation of each writer frame gives a candidate place, and so, where asked, do
the first places of the person's biography as the model writes it, greedily and in samples;
each candidate is scored after every scorer frame. The answer is the learned choice's candidate
(choice.py), or without its weights the one whose log-probabilities add up highest.
"""

import dataclasses
import math
import zlib
from typing import Optional

import torch

from dataset import MASK_CHAR, PAD_CHAR, encoded, known_characters, padded_ids
from factgpt.readout import choice
from factgpt.readout.decoding import Answer, greedy_completions, sampled_completions
from factgpt.readout.frames import NAME, place_in, places_named, prompt
from utils import eval_mode

PLACE_STEPS = 32  # characters written after a frame, enough for the place
BIOGRAPHY_STEPS = 100  # characters of a greedy biography written after its name: most of a block
SAMPLED_PLACES = 2  # the places read from each sampled biography, its first


def candidate_set(places):
    """The distinct places written, sorted: a person's candidates."""
    return tuple(sorted({place for place in places if place}))


@dataclasses.dataclass(frozen=True)
class Candidates:
    """
    One person's candidate places, what wrote them, and how likely each is after each scorer frame.
    """

    written: tuple  # the place each writer wrote, "" where it wrote none
    places: tuple  # the candidates (candidate_set)
    scores: tuple  # per candidate, its log-probability after each scorer frame
    counts: Optional[tuple] = None  # with samples: per candidate, how many samples named it

    def summed(self):
        """
        The candidate whose log-probabilities add up highest, and that sum; ("", -inf) without
        candidates.
        """
        totals = [sum(scores) for scores in self.scores]
        return max(zip(totals, self.places))[::-1] if self.places else ("", -math.inf)

    def features(self):
        """What the learned choice reads of each candidate (choice.features)."""
        return choice.features(self.scores, self.written, self.places, self.counts)

    def chosen(self, weights=()):
        """
        The learned choice's candidate under `weights` and its summed log-probability; without
        weights, summed().
        """
        if not (weights and self.places):
            return self.summed()
        k = choice.chosen(self.features(), weights)
        return self.places[k], sum(self.scores[k])

    def of_writers(self, ids):
        """The candidates of the writers `ids` alone, scored as here."""
        written = tuple(self.written[i] for i in ids)
        places = candidate_set(written)
        return Candidates(
            written, places, tuple(self.scores[self.places.index(place)] for place in places)
        )


def sampled_places(model, corpus, names, skips, device, samples, temperature,
                   most=SAMPLED_PLACES, banned=(MASK_CHAR, PAD_CHAR)):  # fmt: skip
    """
    For each name, a list per sample of the first `most` places of each of `samples` biographies
    drawn at `temperature`. The mask and pad characters are never drawn, so that a biography goes
    on instead of turning to a span corruption's answer; each draw is seeded by the name and the
    sample's number alone, so a name's first N draws are the same whatever `samples` is.
    """
    openings = [prompt(f"{NAME}. ", name) for name in names for _ in range(samples)]
    seeds = [zlib.crc32(f"{name}\n{k}".encode()) for name in names for k in range(samples)]
    texts = sampled_completions(
        model, openings, seeds, corpus, device, BIOGRAPHY_STEPS, temperature, banned
    )
    return [
        [places_named(text, skips, most) for text in texts[i * samples : (i + 1) * samples]]
        for i in range(len(names))
    ]


def every_sample(per_sample):
    """Each person's places of sampled_places, sample after sample: what their candidates count."""
    return [[place for sample in person for place in sample] for person in per_sample]


def written_places(model, corpus, names, frames, skips, device, biography=0):
    """
    For each name, the place that the greedy continuation of each frame names (place_in), then
    the first `biography` places its greedy biography names (places_named; "" where it names fewer).
    """
    prompts = [prompt(frame, name) for name in names for frame in frames]
    written = greedy_completions(model, prompts, corpus, device, PLACE_STEPS)
    places = [place_in(text, skips) for text in written]
    rows = [places[i * len(frames) : (i + 1) * len(frames)] for i in range(len(names))]
    if not biography:
        return rows
    # how every biography of the corpus opens
    openings = [prompt(f"{NAME}. ", name) for name in names]
    texts = greedy_completions(model, openings, corpus, device, BIOGRAPHY_STEPS)
    named = [
        (places_named(text, skips, biography) + [""] * biography)[:biography] for text in texts
    ]
    return [row + extra for row, extra in zip(rows, named)]


@torch.no_grad()
def text_logprobs(model, corpus, prompts, continuations, device, batch_size=256):
    """
    log P(continuation | prompt) for each pair; -inf where the two do not fit in the block.
    The rows are batched in order of length, so that little of a batch is padding.
    """
    rows = [
        (encoded(p, corpus.stoi), encoded(c, corpus.stoi)) for p, c in zip(prompts, continuations)
    ]
    fits = [len(p) + len(c) <= model.get_block_size() for p, c in rows]
    by_length = sorted(
        (i for i, fit in enumerate(fits) if fit), key=lambda i: len(rows[i][0]) + len(rows[i][1])
    )
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


def scored_candidates(model, corpus, names, written, scorers, end, device, sampled=None):
    """
    Each name's Candidates: the places its writers wrote (`written`) and, where given, those its
    samples named (`sampled`, counted), each followed by `end` and scored after every scorer frame.
    """
    named = sampled if sampled is not None else [None] * len(written)
    places = [candidate_set([*row, *(samples or ())]) for row, samples in zip(written, named)]
    prompts, texts = [], []
    for name, options in zip(names, places):
        for place in options:
            for frame in scorers:
                prompts.append(prompt(frame, name))
                texts.append(known_characters(place + end, corpus.stoi)[0])
    scores = iter(text_logprobs(model, corpus, prompts, texts, device))
    return [
        Candidates(
            tuple(row),
            tuple(options),
            tuple(tuple(next(scores) for _ in scorers) for _ in options),
            None if samples is None else tuple(samples.count(place) for place in options),
        )
        for row, options, samples in zip(written, places, named)
    ]


@dataclasses.dataclass(frozen=True)
class Ensemble:
    """The frames a readout asks, and how it chooses among the candidates they give."""

    writers: tuple  # the frames whose greedy continuations give the candidates
    scorers: tuple  # the frames after which each candidate is scored
    skips: frozenset = frozenset()  # the date words place_in passes over (frames.Mined)
    end: str = ","  # what follows a candidate when it is scored
    # the learned choice's (choice.py); none: the summed log-probabilities choose
    weights: tuple = ()
    # the greedy biography's first places among the candidates, each written as by a writer
    biography: int = 0
    # biographies sampled for each person: the places they name among the candidates, counted
    samples: int = 0
    temperature: float = 1.0  # the samples'

    def candidates(self, model, corpus, names, device):
        """Each name's Candidates under this ensemble's frames and samples."""
        written = written_places(
            model, corpus, names, self.writers, self.skips, device, self.biography
        )
        sampled = None
        if self.samples:
            sampled = every_sample(
                sampled_places(
                    model, corpus, names, self.skips, device, self.samples, self.temperature
                )
            )
        return scored_candidates(
            model, corpus, names, written, self.scorers, self.end, device, sampled
        )

    def chosen(self, candidates):
        """The (answer, its summed log-probability) chosen among each person's candidates."""
        return [person.chosen(self.weights) for person in candidates]

    def answers(self, model, corpus, names, device):
        """
        The readout's decoding.Answer for each name; an empty one where no frame wrote a place.
        """
        chosen = self.chosen(self.candidates(model, corpus, names, device))
        return [Answer(text, score, math.nan, bool(text)) for text, score in chosen]


def accuracy(answers, pairs):
    """The share of (question, place) pairs whose place is the answer."""
    return sum(answer == place for answer, (_, place) in zip(answers, pairs)) / max(1, len(pairs))
