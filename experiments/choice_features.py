"""
The learned choice among sampled candidates, on the tuning split: the writers are fitted on the first 1,600
training people; every training person's candidates (the writers' places, the greedy biography's first 2, and the
first 2 of each of --samples biographies drawn as the readout draws them) are written and scored once; then, for
each number of samples N in --counts (a person's first N draws, which are the readout's N samples) and each set of
features, the choice is fitted on the first 1,600 and checked on the last 400.

    python experiments/choice_features.py vanilla wiki.txt --reading_params_path pretrain.params \\
        [--finetune_corpus_path birth_places_train.tsv] [--samples 16] [--counts 0 4 8 12 16]

The features: the readout's (choice.features: the scores after each scorer frame, which writers wrote the candidate,
its length, and with samples how many named it); "log count", log(1 + that count) in its place; "prior", the
readout's with log(1 + how many of the first 1,600 were born there), each fitted person left out of their own count.
"""

import collections
import math
import time

import src_path  # noqa: F401

# isort: split
import torch

from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.corpus.reading import answered_pairs
from factgpt.readout import choice
from factgpt.readout.ensemble import (
    Candidates,
    candidate_set,
    every_sample,
    sampled_places,
    scored_candidates,
    written_places,
)
from factgpt.readout.fitting import fitted_ensemble
from factgpt.readout.frames import names_in
from factgpt.settings.command_line import params_parser, reading_config
from readout import tuning_split


def with_samples(people, per_sample, n):
    """Each person's Candidates among the writers' places and those of their first n samples, counted."""
    kept = []
    for person, samples in zip(people, per_sample):
        named = [place for sample in samples[:n] for place in sample]
        places = candidate_set([*person.written, *named])
        scores = tuple(person.scores[person.places.index(place)] for place in places)
        counts = tuple(named.count(place) for place in places) if n else None
        kept.append(Candidates(person.written, places, scores, counts))
    return kept


def feature_rows(people, features, prior, own):
    """Each person's feature rows: the readout's, its count's logarithm in its place, or with the prior added."""
    rows = [person.features() for person in people]
    if features == "log count":
        rows = [torch.cat([f[:, :-1], f[:, -1:].log1p()], 1) if person.counts else f for f, person in zip(rows, people)]
    if features == "prior":
        born_there = [[math.log1p(prior[p] - (p == mine)) for p in person.places] for person, mine in zip(people, own)]
        rows = [torch.cat([f, torch.tensor(b, dtype=f.dtype)[:, None]], 1) for f, b in zip(rows, born_there)]
    return rows


def shares(people, places, features, prior, fitted_on):
    """
    The choice fitted on the first `fitted_on` people: (place among the candidates, answered, answered where among
    them, candidates a person) on the rest.
    """
    fit, check = range(fitted_on), range(fitted_on, len(people))
    own = [place if i < fitted_on else None for i, place in enumerate(places)]
    rows = feature_rows(people, features, prior, own)
    rights = [person.places.index(place) if place in person.places else None for person, place in zip(people, places)]
    weights = choice.fitted_weights([rows[i] for i in fit], [rights[i] for i in fit])
    right = [bool(people[i].places) and people[i].places[choice.chosen(rows[i], weights)] == places[i] for i in check]
    present = [rights[i] is not None for i in check]
    kept = sum(r for r, p in zip(right, present) if p) / max(1, sum(present))
    size = sum(len(people[i].places) for i in check) / len(check)
    return sum(present) / len(check), sum(right) / len(check), kept, size


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to read", prog="choice_features.py")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--writers", type=int, default=8, help="frames fitted on the first 1,600 (default 8)")
    parser.add_argument("--samples", type=int, default=16, help="biographies drawn a person (default 16)")
    parser.add_argument("--temperature", type=float, default=0.5, help="of the samples (default 0.5)")
    parser.add_argument("--counts", type=int, nargs="+", default=[0, 4, 8, 12, 16], help="the samples' Ns to check")
    args = parser.parse_args(argv)
    cfg = reading_config(args, finetune_corpus_path=args.finetune_corpus_path)

    def run():
        setup, device = pipeline.load(cfg)
        model, corpus = setup.model, setup.corpus
        first, last = tuning_split(answered_pairs(cfg.finetune_corpus_path))
        began = time.perf_counter()
        fitted = fitted_ensemble(model, corpus, first, args.writers, device)
        pairs = first + last
        names, places = names_in(pairs), [place for _, place in pairs]
        written = written_places(model, corpus, names, fitted.writers, fitted.skips, device, biography=2)
        per_sample = sampled_places(model, corpus, names, fitted.skips, device, args.samples, args.temperature)
        people = scored_candidates(
            model, corpus, names, written, fitted.scorers, fitted.end, device, every_sample(per_sample)
        )
        print(f"{len(pairs)} training people written, sampled and scored in {time.perf_counter() - began:.0f} s\n")
        prior = collections.Counter(places[: len(first)])
        print("| candidates | features | place among them | answered | answered where among them | a person |")
        print("| --- | --- | --- | --- | --- | --- |")
        for n in args.counts:
            label = f"writers and greedy biography{f', {n} samples' if n else ''}"
            for features in ("the readout's", "log count", "prior") if n else ("the readout's", "prior"):
                among, answered, kept, size = shares(
                    with_samples(people, per_sample, n), places, features, prior, len(first)
                )
                print(f"| {label} | {features} | {among:.1%} | {answered:.1%} | {kept:.1%} | {size:.1f} |", flush=True)

    return exit_status("choice_features.py", run)


if __name__ == "__main__":
    exit_process(main())
