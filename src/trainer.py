"""
The training loop shared by pretraining and finetuning (minGPT's Trainer).

AdamW with weight decay on the matrix-multiply weights only, a learning rate that
warms up linearly and then follows a cosine down to 10% of its peak (both counted
in training tokens, block_size-1 per example; step s uses the rate for the tokens
up to and including its own batch), gradient-norm clipping, a tqdm bar and
TensorBoard scalars.

Padding is skipped: every batch is cut after its last target that is not the pad
(exact, since the loss ignores pad targets and every model here is causal), and
batches can be drawn from pools of examples grouped by length (bucket_pool), so
that a batch holds examples of similar length. On CUDA it trains in bf16 (fp16
with a gradient scaler where bf16 is missing) with TF32 matmuls and fused AdamW,
and reads the loss back only every log_every steps instead of after every step.
"""

import contextlib
import logging
import math

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from utils import pick_device, save_params

logger = logging.getLogger(__name__)


class TrainerConfig:
    """Optimisation settings: the class attributes are defaults, every kwarg becomes an attribute."""

    max_epochs = 10
    batch_size = 64
    learning_rate = 3e-4
    betas = (0.9, 0.95)
    grad_norm_clip = 1.0
    weight_decay = 0.1  # only on matmul weights
    lr_decay = False  # linear warmup, then cosine decay to 10%
    warmup_tokens = 375e6
    final_tokens = 260e9  # tokens at which the cosine reaches 10%
    num_workers = 0
    writer = None  # a torch.utils.tensorboard.SummaryWriter, or None
    ckpt_path = None  # where to save the model's state_dict after every epoch, or None
    device = "auto"  # "auto", "cuda", "mps" or "cpu"
    skip_padding = True  # cut every batch after its last non-pad target (exact)
    bucket_pool = 16  # with skip_padding, batches per pool of examples grouped by length (1: no grouping)
    precision = "auto"  # "auto" (bf16, or fp16 + GradScaler, on CUDA; fp32 elsewhere), "fp32", "bf16", "fp16"
    fused_adamw = None  # None: fused on CUDA
    compile = False  # torch.compile the model
    log_every = 10  # steps between reading the loss back for the bar and TensorBoard

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def lr_multiplier(tokens, warmup_tokens, final_tokens):
    """The learning-rate factor after `tokens` training tokens: linear warmup, cosine to 0.1, then 0.1."""
    if tokens < warmup_tokens:
        return tokens / max(1, warmup_tokens)
    progress = min(1.0, (tokens - warmup_tokens) / max(1, final_tokens - warmup_tokens))
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


def real_lengths(y):
    """(B, T) targets -> (B,) the position after each row's last target that is not the pad 0."""
    positions = torch.arange(1, y.size(1) + 1, device=y.device)
    return ((y != 0) * positions).max(dim=1).values


def length_buckets(x, y, batch_size):
    """
    Split a pool of examples into batches of similar length, each cut to its longest row.
    The full batches come in random order (ties in length broken at random), then a
    short remainder batch of randomly chosen examples, as a DataLoader would end an epoch.
    """
    lengths = real_lengths(y)
    order = torch.randperm(len(y))
    n_remainder = len(y) % batch_size
    remainder, rest = order[:n_remainder], order[n_remainder:]
    rest = rest[torch.argsort(lengths[rest], stable=True)]
    chunks = [rows for rows in rest.split(batch_size) if len(rows)]
    chunks = [chunks[i] for i in torch.randperm(len(chunks)).tolist()] + ([remainder] if n_remainder else [])
    for rows in chunks:
        n = max(1, int(lengths[rows].max()))
        yield x[rows, :n], y[rows, :n]


