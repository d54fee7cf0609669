"""
A recipe's learning curve: what pretraining has put in the model, and what finetuning
gets out of it, against the minutes spent pretraining.

    python src/learning_curve.py vanilla wiki.txt --recipe cpu --every 10 \\
        --finetune_corpus_path train1600.tsv --eval_corpus_path val400.tsv --out curves/vanilla [-- run.py flags]

It pretrains with run.py (the flags after -- go to that pretraining), saving the params
every --every epochs (run.py --save_every). Then, for every saved snapshot, it counts
the birthplaces of the held-out people (--eval_corpus_path) that the model completes
from their biographies (recall), finetunes a copy on --finetune_corpus_path with the
recipe's finetuning and counts the held-out questions it answers (accuracy). It writes
<out>/curve.csv, one row per snapshot, and prints the table; src/plot_curves.py draws it.
The held-out people must not be among the finetuning pairs. Pretraining is skipped when
<out>/pretrain.params exists (its snapshots are scored again).
"""

import argparse
import csv
import io
import os
import re
import sys
from pathlib import Path

import run
from checkpoint import load_fitting_params, read_facts
from config import BLOCK_SIZE, HANDOUT, RECIPES
from dataset import CharCorruptionDataset, read_question_file
from decoding import birthplace_recall
from distributed import pick_device
from files import atomic_write, resolve_data_path
from model import GPT, VARIANTS, variant_config

COLUMNS = ["epochs", "training_minutes", "recalled", "probed", "answered", "questions"]


def snapshots(params_path):
    """
    [(epochs, path)] of the params run.py --save_every wrote beside params_path, by epoch
    (with a shifted pretraining stage, the first stage's are <params_path>.unshifted.epoch<E>).
    """
    folder, name = os.path.split(params_path)
    found = []
    for entry in os.listdir(folder or "."):
        match = re.fullmatch(re.escape(name) + rf"(?:{re.escape(run.UNSHIFTED_SUFFIX)})?\.epoch(\d+)", entry)
        if match:
            found.append((int(match.group(1)), os.path.join(folder, entry)))
    return sorted(found)


def recall(args, corpus, snapshot, pairs, device, prompt=None):
    """(recalled, probed): held-out birthplaces the snapshot completes from their biographies in `corpus`."""
    facts = read_facts(snapshot) or {}  # params without facts (the course's code wrote them) are the handout's model
    sizes = HANDOUT.model_sizes() | {
        key: facts[key] for key in ("n_layer", "n_head", "n_embd", "bottleneck_dim") if key in facts
    }
    model = GPT(variant_config(args.variant, corpus.vocab_size, BLOCK_SIZE, **sizes))
    load_fitting_params(model, snapshot, args.variant, args.pretrain_corpus_path, "evaluate")
    return birthplace_recall(model.to(device), corpus.data, pairs, corpus.stoi, corpus.itos, device, prompt)


def accuracy(args, snapshot, epochs, pairs):
    """(answered, questions): held-out (question, place) pairs answered after finetuning a copy of the snapshot."""
    finetuned = os.path.join(args.out, f"finetune.epoch{epochs}.params")
    predictions = os.path.join(args.out, f"finetune.epoch{epochs}.predictions")
    common = [args.variant, args.pretrain_corpus_path, "--recipe", args.recipe]
    finetune = ["finetune", *common, "--reading_params_path", snapshot, "--writing_params_path", finetuned]
    if run.main([*finetune, "--finetune_corpus_path", args.finetune_corpus_path]) != 0:
        raise SystemExit(f"learning_curve.py: finetuning {snapshot} failed")
    evaluate = ["evaluate", *common, "--reading_params_path", finetuned, "--outputs_path", predictions]
    if run.main([*evaluate, "--eval_corpus_path", args.eval_corpus_path]) != 0:
        raise SystemExit(f"learning_curve.py: evaluating {finetuned} failed")
    with open(predictions, encoding="utf-8") as f:
        answers = f.read().split("\n")[:-1]
    for leftover in (finetuned, finetuned + ".json"):
        os.remove(leftover)  # a finetuned copy per snapshot would fill the disk; its predictions stay
    return sum(answer == place for answer, (_, place) in zip(answers, pairs)), len(pairs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    ours, run_flags = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("pretrain_corpus_path")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="handout")
    parser.add_argument("--every", type=int, default=10, help="epochs between snapshots (default 10)")
    parser.add_argument("--finetune_corpus_path", required=True, help="question<TAB>place pairs to finetune on")
    parser.add_argument("--eval_corpus_path", required=True, help="held-out question<TAB>place pairs")
    parser.add_argument("--out", required=True, help="folder for the params, predictions and curve.csv")
    args = parser.parse_args(ours)
    if args.every < 1:
        parser.error("--every must be a positive integer")
    args.pretrain_corpus_path = str(resolve_data_path(args.pretrain_corpus_path))
    try:
        pairs = [(question, place) for _, question, place in read_question_file(args.eval_corpus_path)]
    except (OSError, ValueError) as e:
        parser.error(f"cannot read --eval_corpus_path: {e}")
    if any(place is None for _, place in pairs):
        parser.error(f"--eval_corpus_path {args.eval_corpus_path}: the held-out questions need their places")
    Path(args.out).mkdir(parents=True, exist_ok=True)

    params = os.path.join(args.out, "pretrain.params")
    if os.path.exists(params):
        print(f"{params} exists: scoring its snapshots without pretraining again", file=sys.stderr)
    else:
        pretrain = ["pretrain", args.variant, args.pretrain_corpus_path, "--writing_params_path", params]
        if run.main([*pretrain, "--recipe", args.recipe, "--save_every", str(args.every), *run_flags]) != 0:
            return 2
    with open(args.pretrain_corpus_path, encoding="utf-8") as f:
        corpus = CharCorruptionDataset(f.read(), BLOCK_SIZE)
    device = pick_device("auto")
    rows = []
    for epochs, snapshot in snapshots(params):
        recalled, probed = recall(args, corpus, snapshot, pairs, device)
        answered, questions = accuracy(args, snapshot, epochs, pairs)
        minutes = read_facts(snapshot)["training_seconds"] / 60
        rows.append(dict(zip(COLUMNS, [epochs, round(minutes, 3), recalled, probed, answered, questions])))
        print(
            f"epoch {epochs} ({minutes:.1f} min): recalls {recalled} of {probed} ({recalled / max(1, probed):.1%}), "
            f"answers {answered} of {questions} ({answered / max(1, questions):.1%})",
            flush=True,
        )
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(os.path.join(args.out, "curve.csv"), lambda f: f.write(table.getvalue().encode("utf-8")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
