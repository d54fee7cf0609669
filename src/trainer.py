"""
The training loop shared by pretraining and finetuning (minGPT's Trainer).

AdamW with weight decay on the matrix-multiply weights only, a learning rate that
warms up linearly and then follows a cosine down to 10% of its peak (both counted
in training tokens, as in minGPT), gradient-norm clipping, a tqdm bar and
TensorBoard scalars.
"""

import logging
import math

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from tqdm import tqdm

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

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def lr_multiplier(tokens, warmup_tokens, final_tokens):
    """The learning-rate factor after `tokens` training tokens: linear warmup, cosine to 0.1, then 0.1."""
    if tokens < warmup_tokens:
        return tokens / max(1, warmup_tokens)
    progress = min(1.0, (tokens - warmup_tokens) / max(1, final_tokens - warmup_tokens))
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))


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

    def train(self):
        config, model = self.config, self.model
        self.tokens_per_example = self.train_dataset[0][0].numel()
        optimizer = torch.optim.AdamW(
            parameter_groups(model, config.weight_decay), lr=config.learning_rate, betas=config.betas
        )
        scheduler = LambdaLR(optimizer, self.lr_lambda)
        loader = DataLoader(
            self.train_dataset,
            batch_size=config.batch_size,
            shuffle=True,
            num_workers=config.num_workers,
            persistent_workers=config.num_workers > 0,
            pin_memory=self.device.type == "cuda",
        )
        bar = tqdm(total=config.max_epochs * len(loader), dynamic_ncols=True, desc="training")
        for epoch in range(config.max_epochs):
            model.train()
            total, batches = 0.0, 0
            for x, y in loader:
                x, y = x.to(self.device), y.to(self.device)
                _, loss = model(x, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
                optimizer.step()
                lr = scheduler.get_last_lr()[0]
                scheduler.step()
                loss = loss.item()
                total, batches = total + loss, batches + 1
                bar.set_description(f"epoch {epoch + 1}/{config.max_epochs} loss {loss:.4f} lr {lr:.2e}", refresh=False)
                bar.update()
                if config.writer is not None:
                    config.writer.add_scalar("train/loss", loss, self.step)
                    config.writer.add_scalar("train/lr", lr, self.step)
                self.step += 1
            self.epoch_losses.append(total / max(1, batches))
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
        """The mean loss over a dataset, with dropout off."""
        self.model.eval()
        loader = DataLoader(dataset, batch_size=self.config.batch_size, num_workers=self.config.num_workers)
        losses = [self.model(x.to(self.device), y.to(self.device))[1].item() for x, y in loader]
        return sum(losses) / max(1, len(losses))
