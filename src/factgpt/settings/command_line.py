"""
run.py's command line as a run_config.RunConfig, with a flag for every Recipe field made from its
type, default and help.
"""

import argparse
import dataclasses
import math
import shlex
import textwrap

from factgpt.common.distributed import DEVICES
from factgpt.common.errors import RunError
from factgpt.settings.fields import parse_value
from factgpt.settings.recipe import Recipe, parse_stages
from factgpt.settings.recipes import RECIPES
from factgpt.settings.run_config import CUDA_CHECKPOINT_MINUTES, FUNCTIONS, REQUIRED, RunConfig
from model import VARIANTS


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


# flags of earlier versions, each refused in one line naming what replaced it
SHIFTED_STAGE = '--pretrain_stages "corpus+pairs; corpus+pairs epochs=20 lr=3e-4 max_shift=13"'
RETIRED_FLAGS = {
    "max_epochs": "--pretrain_epochs (pretrain), or --finetune_epochs_from_scratch and "
    "--finetune_epochs_from_pretrained (finetune)",
    "batch_size": "--pretrain_batch_size (pretrain) or --finetune_batch_size (finetune)",
    "shifted_epochs": f"the second stage's epochs in --pretrain_stages, e.g. {SHIFTED_STAGE}",
    "shifted_lr": f"the second stage's lr in --pretrain_stages, e.g. {SHIFTED_STAGE}",
    "shifted_max_shift": f"the second stage's max_shift in --pretrain_stages, e.g. {SHIFTED_STAGE}",
}


