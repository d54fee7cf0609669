"""
One configuration of the demo-world study (docs/demo.md): a generated world, pretraining
(optionally mixed with the question pairs of the people finetuning will see), finetuning,
and the figures the demo prints, as one JSON line.

    python experiments/demo_study.py --seed 0 --split tune [--variant rope] [--epochs 150] [--mix_copies K]
        [--n_layer 4] [--n_head 4] [--n_embd 128] [--decay_epochs 200] [--max_shift 13] [--finetune_lr 3e-5]
        [--finetune_epochs 10] [--finetune_frozen mlp] [--finetune_recalled] [--finetune_lm_weight 0 0.5 ...]
        [--scratch] [--world "--n_train 100 ..."] --out DIR

--split tune holds the last fifth of the world's training people out (their questions
never seen, scored after finetuning on the rest): the split to choose settings on.
--split dev finetunes on every training person and scores the dev people: for the chosen
settings, once. The defaults are the demo's (run.sh demo: config.RECIPES["demo"] with
config.DEMO_VARIANT; the world is world.DEMO_WORLD), so that a winner can become it.
--finetune_recalled finetunes only on the seen people whose birthplace the pretrained model
completes from their biography. Several --finetune_lm_weight values finetune the one
pretrained model once each (a row each); the pretrain+finetune answers' details go to
DIR/finetune*.params.details (experiments/confidence.py --summarise reads them). The row
also says how many the pretrained model answers before any finetuning (pretrained_only).
"""

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

import src_path  # noqa: F401

# isort: split
import pipeline
import world
from arguments import exit_status
from config import DEMO_VARIANT, RECIPES, RunConfig
from dataset import question_place_pairs
from decoding import recalled_places
from inputs import read_pairs
from london_baseline import most_frequent_place
from model import VARIANTS

DEMO = RECIPES["demo"]


def world_options(text):
    """world.py's flags (as run.sh's DEMO_WORLD holds them) as write_world's keyword arguments."""
    return world.parse_args(["FOLDER", *shlex.split(text)])[3]


def pairs_file(path, rows):
    Path(path).write_text("".join(f"{question}\t{place}\n" for question, place in rows), encoding="utf-8")
    return str(path)