def autocast_dtype(device, precision):
    """The dtype to autocast to, or None for fp32."""
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def parameter_groups(model, weight_decay):
    """AdamW groups: decay the weights that multiply activations, not biases, LayerNorms or embeddings."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():
        (decay if p.dim() == 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Trainer:
    """Trains `model` on `train_dataset` (pairs of Long tensors x, y); reports the loss on `test_dataset` if given."""

    def __init__(self, model, train_dataset, test_dataset, config):
        self.config = config
        self.device = pick_device(config.device)
        self.model = model.to(self.device)
        self.train_dataset = train_dataset
        self.test_dataset = test_dataset
        self.epoch_losses = []  # mean training loss of every finished epoch
        self.step = 0  # optimizer steps taken
        self.useful_tokens = 0  # targets trained on that are not the pad

    def tokens_after(self, step):
        """Training tokens seen once batch `step` (0-based) is done: the schedule's clock."""
        n, bs = len(self.train_dataset), self.config.batch_size
        steps_per_epoch = math.ceil(n / bs)
        epochs, within = divmod(step, steps_per_epoch)
        return (epochs * n + min((within + 1) * bs, n)) * self.tokens_per_example

    def lr_lambda(self, step):
        if not self.config.lr_decay:
            return 1.0
        return lr_multiplier(self.tokens_after(step), self.config.warmup_tokens, self.config.final_tokens)

    def batches(self, loader):
        """The training batches of one epoch, on the device."""
        config = self.config
        for x, y in loader:
            if config.skip_padding:
                pieces = length_buckets(x, y, config.batch_size)
            else:
                pieces = [(x, y)]
            for xb, yb in pieces:
                self.useful_tokens += int((yb != 0).sum())
                if self.device.type == "cuda":
                    xb, yb = xb.pin_memory(), yb.pin_memory()
                yield xb.to(self.device, non_blocking=True), yb.to(self.device, non_blocking=True)

    def train(self):
        config, model = self.config, self.model
        self.tokens_per_example = self.train_dataset[0][0].numel()
        on_cuda = self.device.type == "cuda"
        if on_cuda:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        dtype = autocast_dtype(self.device, config.precision)
        autocast = torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        scaler = torch.amp.GradScaler(self.device.type, enabled=dtype == torch.float16)
        fused = on_cuda if config.fused_adamw is None else config.fused_adamw
        optimizer = torch.optim.AdamW(
            parameter_groups(model, config.weight_decay), lr=config.learning_rate, betas=config.betas, fused=fused
        )
        scheduler = LambdaLR(optimizer, self.lr_lambda)
        forward = torch.compile(model, dynamic=True) if config.compile else model
        pool = config.batch_size * (config.bucket_pool if config.skip_padding else 1)
        loader = DataLoader(
            self.train_dataset,
            batch_size=pool,
            shuffle=True,
            num_workers=config.num_workers,
            persistent_workers=config.num_workers > 0,
            pin_memory=on_cuda,
        )
        steps_per_epoch = math.ceil(len(self.train_dataset) / config.batch_size)
        bar = tqdm(total=config.max_epochs * steps_per_epoch, dynamic_ncols=True, desc="training")
        for epoch in range(config.max_epochs):
            model.train()
            epoch_loss = torch.zeros((), device=self.device)
            window_loss, window_steps = torch.zeros((), device=self.device), 0
            for x, y in self.batches(loader):
                with autocast:
                    _, loss = forward(x, y)
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
                scaler.step(optimizer)
                scaler.update()
                lr = scheduler.get_last_lr()[0]
                scheduler.step()
                epoch_loss += loss.detach().float()
                window_loss += loss.detach().float()
                window_steps += 1
                self.step += 1
                bar.update()
                if config.writer is not None:
                    config.writer.add_scalar("train/lr", lr, self.step)
                if self.step % config.log_every == 0:
                    mean = window_loss.item() / window_steps
                    window_loss.zero_()
                    window_steps = 0
                    bar.set_description(f"epoch {epoch + 1}/{config.max_epochs} loss {mean:.4f} lr {lr:.2e}", refresh=False)
                    if config.writer is not None:
                        config.writer.add_scalar("train/loss", mean, self.step)
            self.epoch_losses.append(epoch_loss.item() / steps_per_epoch)
            logger.info("epoch %d: mean train loss %.4f", epoch + 1, self.epoch_losses[-1])
            if self.test_dataset is not None:
                test_loss = self.evaluate_loss(self.test_dataset)
                logger.info("epoch %d: test loss %.4f", epoch + 1, test_loss)
                if config.writer is not None:
                    config.writer.add_scalar("test/loss", test_loss, self.step)
            if config.ckpt_path is not None:
                save_params(model, config.ckpt_path)
        bar.close()

    @torch.no_grad()
    def evaluate_loss(self, dataset):
        """The mean loss over a dataset, with dropout off; the model's mode is left as it was."""
        was_training = self.model.training
        self.model.eval()
        loader = DataLoader(dataset, batch_size=self.config.batch_size, num_workers=self.config.num_workers)
        losses = [self.model(x.to(self.device), y.to(self.device))[1].item() for x, y in loader]
        self.model.train(was_training)
        return sum(losses) / max(1, len(losses))
