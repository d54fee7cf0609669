"""
The command line of the assignment:

    python src/run.py {pretrain,finetune,evaluate} {vanilla,perceiver,synthesizer} PRETRAIN_CORPUS_PATH [flags]

pretrain: span-corruption pretraining on the corpus, saved to --writing_params_path.
finetune: birthplace finetuning on --finetune_corpus_path, from scratch or from
          --reading_params_path, saved to --writing_params_path.
evaluate: greedy answers for --eval_corpus_path, written to --outputs_path, scored
          when the file has answers.
The vocabulary always comes from the pretraining corpus, so all three agree.
"""

import argparse
import logging
import os
import sys

from dataset import CharCorruptionDataset, NameDataset, known_characters, numbered_lines
from model import GPT, GPTConfig
from trainer import Trainer, TrainerConfig
from utils import atomic_write, evaluate_places, load_params, pick_device, predict_places, resolve_data_path, save_params, set_seed

# The handout's settings.
BLOCK_SIZE = 128
MODEL = dict(n_layer=4, n_head=8, n_embd=256)
PRETRAIN_EPOCHS = 650
PRETRAIN_BATCH_SIZE = 128
FINETUNE_BATCH_SIZE = 256
PRETRAIN_BUCKET_POOL = 16  # pretraining batches group examples of similar length
FINETUNE_BUCKET_POOL = 1  # finetuning examples keep the handout's random batches (cut, not grouped)
FINETUNE_EPOCHS_FROM_SCRATCH = 75
FINETUNE_EPOCHS_FROM_PRETRAINED = 10
WARMUP_TOKENS = 512 * 20
FINAL_TOKENS_PER_EXAMPLE = 200 * BLOCK_SIZE  # final_tokens = 200 * len(pretrain_dataset) * block_size
CUDA_NUM_WORKERS = 4
ANSWER_STEPS = 32

REQUIRED = {
    "pretrain": ["writing_params_path"],
    "finetune": ["writing_params_path", "finetune_corpus_path"],
    "evaluate": ["reading_params_path", "eval_corpus_path", "outputs_path"],
}


