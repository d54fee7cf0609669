"""
What the model would write next, and what else it considered: the greedy continuation of
a prompt with, for every character it writes, the k likeliest characters and their
probabilities (next_character_choices).

    python experiments/next_chars.py vanilla wiki.txt --reading_params_path finetune.params \\
        --question "Where was Ada Lovelace born?"
    python experiments/next_chars.py vanilla wiki.txt --reading_params_path pretrain.params \\
        --prompt "Ada Lovelace. Ada Lovelace was born in" [--top_k 5] [--steps 20] [--decimals 3]

--question asks as finetuning does (the question, then the mask character ⁇) and stops
after the closing mask; --prompt continues any text for --steps characters, which shows
what a pretrained-only model has stored before any finetuning. The prompt's characters
outside the vocabulary are dropped (and said).
"""

import torch

import src_path  # noqa: F401

# isort: split
from dataset import MASK_CHAR, encoded
from factgpt import pipeline
from factgpt.common.commands import exit_status
from factgpt.common.distributed import exit_process
from factgpt.common.errors import RunError
from factgpt.corpus.reading import encodable_questions
from factgpt.readout.decoding import greedy_decode_cached
from factgpt.settings.command_line import params_parser, reading_config
from utils import eval_mode


def choice_lines(prompt, choices, decimals=3):
    """The printed view: the prompt and the completion, then a line per written character (its probabilities to
    `decimals` decimals)."""
    lines = [f"{prompt}{''.join(char for char, _ in choices)}", "character | probability | alternatives"]
    for char, alternatives in choices:
        others = ", ".join(f"{alt!r} {p:.{decimals}f}" for alt, p in alternatives[1:])
        lines.append(f"{char!r} | {alternatives[0][1]:.{decimals}f} | {others}")
    return lines


def next_character_choices(model, prompt, corpus, device, steps, k, stop_char=None):
    """
    The greedy continuation of `prompt` with, at every character it writes, the k
    likeliest characters and their probabilities: [(char, [(alternative, probability)])],
    the chosen character first among its alternatives. It stops after stop_char, or
    when the prompt and what it wrote fill the block (block_size characters).
    """
    context = model.get_block_size() - 1
    if not prompt or len(prompt) > context:
        raise ValueError(f"the prompt must have 1 to {context} characters, got {len(prompt)}")
    with eval_mode(model):
        x = torch.tensor([encoded(prompt, corpus.stoi)], dtype=torch.long, device=device)
        k = min(k, len(corpus.itos))
        stop_id = corpus.stoi[stop_char] if stop_char is not None else -1
        decoded = greedy_decode_cached(model, x, min(steps, context - len(prompt) + 1), stop_id, top_k=k)
    return [
        (corpus.itos[chosen], [(corpus.itos[i], p) for i, p in zip(ids, probs)])
        for chosen, ids, probs in zip(
            decoded.ids[0].tolist(), decoded.top_ids[0].tolist(), decoded.top_probs[0].tolist()
        )
    ]


def main(argv=None):
    parser = params_parser(__doc__, "the params to read (pretrained or finetuned)")
    text = parser.add_mutually_exclusive_group(required=True)
    text.add_argument("--question", help="a question, asked as finetuning asks it (the mask appended)")
    text.add_argument("--prompt", help="any text to continue")
    parser.add_argument("--top_k", type=int, default=5, help="alternatives shown per character (default 5)")
    parser.add_argument("--steps", type=int, default=32, help="characters to write at most (default 32)")
    parser.add_argument("--decimals", type=int, default=3, help="of the probabilities printed (default 3)")
    args = parser.parse_args(argv)
    if args.top_k < 1 or args.steps < 1:
        parser.error("--top_k and --steps must be positive")
    if args.decimals < 0:
        parser.error("--decimals must not be negative")
    cfg = reading_config(args)

    def run():
        setup, device = pipeline.load(cfg)
        corpus = setup.corpus
        prompt = encodable_questions(corpus, [args.prompt or args.question], "prompt")[0]
        prompt += MASK_CHAR if args.question else ""
        try:
            choices = next_character_choices(
                setup.model,
                prompt,
                corpus,
                device,
                args.steps,
                args.top_k,
                stop_char=MASK_CHAR if args.question else None,
            )
        except ValueError as e:
            raise RunError(str(e)) from None
        print("\n".join(choice_lines(prompt, choices, args.decimals)))

    return exit_status("next_chars.py", run)


if __name__ == "__main__":
    exit_process(main())
