"""
The controls beside a readout's figures on held-out people: its answers (predictions files
that `run.py evaluate` wrote, one column each) split by whether the person's biography in
the corpus names the birthplace, beside the same readout of the same model never pretrained
(the recipe's sizes, the seed's initial weights, fitted on the training people as evaluate
fits it) and London for everyone.

    python experiments/controls.py vanilla wiki.txt --reading_params_path pretrain.params \\
        --predictions dev.predictions [more.predictions ...] [--eval_corpus_path birth_dev.tsv] \\
        [--finetune_corpus_path birth_places_train.tsv] [--recipe cpu] [--seed 0]
"""

import dataclasses
import os
import tempfile
import time

import src_path  # noqa: F401

# isort: split
import pipeline
from arguments import exit_status, params_parser, reading_config
from config import RECIPES
from dataset import biographies, name_of
from distributed import exit_process
from errors import RunError
from inputs import answered_pairs, load_corpus, read_text
from params import save_params_with_metadata


def read_predictions(path, count):
    """The predictions file's lines, which must be one per held-out pair."""
    lines = read_text(path, "predictions").splitlines()
    if len(lines) != count:
        raise RunError(f"{path} has {len(lines)} predictions for {count} questions")
    return lines


def never_pretrained(cfg, folder):
    """The readout's answers from the model cfg's recipe and seed build before any training."""
    untrained = dataclasses.replace(cfg, function="pretrain", reading_params_path=None)
    setup = pipeline.build(untrained, None)
    path = os.path.join(folder, "untrained.params")
    save_params_with_metadata(setup.model, path, pipeline.params_metadata(untrained, setup.corpus))
    outputs = os.path.join(folder, "untrained.predictions")
    return pipeline.evaluate(dataclasses.replace(cfg, reading_params_path=path, outputs_path=outputs)).predictions


def main(argv=None):
    parser = params_parser(__doc__, "the params the predictions come from (their sizes)", prog="controls.py")
    parser.add_argument("--predictions", nargs="+", required=True, help="what evaluate answered, a line per question")
    parser.add_argument("--eval_corpus_path", default="birth_dev.tsv", help="the held-out pairs asked")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--recipe", choices=list(RECIPES), default="cpu", help="the readout's settings")
    parser.add_argument("--seed", type=int, default=0, help="the untrained model's initial weights")
    args = parser.parse_args(argv)
    cfg = reading_config(args, eval_corpus_path=args.eval_corpus_path, finetune_corpus_path=args.finetune_corpus_path)
    cfg = dataclasses.replace(cfg, recipe=RECIPES[args.recipe], recipe_name=args.recipe, seed=args.seed)

    def run():
        held_out = answered_pairs(cfg.eval_corpus_path, "held-out pairs")
        read = [read_predictions(path, len(held_out)) for path in args.predictions]
        started = time.process_time()
        with tempfile.TemporaryDirectory() as folder:
            untrained = never_pretrained(pipeline.resolved(cfg)[0], folder)
        corpus = load_corpus(cfg.pretrain_corpus_path)
        names = [name_of(question) for question, _ in held_out]
        bios = biographies(corpus.data, names)
        named = [place in bios.get(name, "") for name, (_, place) in zip(names, held_out)]
        groups = [("all", [True] * len(held_out)), ("biography names the place", named)]
        groups.append(("biography does not name it", [not n for n in named]))
        columns = [f"`{os.path.basename(path)}`" for path in args.predictions] + ["never pretrained", "London for all"]
        print(f"| held-out people | {' | '.join(columns)} |\n|{' --- |' * (len(columns) + 1)}")
        for label, members in groups:
            chosen = [i for i, member in enumerate(members) if member]
            cells = []
            for answers in (*read, untrained, ["London"] * len(held_out)):
                right = sum(answers[i] == held_out[i][1] for i in chosen)
                cells.append(f"{right} ({right / max(1, len(chosen)):.1%})")
            print(f"| {label} ({len(chosen)}) | {' | '.join(cells)} |")
        print(f"\nCPU time of the untrained readout: {time.process_time() - started:.0f} s")

    return exit_status("controls.py", run)


if __name__ == "__main__":
    exit_process(main())