class UsageError(Exception):
    """A problem with the user's input: reported in one line, exit code 2."""


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def check_writable(path, what):
    """Fail now, not after hours of training, if `path` cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{what} {path} is a directory")
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK):
        raise UsageError(f"{what} {path} cannot be written: {existing} is not a writable folder")


def build_parser():
    p = argparse.ArgumentParser(prog="run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("function", choices=["pretrain", "finetune", "evaluate"])
    p.add_argument("variant", choices=["vanilla", "perceiver", "synthesizer"])
    p.add_argument("pretrain_corpus_path", help="the pretraining corpus; its characters are the vocabulary")
    p.add_argument("--bottleneck_dim", type=positive_int, default=32, help="perceiver latent length m (default 32)")
    p.add_argument("--reading_params_path", help="params to start from (finetune) or to evaluate")
    p.add_argument("--writing_params_path", help="where to save the trained params")
    p.add_argument("--finetune_corpus_path", help="question<TAB>place pairs to finetune on")
    p.add_argument("--eval_corpus_path", help="questions (with or without places) to answer")
    p.add_argument("--outputs_path", help="where to write one predicted place per line")
    p.add_argument("--pretrain_lr", type=float, default=6e-3)
    p.add_argument("--finetune_lr", type=float, default=6e-4)
    p.add_argument("--tb_expt_name", default="run", help="TensorBoard run name, under expt/")
    g = p.add_argument_group("overrides for quick runs and experiments (defaults: the handout's)")
    g.add_argument("--max_epochs", type=positive_int, help="epochs (pretrain 650; finetune 75 from scratch, 10 from params)")
    g.add_argument("--batch_size", type=positive_int, help="batch size (pretrain 128, finetune 256)")
    g.add_argument("--n_layer", type=positive_int, default=MODEL["n_layer"])
    g.add_argument("--n_head", type=positive_int, default=MODEL["n_head"])
    g.add_argument("--n_embd", type=positive_int, default=MODEL["n_embd"])
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--device", choices=["auto", "cuda", "mps", "cpu"], default="auto")
    g.add_argument("--num_workers", type=int, choices=range(0, 65), metavar="N", help="DataLoader worker processes (default: 4 with CUDA, else 0)")
    s = p.add_argument_group("speed (the defaults are the fast paths; these switch them off or add to them)")
    s.add_argument("--full_padding", action="store_true",
                   help="train on rows padded to the block size instead of length-bucketed batches cut to their real length")
    s.add_argument("--sequential_decoding", action="store_true",
                   help="evaluate one question at a time without a KV cache (same answers, slower)")
    s.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
                   help="auto: bf16 autocast on CUDA (fp16 with a gradient scaler without bf16), fp32 elsewhere")
    s.add_argument("--compile", action="store_true", help="torch.compile the model for training")
    return p


def read_text(path, what):
    path = resolve_data_path(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {what} {path}: {e}") from None
    if not text.strip():
        raise UsageError(f"{what} {path} is empty")
    return text


def build_model(args, vocab_size):
    if args.n_embd % args.n_head:
        raise UsageError(f"--n_embd {args.n_embd} must be a multiple of --n_head {args.n_head}")
    if args.variant == "perceiver" and args.n_layer < 2:
        raise UsageError("the perceiver needs --n_layer 2 or more (a down- and an up-projection block)")
    config = GPTConfig(
        vocab_size,
        BLOCK_SIZE,
        n_layer=args.n_layer,
        n_head=args.n_head,
        n_embd=args.n_embd,
        perceiver=args.variant == "perceiver",
        bottleneck_dim=args.bottleneck_dim,
        synthesizer=args.variant == "synthesizer",
    )
    return GPT(config)


def read_params(model, path, variant):
    try:
        load_params(model, path)
    except FileNotFoundError:
        raise UsageError(f"params file {path} does not exist") from None
    except Exception as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"cannot load params {path} into a {variant} model of this size: {reason}") from None


def tensorboard_writer(args):
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(
        log_dir=f"expt/{args.function}/{args.tb_expt_name}_{args.variant}_{args.bottleneck_dim}"
        f"_pt_lr_{args.pretrain_lr}_ft_lr_{args.finetune_lr}"
    )


def train(args, model, dataset, pretrain_dataset, learning_rate, epochs, batch_size, bucket_pool):
    config = TrainerConfig(
        max_epochs=args.max_epochs or epochs,
        batch_size=args.batch_size or batch_size,
        learning_rate=learning_rate,
        lr_decay=True,
        warmup_tokens=WARMUP_TOKENS,
        final_tokens=FINAL_TOKENS_PER_EXAMPLE * len(pretrain_dataset),
        num_workers=args.num_workers,
        writer=tensorboard_writer(args),
        device=args.device,
        skip_padding=not args.full_padding,
        bucket_pool=bucket_pool,
        precision=args.precision,
        compile=args.compile,
    )
    Trainer(model, dataset, None, config).train()
    config.writer.close()
    save_params(model, args.writing_params_path)


def evaluate(args, model, pretrain_dataset, device):
    questions, dropped, answered = [], 0, None
    for lineno, line in numbered_lines(read_text(args.eval_corpus_path, "evaluation corpus")):
        fields = line.split("\t")
        has_place = len(fields) == 2
        if len(fields) > 2 or answered not in (None, has_place):
            raise UsageError(f"{resolve_data_path(args.eval_corpus_path)} line {lineno}: expected 'question' on every "
                             "line or 'question<TAB>place' on every line")
        answered = has_place
        question, n = known_characters(fields[0], pretrain_dataset.stoi)
        questions.append(question)
        dropped += n
    if dropped:
        print(f"dropped {dropped} character(s) outside the pretraining vocabulary from the questions", file=sys.stderr)
    predictions = predict_places(model.to(device), questions, pretrain_dataset.stoi, pretrain_dataset.itos, device,
                                 ANSWER_STEPS, sequential=args.sequential_decoding)
    atomic_write(args.outputs_path, lambda f: f.write("".join(p + "\n" for p in predictions).encode("utf-8")))
    total, correct = evaluate_places(resolve_data_path(args.eval_corpus_path), predictions)
    if total > 0:
        print(f"Correct: {correct} out of {total}: {correct / total * 100}%")
    else:
        print(f"Predictions written to {args.outputs_path}; no targets provided!")


def run(args):
    for name in ("writing_params_path", "outputs_path"):
        if getattr(args, name):
            check_writable(getattr(args, name), "--" + name)
    try:
        device = pick_device(args.device)
    except RuntimeError as e:
        raise UsageError(str(e)) from None
    set_seed(args.seed)
    if args.num_workers is None:
        args.num_workers = CUDA_NUM_WORKERS if device.type == "cuda" else 0
    pretrain_dataset = CharCorruptionDataset(read_text(args.pretrain_corpus_path, "pretraining corpus"), BLOCK_SIZE)
    model = build_model(args, pretrain_dataset.vocab_size)
    if args.reading_params_path:
        read_params(model, args.reading_params_path, args.variant)

    if args.function == "pretrain":
        train(args, model, pretrain_dataset, pretrain_dataset, args.pretrain_lr, PRETRAIN_EPOCHS, PRETRAIN_BATCH_SIZE,
              PRETRAIN_BUCKET_POOL)
    elif args.function == "finetune":
        epochs = FINETUNE_EPOCHS_FROM_PRETRAINED if args.reading_params_path else FINETUNE_EPOCHS_FROM_SCRATCH
        path = args.finetune_corpus_path
        try:
            finetune_dataset = NameDataset(pretrain_dataset, read_text(path, "finetuning corpus"))
        except ValueError as e:
            raise UsageError(f"{resolve_data_path(path)}: {e}") from None
        if finetune_dataset.dropped_characters:
            print(
                f"dropped {finetune_dataset.dropped_characters} character(s) outside the pretraining vocabulary"
                " from the finetuning pairs",
                file=sys.stderr,
            )
        train(args, model, finetune_dataset, pretrain_dataset, args.finetune_lr, epochs, FINETUNE_BATCH_SIZE,
              FINETUNE_BUCKET_POOL)
    else:
        evaluate(args, model, pretrain_dataset, device)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = [f"--{name}" for name in REQUIRED[args.function] if not getattr(args, name)]
    if missing:
        parser.error(f"{args.function} needs {' and '.join(missing)}")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        run(args)
    except UsageError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