def study(args):
    out = Path(args.out)
    files = world.write_world(out / "world", seed=args.seed, **world_options(args.world))
    read = lambda path: [(q, p) for _, q, p in read_pairs(path, "pairs", question_place_pairs)]  # noqa: E731
    train = read(files["birth_places_train.tsv"])
    if args.split == "tune":
        cut = len(train) - len(train) // 5
        seen, scored = train[:cut], train[cut:]
    else:
        seen, scored = train, read(files["birth_dev.tsv"])
    seen_path, scored_path = pairs_file(out / "seen.tsv", seen), pairs_file(out / "scored.tsv", scored)
    recipe = dataclasses.replace(
        DEMO,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_embd=args.n_embd,
        pretrain_epochs=args.epochs,
        decay_epochs=args.decay_epochs,
        finetune_lr=args.finetune_lr,
        finetune_epochs_from_pretrained=args.finetune_epochs,
        finetune_frozen=args.finetune_frozen,
        max_shift=args.max_shift,
    )
    common = dict(variant=args.variant, pretrain_corpus_path=files["wiki.txt"], recipe=recipe, seed=args.seed)
    common.update(device="cpu", tensorboard_root=str(out / "expt"))
    start = time.monotonic()
    pretrained = str(out / "pretrain.params")
    mix = pairs_file(out / "mixed.tsv", seen * args.mix_copies) if args.mix_copies else None
    pipeline.pretrain(RunConfig("pretrain", writing_params_path=pretrained, mix_corpus_path=mix, **common))
    setup = pipeline.build(RunConfig("evaluate", reading_params_path=pretrained, **common))
    corpus = setup.corpus
    known = recalled_places(setup.model, corpus.data, scored + seen, corpus.stoi, corpus.itos, "cpu")
    recalled, probed = sum(r is True for r in known[: len(scored)]), sum(r is not None for r in known[: len(scored)])
    finetuned_on = seen_path
    if args.finetune_recalled:
        recalled_seen = [pair for pair, r in zip(seen, known[len(scored) :]) if r]
        finetuned_on = pairs_file(out / "seen_recalled.tsv", recalled_seen)

    def answered(params, cfg_recipe=recipe, finetune=True, **finetuning):
        """The scored people answered by params, after finetuning them there first (finetune=True)."""
        run = dict(common, recipe=cfg_recipe)
        if finetune:
            pipeline.finetune(RunConfig("finetune", writing_params_path=params, finetune_corpus_path=finetuned_on,
                                        **finetuning, **run))  # fmt: skip
        evaluation = pipeline.evaluate(
            RunConfig(
                "evaluate",
                reading_params_path=params,
                eval_corpus_path=scored_path,
                outputs_path=params + ".predictions",
                details_path=params + ".details",
                **run,
            )  # fmt: skip
        )
        return evaluation.correct

    frequent = most_frequent_place(seen_path)
    scratch = None
    if args.scratch:
        scratch = answered(str(out / "scratch.params"))
    before_finetuning = answered(pretrained, finetune=False)  # mixed pairs can teach the questions already
    for weight in args.finetune_lm_weight:
        suffix = f"_lm{weight:g}" if len(args.finetune_lm_weight) > 1 else ""
        with_weight = dataclasses.replace(recipe, finetune_lm_weight=weight)
        with_pretraining = answered(str(out / f"finetune{suffix}.params"), with_weight, reading_params_path=pretrained)
        row = dict(
            seed=args.seed,
            split=args.split,
            variant=args.variant,
            epochs=args.epochs,
            decay_epochs=recipe.decay_epochs,
            n_layer=args.n_layer,
            n_head=args.n_head,
            n_embd=args.n_embd,
            mix_copies=args.mix_copies,
            max_shift=args.max_shift,
            finetune_lr=args.finetune_lr,
            finetune_epochs=args.finetune_epochs,
            finetune_frozen=args.finetune_frozen,
            finetune_lm_weight=weight,
            finetuned_on=len(read_pairs(finetuned_on, "pairs", question_place_pairs)),
            world=args.world,
            scored=len(scored),
            recalled=f"{recalled}/{probed}",
            pretrained_only=before_finetuning,
            pretrain_finetune=with_pretraining,
            finetune_only=scratch,
            most_frequent=sum(place == frequent for _, place in scored),
            seconds=round(time.monotonic() - start, 1),
        )
        print(json.dumps(row), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="seeds the world and the training")
    parser.add_argument("--split", choices=["tune", "dev"], required=True)
    parser.add_argument("--variant", choices=VARIANTS, default=DEMO_VARIANT)
    parser.add_argument("--epochs", type=int, default=DEMO.pretrain_epochs, help="pretraining epochs")
    parser.add_argument(
        "--decay_epochs",
        type=int,
        default=DEMO.decay_epochs,
        help="the learning rate's cosine half period in epochs",
    )
    parser.add_argument("--n_layer", type=int, default=DEMO.n_layer, help="model depth")
    parser.add_argument("--n_head", type=int, default=DEMO.n_head, help="attention heads")
    parser.add_argument("--n_embd", type=int, default=DEMO.n_embd, help="model width")
    parser.add_argument(
        "--mix_copies",
        type=int,
        default=1,
        metavar="K",
        help="mix K copies of the seen people's questions into every pretraining epoch (default 1; 0: none)",
    )
    parser.add_argument("--max_shift", type=int, default=DEMO.max_shift, help="examples shifted by 0..N pads")
    parser.add_argument("--finetune_lr", type=float, default=DEMO.finetune_lr)
    parser.add_argument("--finetune_epochs", type=int, default=DEMO.finetune_epochs_from_pretrained)
    parser.add_argument("--finetune_frozen", default="", help="parts finetuning leaves frozen (a recipe field)")
    parser.add_argument(
        "--finetune_recalled", action="store_true", help="finetune only on the seen people the model recalls"
    )
    parser.add_argument(
        "--finetune_lm_weight", type=float, nargs="+", default=[0.0], help="GPT-1's auxiliary loss weight(s)"
    )
    parser.add_argument("--scratch", action="store_true", help="also finetune without pretraining")
    parser.add_argument("--world", default=world.DEMO_WORLD, help="world.py's flags (default: the demo's)")
    parser.add_argument("--out", required=True, help="folder for the world, params and predictions")
    args = parser.parse_args(argv)
    return exit_status("demo_study.py", lambda: study(args))


if __name__ == "__main__":
    sys.exit(main())
