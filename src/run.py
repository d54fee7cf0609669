"""
The command line of the assignment:

    python src/run.py {pretrain,finetune,evaluate} {vanilla,perceiver,synthesizer,rope} \\
        PRETRAIN_CORPUS_PATH [flags]

pretrain trains the model on the corpus with span corruption, finetune on --finetune_corpus_path's
birthplace pairs, and evaluate answers --eval_corpus_path's questions; the vocabulary always
comes from the pretraining corpus. Training follows --recipe, and every recipe field is a flag.
--resume continues a stopped training from its checkpoint. A mistake in the input is one line
and exit code 2.
"""

import sys

from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process, launch_rank
from factgpt.common.questions import score_line
from factgpt.settings.command_line import build_parser, parse


def run(cfg):
    """Run the command's function; evaluate prints the score (or where the answers went)."""
    if cfg.function != "evaluate":
        getattr(pipeline, cfg.function)(cfg)
        return
    result = pipeline.evaluate(cfg)
    if launch_rank() == 0 and result.total:
        print(score_line(result.total, result.correct))
    elif launch_rank() == 0:
        print(f"Predictions written to {cfg.outputs_path}; no targets provided!")


def main(argv=None):
    cfg, _ = parse(sys.argv[1:] if argv is None else list(argv), build_parser("run.py", __doc__))
    return exit_status("run.py", lambda: run(cfg))


if __name__ == "__main__":
    exit_process(main())
