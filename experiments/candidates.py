"""
Where the frames readout's candidates come from, and how often they hold the right place: on the
last 400 training people (the tuning split's check part; the writers are fitted on the first
1,600), for each source of candidates and for the sources added up in the order given.

    python experiments/candidates.py vanilla wiki.txt --reading_params_path pretrain.params \\
        [--finetune_corpus_path birth_places_train.tsv] [--writers 8] [--biography_places 2 4] \\
        [--samples 8] [--temperatures 0.7 1.0] [--sampled_places 2] [--choose 800 [--least 1 2 3]]

Sources: the writers' greedy places (the recipe's), the greedy biography's first N places for
each N of --biography_places, greedy again with the mask and pad characters forbidden, and for
each temperature, --samples biographies drawn after the same opening ("NAME. "), with and
without those characters, each giving its first --sampled_places places (each person's draws
seeded by their name, as the readout's: src/factgpt/readout/ensemble.py). For each it prints the share of people
whose place is among the candidates, the candidates a person, and the seconds the source took;
then the same for the sources added up.

--choose N instead fits the learned choice (src/factgpt/readout/choice.py) on N of the first 1,600, evenly, and
checks it on the last 400: among the writers' and the greedy biography's candidates (the
recipe's), with the samples' count of each place as a feature, and with the places that at least
K samples (of the first temperature, without masks) name, for each K of --least.
"""

import dataclasses
import math
import time

import src_path  # noqa: F401

# isort: split

from dataset import MASK_CHAR, PAD_CHAR
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.corpus.reading import answered_pairs
from factgpt.readout import choice
from factgpt.readout.ensemble import every_sample, sampled_places, written_places
from factgpt.readout.fitting import fitted_ensemble
from factgpt.readout.frames import names_in
from factgpt.settings.command_line import params_parser, reading_config
from readout import tuning_split


def scored_people(model, corpus, fitted, pairs, device):
    """
    For each person: the Candidates of the writers', the greedy biography's and the sampled places
    together (each place counted among the samples), and the right place.
    """
    people = fitted.candidates(model, corpus, names_in(pairs), device)
    return [(person, place) for person, (_, place) in zip(people, pairs)]


def kept_rows(person, least, counted):
    """
    The features of the candidates kept (each writer's and those `least` samples named), their
    count the last feature if `counted`, and the places kept.
    """
    kept = [k for k, (place, n) in enumerate(zip(person.places, person.counts))
            if place in person.written or n >= least]  # fmt: skip
    features = person.features()[kept]
    return (features if counted else features[:, :-1]), [person.places[k] for k in kept]


def chosen_share(parts, least, counted):
    """
    The learned choice fitted on parts["fit"], checked on parts["check"]: (place among the
    candidates, answered, answered where the place is among them) on the check.
    """
    rows = {part: [kept_rows(person, least, counted) for person, _ in people] for part, people in parts.items()}
    rights = {
        part: [places.index(place) if place in places else None for (_, places), (_, place) in zip(rows[part], people)]
        for part, people in parts.items()
    }
    weights = choice.fitted_weights([features for features, _ in rows["fit"]], rights["fit"])
    answers = [places[choice.chosen(features, weights)] if places else "" for features, places in rows["check"]]
    right = [answer == place for answer, (_, place) in zip(answers, parts["check"])]
    present = [r is not None for r in rights["check"]]
    answered_present = sum(r for r, p in zip(right, present) if p) / max(1, sum(present))
    return sum(present) / len(present), sum(right) / len(right), answered_present


