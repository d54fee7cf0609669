"""
The frames readout (src/frames.py), studied on the training people: the frames mined from
the first 1,600 people of birth_places_train.tsv and their zero-shot accuracy there, then
ensembles of the best of them, fitted on those 1,600 and checked on the last 400.

    python experiments/readout.py vanilla wiki.txt --reading_params_path pretrain.params \\
        [--finetune_corpus_path birth_places_train.tsv] [--sizes 1 2 3 5 8] [--eval_corpus_path birth_dev.tsv]

--eval_corpus_path scores, once, the ensemble of the size best on the last 400, fitted on all
the training people (what `run.py evaluate --readout frames --readout_frames N` does), beside
the controls: the handout's question on the same params, the most frequent training place,
and the people whose biography does not name their birthplace. --sizes N alone skips the
choice.
"""

import collections
import sys
import time

import src_path  # noqa: F401

# isort: split
import frames
import pipeline
from arguments import exit_status, params_parser, reading_config
from decoding import predict_places
from evaluation import held_out_pairs


def option_table(model, corpus, ensemble, pairs, device):
    """Each person's place written by each of the ensemble's writers, and {place: summed score}."""
    names = [frames.name_of(question) for question, _ in pairs]
    written = frames.candidates(model, corpus, names, ensemble.writers, ensemble.skips, device)
    options = [sorted({place for place in row if place}) for row in written]
    totals = frames.option_scores(model, corpus, names, options, ensemble.scorers, ensemble.end, device)
    return written, [dict(zip(places, scores)) for places, scores in zip(options, totals)]


def answers_of(written, scored, size):
    """The answers of the ensemble's first `size` writers (Ensemble.answers, from the table)."""
    answers = []
    for row, score in zip(written, scored):
        places = sorted({place for place in row[:size] if place})
        answers.append(frames.best_option(places, [score[place] for place in places])[0])
    return answers


def controls(model, corpus, training, held_out, size, device):
    """
    The ensemble of `size` writers fitted on all the training people, scored once on the
    held-out pairs, beside the handout's question on the same params and the most frequent
    training place; split by whether the person's biography names the place.
    """
    names = [frames.name_of(question) for question, _ in held_out]
    ensemble = frames.chosen(model, corpus, training, size, device)
    readout = [answer for answer, _ in ensemble.answers(model, corpus, names, device)]
    asked = predict_places(model, [question for question, _ in held_out], corpus.stoi, corpus.itos, device)
    commonest = collections.Counter(place for _, place in training).most_common(1)[0][0]
    bios = frames.biographies(corpus.data, names)
    named = [place in bios.get(name, "") for name, (_, place) in zip(names, held_out)]
    groups = [("all", [True] * len(held_out)), ("biography names the place", named)]
    groups.append(("biography does not name it", [not n for n in named]))
    print(f"\n| held-out people | frames readout ({size} writing) | the handout question | {commonest} for all |")
    print("| --- | --- | --- | --- |")
    for label, members in groups:
        chosen = [i for i, member in enumerate(members) if member]
        cells = []
        for answers in (readout, asked, [commonest] * len(held_out)):
            right = sum(answers[i] == held_out[i][1] for i in chosen)
            cells.append(f"{right} ({right / max(1, len(chosen)):.1%})")
        print(f"| {label} ({len(chosen)}) | {' | '.join(cells)} |")


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to read", prog="readout.py")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3, 5, 8], help="how many frames write")
    parser.add_argument("--eval_corpus_path", help="score the chosen ensemble on these pairs, once")
    args = parser.parse_args(argv)
    cfg = reading_config(args, finetune_corpus_path=args.finetune_corpus_path)

    def run():
        resolved, facts = pipeline.resolved(cfg)
        setup, device = pipeline.build(resolved, facts), pipeline.start_device(resolved)
        model, corpus = setup.model.to(device), setup.corpus
        pairs = held_out_pairs(cfg.finetune_corpus_path)
        fitting, checking = pairs[:1600], pairs[-400:]
        started = time.process_time()
        mined = frames.mine(corpus.data, fitting, frames.least_people(fitting))
        names = [frames.name_of(question) for question, _ in fitting]
        written = frames.candidates(model, corpus, names, [frame for frame, _ in mined.frames], mined.skips, device)
        print(f"date words: {' '.join(sorted(mined.skips))}\n")
        print(f"| frame | people (of {len(fitting)}) | scores | zero-shot, first 1,600 |\n| --- | --- | --- | --- |")
        alone = [frames.accuracy([row[i] for row in written], fitting) for i in range(len(mined.frames))]
        for i in sorted(range(len(alone)), key=lambda i: -alone[i]):
            frame, people = mined.frames[i]
            print(f"| `{frame}` | {people} | {'yes' if frame in mined.scorers else ''} | {alone[i]:.1%} |")
        print("\n| frames writing | chosen (in order) | first 1,600 | last 400 |\n| --- | --- | --- | --- |")
        results, largest = [], frames.chosen(model, corpus, fitting, max(args.sizes), device)
        split = {"first 1,600": fitting, "last 400": checking}
        tables = {label: option_table(model, corpus, largest, pairs, device) for label, pairs in split.items()}
        for size in args.sizes:  # the writers are chosen one at a time: each size's are the first of the largest's
            figures = [frames.accuracy(answers_of(*tables[label], size), pairs) for label, pairs in split.items()]
            writers = ", ".join(f"`{frame}`" for frame in largest.writers[:size])
            print(f"| {size} | {writers} | {figures[0]:.1%} | {figures[1]:.1%} |", flush=True)
            results.append((figures[1], size))
        print(f"\nCPU time: {time.process_time() - started:.0f} s")
        if args.eval_corpus_path:
            controls(model, corpus, pairs, held_out_pairs(args.eval_corpus_path), max(results)[1], device)

    return exit_status("readout.py", run)


if __name__ == "__main__":
    sys.exit(main())
