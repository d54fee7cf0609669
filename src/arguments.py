"""
run.py's command line as a config.RunConfig: the course's flags, the model sizes, the
run controls, and every recipe field as a flag of its own (--dropout 0, --group_by_length,
--no-group_by_length). run.py and the research scripts in experiments/ parse with it.
"""

import argparse
import dataclasses
import logging
import math
import shlex
import sys

import torch
from tqdm.contrib.logging import logging_redirect_tqdm

from config import BOTTLENECK_DIM, HANDOUT, RECIPES, Recipe, RunConfig
from distributed import launch_rank
from model import VARIANTS
from pipeline import ConfigError
from trainer import TrainingInterrupted

SIZE_FLAGS = ("n_layer", "n_head", "n_embd")  # the recipe's sizes, but the params' own when reading params
RECIPE_FLAGS = {f.name: f.type for f in dataclasses.fields(Recipe) if f.name not in SIZE_FLAGS}


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (no usage block), exit code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text):
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def recipe_epilog():
    """The recipe fields a command line may set, with the handout's and the cpu recipe's values."""
    lines = ["recipe settings (--NAME VALUE; a yes/no setting: --NAME or --no-NAME), handout / cpu:"]
    for name in RECIPE_FLAGS:
        handout, cpu = getattr(HANDOUT, name), getattr(RECIPES["cpu"], name)
        lines.append(f"  --{name} {handout}" + (f" / {cpu}" if cpu != handout else ""))
    needs = [f"  {function}: {' '.join('--' + n for n in names)}" for function, names in RunConfig.REQUIRED.items()]
    return "\n".join(lines + ["", "flags each function needs:", *needs])


def build_parser(prog="run.py", description=None):
    """The parser of run.py's flags (a research script adds its own to it)."""
    p = OneLineParser(
        prog=prog,
        description=description,
        epilog=recipe_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # a prefix of a recipe field would be taken for another flag
    )
    p.add_argument("function", choices=list(RunConfig.REQUIRED))
    p.add_argument("variant", choices=VARIANTS)
    p.add_argument("pretrain_corpus_path", help="the pretraining corpus; its characters are the vocabulary")
    p.add_argument(
        "--reading_params_path", help="params to start from (finetune, or pretrain to go on pretraining) or to evaluate"
    )
    p.add_argument("--writing_params_path", help="where to save the trained params")
    p.add_argument("--finetune_corpus_path", help="question<TAB>place pairs to finetune on")
    p.add_argument("--eval_corpus_path", help="questions (with or without places) to answer")
    p.add_argument("--outputs_path", help="where to write one predicted place per line")
    p.add_argument("--tb_expt_name", default="run", help="TensorBoard run name, under expt/")
    p.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="handout",
        help="training settings: handout (default) or cpu, a schedule for a CPU (docs/cpu-recipe.md)",
    )
    m = p.add_argument_group("model size (default: the recipe's, or the params' own)")
    what = dict(n_layer="Transformer blocks", n_head="attention heads per block", n_embd="width of every block")
    for name in SIZE_FLAGS:
        m.add_argument(f"--{name}", type=positive_int, help=f"{what[name]} (default {getattr(HANDOUT, name)})")
    m.add_argument(
        "--bottleneck_dim", type=positive_int, help=f"the perceiver's latent length m (default {BOTTLENECK_DIM})"
    )
    c = p.add_argument_group("run control")
    c.add_argument(
        "--max_epochs",
        type=positive_int,
        help="epochs (default: the recipe's; pretrain: the first stage's where the recipe has a shifted one)",
    )
    c.add_argument("--batch_size", type=positive_int, help="batch size (default: the recipe's)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--device", choices=["auto", "cuda", "mps", "cpu"], default="auto")
    c.add_argument(
        "--num_workers",
        type=int,
        choices=range(0, 65),
        metavar="N",
        help="DataLoader worker processes (default: 4 with CUDA, else 0)",
    )
    c.add_argument("--resume", action="store_true", help="continue from <writing_params_path>.ckpt if it exists")
    c.add_argument(
        "--checkpoint_minutes",
        type=positive_float,
        metavar="N",
        help="also write the checkpoint every N minutes within an epoch (default: after every epoch only)",
    )
    c.add_argument("--keep_checkpoint", action="store_true", help="keep the checkpoint when training finishes")
    return p


def split_recipe_flags(argv):
    """(the arguments for the parser, [(name, text)] of the recipe settings among them)."""
    rest, settings, i = [], [], 0
    while i < len(argv):
        flag = argv[i]
        name, equals, text = flag[2:].partition("=") if flag.startswith("--") else ("", "", "")
        if name.startswith("no-") and RECIPE_FLAGS.get(name[3:]) is bool and not equals:
            settings.append((name[3:], "false"))
        elif name in RECIPE_FLAGS and (equals or RECIPE_FLAGS[name] is bool):
            settings.append((name, text if equals else "true"))
        elif name in RECIPE_FLAGS:
            if i + 1 == len(argv):
                raise ValueError(f"--{name} needs a value")
            settings.append((name, argv[i + 1]))
            i += 1
        else:
            rest.append(flag)
        i += 1
    return rest, settings


def run_config(args, recipe, command):
    """The RunConfig of the parsed command line: its flags, the recipe with its settings, the command itself."""
    given = {name: value for name, value in vars(args).items() if name in RunConfig.__dataclass_fields__}
    return RunConfig(**given | dict(recipe=recipe, recipe_name=args.recipe, command=command))


def parse(argv, parser):
    """
    (the RunConfig, the parsed namespace) of a run.py command line; a bad one exits with
    one line and code 2. `parser` is build_parser()'s, perhaps with more arguments added.
    """
    try:
        parser_argv, settings = split_recipe_flags(argv)
    except ValueError as e:
        parser.error(str(e))
    args = parser.parse_args(parser_argv)
    try:
        recipe = RECIPES[args.recipe].with_settings(settings)
    except ValueError as e:
        parser.error(str(e))
    return run_config(args, recipe, shlex.join([parser.prog, *argv])), args


def exit_status(prog, call):
    """
    call()'s exit status as a command's: 0; 2 with a ConfigError said in one line; 128 + the
    signal for an interrupted training (its checkpoint kept). torchrun's process group ends here.
    """
    said = logging.StreamHandler(sys.stderr)  # the library's warnings, one plain line each
    said.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger().addHandler(said)
    logging.getLogger("pipeline").setLevel(logging.INFO)  # the held-out loss of every epoch, when asked for
    try:
        with logging_redirect_tqdm():  # a line said during training goes above the progress bar, not into it
            call()
        if torch.distributed.is_initialized():
            torch.distributed.barrier()  # the ranks leave together, rank 0's files written: no rank tears down alone
    except ConfigError as e:
        if launch_rank() == 0:
            print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except TrainingInterrupted as e:
        print(f"{prog}: {e}: run the same command with --resume to go on", file=sys.stderr)
        return 128 + e.signum
    finally:
        logging.getLogger().removeHandler(said)
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0