def sources_table(model, corpus, fitted, last, args, device):
    """Print each source's share of people whose place it holds, and the sources added up."""
    names, places = names_in(last), [place for _, place in last]
    sources = {}

    def sampled(samples, temperature, unmasked, most):
        banned = (MASK_CHAR, PAD_CHAR) if unmasked else ()
        per_sample = sampled_places(model, corpus, names, fitted.skips, device, samples, temperature, most, banned)
        return every_sample(per_sample)

    def timed(label, make):
        began = time.perf_counter()
        sources[label] = (make(), time.perf_counter() - began)

    timed(f"{args.writers} writers, greedy",
          lambda: written_places(model, corpus, names, fitted.writers, fitted.skips, device))  # fmt: skip
    for n in args.biography_places:
        timed(f"greedy biography, first {n}",
              lambda n=n: written_places(model, corpus, names, (), fitted.skips, device, biography=n))  # fmt: skip
    for n in args.biography_places:
        timed(f"greedy biography without masks, first {n}",
              lambda n=n: sampled(1, 0, True, n))  # fmt: skip
    for t in args.temperatures:
        for unmasked in (False, True):
            label = f"{args.samples} biographies sampled at {t:g}{' without masks' * unmasked}"
            timed(label + f", first {args.sampled_places} each",
                  lambda t=t, u=unmasked: sampled(args.samples, t, u, args.sampled_places))  # fmt: skip
    print(f"\n{len(last)} of the last 400 training people\n")
    print("| candidates | place among them | candidates a person | seconds |")
    print("| --- | --- | --- | --- |")
    union = [set() for _ in names]
    rows = []
    for label, (written, seconds) in sources.items():
        sets = [{p for p in row if p} for row in written]
        among = sum(place in s for s, place in zip(sets, places)) / len(places)
        print(f"| {label} | {among:.1%} | {sum(map(len, sets)) / len(sets):.1f} | {seconds:.0f} |")
        union = [u | s for u, s in zip(union, sets)]
        among = sum(place in u for u, place in zip(union, places)) / len(places)
        rows.append((label, among, sum(map(len, union)) / len(union)))
    print("\n| added up to | place among them | candidates a person |\n| --- | --- | --- |")
    for label, among, size in rows:
        print(f"| {label} | {among:.1%} | {size:.1f} |")


def choice_table(model, corpus, fitted, first, last, args, device):
    """Print the learned choice's shares on the last 400, fitted on --choose of the first 1,600."""
    fit = first[:: len(first) // args.choose][: args.choose]
    fitted = dataclasses.replace(fitted, biography=2, samples=args.samples, temperature=args.temperatures[0])
    began = time.perf_counter()
    parts = {
        part: scored_people(model, corpus, fitted, pairs, device) for part, pairs in dict(fit=fit, check=last).items()
    }
    print(f"sampled and scored in {time.perf_counter() - began:.0f} s\n")
    print("| candidates | place among them | answered | answered where among them |")
    print("| --- | --- | --- | --- |")
    ways = [("writers and greedy biography", math.inf, False)]
    ways += [("writers and greedy biography, the samples' count a feature", math.inf, True)]
    ways += [(f"and the places {n} of {args.samples} samples name", n, True) for n in args.least]
    for label, least, counted in ways:
        among, answered, where = chosen_share(parts, least, counted)
        print(f"| {label} | {among:.1%} | {answered:.1%} | {where:.1%} |", flush=True)


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to read", prog="candidates.py")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--writers", type=int, default=8, help="frames fitted on the first 1,600 (default 8)")
    parser.add_argument("--biography_places", type=int, nargs="+", default=[2, 4], help="greedy biography's N")
    parser.add_argument("--samples", type=int, default=8, help="biographies sampled a person (default 8)")
    parser.add_argument("--temperatures", type=float, nargs="*", default=[0.7, 1.0], help="of the samples")
    parser.add_argument("--sampled_places", type=int, default=2, help="places read from each sample")
    parser.add_argument("--people", type=int, default=400, help="of the last 400, the first this many")
    parser.add_argument("--least", type=int, nargs="+", default=[1, 2, 3], help="--choose: samples naming a place")
    parser.add_argument(
        "--choose",
        type=int,
        default=0,
        help="instead: the learned choice fitted on this many of the first 1,600 (evenly), with and without the "
        "samples of the first temperature, without masks",
    )
    args = parser.parse_args(argv)
    cfg = reading_config(args, finetune_corpus_path=args.finetune_corpus_path)

    def run():
        setup, device = pipeline.load(cfg)
        first, last = tuning_split(answered_pairs(cfg.finetune_corpus_path))
        started = time.perf_counter()
        fitted = fitted_ensemble(setup.model, setup.corpus, first, args.writers, device)
        print(f"writers fitted on the first 1,600 in {time.perf_counter() - started:.0f} s: {fitted.writers}")
        last = last[: args.people]
        if args.choose:
            choice_table(setup.model, setup.corpus, fitted, first, last, args, device)
        else:
            sources_table(setup.model, setup.corpus, fitted, last, args, device)

    return exit_status("candidates.py", run)


if __name__ == "__main__":
    exit_process(main())
