"""
The frames readout's choice among its candidates, learned or summed, on the tuning split: the
ensemble (its writers and the learned choice's weights, src/choice.py) is fitted on the
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
"""

import dataclasses
import time

import src_path  # noqa: F401

# isort: split
import frames
import pipeline
from arguments import exit_status, params_parser, reading_config
from dataset import name_of
from distributed import exit_process
from inputs import answered_pairs
from readout import branched_places, tuning_split


def shares(ensemble, described, pairs):
    """(the share of people whose place is among their candidates, the summed score's accuracy, the learned's)."""
    options = described[0]
    among = sum(place in places for places, (_, place) in zip(options, pairs)) / len(pairs)
    summed = dataclasses.replace(ensemble, weights=()).choose(*described)
    learned = ensemble.choose(*described)
    return among, *(frames.accuracy([answer for answer, _ in picked], pairs) for picked in (summed, learned))


def branched_described(model, corpus, ensemble, names, k, device):
    """Ensemble.described, its candidates grown by branching at the k likeliest first characters (branched_places)."""
    branched = branched_places(model, corpus, ensemble, names, k, device)
    options = [sorted({place for places in row for place in places if place}) for row in branched]
    written = [[places[0] for places in row] for row in branched]
    return options, frames.scorer_scores(model, corpus, names, options, ensemble.scorers, ensemble.end, device), written


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to read", prog="rerank.py")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--writers", type=int, nargs="+", default=[4, 8], help="numbers of writers (default 4 8)")
    parser.add_argument("--first_chars", type=int, nargs="+", default=[], help="branch at K first characters")
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
            ensemble = frames.fitted_ensemble(model, corpus, split["first 1,600"], writers, device, learned=True)
            for label, part in split.items():
                names = [name_of(question) for question, _ in part]
                among, summed, learned = shares(ensemble, ensemble.described(model, corpus, names, device), part)
                print(f"| {writers} | {label} | {among:.1%} | {summed:.1%} | {learned:.1%} |", flush=True)
        for k in args.first_chars:
            names = {label: [name_of(question) for question, _ in part] for label, part in split.items()}
            grown = {label: branched_described(model, corpus, ensemble, names[label], k, device) for label in split}
            weights = frames.weights_fitted_to(grown["first 1,600"], split["first 1,600"])
            refitted = dataclasses.replace(ensemble, weights=weights)
            for label, part in split.items():
                among, summed, learned = shares(refitted, grown[label], part)
                row = f"{writers}, {k} first characters ({sum(map(len, grown[label][0])) / len(part):.1f} a person)"
                print(f"| {row} | {label} | {among:.1%} | {summed:.1%} | {learned:.1%} |", flush=True)
        labels = [f"scorer `{s}`" for s in ensemble.scorers] + [f"written by `{w}`" for w in ensemble.writers]
        print("\n| feature | weight |\n| --- | --- |")
        for label, weight in zip(labels + ["length"], ensemble.weights):
            print(f"| {label} | {weight:+.3f} |")
        print(f"\nCPU time: {time.process_time() - started:.0f} s")

    return exit_status("rerank.py", run)


if __name__ == "__main__":
    exit_process(main())
