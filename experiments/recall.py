"""
How many held-out birthplaces a pretrained model has memorised: for each person whose
biography names the birthplace, the model continues the biography from just before the
place (decoding.birthplace_recall), and the completions that start with the place count.

    python experiments/recall.py vanilla wiki.txt --reading_params_path pretrain.params \\
        --eval_corpus_path birth_dev.tsv [--positions] [--prefix TEXT ...]

One line: the biographies as pretraining lays them out (the name at position 0). The
position probe, --positions, adds three more with the biography moved away from position 0:
after one space, after ten spaces, and after "Where was ", which puts the name where the
finetuning questions have it (docs/cpu-recipe.md: "where the facts are keyed"); --prefix adds
texts of one's own.
"""

import dataclasses
import sys

import src_path  # noqa: F401

# isort: split
import pipeline
from arguments import exit_status
from dataset import question_place_pairs
from decoding import birthplace_recall
from distributed import pick_device
from reading import params_parser, reading_config

POSITIONS = [" ", " " * 10, "Where was "]


def held_out_pairs(path):
    """[(question, place)] of a question<TAB>place file whose every line has its place."""
    return [
        (question, place) for _, question, place in pipeline.read_pairs(path, "held-out pairs", question_place_pairs)
    ]


def recall(cfg, pairs, prefix=None):
    """(recalled, probed) of cfg's params (reading_params_path) over the corpus's biographies, after `prefix`."""
    setup = pipeline.build(dataclasses.replace(cfg, function="evaluate"))
    device = pick_device(cfg.device)
    prompt = None if prefix is None else (lambda name, before: prefix + before)
    corpus = setup.corpus
    try:
        return birthplace_recall(setup.model.to(device), corpus.data, pairs, corpus.stoi, corpus.itos, device, prompt)
    except ValueError as e:  # a prefix outside the vocabulary
        raise pipeline.ConfigError(str(e)) from None


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to probe")
    parser.add_argument("--eval_corpus_path", required=True, help="held-out question<TAB>place pairs")
    parser.add_argument("--positions", action="store_true", help="also probe with the biography moved (see above)")
    parser.add_argument("--prefix", action="append", default=[], help="also probe after this text (repeatable)")
    args = parser.parse_args(argv)
    cfg = reading_config(args, eval_corpus_path=args.eval_corpus_path)

    def run():
        pairs = held_out_pairs(args.eval_corpus_path)
        prefixes = [None] + (POSITIONS if args.positions else []) + args.prefix
        for prefix in prefixes:
            recalled, probed = recall(cfg, pairs, prefix)
            label = "as pretraining lays it out" if prefix is None else f"after {prefix!r}"
            print(f"{label}: recalls {recalled} of {probed} birthplaces ({recalled / max(1, probed):.1%})", flush=True)

    return exit_status("recall.py", run)


if __name__ == "__main__":
    sys.exit(main())
