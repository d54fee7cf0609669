"""
Where a pretrained model keys what it has memorised: the birthplace recall probe with the
biography moved away from position 0, where every pretraining example of the course starts.

    python src/position_probe.py vanilla wiki.txt --reading_params_path pretrain.params \\
        --eval_corpus_path val400.tsv

For each held-out person whose biography names the birthplace (decoding.birthplace_recall),
the model continues the biography from just before the place: as pretraining laid it out
(the name at position 0), then after each --prefix (default: one space, ten spaces, and
"Where was ", which puts the name where the finetuning questions have it). One line each.
"""

import argparse
import sys

from config import BLOCK_SIZE
from dataset import CharCorruptionDataset, read_question_file
from distributed import pick_device
from files import resolve_data_path
from learning_curve import recall
from model import VARIANTS

PREFIXES = [" ", " " * 10, "Where was "]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("pretrain_corpus_path")
    parser.add_argument("--reading_params_path", required=True, help="the pretrained params to probe")
    parser.add_argument("--eval_corpus_path", required=True, help="held-out question<TAB>place pairs")
    parser.add_argument(
        "--prefix", action="append", help="text to put before the biography (repeatable; default: the three above)"
    )
    args = parser.parse_args(argv)
    args.pretrain_corpus_path = str(resolve_data_path(args.pretrain_corpus_path))
    try:
        pairs = [(question, place) for _, question, place in read_question_file(args.eval_corpus_path)]
        with open(args.pretrain_corpus_path, encoding="utf-8") as f:
            corpus = CharCorruptionDataset(f.read(), BLOCK_SIZE)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    if any(place is None for _, place in pairs):
        parser.error(f"--eval_corpus_path {args.eval_corpus_path}: the held-out questions need their places")
    device = pick_device("auto")
    prompts = [("as pretraining lays it out", None)]
    prompts += [
        (f"after {prefix!r}", lambda name, before, prefix=prefix: prefix + before) for prefix in args.prefix or PREFIXES
    ]
    for label, prompt in prompts:
        try:
            recalled, probed = recall(args, corpus, args.reading_params_path, pairs, device, prompt)
        except ValueError as e:  # the params do not fit, or a prefix outside the vocabulary
            parser.error(str(e))
        print(f"{label}: recalls {recalled} of {probed} ({recalled / max(1, probed):.1%})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
