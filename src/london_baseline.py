"""python src/london_baseline.py [EVAL_CORPUS_PATH]: the accuracy of answering "London" to every question."""

import argparse

from utils import evaluate_places, resolve_data_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("eval_corpus_path", nargs="?", default="birth_dev.tsv")
    args = parser.parse_args(argv)
    path = resolve_data_path(args.eval_corpus_path)
    with open(path, encoding="utf-8") as f:
        n_questions = sum(1 for line in f if line.strip())
    total, correct = evaluate_places(path, ["London"] * n_questions)
    if total == 0:
        print(f"{path} has no answers to score")
    else:
        print(f"Correct: {correct} out of {total}: {correct / total * 100}%")


if __name__ == "__main__":
    main()
