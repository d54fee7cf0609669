"""
Pretraining as `run.py pretrain` runs it, with the research switches of the studies in
docs/: a birthplace-recall probe every few epochs, and snapshots of the params.

    python experiments/probed_pretraining.py pretrain vanilla wiki.txt --writing_params_path pretrain.params \\
        --probe_corpus_path val400.tsv --probe_every 10 [--save_every 10] [run.py flags]
"""

import sys

import src_path  # noqa: F401

# isort: split
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.settings.command_line import build_parser, parse, positive_int
from hooks import recall_probe, save_snapshots


def main(argv=None):
    parser = build_parser("probed_pretraining.py", __doc__)
    r = parser.add_argument_group("research switches")
    r.add_argument(
        "--probe_corpus_path",
        metavar="PATH",
        help="question<TAB>place pairs whose birthplaces the model should come to recall from the corpus",
    )
    r.add_argument("--probe_every", type=positive_int, default=5, metavar="N", help="epochs between probes (default 5)")
    r.add_argument(
        "--save_every", type=positive_int, metavar="N", help="also save the params every N epochs as <params>.epoch<E>"
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg, args = parse(argv, parser)
    if cfg.function != "pretrain":
        parser.error(f"runs pretrain, not {cfg.function}")

    def run():
        hooks = [save_snapshots(args.save_every)] if args.save_every else []
        if args.probe_corpus_path:
            hooks.append(recall_probe(args.probe_corpus_path, args.probe_every))
        pipeline.pretrain(cfg, hooks)

    return exit_status("probed_pretraining.py", run)


if __name__ == "__main__":
    exit_process(main())
