"""
What one pretrain, finetune or evaluate run is given (RunConfig): its inputs and outputs, the
recipe, and the run's controls; and how the recipe it reads is resolved against a params file.
"""

import dataclasses
import os
from typing import Optional

from factgpt.common.errors import RunError
from factgpt.settings.fields import path
from factgpt.settings.recipe import Recipe
from factgpt.settings.recipes import HANDOUT
from factgpt.settings.shapes import check_model

# on CUDA a checkpoint every 2 minutes, not after every (sub-second) epoch
CUDA_CHECKPOINT_MINUTES = 2
# DataLoader workers with CUDA at most (none on the CPU), one core left to training
CUDA_NUM_WORKERS = 4

FUNCTIONS = ("pretrain", "finetune", "evaluate")


@dataclasses.dataclass
class RunConfig:
    """
    One pretrain, finetune or evaluate run: its inputs and outputs, the recipe, and the run's
    controls.
    """

    function: str  # "pretrain", "finetune" or "evaluate"
    variant: str  # "vanilla", "perceiver", "synthesizer" or "rope"
    # its characters are the vocabulary
    pretrain_corpus_path: str = dataclasses.field(metadata=dict(role="input"))
    reading_params_path: Optional[str] = path("input", needed_by=("evaluate",))
    writing_params_path: Optional[str] = path("output", needed_by=("pretrain", "finetune"))
    finetune_corpus_path: Optional[str] = path("input", needed_by=("finetune",))
    eval_corpus_path: Optional[str] = path("input", needed_by=("evaluate",))
    outputs_path: Optional[str] = path("output", needed_by=("evaluate",))
    # evaluate: a line of JSON per answer with its confidence
    details_path: Optional[str] = path("output")
    # pretrain: question<TAB>place pairs, the stages' "pairs"
    mix_corpus_path: Optional[str] = path("input")
    recipe: Recipe = HANDOUT
    recipe_name: str = "handout"
    # the recipe fields the command line set: they win over the params' metadata
    given: frozenset = frozenset()
    seed: int = 0
    device: str = "auto"
    num_workers: Optional[int] = None  # DataLoader workers (None: default_num_workers)
    resume: bool = False
    # None: after every epoch; on CUDA every CUDA_CHECKPOINT_MINUTES
    checkpoint_minutes: Optional[float] = None
    keep_checkpoint: bool = False
    tb_expt_name: str = "run"
    tensorboard_root: str = "expt"  # relative to the working directory
    command: str = ""  # the command line, recorded in the params' metadata


INPUTS = tuple(f.name for f in dataclasses.fields(RunConfig) if f.metadata.get("role") == "input")
OUTPUTS = tuple(f.name for f in dataclasses.fields(RunConfig) if f.metadata.get("role") == "output")
REQUIRED = {
    function: tuple(
        f.name for f in dataclasses.fields(RunConfig) if function in f.metadata.get("needed_by", ())
    )
    for function in FUNCTIONS
}


def available_cores():
    """The cores this process may run on (a container's share; os.cpu_count() says the host's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cuda_num_workers(cores):
    """
    DataLoader workers beside a CUDA training that has `cores`: all but one (left to training), at
    most 4.
    """
    return max(0, min(CUDA_NUM_WORKERS, cores - 1))


def default_num_workers(device):
    """
    DataLoader workers where none are asked for: none on the CPU; with CUDA, one per core this
    process may use but one, at most CUDA_NUM_WORKERS: one on Colab's two vCPUs.
    """
    return cuda_num_workers(available_cores()) if device.type == "cuda" else 0


def resolve_recipe(cfg, metadata):
    """
    The run's recipe, its model sizes from the command line, else the metadata of the params
    read, else the recipe. A size the command line gives that the metadata contradicts is refused.
    """
    recipe = cfg.recipe
    for name, trained in (metadata or {}).items():
        if name not in recipe.sizes("perceiver"):
            continue
        if name in cfg.given and getattr(recipe, name) != trained:
            raise RunError(
                f"params file {cfg.reading_params_path} was trained with --{name} {trained} "
                f"(its {cfg.reading_params_path}.json says so), not {getattr(recipe, name)}: "
                f"leave --{name} out"
            )
        recipe = dataclasses.replace(recipe, **{name: trained})
    check_model(recipe, cfg.variant)
    return recipe
