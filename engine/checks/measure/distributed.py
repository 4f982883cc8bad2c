"""One rank of a simulated multi-GPU world: a fake process group, fake tensors, and a tracker beneath DTensor.

The world. ``fake_world(n, rank)`` initialises torch.distributed with the ``fake`` backend
(``torch.testing._internal.distributed.fake_pg``): every collective returns at once without moving data,
so one process runs the code of rank ``rank`` of a world of ``n``, with the buffers that rank's framework
code allocates around its collectives (FSDP2's all-gather and reduce-scatter buffers, DDP's buckets,
DTensor's functional collectives, the pipeline's receive buffers). Nothing is re-implemented: the allocations
are the framework's own.

The tracker. The single-GPU harness stacks a ``LiveBytes`` dispatch mode above ``FakeTensorMode``. A mode
above the fake mode sees an op on DTensors before DTensor unwraps it, so it would log the DTensor *wrapper*
(whose storage reports the global size) and never see the local ops and collectives DTensor runs inside.
``TrackedFakeMode`` is therefore the fake mode itself: every op that reaches the fake mode at the top level
(not the ops of a decomposition the fake mode runs inside an op) is logged, with the local shapes a rank
really holds. For plain tensors this is the same set of ops the single-GPU tracker sees (the tests check
that one-rank runs reproduce ``measure_case`` to the byte).

What the fake tensors need beside that, each confined to the run, is in fake_tensor_patches.py, and the labels of
what the frameworks allocate around their collectives in buffer_tags.py. One need is met here:

* ``_c10d_functional.wait_tensor`` returns its input on a real device; its fake kernel returns a fresh tensor.
  The log treats the output as the input's storage (``RankLiveBytes.alias``), so no collective is counted twice.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves

from engine.checks.measure.tracker import Alloc, LiveBytes

# Functional collectives (torch.distributed._functional_collectives) whose outputs are communication buffers.
COLLECTIVES = {"all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_to_all_single",
               "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced", "all_reduce_coalesced",
               "broadcast"}


@contextmanager
def fake_world(world_size: int, rank: int = 0):
    """torch.distributed initialised with the fake backend as rank ``rank`` of ``world_size``; torn down after."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def local(t):
    """The tensor a rank holds: a DTensor's local shard, anything else unchanged."""
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


class RankLiveBytes(LiveBytes):
    """``LiveBytes`` used as a log (not entered as a mode): adds storage-level records and aliases, and a tag
    per record (``tags[id(record)]``: a kind, and the parameter group or collective it belongs to)."""

    def __init__(self) -> None:
        super().__init__()
        self.tag: str | None = None  # set by `tagging` while a wrapped framework function runs
        self.tags: dict[int, str] = {}
        self.stream = 0  # the stream allocations go to (buffer_tags.stream_scopes; 0 = the default stream)
        self.streams: dict[int, int] = {}  # record id -> the stream it was allocated on, when not the default

    def track(self, t: torch.Tensor, op: str = "external") -> None:
        before = len(self.records)
        super().track(t, op)
        if len(self.records) > before and self.tag is not None:
            self.tags[id(self.records[-1])] = self.tag
        if len(self.records) > before and self.stream:
            self.streams[id(self.records[-1])] = self.stream

    def track_storage(self, st: torch.UntypedStorage, op: str, tag: str | None) -> None:
        """A storage that grew from nothing (FSDP2's ``alloc_storage``): a new record of its size."""
        key = st._cdata
        rec = Alloc(st.nbytes(), self.tick(), self.phase, self.micro, self.step, op, self.layer, self.module,
                    "", (st.nbytes(),))
        self.records.append(rec)
        self._live[key] = rec
        self._refs[key] = weakref.ref(st, lambda _r, k=key: self._free(k))
        if tag or self.tag:
            self.tags[id(rec)] = tag or self.tag
        if self.stream:
            self.streams[id(rec)] = self.stream

    def free_storage(self, st: torch.UntypedStorage) -> None:
        """A storage resized to nothing (FSDP2's ``free_storage``): its record dies now."""
        self._free(st._cdata)

    def alias(self, out: torch.Tensor, of: torch.Tensor) -> None:
        """``out`` is, on a real device, the very storage of ``of`` (``wait_tensor``): move the record over."""
        src, dst = of.untyped_storage()._cdata, out.untyped_storage()._cdata
        rec = self._live.get(dst)
        if rec is None or src == dst or src not in self._live:
            return
        self._live.pop(dst)  # the fresh record the fake kernel's output got
        self._refs.pop(dst, None)
        self.records.remove(rec)
        self.tags.pop(id(rec), None)
        old = self._live.pop(src)
        self._refs.pop(src, None)
        self._live[dst] = old
        self._refs[dst] = weakref.ref(out.untyped_storage(), lambda _r, k=dst: self._free(k))


class TrackedFakeMode(FakeTensorMode):
    """``FakeTensorMode`` that logs every storage the ops dispatched to it return (see module docstring)."""

    def __init__(self, lb: RankLiveBytes) -> None:
        super().__init__()
        self.lb = lb
        self._depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._depth:  # an op inside a decomposition the fake mode runs: part of the outer op
            return super().__torch_dispatch__(func, types, args, kwargs)
        self._depth += 1
        try:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self._depth -= 1
        if out is NotImplemented:  # DTensor (or another subclass) handles it and calls back with local tensors
            return out
        self._log(func, args, out)
        return out

    def _log(self, func, args, out) -> None:
        lb = self.lb
        name = str(func.overloadpacket.__name__) + ("" if func._overloadname == "default" else "." + func._overloadname)
        if name == "wait_tensor" and isinstance(out, torch.Tensor):
            lb.track(out, name)
            lb.alias(out, args[0])
            return
        tag = lb.tag
        if name in COLLECTIVES and tag is None:
            lb.tag = "collective@" + name
        try:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    lb.track(t, name)
        finally:
            lb.tag = tag
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.Tensor):
            rec = lb.record_of(out)
            if rec is not None and rec.op == name:
                rec.src = lb.record_of(args[0])
