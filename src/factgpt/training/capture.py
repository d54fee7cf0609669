"""
One training step captured once and replayed as a CUDA graph (Recipe.captured_step): forward,
backward, clipping and fused AdamW in one launch instead of hundreds of kernels from the host.
The ways:
- "cuda_graph": torch.cuda.graph of the eager kernels;
- "compiled": torch.compile(mode="reduce-overhead"), inductor's kernels in its own CUDA graphs;
- "fused_graph": inductor's kernels, compiled without its CUDA graphs, captured in one
  torch.cuda.graph;
- "auto", the default: see capture_mode.

Capture needs a step that reads nothing back to the host, its learning rate in a tensor (lr_tensor),
AdamW's capturable state made by eager warm-up steps, and dropout from the default CUDA generator,
so that each replay draws anew.
"""

import logging

import torch

from factgpt.common.distributed import rank_and_world_size

logger = logging.getLogger(__name__)

# eager steps, on a side stream, before the capture (PyTorch's advice for whole-network capture)
WARMUP_STEPS = 3


def capture_mode(config, device):
    """
    The way config.captured_step asks for on this device. "auto" is a CUDA graph on one CUDA process
    (the fastest there: docs/speed.md) without --compile or fp16, whose capture is not yet measured;
    else off.
    """
    if config.captured_step != "auto":
        return config.captured_step
    alone_on_cuda = device.type == "cuda" and rank_and_world_size()[1] == 1
    return (
        "cuda_graph"
        if alone_on_cuda and config.precision != "fp16" and not config.compile
        else "off"
    )


def lr_tensor(value, device):
    """
    A learning rate as the tensor a captured AdamW reads: float32 on CUDA, for its fused kernel, and
    float64 elsewhere, with which the CPU's fused kernel takes the same steps as with a float.
    """
    dtype = torch.float32 if device.type == "cuda" else torch.float64
    return torch.tensor(value, dtype=dtype, device=device)


def rate_in_tensor(way, device, fused):
    """
    Whether AdamW's rate is a tensor and its state capturable: for a captured step, on CUDA or with
    a fused AdamW.
    """
    return way != "off" and (device.type == "cuda" or fused)


def captured(step, way, device, world_size):
    """
    `step(x, y) -> loss` run as `way` (a captured_step but "auto") says, or uncaptured where it
    cannot be.
    """
    if way == "off":
        return step
    if way == "fused_graph":  # the graph's kernels: inductor's, compiled at the first warm-up step
        step = torch.compile(step)
    if device.type != "cuda" or world_size > 1:
        logger.warning("captured_step %s needs CUDA and one process: the step runs uncaptured", way)
        return step
    if way == "compiled":
        return CompiledStep(step)
    return CudaGraphStep(step)


class CudaGraphStep:
    """
    `step(x, y) -> loss` on batches of one shape: WARMUP_STEPS eager calls on a side stream, then
    one CUDA graph replayed with each batch copied in. The next replay overwrites the loss returned:
    add it up first.
    """

    def __init__(self, step):
        self.step, self.warmup, self.graph = step, WARMUP_STEPS, None
        # the warm-up steps' stream: one, so that its cached blocks serve every warm-up step
        self.side = None

    def __call__(self, x, y):
        if self.graph is None and self.warmup:
            self.warmup -= 1
            self.side = self.side or torch.cuda.Stream()
            return self.on_side_stream(self.side, self.step, x, y)
        if self.graph is None:
            self.x, self.y, self.graph = x.clone(), y.clone(), torch.cuda.CUDAGraph()
            # a data thread may run
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.loss = self.step(self.x, self.y)
        else:
            self.x.copy_(x)
            self.y.copy_(y)
        self.graph.replay()
        return self.loss

    @staticmethod
    def on_side_stream(side, step, x, y):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            loss = step(x, y)
        torch.cuda.current_stream().wait_stream(side)
        return loss


class CompiledStep:
    """
    `step(x, y) -> loss` compiled with mode="reduce-overhead": inductor's kernels, replayed as CUDA
    graphs.
    """

    def __init__(self, step):
        self.compiled = torch.compile(step, mode="reduce-overhead")

    def __call__(self, x, y):
        # the last step's outputs may be overwritten: they were added up
        torch.compiler.cudagraph_mark_step_begin()
        return self.compiled(x, y)
