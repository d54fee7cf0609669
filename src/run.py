"""
The command line of the assignment:

    python src/run.py {pretrain,finetune,evaluate} {vanilla,perceiver,synthesizer,rope} PRETRAIN_CORPUS_PATH [flags]

pretrain: span-corruption pretraining on the corpus (going on from --reading_params_path
          if given), stage after stage of the recipe's pretrain_stages, with the
          question<TAB>place pairs of --mix_corpus_path where a stage trains on
          pairs; saved to --writing_params_path.
finetune: birthplace finetuning on --finetune_corpus_path, from scratch or from
          --reading_params_path, saved to --writing_params_path.
evaluate: greedy answers for --eval_corpus_path, written to --outputs_path, scored
          when the file has answers.
The vocabulary always comes from the pretraining corpus, so all three agree.

Training follows --recipe (the handout's by default; src/config.py). Any field of a
recipe is a flag: --dropout 0, --pretrain_epochs 420, --group_by_length,
--no-group_by_length, --precision bf16 (--help lists them with every recipe's values).

pretrain and finetune keep a resumable checkpoint at <writing_params_path>.ckpt
(after every epoch, or on CUDA every 2 minutes and at the end instead; and every
--checkpoint_minutes); --resume continues from it.
Under torchrun (torchrun --nproc_per_node=N src/run.py ...) every command runs on
N processes with DistributedDataParallel; rank 0 alone prints and writes files.
Mistakes in the input are reported in one line with exit code 2.
"""

import sys

import pipeline
from arguments import build_parser, exit_status, parse
from distributed import exit_process, launch_rank
from utils import score_line


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
