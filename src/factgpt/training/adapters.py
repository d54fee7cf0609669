"""
What finetuning leaves out of training: frozen parts (Recipe.finetune_frozen), or every weight, with
low-rank adapters (LoRA, Hu et al. 2021; Recipe.finetune_lora_rank) trained instead. An adapted
Linear weight W is trained as W + B A, W frozen and B zero at first, so that finetuning starts from
the pretrained model. merge() folds B A into W, so that the params file is a plain state_dict like
every other.
"""

import math

import torch
from torch import nn
from torch.nn.utils import parametrize


def freeze(model, parts):
    """
    Leave the parameters of the model's `parts` (settings.recipe.FREEZABLE) out of training: they
    get no gradient, so AdamW neither moves nor decays them. "ln" is every part whose name starts
    with ln.
    """
    for name, parameter in model.named_parameters():
        components = name.split(".")
        if any(
            c == part or (part == "ln" and c.startswith("ln")) for part in parts for c in components
        ):
            parameter.requires_grad_(False)


class LowRankDelta(nn.Module):
    """The parametrization W -> W + B A of a (out, in) weight."""

    def __init__(self, weight, rank):
        super().__init__()
        out_features, in_features = weight.shape
        # drawn by the CPU's generator, then put where the weight is (a model already on its device)
        a = torch.randn(rank, in_features, dtype=weight.dtype) / math.sqrt(in_features)
        self.A = nn.Parameter(a.to(weight.device))
        self.B = nn.Parameter(
            torch.zeros(out_features, rank, dtype=weight.dtype, device=weight.device)
        )

    def forward(self, weight):
        return weight + self.B @ self.A


def add(model, rank):
    """Freeze every parameter of the model and give each Linear weight a rank-`rank` adapter."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            parametrize.register_parametrization(
                module, "weight", LowRankDelta(module.weight, rank)
            )


def merge(model):
    """Fold the adapters into the weights (W + B A) and remove them; no-op without adapters."""
    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
            module.weight.requires_grad_(True)
