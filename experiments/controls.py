"""
The controls beside a readout's figures on held-out people: its answers (predictions files
that `run.py evaluate` wrote, one column each) split by whether the person's biography in
the corpus names the birthplace, beside the readout of a model never pretrained and London
for everyone. The untrained model has the sizes of the params read and the initial weights
of --seed (those its pretraining started from); --recipe and run.py's recipe flags (such as
--readout_biography) give the readout it is asked with (its writers and choice, fitted on the
training people as evaluate fits them), which should be the one the predictions were asked with.
Last, the gold control: the params read out on the held-out file as it is and with its places
shuffled, which must answer every question alike, since a readout never sees the places asked.

    python experiments/controls.py vanilla wiki.txt --reading_params_path pretrain.params \\
        --predictions dev.predictions [more.predictions ...] [--eval_corpus_path birth_dev.tsv] \\
        [--finetune_corpus_path birth_places_train.tsv] [--recipe cpu] [--readout_biography 2] [--seed 0]
"""

import dataclasses
import os
import random
import tempfile
import time

import src_path  # noqa: F401

# isort: split
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.errors import RunError
from factgpt.common.questions import question_place_pairs
from factgpt.corpus.reading import load_corpus, read_pairs
from factgpt.pipeline import start
from factgpt.readout import frames
from factgpt.settings.command_line import add_recipe_flags, given_recipe, params_parser, reading_config
from factgpt.settings.recipes import RECIPES
from factgpt.training.params import save_params_with_metadata
from readout import print_split


def read_predictions(path, count):
    """The predictions file's lines (an empty one is an empty answer), which must be one per held-out pair."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")[:-1]
    except (OSError, UnicodeDecodeError) as e:
        raise RunError(f"cannot read predictions {path}: {e}") from None
    if len(lines) != count:
        raise RunError(f"{path} has {len(lines)} predictions for {count} questions")
    return lines


def never_pretrained(cfg, folder):
    """The readout's answers from the model that cfg's sizes and seed build before any training."""
    untrained = dataclasses.replace(cfg, function="pretrain", reading_params_path=None)
    setup = start.build(untrained, None)
    path = os.path.join(folder, "untrained.params")
    save_params_with_metadata(setup.model, path, start.params_metadata(untrained, setup.corpus))
    outputs = os.path.join(folder, "untrained.predictions")
    return pipeline.evaluate(dataclasses.replace(cfg, reading_params_path=path, outputs_path=outputs)).predictions


def gold_shuffled(cfg, rows, folder):
    """
    How many of the params' answers stay the same when the held-out file's places are shuffled: all
    of them, unless the gold reaches the readout.
    """
    places = [place for _, _, place in rows]
    random.Random(0).shuffle(places)
    shuffled = os.path.join(folder, "shuffled.tsv")
    with open(shuffled, "w", encoding="utf-8") as f:
        f.writelines(f"{question}\t{place}\n" for (_, question, _), place in zip(rows, places))
    answers = [
        pipeline.evaluate(dataclasses.replace(cfg, eval_corpus_path=path, outputs_path=os.path.join(folder, name)))
        for path, name in ((cfg.eval_corpus_path, "as.predictions"), (shuffled, "shuffled.predictions"))
    ]
    return sum(a == b for a, b in zip(answers[0].predictions, answers[1].predictions))


def main(argv=None):
    parser = params_parser(__doc__, "the params the predictions come from (their sizes)", prog="controls.py")
    parser.add_argument("--predictions", nargs="+", required=True, help="what evaluate answered, a line per question")
    parser.add_argument("--eval_corpus_path", default="birth_dev.tsv", help="the held-out pairs asked")
    parser.add_argument("--finetune_corpus_path", default="birth_places_train.tsv", help="the training pairs")
    parser.add_argument("--recipe", choices=list(RECIPES), default="cpu", help="the readout's settings")
    parser.add_argument("--seed", type=int, default=0, help="the untrained model's initial weights")
    add_recipe_flags(parser)
    args = parser.parse_args(argv)
    recipe, given = given_recipe(parser, args, RECIPES[args.recipe])
    cfg = reading_config(args, eval_corpus_path=args.eval_corpus_path, finetune_corpus_path=args.finetune_corpus_path)
    cfg = dataclasses.replace(cfg, recipe=recipe, recipe_name=args.recipe, given=frozenset(given), seed=args.seed)

    def run():
        rows = read_pairs(cfg.eval_corpus_path, "held-out pairs", question_place_pairs)
        frames.names_of(rows, cfg.eval_corpus_path)  # a question of another form is refused before the readout
        held_out = [(question, place) for _, question, place in rows]
        columns = {f"`{os.path.basename(path)}`": read_predictions(path, len(held_out)) for path in args.predictions}
        started = time.process_time()
        with tempfile.TemporaryDirectory() as folder:
            columns["never pretrained"] = never_pretrained(start.with_resolved_recipe(cfg)[0], folder)
            seconds = time.process_time() - started
            columns["London for all"] = ["London"] * len(held_out)
            print_split(load_corpus(cfg.pretrain_corpus_path), held_out, columns)
            print(f"\nCPU time of the untrained model's readout: {seconds:.0f} s")
            same = gold_shuffled(start.with_resolved_recipe(cfg)[0], rows, folder)
            print(f"the held-out places shuffled: {same} of {len(rows)} answers unchanged")

    return exit_status("controls.py", run)


if __name__ == "__main__":
    exit_process(main())
