"""
./run.sh demo: the experiment on a generated world, with no data and no GPU (docs/demo.md).

world.py writes the assignment's four files for generated people into DEMO_DIR/world. A model of
DEMO_VARIANT is pretrained on their biographies with the demo recipe, then asked the dev people's
questions in the biographies' own words (or, with --readout question in DEMO_FLAGS, finetuned and
asked the question), against the handout's question asked of the same params, finetuning without
pretraining and the most frequent training birthplace. The dev people's questions are never trained
on. DEMO_SEED seeds the world and the training; DEMO_WORLD (world.py's flags; by default
DEMO_WORLD below) and DEMO_FLAGS (run.py's) shrink it.
"""

import contextlib
import logging
import os
import shlex
import sys
from pathlib import Path

from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.questions import read_question_file, score_line
from factgpt.settings.run_config import RunConfig
from factgpt.table import world
from factgpt.table.tasks import Task, run_tasks
from london_baseline import most_frequent_place

logger = logging.getLogger(__name__)

# The demo's variant and world (./run.sh demo; docs/demo.md says why): world.py's flags for 50 dev
# people, so that accuracies move in steps of 2%; 25 training people, enough to mine frames from,
# and few, since every biography costs pretraining time; 60 places, so that the most frequent one
# is a weak baseline; five biographies a person
DEMO_VARIANT = "rope"
DEMO_WORLD = (
    "--n_train 25 --n_dev 50 --n_test 1 --n_places 60 --bios_per_person 5 --shuffle_sentences "
    "--full_names"
)


def task(name, argv, output):
    """A task of the demo, said as it starts."""
    return Task(name, argv, output, split="dev" if argv[0] == "evaluate" else None)


def demo(folder, seed, world_flags, flags):
    """
    The demo's tasks in this process, then its lines: what was recalled and asked, and its table.
    """
    w = folder / "world"
    logger.info("== demo world")
    with contextlib.redirect_stdout(sys.stderr):  # world.py's lines are progress, not the result
        world.main([str(w), *world_flags, "--seed", str(seed)])
    wiki, train, dev = (
        str(w / name) for name in ("wiki.txt", "birth_places_train.tsv", "birth_dev.tsv")
    )
    common = [DEMO_VARIANT, wiki, "--recipe", "demo", "--seed", str(seed), *flags]
    pretrained = str(folder / "pretrain.params")
    pretraining = task("pretraining on the biographies",
                       ["pretrain", *common, "--writing_params_path", pretrained],
                       pretrained)  # fmt: skip
    recipe = pretraining.cfg.recipe
    if recipe.trains_on_pairs():
        pretraining = task(
            "pretraining on the biographies, the training people's questions mixed in",
            [*pretraining.argv, "--mix_corpus_path", train], pretrained)  # fmt: skip
    run_tasks([pretraining])
    recalled, probed = pipeline.recall(RunConfig("evaluate", DEMO_VARIANT, wiki,
                                                 reading_params_path=pretrained,
                                                 eval_corpus_path=dev))  # fmt: skip

    def asked(name, params, readout, output, *more):
        argv = ["evaluate", *common, *more, "--readout", readout, "--reading_params_path", params]
        output = str(folder / output)
        return task(name, [*argv, "--eval_corpus_path", dev, "--outputs_path", output], output)

    before = asked("pretrained model, asked the handout's question", pretrained, "question",
                   "before_finetuning.dev.predictions")  # fmt: skip
    tasks, read, label = [before], pretrained, "pretrained, asked in the corpus's words"
    if recipe.readout == "question":
        read, label = str(folder / "finetune.params"), "pretrain+finetune"
        argv = ["finetune", *common, "--reading_params_path", pretrained]
        argv += ["--writing_params_path", read, "--finetune_corpus_path", train]
        tasks.append(task("finetuning the pretrained model", argv, read))
    answered = asked(
        label, read, recipe.readout, "pretrained.dev.predictions", "--finetune_corpus_path", train
    )
    scratch_params = str(folder / "scratch.params")
    scratch = task("finetuning without pretraining",
                   ["finetune", *common, "--writing_params_path", scratch_params,
                    "--finetune_corpus_path", train], scratch_params)  # fmt: skip
    scratch_asked = asked("finetune only", scratch_params, "question", "scratch.dev.predictions")
    run_tasks([*tasks, answered, scratch, scratch_asked])
    rows = read_question_file(dev)
    place = most_frequent_place(train)
    baseline = score_line(len(rows), sum(true_place == place for _, _, true_place in rows))
    scores = {name: score_line(s.record()["total"], s.record()["correct"])
              for name, s in [("before", before), (label, answered),
                              ("finetune only", scratch_asked)]}  # fmt: skip
    scores["most frequent training birthplace"] = baseline
    lines = [
        "",
        (
            "pretrained model, continuing the dev people's biographies: "
            f"{recalled} of {probed} birthplaces recalled"
        ),
        (
            "pretrained model, asked the handout's question before any finetuning: "
            f"{cut(scores.pop('before'))}"
        ),
        "",
        "| run | dev: correct out of total: accuracy |",
        "| --- | --- |",
        *(f"| {name} | {cut(score)} |" for name, score in scores.items()),
        "",
        "demo result: "
        + ", ".join(f"{name} {percent(score)}" for name, score in short_names(scores, label)),
    ]
    print("\n".join(lines))


def cut(score):
    """A score line without its "Correct: "."""
    return score.removeprefix("Correct: ")


def percent(score):
    return score.rsplit(": ", 1)[1]


def short_names(scores, label):
    """The result line's names for the table's rows."""
    names = {
        label: label,
        "finetune only": "finetune only",
        "most frequent training birthplace": "most-frequent-place",
    }
    return [(names[name], score) for name, score in scores.items()]


def main(argv):
    if argv:
        print(
            "run.sh: demo takes no arguments (DEMO_WORLD and DEMO_FLAGS shrink it, "
            "DEMO_SEED seeds it)",
            file=sys.stderr,
        )
        return 2
    folder = Path(os.environ.get("DEMO_DIR", "demo"))
    world_flags = shlex.split(os.environ.get("DEMO_WORLD", DEMO_WORLD))
    flags = shlex.split(os.environ.get("DEMO_FLAGS", ""))
    seed = int(os.environ.get("DEMO_SEED", "0"))
    logging.getLogger(__name__).setLevel(logging.INFO)
    return exit_status("run.sh demo", lambda: demo(folder, seed, world_flags, flags))
