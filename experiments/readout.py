"""
The frames readout (src/frames.py), studied on the training people: the frames mined from
the first 1,600 people of birth_places_train.tsv and their zero-shot accuracy there, then
ensembles of the best of them, fitted on those 1,600 and checked on the last 400.

    python experiments/readout.py vanilla wiki.txt --reading_params_path pretrain.params \\
        [--finetune_corpus_path birth_places_train.tsv] [--sizes 1 2 3 5 8] [--eval_corpus_path birth_dev.tsv]

--eval_corpus_path scores, once, the ensemble of the size best on the last 400, fitted on all
the training people (what `run.py evaluate --readout frames --readout_frames N` does).
"""

import sys
import time

import src_path  # noqa: F401

# isort: split
import frames
import pipeline
from arguments import exit_status, params_parser, reading_config
from evaluation import held_out_pairs


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
        people = dict(mined.frames)
        best = frames.ranked_frames(model, corpus, mined, fitting, device)
        print(f"date words: {' '.join(sorted(mined.skips))}\n")
        print(f"| frame | people (of {len(fitting)}) | scores | zero-shot, first 1,600 |\n| --- | --- | --- | --- |")
        for score, frame in best:
            print(f"| `{frame}` | {people[frame]} | {'yes' if frame in mined.scorers else ''} | {score:.1%} |")
        print("\n| frames writing | first 1,600 | last 400 |\n| --- | --- | --- |")
        results = []
        for size in args.sizes:
            ensemble = frames.Ensemble(tuple(frame for _, frame in best[:size]), mined.scorers, mined.skips)
            figures = []
            for split in (fitting, checking):
                answers = ensemble.answers(model, corpus, [frames.name_of(q) for q, _ in split], device)
                figures.append(frames.accuracy([answer for answer, _ in answers], split))
            print(f"| {size} | {figures[0]:.1%} | {figures[1]:.1%} |", flush=True)
            results.append((figures[1], size))
        print(f"\nCPU time: {time.process_time() - started:.0f} s")
        if args.eval_corpus_path:
            size = max(results)[1]
            ensemble = frames.chosen(model, corpus, pairs, size, device)
            held_out = held_out_pairs(args.eval_corpus_path)
            answers = ensemble.answers(model, corpus, [frames.name_of(q) for q, _ in held_out], device)
            figure = frames.accuracy([answer for answer, _ in answers], held_out)
            print(f"{args.eval_corpus_path}, {size} frames writing: {figure:.1%}")

    return exit_status("readout.py", run)


if __name__ == "__main__":
    sys.exit(main())
