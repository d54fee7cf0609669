"""
A recipe's learning curve: what pretraining has put in the model, and what finetuning
gets out of it, against the minutes spent pretraining.

    python experiments/learning_curve.py pretrain vanilla wiki.txt --recipe cpu --every 10 \\
        --finetune_corpus_path train1600.tsv --eval_corpus_path val400.tsv --out curves/vanilla [run.py flags]

It pretrains as run.py would with these flags, saving the params every --every epochs
(hooks.save_snapshots). Then, for every snapshot, it counts the birthplaces of the held-out
people (--eval_corpus_path) that the model completes from their biographies (recall), from
their names alone (name recall) and from their questions before finetuning (readout.recall.PROBES;
the same people each), finetunes a copy on --finetune_corpus_path with the recipe's finetuning and counts the
held-out questions it answers (accuracy). It writes <out>/curve.csv, one row per snapshot,
and prints the table; experiments/plot_curves.py draws it. The held-out people must not be
among the finetuning pairs. Pretraining is skipped when <out>/pretrain.params exists (its
snapshots are scored again).
"""

import csv
import dataclasses
import io
import os
import sys
from pathlib import Path

import src_path  # noqa: F401

# isort: split
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.files import atomic_write
from factgpt.corpus.reading import answered_pairs
from factgpt.readout.recall import PROBES
from factgpt.settings.command_line import build_parser, parse, positive_int
from factgpt.training.params import read_metadata
from hooks import save_snapshots, snapshots

COLUMNS = ["epochs", "training_minutes", "recalled", "name_recalled", "question_recalled", "probed"]
COLUMNS += ["answered", "questions"]


def accuracy(cfg, snapshot, epochs, out):
    """(answered, questions): held-out questions answered after finetuning a copy of the snapshot."""
    finetuned = os.path.join(out, f"finetune.epoch{epochs}.params")
    common = dict(reading_params_path=snapshot, resume=False, keep_checkpoint=False)
    pipeline.finetune(dataclasses.replace(cfg, function="finetune", writing_params_path=finetuned, **common))
    evaluation = pipeline.evaluate(
        dataclasses.replace(
            cfg,
            function="evaluate",
            reading_params_path=finetuned,
            outputs_path=os.path.join(out, f"finetune.epoch{epochs}.predictions"),
        )
    )
    for leftover in (finetuned, finetuned + ".json"):
        os.remove(leftover)  # a finetuned copy per snapshot would fill the disk; its predictions stay
    return evaluation.correct, evaluation.total


def curve(cfg, every, out):
    """Pretrain with snapshots (unless done), score every snapshot, write <out>/curve.csv."""
    answered_pairs(cfg.eval_corpus_path)  # a bad file is said before pretraining
    Path(out).mkdir(parents=True, exist_ok=True)
    params = cfg.writing_params_path
    if os.path.exists(params):
        print(f"{params} exists: scoring its snapshots without pretraining again", file=sys.stderr)
    else:
        pipeline.pretrain(cfg, [save_snapshots(every)])
    cfg = dataclasses.replace(cfg, mix_corpus_path=None)  # the mixed pairs are pretraining's alone
    rows = []
    for epochs, snapshot in snapshots(params):
        probed_cfg = dataclasses.replace(cfg, reading_params_path=snapshot)
        recalls = {name: pipeline.recall(probed_cfg, prompt) for name, prompt in PROBES.items()}
        (recalled, probed), (by_name, _), (by_question, _) = recalls.values()
        answered, questions = accuracy(cfg, snapshot, epochs, out)
        minutes = read_metadata(snapshot)["training_seconds"] / 60
        values = [epochs, round(minutes, 3), recalled, by_name, by_question, probed, answered, questions]
        rows.append(dict(zip(COLUMNS, values)))
        print(
            f"epoch {epochs} ({minutes:.1f} min): of {probed} recalls {recalled} from the biography, "
            f"{by_name} from the name, {by_question} from the question; answers {answered} of {questions} "
            f"({answered / max(1, questions):.1%}) after finetuning",
            flush=True,
        )
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(os.path.join(out, "curve.csv"), lambda f: f.write(table.getvalue().encode("utf-8")))


def main(argv=None):
    parser = build_parser("learning_curve.py", __doc__)
    parser.add_argument("--every", type=positive_int, default=10, help="epochs between snapshots (default 10)")
    parser.add_argument("--out", required=True, help="folder for the params, predictions and curve.csv")
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg, args = parse(argv, parser)
    if cfg.function != "pretrain" or not cfg.finetune_corpus_path or not cfg.eval_corpus_path:
        parser.error("takes a pretrain command line with --finetune_corpus_path and --eval_corpus_path")
    cfg.writing_params_path = os.path.join(args.out, "pretrain.params")
    return exit_status("learning_curve.py", lambda: curve(cfg, args.every, args.out))


if __name__ == "__main__":
    exit_process(main())
