"""
Draw learning curves written by experiments/learning_curve.py: recall and held-out accuracy
against pretraining minutes, one line each per curve (and a dashed one for the recall from
the name alone, where the curve has it).

    python experiments/plot_curves.py curves/vanilla/curve.csv curves/perceiver/curve.csv --out docs/cpu_curve.png \
        [--baseline 6.25 --baseline_label "most frequent place"]

A curve is labelled with its folder's name unless --labels names them. Needs matplotlib
(in requirements-dev.txt).
"""

import argparse
import csv
import os
import sys

import src_path  # noqa: F401

# isort: split
from factgpt.common.files import atomic_write


def read_curve(path):
    """[(minutes, recall %, name recall % or None, accuracy %)] of a curve.csv, by minutes."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))

    def percent(row, count, of):
        return 100 * int(row[count]) / max(1, int(row[of])) if row.get(count) else None

    points = [
        (
            float(row["training_minutes"]),
            percent(row, "recalled", "probed"),
            percent(row, "name_recalled", "probed"),
            percent(row, "answered", "questions"),
        )
        for row in rows
    ]
    return sorted(points, key=lambda point: point[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("curves", nargs="+", help="curve.csv files of experiments/learning_curve.py")
    parser.add_argument("--labels", nargs="+", help="one label per curve (default: the folder's name)")
    parser.add_argument("--title", default="")
    parser.add_argument(
        "--baseline",
        type=float,
        metavar="PERCENT",
        help="a reference accuracy drawn across the accuracy panel (e.g. the most frequent place's)",
    )
    parser.add_argument("--baseline_label", default="baseline", help="its label in the legend")
    parser.add_argument("--out", required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    labels = args.labels or [os.path.basename(os.path.dirname(os.path.abspath(path))) for path in args.curves]
    if len(labels) != len(args.curves):
        parser.error(f"{len(args.curves)} curves but {len(labels)} labels")
    try:
        curves = [read_curve(path) for path in args.curves]
    except (OSError, KeyError, ValueError) as e:
        parser.error(f"cannot read a curve: {e}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        parser.error("drawing needs matplotlib: pip install -r requirements-dev.txt")

    figure, (recall_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for label, points in zip(labels, curves):
        minutes, recalls, name_recalls, accuracies = zip(*points) if points else ((), (), (), ())
        line = recall_axes.plot(minutes, recalls, marker="o", label=label)[0]
        if all(value is not None for value in name_recalls):
            recall_axes.plot(minutes, name_recalls, marker=".", linestyle="--", color=line.get_color())
        accuracy_axes.plot(minutes, accuracies, marker="o", label=label)
    if args.baseline is not None:
        accuracy_axes.axhline(args.baseline, color="gray", linestyle="--", label=args.baseline_label)
    recall_axes.set_title("birthplaces recalled from the biographies (dashed: from the names)")
    accuracy_axes.set_title("held-out questions answered after finetuning")
    for axes in (recall_axes, accuracy_axes):
        axes.set_xlabel("pretraining minutes")
        axes.set_ylabel("% of held-out people")
        axes.grid(alpha=0.3)
        axes.set_ylim(bottom=0)
    if args.title:
        figure.suptitle(args.title)
    figure.tight_layout()
    handles, legend_labels = accuracy_axes.get_legend_handles_labels()
    figure.legend(handles, legend_labels, loc="upper center", bbox_to_anchor=(0.5, 0), ncol=3)  # under the panels
    atomic_write(args.out, lambda f: figure.savefig(f, format="png", dpi=120, bbox_inches="tight"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
