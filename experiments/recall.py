"""
python experiments/recall.py VARIANT PRETRAIN_CORPUS_PATH --reading_params_path PARAMS \\
    --eval_corpus_path PAIRS

How many of the held-out people's birthplaces the pretrained params have stored: the model continues
each biography in the corpus from just before the birthplace, and a completion that starts with it
counts (factgpt.readout.recall.probed_recall). Prints "Recalled: X out of Y: Z%", Y being the people who could
be probed.
"""

import src_path  # noqa: F401  (src/ on sys.path)
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.questions import score_line
from factgpt.settings.command_line import params_parser, reading_config


def main(argv=None):
    parser = params_parser(__doc__, "the pretrained params to probe", prog="recall.py")
    parser.add_argument("--eval_corpus_path", required=True, help="held-out question<TAB>place pairs")
    args = parser.parse_args(argv)
    cfg = reading_config(args, eval_corpus_path=args.eval_corpus_path)

    def report():
        recalled, probed = pipeline.recall(cfg)
        print(score_line(probed, recalled, counted="Recalled"))

    return exit_status("recall.py", report)


if __name__ == "__main__":
    exit_process(main())
