"""
python src/london_baseline.py [EVAL_CORPUS_PATH] [--place PLACE | --most_frequent_in TRAIN_TSV]

The accuracy of answering one place to every question: "London" by default, as in
the handout, or the most frequent birthplace of a training file.
"""

import argparse
import collections
import sys

from factgpt.common.files import resolve_data_path
from factgpt.common.questions import read_question_file, score_line


def most_frequent_place(path):
    """The most common place of a question<TAB>place file (the first seen among ties)."""
    places = [place for _, _, place in read_question_file(path) if place is not None]
    if not places:
        raise ValueError(f"{path} has no places")
    return collections.Counter(places).most_common(1)[0][0]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("eval_corpus_path", nargs="?", default="birth_dev.tsv")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--place", default="London", help="the answer to give (default London)")
    choice.add_argument(
        "--most_frequent_in",
        metavar="TRAIN_TSV",
        help="answer the most frequent place of this file",
    )
    args = parser.parse_args(argv)
    path = resolve_data_path(args.eval_corpus_path)
    try:
        place = (
            most_frequent_place(resolve_data_path(args.most_frequent_in))
            if args.most_frequent_in
            else args.place
        )
        rows = read_question_file(path)
    except (OSError, ValueError) as e:
        print(f"london_baseline.py: error: {e}", file=sys.stderr)
        return 2
    if not rows or rows[0][2] is None:
        print(f"{path} has no answers to score")
    else:
        print(score_line(len(rows), sum(true_place == place for _, _, true_place in rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
