"""
Devices and processes: the device, this process's rank, torchrun's process group, gathering results,
and a rank's exit.
"""

import gc
import os
import sys

import torch
import torch.distributed as dist

# what --device takes: "auto" is the first of the others that is available
DEVICES = ("auto", "cuda", "mps", "cpu")


def pick_device(name="auto"):
    """torch.device for one of DEVICES; a torch.device as is."""
    if isinstance(name, torch.device):
        return name
    available = {
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
        "cpu": True,
    }
    if name == "auto":
        name = next(device for device, ok in available.items() if ok)
    elif not available[name]:
        raise RuntimeError(f"device {name} is not available on this machine (try --device auto)")
    return torch.device(name)


def launched_by_torchrun():
    """True in the processes torchrun starts with more than one of them."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def launch_rank():
    """
    This process's rank as torchrun announces it (0 without torchrun), known before the process
    group starts.
    """
    return int(os.environ.get("RANK", "0"))


def rank_and_world_size():
    """
    This process's rank and the number of processes under torch.distributed; 0 and 1 without it.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def start_distributed(device):
    """
    Join torchrun's process group when launched by torchrun (NCCL on GPUs, gloo on the CPU) and
    return this rank's device; RuntimeError for a device torchrun cannot use.
    """
    if not launched_by_torchrun():
        return device
    # a second run in the same processes (a research script's finetuning after pretraining)
    if dist.is_initialized():
        return (
            torch.device("cuda", int(os.environ["LOCAL_RANK"])) if device.type == "cuda" else device
        )
    if device.type not in ("cuda", "cpu"):
        raise RuntimeError(
            f"torchrun runs on CUDA GPUs or the CPU, not on {device.type} (pass --device cpu)"
        )
    if device.type == "cuda":
        local_rank, gpus = int(os.environ["LOCAL_RANK"]), torch.cuda.device_count()
        if local_rank >= gpus:
            raise RuntimeError(
                "torchrun started more processes on this machine than its "
                f"{gpus} visible CUDA GPU(s): use --nproc_per_node {gpus}, or --device cpu"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def over_ranks(value, op):
    """
    The device tensor `value` reduced over the ranks with `op` (a dist.ReduceOp) in a copy; itself
    in one process.
    """
    if rank_and_world_size()[1] == 1:
        return value
    value = value.clone()
    dist.all_reduce(value, op=op)
    return value


def gather_interleaved(items, total):
    """
    The whole list, in order, on every rank, from the ranks' shares: rank r holds items r, r + N, r
    + 2N, ...
    """
    _, world_size = rank_and_world_size()
    if world_size == 1:
        return items
    shares = [None] * world_size
    dist.all_gather_object(shares, items)
    return [shares[i % world_size][i // world_size] for i in range(total)]


def exit_process(code):
    """
    sys.exit(code), but a torchrun rank skips Python's finalization: a gloo thread still releasing
    the last collective's tensors would abort it (docs/robustness.md).
    """
    if not launched_by_torchrun():
        sys.exit(code)
    gc.collect()  # what still holds resources (a DataLoader's worker processes) lets them go
    sys.stdout.flush()
    sys.stderr.flush()  # the log messages went there
    os._exit(code)
