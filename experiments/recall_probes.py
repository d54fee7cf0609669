"""
How many held-out birthplaces a pretrained model has memorised, and where they are keyed:
`python experiments/recall.py` (pipeline.recall) with other prompts.

    python experiments/recall_probes.py vanilla wiki.txt --reading_params_path pretrain.params \\
        --eval_corpus_path birth_dev.tsv [--positions] [--prefix TEXT ...]

Three lines, one per probe of readout.recall.PROBES, each over the same people: the biographies
as pretraining lays them out (the name at position 0, every cue of the text before the
place), the name and the two words before the place alone ("NAME. NAME born in "), and the question ("Where was NAME
born?" and its mask). The position probe, --positions, adds three more with the biography
moved away from position 0: after one space, after ten spaces, and after "Where was ", which
puts the name where the finetuning questions have it (docs/cpu-recipe.md: "where the facts are keyed"); --prefix adds
texts of one's own.
"""

import src_path  # noqa: F401

# isort: split
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.readout.recall import PROBES
from factgpt.settings.command_line import params_parser, reading_config

POSITIONS = [" ", " " * 10, "Where was "]


def after(prefix):
    """The biography probe with the biography put after `prefix` (where is the fact keyed?)."""
    return lambda name, before: prefix + before


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to probe", prog="recall_probes.py")
    parser.add_argument("--eval_corpus_path", required=True, help="held-out question<TAB>place pairs")
    parser.add_argument("--positions", action="store_true", help="also probe with the biography moved (see above)")
    parser.add_argument("--prefix", action="append", default=[], help="also probe after this text (repeatable)")
    args = parser.parse_args(argv)
    cfg = reading_config(args, eval_corpus_path=args.eval_corpus_path)

    def run():
        probes = [(f"from the {name}", prompt) for name, prompt in PROBES.items()]
        prefixes = (POSITIONS if args.positions else []) + args.prefix
        for label, prompt in probes + [(f"the biography after {prefix!r}", after(prefix)) for prefix in prefixes]:
            recalled, probed = pipeline.recall(cfg, prompt)
            print(f"{label}: recalls {recalled} of {probed} birthplaces ({recalled / max(1, probed):.1%})", flush=True)

    return exit_status("recall_probes.py", run)


if __name__ == "__main__":
    exit_process(main())
