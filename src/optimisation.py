"""
How the Trainer optimises: AdamW's decayed and undecayed groups, the course's AdamW (fused,
and capturable for a captured step), and the step's arithmetic (fp32, TF32, bf16 or fp16).
"""

import contextlib

import torch
import torch.nn as nn

from capture import capture_mode, lr_tensor, rate_in_tensor

# the course's AdamW rule: names containing these are not decayed
COURSE_NO_DECAY = ("bias", "LayerNorm.weight")


def parameter_groups(model, weight_decay, groups="course"):
    """
    AdamW's two groups, decayed and not. "course" decays by name, as the course's trainer does;
    "matmul" decays only the weights of Linear layers, as nanoGPT does.
    """
    if groups == "course":
        decayed = {
            name
            for name, _ in model.named_parameters()
            if not any(nd in name for nd in COURSE_NO_DECAY)
        }
    else:
        decayed = {
            f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.Linear)
        }
    decay = [p for name, p in model.named_parameters() if name in decayed]
    no_decay = [p for name, p in model.named_parameters() if name not in decayed]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def course_adamw(model, config, device):
    """
    The course's AdamW, fused where PyTorch has it. For a captured step it is capturable, and
    its rate is a tensor on the device that the scheduler writes in place.
    """
    fused = device.type in ("cuda", "cpu") if config.fused_adamw is None else config.fused_adamw
    capture = rate_in_tensor(capture_mode(config, device), device, fused)
    groups = parameter_groups(model, config.weight_decay, config.decay_groups)
    optimizer = torch.optim.AdamW(
        groups, lr=config.learning_rate, betas=config.betas, fused=fused, capturable=capture
    )
    if capture:
        for group in optimizer.param_groups:
            group["initial_lr"], group["lr"] = group["lr"], lr_tensor(group["lr"], device)
    return optimizer


def autocast_and_scaler(precision, device):
    """
    The step's arithmetic: an autocast context for bf16 or fp16 (else none), and a GradScaler that
    scales fp16's loss only. TF32 matmuls are switched on CUDA for "tf32".
    """
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
    return autocast, torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