class Retired(argparse.Action):
    """A flag of an earlier version: the command line is refused, saying what replaced it."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is gone: use {RETIRED_FLAGS[self.dest]}")


METAVARS = {int: "N", str: "TEXT", tuple: "STAGES"}  # and X for a number that may have decimals
HELP_WIDTH = 100  # --help's end, the recipes' values, wrapped to it


def recipe_type(field):
    """
    argparse's type for a Recipe field: its text parsed as the stages or a plain value, errors in
    one line.
    """
    kind = float if "float" in str(field.type) else field.type

    def parse(text):
        try:
            return parse_stages(text) if kind is tuple else parse_value(kind, text)
        except RunError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def add_recipe_flags(parser):
    """A flag for every Recipe field; a flag left out leaves the field out of the namespace."""
    group = parser.add_argument_group(
        f"recipe settings (default: --recipe's; --help's end lists {' / '.join(RECIPES)})"
    )
    for field in dataclasses.fields(Recipe):
        kwargs = dict(default=argparse.SUPPRESS, help=field.metadata["help"])
        if field.type is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif field.metadata["choices"]:
            kwargs["choices"] = field.metadata["choices"]
        else:
            kwargs.update(type=recipe_type(field), metavar=METAVARS.get(field.type, "X"))
        group.add_argument(f"--{field.name}", **kwargs)


def recipe_fields_given(args):
    """
    The recipe fields set on the command line that add_recipe_flags' parser read, with their values.
    """
    return {
        f.name: getattr(args, f.name) for f in dataclasses.fields(Recipe) if hasattr(args, f.name)
    }


def given_recipe(parser, args, base):
    """
    `base` with the recipe fields given on the command line put in, and those fields; a bad mix
    exits in one line.
    """
    given = recipe_fields_given(args)
    try:
        return dataclasses.replace(base, **given), given
    except RunError as e:
        parser.error(str(e))


def recipe_epilog():
    """Every recipe field with its value in each named recipe, and the flags each function needs."""
    lines = [f"recipe settings, {' / '.join(RECIPES)}:"]
    for field in dataclasses.fields(Recipe):
        values = [getattr(recipe, field.name) for recipe in RECIPES.values()]
        shown = [
            repr("; ".join(map(str, v))) if isinstance(v, tuple) else str(v) or "''" for v in values
        ]
        line = f"  --{field.name} " + (shown[0] if len(set(shown)) == 1 else " / ".join(shown))
        lines += textwrap.wrap(line, HELP_WIDTH, subsequent_indent=" " * 6, break_on_hyphens=False)
    needs = [
        f"  {function}: {' '.join('--' + n for n in names)}" for function, names in REQUIRED.items()
    ]
    # the frames readout is fitted on the training people (pipeline.checks.check_frames_inputs)
    needs.append("  evaluate --readout frames: --finetune_corpus_path as well")
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
    p.add_argument("function", choices=FUNCTIONS)
    p.add_argument("variant", choices=VARIANTS)
    p.add_argument(
        "pretrain_corpus_path", help="the pretraining corpus; its characters are the vocabulary"
    )
    p.add_argument(
        "--reading_params_path",
        help="params to start from (finetune, or pretrain to go on pretraining) or to evaluate",
    )
    p.add_argument("--writing_params_path", help="where to save the trained params")
    p.add_argument("--finetune_corpus_path", help="question<TAB>place pairs to finetune on")
    p.add_argument("--eval_corpus_path", help="questions (with or without places) to answer")
    p.add_argument("--outputs_path", help="where to write one predicted place per line")
    p.add_argument(
        "--mix_corpus_path",
        help="pretrain: question<TAB>place pairs, the stages' pairs (see Stage)",
    )
    p.add_argument("--tb_expt_name", default="run", help="TensorBoard run name, under expt/")
    p.add_argument(
        "--recipe",
        choices=list(RECIPES),
        default="handout",
        help="the named settings (factgpt/settings/recipes.py; default: handout)",
    )
    c = p.add_argument_group("run control")
    c.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the model, the data's order and draws (default: 0)",
    )
    c.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="auto: cuda, else mps, else cpu, the first there is (default)",
    )
    c.add_argument(
        "--num_workers",
        type=int,
        choices=range(0, 65),
        metavar="N",
        help="DataLoader worker processes (default: with CUDA, the cores but one, at most 4; "
        "else 0)",
    )
    c.add_argument(
        "--resume",
        action="store_true",
        help="continue from <writing_params_path>.ckpt if it exists",
    )
    c.add_argument(
        "--checkpoint_minutes",
        type=positive_float,
        metavar="N",
        help="write the checkpoint every N minutes within an epoch too (default: after every "
        f"epoch only; on CUDA every {CUDA_CHECKPOINT_MINUTES} minutes and at the end instead of "
        "after every epoch)",
    )
    c.add_argument(
        "--keep_checkpoint", action="store_true", help="keep the checkpoint when training finishes"
    )
    add_recipe_flags(p)
    for name in RETIRED_FLAGS:
        p.add_argument(
            f"--{name}",
            action=Retired,
            nargs="?",
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )
    return p


def params_parser(description, params_help, prog=None):
    """
    The parser of a command that reads one params file, to which the command adds its own arguments.
    """
    parser = OneLineParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("pretrain_corpus_path", help="the pretraining corpus (the vocabulary)")
    parser.add_argument("--reading_params_path", required=True, help=params_help)
    parser.add_argument("--device", choices=DEVICES, default="auto")
    return parser


def reading_config(args, **more):
    """
    The evaluate RunConfig of params_parser's arguments: the params to read, on the device asked
    for.
    """
    return RunConfig(
        "evaluate",
        args.variant,
        args.pretrain_corpus_path,
        reading_params_path=args.reading_params_path,
        device=args.device,
        **more,
    )


def parse(argv, parser):
    """
    The RunConfig of a run.py command line, and the parsed namespace; a bad one exits with one line
    and code 2.
    """
    args = parser.parse_args(argv)
    recipe, given = given_recipe(parser, args, RECIPES[args.recipe])
    run = {
        name: value for name, value in vars(args).items() if name in RunConfig.__dataclass_fields__
    }
    command = shlex.join([parser.prog, *argv])
    extra = dict(recipe=recipe, recipe_name=args.recipe, given=frozenset(given), command=command)
    return RunConfig(**run | extra), args
