"""
One configuration of the demo-world study (docs/demo.md, docs/extraction.md): a generated
world, pretraining with the question pairs of the people finetuning will see as the
stages' "pairs", finetuning, and the figures the demo prints, as one JSON line.

    python experiments/demo_study.py --seed 0 --split tune [--variant rope] [--scratch]
        [--world "--n_train 100 ..."] [any recipe flag of run.py, e.g. --pretrain_epochs 100
        --pretrain_stages "corpus+pairs pair_copies=3" --finetune_people name] --out DIR

--split tune holds the last fifth of the world's training people out (their questions
never seen, scored after finetuning on the rest): the split to choose settings on.
--split dev finetunes on every training person and scores the dev people: for the chosen
settings, once. The recipe is the demo's (run.sh demo: RECIPES["demo"] with
table.demo.DEMO_VARIANT; the world is table.demo.DEMO_WORLD) with the flags given, so that a winner
can become it; the row names the fields that differ from it. Besides the accuracies, the
row says how many scored birthplaces the pretrained model completes from the biography and
from the name (readout.recall.PROBES), and how many questions it answers before any finetuning
(pretrained_only: with --readout frames, the readout itself, its frames mined from the
finetuned people's biographies, and no finetuning from pretrained params). The
pretrain+finetune answers' details go to DIR/finetune.params.details
(experiments/confidence.py --summarise reads them).
"""

import argparse
import dataclasses
import json
import shlex
import time
from pathlib import Path

import src_path  # noqa: F401

# isort: split
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.errors import RunError
from factgpt.corpus.reading import answered_pairs
from factgpt.readout.recall import PROBES, probed_recall
from factgpt.settings.command_line import add_recipe_flags
from factgpt.settings.recipe import Recipe
from factgpt.settings.recipes import RECIPES
from factgpt.settings.run_config import RunConfig
from factgpt.table import world
from factgpt.table.demo import DEMO_VARIANT, DEMO_WORLD
from london_baseline import most_frequent_place
from model import VARIANTS

DEMO = RECIPES["demo"]
PROBED = ("biography", "name")  # the recall probes of every row


def world_options(text):
    """world.py's flags (as run.sh's DEMO_WORLD holds them) as write_world's keyword arguments."""
    return world.parse_args(["FOLDER", *shlex.split(text)])[3]


def pairs_file(path, rows):
    Path(path).write_text("".join(f"{question}\t{place}\n" for question, place in rows), encoding="utf-8")
    return str(path)


def study(args, recipe):
    out = Path(args.out)
    try:
        files = world.write_world(out / "world", seed=args.seed, **world_options(args.world))
    except ValueError as e:  # the sizes make no world
        raise RunError(f"--world {args.world!r}: {e}") from None
    train = answered_pairs(files["birth_places_train.tsv"])
    if args.split == "tune":
        cut = len(train) - len(train) // 5
        seen, scored = train[:cut], train[cut:]
    else:
        seen, scored = train, answered_pairs(files["birth_dev.tsv"])
    seen_path, scored_path = pairs_file(out / "seen.tsv", seen), pairs_file(out / "scored.tsv", scored)
    common = dict(variant=args.variant, pretrain_corpus_path=files["wiki.txt"], recipe=recipe, seed=args.seed)
    common.update(device="cpu", tensorboard_root=str(out / "expt"))
    start = time.monotonic()
    pretrained = str(out / "pretrain.params")
    mixed = seen_path if recipe.trains_on_pairs() else None
    pipeline.pretrain(RunConfig("pretrain", writing_params_path=pretrained, mix_corpus_path=mixed, **common))
    pretrain_seconds = time.monotonic() - start
    setup, device = pipeline.load(RunConfig("evaluate", reading_params_path=pretrained, **common))
    recalls = {name: probed_recall(setup.model, setup.corpus, scored, device, PROBES[name]) for name in PROBED}

    def answered(params, finetune=True, **finetuning):
        """
        The scored people answered by params: pretrained ones by the recipe's readout; with
        finetune=True, finetuned there first and asked the question they were finetuned on.
        """
        reading = common
        if finetune:
            pipeline.finetune(
                RunConfig(
                    "finetune", writing_params_path=params, finetune_corpus_path=seen_path, **finetuning, **common
                )
            )
            reading = {**common, "recipe": dataclasses.replace(recipe, readout="question")}
        evaluation = pipeline.evaluate(
            RunConfig(
                "evaluate",
                reading_params_path=params,
                eval_corpus_path=scored_path,
                outputs_path=params + ".predictions",
                details_path=params + ".details",
                finetune_corpus_path=seen_path,  # where the frames readout mines its frames
                **reading,
            )  # fmt: skip
        )
        return evaluation.correct

    frequent = most_frequent_place(seen_path)
    scratch = answered(str(out / "scratch.params")) if args.scratch else None
    before_finetuning = answered(pretrained, finetune=False)  # mixed pairs can teach the questions already
    with_pretraining = None  # the frames readout is zero-shot: finetuning on the question unlearns it
    if recipe.readout == "question":
        with_pretraining = answered(str(out / "finetune.params"), reading_params_path=pretrained)
    changed = {
        f.name: getattr(recipe, f.name)
        for f in dataclasses.fields(recipe)
        if getattr(recipe, f.name) != getattr(DEMO, f.name)
    }
    if "pretrain_stages" in changed:
        changed["pretrain_stages"] = "; ".join(map(str, recipe.pretrain_stages))
    row = dict(
        seed=args.seed,
        split=args.split,
        variant=args.variant,
        recipe=changed,
        world=args.world,
        scored=len(scored),
        recalled="{}/{}".format(*recalls["biography"]),
        name_recalled="{}/{}".format(*recalls["name"]),
        pretrained_only=before_finetuning,
        pretrain_finetune=with_pretraining,
        finetune_only=scratch,
        most_frequent=sum(place == frequent for _, place in scored),
        pretrain_seconds=round(pretrain_seconds, 1),
        seconds=round(time.monotonic() - start, 1),
    )
    print(json.dumps(row), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="seeds the world and the training")
    parser.add_argument("--split", choices=["tune", "dev"], required=True)
    parser.add_argument("--variant", choices=VARIANTS, default=DEMO_VARIANT)
    parser.add_argument("--scratch", action="store_true", help="also finetune without pretraining")
    parser.add_argument("--world", default=DEMO_WORLD, help="world.py's flags (default: the demo's)")
    parser.add_argument("--out", required=True, help="folder for the world, params and predictions")
    add_recipe_flags(parser)
    args = parser.parse_args(argv)
    fields = {f.name for f in dataclasses.fields(Recipe)}
    return exit_status(
        "demo_study.py",
        lambda: study(args, dataclasses.replace(DEMO, **{k: v for k, v in vars(args).items() if k in fields})),
    )


if __name__ == "__main__":
    exit_process(main())
