"""
What a run is checked for before anything is read: the function's paths, that no output is an
input, that each output can be written, and that the stages have their data. Each problem is a
one-line RunError.
"""

import filecmp
import os
import tempfile

from factgpt.common.errors import RunError
from factgpt.common.files import resolve_data_path
from factgpt.settings.run_config import INPUTS, OUTPUTS, REQUIRED
from model import VARIANTS


def check_config(cfg):
    """
    Check what can be checked before anything is read: the function's paths, their sense, the
    stages' data.
    """
    if cfg.function not in REQUIRED:
        raise RunError(f"function must be pretrain, finetune or evaluate, got {cfg.function!r}")
    if cfg.variant not in VARIANTS:
        raise RunError(f"variant must be one of {', '.join(VARIANTS)}, got {cfg.variant!r}")
    missing = [f"--{name}" for name in REQUIRED[cfg.function] if not getattr(cfg, name)]
    if missing:
        raise RunError(f"{cfg.function} needs {' and '.join(missing)}")
    if cfg.mix_corpus_path and cfg.function != "pretrain":
        raise RunError("mixed pairs (--mix_corpus_path) are for pretrain")
    if cfg.function == "pretrain":
        check_stages(cfg)
    if cfg.function == "evaluate" and cfg.recipe.readout == "frames":
        check_frames_inputs(cfg)
    inputs = {
        os.path.realpath(resolve_data_path(getattr(cfg, n))): n for n in INPUTS if getattr(cfg, n)
    }
    outputs = [os.path.realpath(getattr(cfg, n)) for n in OUTPUTS if getattr(cfg, n)]
    if len(set(outputs)) < len(outputs):
        raise RunError(f"two outputs are one file ({', '.join(OUTPUTS)} must differ)")
    for name in OUTPUTS:
        path = getattr(cfg, name)
        if path and os.path.realpath(path) in inputs:
            raise RunError(
                f"--{name} {path} is also the --{inputs[os.path.realpath(path)]}: "
                "an output never replaces an input"
            )
        if path:
            check_writable(path, "--" + name)


def check_frames_inputs(cfg):
    """
    The frames readout is fitted on the training pairs: they must be given, and not be the questions
    it answers.
    """
    if not cfg.finetune_corpus_path:
        raise RunError(
            "the frames readout mines its frames from the training people: "
            "give --finetune_corpus_path"
        )
    training, asked = (
        resolve_data_path(p) for p in (cfg.finetune_corpus_path, cfg.eval_corpus_path)
    )
    same = os.path.realpath(training) == os.path.realpath(asked)
    if same or (
        os.path.isfile(training)
        and os.path.isfile(asked)
        and filecmp.cmp(training, asked, shallow=False)
    ):
        raise RunError(
            f"--finetune_corpus_path {cfg.finetune_corpus_path} is the --eval_corpus_path: "
            "the frames readout would be fitted on the answers it is scored on"
        )


def check_stages(cfg):
    """
    Every stage has its data: the pairs need --mix_corpus_path; corrupt_by_epoch draws span
    corruptions only.
    """
    if cfg.mix_corpus_path and not cfg.recipe.trains_on_pairs():
        raise RunError(
            "--mix_corpus_path: no pretraining stage trains on the pairs (see --pretrain_stages)"
        )
    for number, stage in enumerate(cfg.recipe.pretrain_stages, 1):
        if stage.data == "pairs" and not cfg.mix_corpus_path:
            raise RunError(
                f"pretraining stage {number} trains on the pairs alone: give --mix_corpus_path"
            )
        if cfg.recipe.corrupt_by_epoch and cfg.mix_corpus_path and stage.uses_pairs:
            raise RunError(
                "corrupt_by_epoch draws span corruptions only: "
                "it cannot be combined with mixed pairs"
            )


def check_writable(path, what):
    """Fail now, not after hours of training, if `path` cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise RunError(f"{what} {path} is a directory")
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise RunError(f"{what} {path} cannot be written: {existing} is not a folder")
    try:
        # os.access can say yes where writing fails (a read-only mount, /proc, some network folders)
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise RunError(
            f"{what} {path} cannot be written: {existing} refuses new files ({e.strerror})"
        ) from None
