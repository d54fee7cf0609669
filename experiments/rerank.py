"""
The frames readout's choice among its candidates, learned or summed, on the tuning split: the
ensemble (its writers and the learned choice's weights, src/factgpt/readout/choice.py) is fitted on the
first 1,600 training people and checked on the last 400.

    python experiments/rerank.py vanilla wiki.txt --reading_params_path pretrain.params \\
        [--finetune_corpus_path birth_places_train.tsv] [--writers 4 8] [--first_chars 2 3]

For each number of writers it prints, on both parts, the share of people whose place is
among the candidates, the summed score's accuracy and the learned choice's, then the weights
of the last (on each feature as it is: a scorer's log-probability, whether a writer wrote
the candidate, its length) and the CPU time.

--first_chars K [K ...] adds to the last ensemble's candidates those of the K-1 next likeliest
characters where each writer's greedy place starts (experiments/readout.py's branches), and
refits the learned choice's weights on the first 1,600 people's candidates so grown: a
branch's place counts as written by a writer only where that writer's greedy path wrote it.
The same table, a row per K and part.

--biography N [N ...] adds to the last ensemble's candidates the first N places of each person's
greedy biography, the model's own text after "NAME. " (Ensemble.biography, --readout_biography),
each a writer of its own, and refits the weights on the first 1,600 people's candidates so grown;
its rows also give the biography's first place alone. The weights printed are the last fit's.
"""

import dataclasses
import time

import src_path  # noqa: F401

# isort: split
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.corpus.reading import answered_pairs
from factgpt.readout.ensemble import accuracy
from factgpt.readout.fitting import fitted_ensemble, weights_fitted_to
from factgpt.readout.frames import names_in
from factgpt.settings.command_line import params_parser, reading_config
from readout import branched_candidates, branched_places, tuning_split


def shares(fitted, candidates, pairs):
    """The share of people whose place is among their candidates, the summed choice's accuracy, the learned's."""
    among = sum(place in person.places for person, (_, place) in zip(candidates, pairs)) / len(pairs)
    summed = [person.summed()[0] for person in candidates]
    learned = [answer for answer, _ in fitted.chosen(candidates)]
    return among, accuracy(summed, pairs), accuracy(learned, pairs)


def branched_people(model, corpus, fitted, names, k, device):
    """The Candidates of the fitted ensemble grown by branching at the k likeliest first characters."""
    branched = branched_places(model, corpus, fitted, names, k, device)
    return branched_candidates(model, corpus, fitted, names, branched, device)


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to read", prog="rerank.py")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--writers", type=int, nargs="+", default=[4, 8], help="numbers of writers (default 4 8)")
    parser.add_argument("--first_chars", type=int, nargs="+", default=[], help="branch at K first characters")
    parser.add_argument("--biography", type=int, nargs="+", default=[], help="the greedy biography's first N places")
    args = parser.parse_args(argv)
    cfg = reading_config(args, finetune_corpus_path=args.finetune_corpus_path)

    def run():
        setup, device = pipeline.load(cfg)
        model, corpus = setup.model, setup.corpus
        split = dict(zip(["first 1,600", "last 400"], tuning_split(answered_pairs(cfg.finetune_corpus_path))))
        started = time.process_time()
        print("| writers | people | place among the candidates | summed score | learned choice |")
        print("| --- | --- | --- | --- | --- |")
        for writers in args.writers:
            fitted = fitted_ensemble(model, corpus, split["first 1,600"], writers, device, learned=True)
            for label, part in split.items():
                among, summed, learned = shares(fitted, fitted.candidates(model, corpus, names_in(part), device), part)
                print(f"| {writers} | {label} | {among:.1%} | {summed:.1%} | {learned:.1%} |", flush=True)
        for k in args.first_chars:
            grown = {
                label: branched_people(model, corpus, fitted, names_in(part), k, device)
                for label, part in split.items()
            }
            weights = weights_fitted_to(grown["first 1,600"], split["first 1,600"])
            refitted = dataclasses.replace(fitted, weights=weights)
            for label, part in split.items():
                among, summed, learned = shares(refitted, grown[label], part)
                a_person = sum(len(person.places) for person in grown[label]) / len(part)
                row = f"{writers}, {k} first characters ({a_person:.1f} a person)"
                print(f"| {row} | {label} | {among:.1%} | {summed:.1%} | {learned:.1%} |", flush=True)
        greedy = fitted
        for n in args.biography:
            with_biography = dataclasses.replace(greedy, biography=n)
            grown = {label: with_biography.candidates(model, corpus, names_in(p), device) for label, p in split.items()}
            weights = weights_fitted_to(grown["first 1,600"], split["first 1,600"])
            fitted = dataclasses.replace(with_biography, weights=weights)
            for label, part in split.items():
                among, summed, learned = shares(fitted, grown[label], part)
                alone = accuracy([person.written[len(greedy.writers)] for person in grown[label]], part)
                row = f"{writers} and the biography's {n} (its first alone: {alone:.1%})"
                print(f"| {row} | {label} | {among:.1%} | {summed:.1%} | {learned:.1%} |", flush=True)
        labels = [f"scorer `{s}`" for s in fitted.scorers] + [f"written by `{w}`" for w in fitted.writers]
        labels += [f"the biography's place {i + 1}" for i in range(fitted.biography)]
        print("\n| feature | weight |\n| --- | --- |")
        for label, weight in zip(labels + ["length"], fitted.weights):
            print(f"| {label} | {weight:+.3f} |")
        print(f"\nCPU time: {time.process_time() - started:.0f} s")

    return exit_status("rerank.py", run)


if __name__ == "__main__":
    exit_process(main())
