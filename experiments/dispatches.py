"""
The aten operators a piece of code dispatches, counted by name, and those among them the host waits
for. A step that the host never waits for can be captured as a CUDA graph (capture.py).
"""

import collections

from torch.utils._python_dispatch import TorchDispatchMode

# aten operators the host waits for (on a GPU, a sync): a scalar read back, a nonzero's size
HOST_READS = ("_local_scalar_dense", "item", "nonzero", "is_nonzero")


class DispatchCount(TorchDispatchMode):
    """Counts the aten operators dispatched inside it, by name."""

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def host_reads(self):
        """How many of the calls the host waits for."""
        return sum(self.calls[name] for name in HOST_READS)
