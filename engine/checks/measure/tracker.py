"""A dispatch-level tracker of live tensor storage bytes, with a full allocation log.

Every tensor an ATen operator returns is looked at below autograd (a ``TorchDispatchMode``, as
``torch.distributed._tools.mem_tracker.MemTracker`` does); each new storage gets a record with its
size, the operator that made it, the training phase, the micro-step and the module that was running.
A weak reference to the storage (PyTorch keeps one Python object per live ``StorageImpl``) stamps
the record with the clock tick at which the storage is freed. The peak and its breakdown are worked
out afterwards from the log (``breakdown.py``), so nothing is classified while the step runs.

What it sees: every allocation that passes through the dispatcher, as ``torch.cuda.memory_allocated``
would. What it cannot see: buffers a kernel allocates inside itself (cuBLAS/flash workspaces),
which never reach the dispatcher; on a fake or CPU run those kernels do not exist anyway.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

CUDA_BLOCK_BYTES = 512  # c10/cuda/CUDACachingAllocator.cpp kMinBlockSize: every block rounds up to this


def rounded_bytes(nbytes: int) -> int:
    """Bytes the CUDA caching allocator hands out for a request of ``nbytes`` (multiple of 512, min 512)."""
    return max(1, -(-nbytes // CUDA_BLOCK_BYTES)) * CUDA_BLOCK_BYTES if nbytes else 0


@dataclass
class Alloc:
    """One storage: its size, when it was born and freed (clock ticks), and who made it."""

    nbytes: int
    born: int
    phase: str  # forward | backward | optimizer | zero_grad | setup
    micro: int  # micro-step index within the optimizer step (grad_accum)
    step: int  # optimizer step index (0 = warm-up, 1 = measured)
    op: str  # ATen overload that returned it, or "external"
    layer: int | None  # transformer block index while it ran, None outside the blocks
    module: str  # innermost running module, relative to its block (e.g. "attn.c_attn")
    dtype: str
    shape: tuple
    died: int | None = None
    host: bool = False  # lives in host memory on CUDA (optimizer ``step`` counters): not counted
    src: "Alloc | None" = None  # for ``_to_copy``: the storage it copied (finds autocast weight casts)


class LiveBytes(TorchDispatchMode):
    """Log every storage an operator returns; ``phase``/``micro``/``layer`` are set by the caller.

    Examples
    --------
    >>> with LiveBytes() as lb:
    ...     y = torch.ones(4) * 2
    >>> [r.nbytes for r in lb.records]
    [16, 16]
    """

    def __init__(self) -> None:
        super().__init__()
        self.records: list[Alloc] = []
        self.marks: dict[str, int] = {}
        self.clock = 0
        self.phase, self.micro, self.step = "setup", 0, 0
        self.layer: int | None = None
        self.module = ""
        self._live: dict[int, Alloc] = {}
        self._refs: dict[int, weakref.ref] = {}

    def tick(self) -> int:
        """Advance the clock; every allocation and every free gets its own tick."""
        self.clock += 1
        return self.clock

    def mark(self, name: str) -> None:
        """Remember the current tick under ``name`` (e.g. the start of the measured step)."""
        self.marks[name] = self.tick()

    def track(self, t: torch.Tensor, op: str = "external") -> None:
        """Start following the storage behind ``t`` unless it is followed already."""
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.device.type == "meta":
            return  # a meta tensor holds no memory (DeepSpeed's ZeRO makes one per parameter to plan its groups)
        st = t.untyped_storage()
        key = st._cdata
        if key in self._live or st.nbytes() == 0:
            return
        rec = Alloc(st.nbytes(), self.tick(), self.phase, self.micro, self.step, op,
                    self.layer, self.module, str(t.dtype).replace("torch.", ""), tuple(t.shape))
        self.records.append(rec)
        self._live[key] = rec
        self._refs[key] = weakref.ref(st, lambda _r, k=key: self._free(k))

    def _free(self, key: int) -> None:
        rec = self._live.pop(key, None)
        self._refs.pop(key, None)
        if rec is not None:
            rec.died = self.tick()

    def record_of(self, t: torch.Tensor) -> Alloc | None:
        """The live record behind ``t``, if it is followed."""
        return self._live.get(t.untyped_storage()._cdata)

    def live_bytes(self) -> int:
        """Bytes of all followed storages alive now (host-resident ones left out)."""
        return sum(r.nbytes for r in self._live.values() if not r.host)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__) + ("" if func._overloadname == "default" else "." + func._overloadname)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.track(t, name)
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.Tensor):
            rec = self.record_of(out)
            if rec is not None and rec.op == name:
                rec.src = self.record_of(args[0])
        return out
