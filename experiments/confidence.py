"""
Retrieved or made up? How sure a finetuned model is of each answer, and whether that
separates its right answers from its wrong ones.

    python experiments/confidence.py vanilla wiki.txt --reading_params_path finetune.params \\
        --eval_corpus_path birth_dev.tsv --details_path dev.details.jsonl [--plot dev.confidence.png]

Answers the questions as `run.py evaluate` does (the same answers, scored in the same
decoding: pipeline.evaluate with a details_path) and writes the details file, a line of
JSON per question (decoding.Answer: the answer, the log-probability of its characters and
the closing mask, its lowest character probability, whether it was closed, right or
wrong). Then prints, for a file with answers: the accuracy by confidence quintile (the
answer's log-probability), the area under the accuracy-coverage curve (answer only the
most confident part of the questions: how accurate is that part?), and the AUROC, the
chance that a right answer is more confident than a wrong one (0.5: no separation).
--plot draws accuracy against coverage and a reliability diagram (needs matplotlib).
--summarise DETAILS reads an existing details file instead of answering.

--pretrained_params P asks where the right answers come from: which of the questions'
birthplaces the pretrained model P completes from the person's biography (decoding.
recalled_places), and the accuracy and median confidence of the answers for the people it
recalls, for those it does not, and for those it cannot be asked about.
"""

import argparse
import json
import math
import statistics

import src_path  # noqa: F401

# isort: split
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import DEVICES, exit_process
from factgpt.common.errors import RunError
from factgpt.common.files import atomic_write
from factgpt.common.questions import score_line
from factgpt.corpus.reading import answered_pairs
from factgpt.readout.decoding import recalled_places
from factgpt.settings.run_config import RunConfig
from model import VARIANTS

QUINTILES = 5
RELIABILITY_BINS = 10


def read_details(path):
    """[(log-probability, right)] of a details file's answered questions that were scored."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            row = json.loads(line)
            if "correct" not in row:
                raise ValueError(f"{path} line {lineno}: no right or wrong (the questions had no answers)")
            if row["logprob"] is not None:
                rows.append((row["logprob"], row["correct"]))
    return rows


def by_confidence(rows):
    """The rows, most confident first (ties keep the file's order)."""
    return sorted(rows, key=lambda row: -row[0])


def quintiles(rows):
    """[(lowest log-probability, highest, answers, right)] of five near-equal groups, most confident first."""
    ranked = by_confidence(rows)
    groups = []
    for i in range(QUINTILES):
        group = ranked[len(ranked) * i // QUINTILES : len(ranked) * (i + 1) // QUINTILES]
        if group:
            groups.append((group[-1][0], group[0][0], len(group), sum(right for _, right in group)))
    return groups


def coverage_curve(rows):
    """[(coverage, accuracy)]: answering only the k most confident questions, k = 1..n."""
    curve, right = [], 0
    for k, (_, correct) in enumerate(by_confidence(rows), 1):
        right += correct
        curve.append((k / len(rows), right / k))
    return curve


def area_under_coverage(rows):
    """The mean accuracy over coverages 1/n..1 (the accuracy itself when confidence says nothing)."""
    curve = coverage_curve(rows)
    return sum(accuracy for _, accuracy in curve) / max(1, len(curve))


def auroc(rows):
    """The chance that a right answer has a higher log-probability than a wrong one (ties count half)."""
    right = [logprob for logprob, correct in rows if correct]
    wrong = [logprob for logprob, correct in rows if not correct]
    if not right or not wrong:
        return math.nan
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))


def reliability(rows):
    """[(mean probability of the answer, accuracy, answers)] in RELIABILITY_BINS equal bins of the probability."""
    bins = [[] for _ in range(RELIABILITY_BINS)]
    for logprob, correct in rows:
        probability = math.exp(logprob)
        bins[min(RELIABILITY_BINS - 1, int(probability * RELIABILITY_BINS))].append((probability, correct))
    return [(sum(p for p, _ in b) / len(b), sum(c for _, c in b) / len(b), len(b)) for b in bins if b]


def summary_lines(rows):
    """The printed summary of [(log-probability, right)]."""
    right = sum(correct for _, correct in rows)
    lines = [f"{len(rows)} answers, {right} right ({right / max(1, len(rows)):.1%})"]
    lines.append("confidence quintile | log-probability | right")
    for i, (low, high, answers, correct) in enumerate(quintiles(rows), 1):
        lines.append(f"{i} | {low:.2f} to {high:.2f} | {correct} of {answers} ({correct / answers:.1%})")
    lines.append(f"area under the accuracy-coverage curve: {area_under_coverage(rows):.3f}")
    lines.append(f"AUROC (right vs wrong by log-probability): {auroc(rows):.3f}")
    return lines


