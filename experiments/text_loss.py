"""
How well a model predicts text it has or has not seen: the span-corruption loss of a
text file's lines (one example per line, laid out as pretraining lays them out, drawn
from a generator seeded with --seed, so the same examples for every model), in nats and
bits per target character (perplexity.corruption_loss).

    python experiments/text_loss.py vanilla wiki.txt --reading_params_path pretrain.params \\
        --text_path held_out.txt [--seed 0]

Characters outside the pretraining corpus's vocabulary are dropped (and said). To hold a
part of wiki.txt out of pretraining and watch its loss every epoch, pretraining has the
recipe field held_out_fraction (run.py pretrain ... --held_out_fraction 0.05).
"""

import src_path  # noqa: F401

# isort: split
from dataset import corpus_lines
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.errors import RunError
from factgpt.corpus.reading import encodable_questions, read_text
from factgpt.settings.command_line import params_parser, reading_config
from factgpt.training.perplexity import bits_per_character, corruption_loss


def text_loss(cfg, text_path, seed=0):
    """(nats, targets, documents) of the text file's lines under cfg's params (reading_params_path), on cfg's device."""
    setup, device = pipeline.load(cfg)
    corpus = setup.corpus
    lines = encodable_questions(corpus, corpus_lines(read_text(text_path, "text")), "text")
    documents = corpus.with_documents(line for line in lines if line)
    if not len(documents):
        raise RunError(f"{text_path} has no characters of the vocabulary")
    nats, targets = corruption_loss(setup.model, documents, device, seed)
    return nats, targets, len(documents)


def main(argv=None):
    parser = params_parser(__doc__, "the params to score")
    parser.add_argument("--text_path", required=True, help="the text to score, a document per line")
    parser.add_argument("--seed", type=int, default=0, help="seed of the span corruptions (default 0)")
    args = parser.parse_args(argv)
    cfg = reading_config(args)

    def run():
        nats, targets, documents = text_loss(cfg, args.text_path, args.seed)
        print(
            f"{args.text_path}: loss {nats / targets:.4f} nats, {bits_per_character(nats, targets):.3f} bits "
            f"per character ({targets} target characters of {documents} documents, seed {args.seed})"
        )

    return exit_status("text_loss.py", run)


if __name__ == "__main__":
    exit_process(main())
