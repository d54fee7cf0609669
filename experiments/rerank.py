"""
A choice learned on the training people, for the frames readout (src/frames.py): the summed
score picks among the writers' candidates by adding their log-probabilities under the scorer
frames; here a linear score of each candidate's features, under a softmax over the person's
candidates, is fitted on the first 1,600 training people and checked on the last 400.

    python experiments/rerank.py vanilla wiki.txt --reading_params_path pretrain.params \\
        [--finetune_corpus_path birth_places_train.tsv] [--writers 8] [--l2 0.01]

The writers (--writers of them) are chosen as evaluate chooses them, on the first 1,600. A
candidate's features: its log-probability after each scorer frame (the ensemble's), which
writers wrote it, its summed log-probability after a content-free name ("N/A": the answer
prior), and its length. It prints, on both parts, the share of people whose place is among
the candidates, the summed score's accuracy and the learned choice's, and the weights.
"""

import time

import src_path  # noqa: F401

# isort: split
import torch

import frames
import pipeline
from arguments import exit_status, params_parser, reading_config
from dataset import known_characters, name_of
from distributed import exit_process
from errors import RunError
from inputs import answered_pairs
from readout import tuning_split

CONTENT_FREE = "N/A"  # the name of nobody: the candidates' prior (contextual calibration's content-free input)
FLOOR = -100.0  # a log-probability that cannot be computed (the text beyond the block) counts as this


def candidate_features(model, corpus, ensemble, pairs, device):
    """
    ([the candidate places] per person, [(candidates, features) float tensor] per person, the
    features' names): the ensemble's writers' candidates and what describes each.
    """
    names = [name_of(question) for question, _ in pairs]
    written = frames.candidates(model, corpus, names, ensemble.writers, ensemble.skips, device)
    options = [sorted({place for place in row if place}) for row in written]
    scored = [
        frames.option_scores(model, corpus, names, options, (scorer,), ensemble.end, device)
        for scorer in ensemble.scorers
    ]
    nobody = known_characters(CONTENT_FREE, corpus.stoi)[0]
    prior = frames.option_scores(model, corpus, [nobody] * len(names), options, ensemble.scorers, ensemble.end, device)
    features, width = [], len(ensemble.scorers) + len(ensemble.writers) + 2
    for i, places in enumerate(options):
        rows = []
        for j, place in enumerate(places):
            row = [scores[i][j] for scores in scored] + [float(w == place) for w in written[i]]
            rows.append(row + [prior[i][j], float(len(place))])
        features.append(torch.tensor(rows, dtype=torch.float64).clamp(min=FLOOR).reshape(len(places), width))
    labels = [f"scorer `{s}`" for s in ensemble.scorers] + [f"written by `{w}`" for w in ensemble.writers]
    return options, features, labels + [f"after `{CONTENT_FREE}`, summed", "length"]


def choice(features, weights, mean, scale):
    """The index of each person's likeliest candidate under the weights (None without candidates)."""
    return [int((((f - mean) / scale) @ weights).argmax()) if len(f) else None for f in features]


def fitted_weights(features, options, pairs, l2):
    """
    The linear weights of a softmax over each person's candidates, fitted (L-BFGS, L2 `l2`) to
    pick the person's place, on the people whose place is among their candidates; with the
    features' mean and scale on those people.
    """
    right = [(f, places.index(place)) for f, places, (_, place) in zip(features, options, pairs) if place in places]
    if not right:
        raise RunError("no training person's place is among their candidates: nothing to fit a choice on")
    stacked = torch.cat([f for f, _ in right])
    mean, scale = stacked.mean(0), stacked.std(0).clamp(min=1e-6)
    weights = torch.zeros(stacked.size(1), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights], max_iter=500, line_search_fn="strong_wolfe")

    def loss():
        optimizer.zero_grad()
        nll = sum(-torch.log_softmax(((f - mean) / scale) @ weights, 0)[k] for f, k in right) / len(right)
        total = nll + l2 * weights.pow(2).sum()
        total.backward()
        return total

    optimizer.step(loss)
    return weights.detach(), mean, scale


def shares(picked, options, pairs):
    """(the share of people whose place is among their candidates, the share answered right)."""
    among = sum(place in places for places, (_, place) in zip(options, pairs)) / len(pairs)
    right = sum(k is not None and places[k] == place for k, places, (_, place) in zip(picked, options, pairs))
    return among, right / len(pairs)


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to read", prog="rerank.py")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--writers", type=int, default=8, help="how many frames write candidates (default 8)")
    parser.add_argument("--l2", type=float, default=0.01, help="the weights' L2 penalty (default 0.01)")
    args = parser.parse_args(argv)
    cfg = reading_config(args, finetune_corpus_path=args.finetune_corpus_path)

    def run():
        setup, device = pipeline.load(cfg)
        model, corpus = setup.model, setup.corpus
        pairs = answered_pairs(cfg.finetune_corpus_path)
        split = dict(zip(["first 1,600", "last 400"], tuning_split(pairs)))
        started = time.process_time()
        ensemble = frames.fitted_ensemble(model, corpus, split["first 1,600"], args.writers, device)
        described = {label: candidate_features(model, corpus, ensemble, part, device) for label, part in split.items()}
        options, features, labels = described["first 1,600"]
        weights, mean, scale = fitted_weights(features, options, split["first 1,600"], args.l2)
        summed = torch.zeros_like(weights)
        summed[: len(ensemble.scorers)] = 1.0
        print(f"{args.writers} writers, {len(ensemble.scorers)} scorers\n")
        print("| people | place among the candidates | summed score | learned choice |\n| --- | --- | --- | --- |")
        for label, part in split.items():
            options, features, _ = described[label]
            among, by_sum = shares(choice(features, summed, 0.0, 1.0), options, part)
            _, learned = shares(choice(features, weights, mean, scale), options, part)
            print(f"| {label} | {among:.1%} | {by_sum:.1%} | {learned:.1%} |")
        print("\n| feature | weight (standardised) |\n| --- | --- |")
        for label, weight in zip(labels, weights.tolist()):
            print(f"| {label} | {weight:+.3f} |")
        print(f"\nCPU time: {time.process_time() - started:.0f} s")

    return exit_status("rerank.py", run)


if __name__ == "__main__":
    exit_process(main())