def recall_lines(cfg, questions_path, answers, pretrained_params):
    """
    The printed comparison of the answers (decoding.Answer, in the file's order) for the
    people whose birthplace the pretrained params recall from their biography and the others.
    """
    pairs = answered_pairs(questions_path, "questions")
    pretrained = RunConfig("evaluate", cfg.variant, cfg.pretrain_corpus_path, reading_params_path=pretrained_params,
                           device=cfg.device)  # fmt: skip
    setup, device = pipeline.load(pretrained)
    corpus = setup.corpus
    known = recalled_places(setup.model, corpus, pairs, device)
    lines = ["the pretrained model, continuing the biography | people | right | median log-probability"]
    for label, value in (("recalls the birthplace", True), ("does not", False), ("cannot be asked", None)):
        chosen = [(answer, place) for answer, (_, place), k in zip(answers, pairs, known) if k is value]
        if chosen:
            right = sum(answer.text == place for answer, place in chosen)
            median = statistics.median(answer.logprob for answer, _ in chosen)
            lines.append(f"{label} | {len(chosen)} | {right} ({right / len(chosen):.1%}) | {median:.2f}")
    return lines


def plot(rows, path, title=""):
    """Accuracy against coverage, and the reliability diagram, side by side in a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (coverage_axes, reliability_axes) = plt.subplots(1, 2, figsize=(10, 4))
    coverage, accuracy = zip(*coverage_curve(rows))
    coverage_axes.plot(coverage, accuracy)
    coverage_axes.axhline(accuracy[-1], color="gray", linestyle="--", label="all answers")
    coverage_axes.set_xlabel("coverage (the most confident part of the questions)")
    coverage_axes.set_ylabel("accuracy")
    coverage_axes.legend()
    predicted, observed, counts = zip(*reliability(rows))
    reliability_axes.plot([0, 1], [0, 1], color="gray", linestyle="--", label="calibrated")
    reliability_axes.scatter(predicted, observed, s=[10 + 2 * c for c in counts], label="bins (size: answers)")
    reliability_axes.set_xlabel("the model's probability of its answer")
    reliability_axes.set_ylabel("accuracy")
    reliability_axes.legend()
    for axes in (coverage_axes, reliability_axes):
        axes.set_xlim(0, 1)
        axes.set_ylim(0, 1.02)
        axes.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    atomic_write(path, lambda f: figure.savefig(f, format="png", dpi=120))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variant", nargs="?", choices=VARIANTS)
    parser.add_argument("pretrain_corpus_path", nargs="?")
    parser.add_argument("--reading_params_path", help="the finetuned params")
    parser.add_argument("--eval_corpus_path", help="question<TAB>place pairs (or questions alone: details only)")
    parser.add_argument("--details_path", help="where to write the details file")
    parser.add_argument(
        "--outputs_path", help="where to write the predictions (default: the details path + .predictions)"
    )
    parser.add_argument("--summarise", metavar="DETAILS", help="summarise this details file instead of answering")
    parser.add_argument("--plot", metavar="PNG", help="also draw accuracy-coverage and reliability")
    parser.add_argument("--pretrained_params", help="also compare the answers for the people these params recall")
    parser.add_argument("--title", default="", help="the picture's title")
    parser.add_argument("--device", choices=DEVICES, default="auto")
    args = parser.parse_args(argv)
    answering = ("variant", "pretrain_corpus_path", "reading_params_path", "eval_corpus_path", "details_path")
    if not args.summarise and not all(getattr(args, name) for name in answering):
        parser.error("give VARIANT PRETRAIN_CORPUS_PATH --reading_params_path --eval_corpus_path --details_path, "
                     "or --summarise DETAILS")  # fmt: skip
    if args.summarise and args.pretrained_params:
        parser.error("--pretrained_params compares fresh answers: leave --summarise out")

    def run():
        if args.summarise:
            try:
                rows = read_details(args.summarise)
            except (OSError, ValueError, KeyError) as e:
                raise RunError(f"cannot read the details file {args.summarise}: {e}") from None
        else:
            cfg = RunConfig(
                "evaluate",
                args.variant,
                args.pretrain_corpus_path,
                reading_params_path=args.reading_params_path,
                eval_corpus_path=args.eval_corpus_path,
                outputs_path=args.outputs_path or args.details_path + ".predictions",
                details_path=args.details_path,
                device=args.device,
            )
            result = pipeline.evaluate(cfg)
            if not result.total:
                print(f"details written to {args.details_path}; no targets provided!")
                return
            print(score_line(result.total, result.correct))
            rows = [(a.logprob, a.text == place) for a, place in zip(result.answers, result.places)]
            rows = [(logprob, right) for logprob, right in rows if not math.isnan(logprob)]
        if not rows:
            raise RunError("no scored answers to summarise")
        print("\n".join(summary_lines(rows)))
        if args.pretrained_params and not args.summarise:
            print("\n".join(recall_lines(cfg, args.eval_corpus_path, result.answers, args.pretrained_params)))
        if args.plot:
            try:
                plot(rows, args.plot, args.title)
            except ImportError:
                raise RunError("drawing needs matplotlib: pip install -r requirements-dev.txt") from None

    return exit_status("confidence.py", run)


if __name__ == "__main__":
    exit_process(main())
