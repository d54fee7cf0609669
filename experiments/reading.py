"""
The command line of a research script that reads one params file:
VARIANT PRETRAIN_CORPUS_PATH --reading_params_path PARAMS [--device DEVICE].
"""

import argparse

import src_path  # noqa: F401

# isort: split
from config import RunConfig
from model import VARIANTS


def params_parser(description, params_help):
    """A parser with the arguments every params-reading script takes; the script adds its own."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("pretrain_corpus_path", help="the pretraining corpus (the vocabulary)")
    parser.add_argument("--reading_params_path", required=True, help=params_help)
    parser.add_argument("--device", choices=["auto", "cuda", "mps", "cpu"], default="auto")
    return parser


def reading_config(args, **more):
    """The evaluate RunConfig of the parsed arguments: the params to read, on the device asked for."""
    return RunConfig(
        "evaluate",
        args.variant,
        args.pretrain_corpus_path,
        reading_params_path=args.reading_params_path,
        device=args.device,
        **more,
    )
