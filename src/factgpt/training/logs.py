"""
What a training reports as it goes: its TensorBoard log, the epoch hooks, and the held-out loss of
every epoch.
"""

import dataclasses
import logging
import os
import time
from typing import Callable, Optional

import torch

from dataset import CharCorruptionDataset
from factgpt.common.distributed import rank_and_world_size
from factgpt.corpus.reading import HELD_OUT_SEED
from factgpt.training.perplexity import bits_per_character, corruption_loss
from model import GPT

logger = logging.getLogger(__name__)


class TensorBoardLog:
    """
    This run's own SummaryWriter, in the course's folder name with the start time and process id. It
    never stops the training: if its folder goes away or cannot be written, it says so once and
    stops logging.
    """

    def __init__(self, cfg, name_suffix=""):
        from torch.utils.tensorboard import SummaryWriter

        r = cfg.recipe
        m = r.bottleneck_dim
        self.log_dir = (
            f"{cfg.tensorboard_root}/{cfg.function}/{cfg.tb_expt_name}{name_suffix}"
            f"_{cfg.variant}_{m}_pt_lr_{r.pretrain_lr}_ft_lr_{r.finetune_lr}"
            f"_{time.strftime('%Y%m%d-%H%M%S')}_{os.getpid()}"
        )
        self.writer = SummaryWriter(log_dir=self.log_dir)

    def call(self, method, *args):
        if self.writer is None:
            return
        try:
            # checked first: the writer's thread would die on it with a traceback
            if not os.path.isdir(self.log_dir):
                raise FileNotFoundError(f"{self.log_dir} was removed")
            getattr(self.writer, method)(*args)
        except Exception as e:
            # a full disk, the folder removed: the training matters more than its log
            logger.warning(
                "TensorBoard log %s stopped (%s); training goes on without it", self.log_dir, e
            )
            self.writer = None

    def add_scalar(self, *args):
        self.call("add_scalar", *args)

    def close(self):
        self.call("close")


@dataclasses.dataclass
class EpochEnd:
    """What an on_epoch_end hook is given, on rank 0 after every epoch."""

    epoch: int  # epochs done, counted on over pretraining's stages
    model: GPT
    corpus: CharCorruptionDataset  # the pretraining corpus (its vocabulary, its documents)
    device: torch.device
    writer: Optional[TensorBoardLog]
    params_path: str  # where the run writes its params
    metadata: dict  # what the params are
    training_seconds: float  # spent training so far, the hooks' own time left out


Hook = Callable[[EpochEnd], None]


class EpochHooks:
    """
    The trainer's epoch_end: the hooks, called on rank 0 with `end` (an EpochEnd), its epochs and
    seconds counted on from the earlier stages' and the hooks' own time left out.
    """

    def __init__(self, hooks, end):
        self.hooks, self.end = list(hooks), end
        self.epochs_before, self.seconds_before = end.epoch, end.training_seconds
        self.start, self.hook_seconds = time.monotonic(), 0.0

    def training_seconds(self):
        return self.seconds_before + time.monotonic() - self.start - self.hook_seconds

    def __call__(self, epochs_done):
        if not self.hooks or rank_and_world_size()[0] != 0:
            return
        hooks_start = time.monotonic()
        end = dataclasses.replace(
            self.end,
            epoch=self.epochs_before + epochs_done,
            training_seconds=self.training_seconds(),
        )
        for hook in self.hooks:
            hook(end)
        self.hook_seconds += time.monotonic() - hooks_start


class HeldOutLoss:
    """
    An epoch hook logging the held-out span-corruption loss (the same examples every epoch), also to
    TensorBoard.
    """

    def __init__(self, documents):
        self.documents = documents

    def __call__(self, end: EpochEnd):
        nats, targets = corruption_loss(end.model, self.documents, end.device, HELD_OUT_SEED)
        loss, bits = nats / max(1, targets), bits_per_character(nats, targets)
        logger.info("epoch %d: held-out loss %.4f, %.3f bits per character", end.epoch, loss, bits)
        if end.writer is not None:
            end.writer.add_scalar("held_out/loss_by_epoch", loss, end.epoch)
            end.writer.add_scalar("held_out/bits_per_character_by_epoch", bits, end.epoch)
