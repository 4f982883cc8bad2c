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

What the fake tensors need beside that, each confined to the run:

* FSDP2 frees and re-allocates the unsharded parameters by resizing their storage
  (``_fsdp_param.free_storage`` / ``alloc_storage``: ``UntypedStorage.resize_``), not by dropping tensors;
  ``storage_resizes`` logs each resize as a free and a new allocation.
* A ``DeviceMesh`` keeps its rank layout in small host tensors; built under the fake mode they would be fake
  and unreadable, so mesh construction runs with the fake mode set aside (``host_meshes``). They are host
  memory on a GPU as well.
* ``_c10d_functional.wait_tensor`` returns its input on a real device; its fake kernel returns a fresh tensor.
  The log treats the output as the input's storage (``RankLiveBytes.alias``), so no collective is counted twice.
* DTensor derives an op's global output shape by running the op on global-shape fake tensors
  (``ShardingPropagator._propagate_tensor_meta_non_cached``, called directly by the loss-parallel handlers),
  in the active fake mode if there is one. On a GPU there is none and those "shadow" tensors live in a
  throw-away fake mode; ``shadow_shapes`` gives them one here too, so they are not logged as this rank's.
* Tags: framework functions that allocate communication buffers are wrapped to label what they allocate
  (``tagging``): FSDP2's all-gather, copy-out (unsharded parameters) and reduce-scatter per parameter group,
  DDP's buckets, the pipeline's receive buffers; functional collectives are labelled by their op.
"""

from __future__ import annotations

import weakref
from contextlib import ExitStack, contextmanager

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
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

    def track(self, t: torch.Tensor, op: str = "external") -> None:
        before = len(self.records)
        super().track(t, op)
        if len(self.records) > before and self.tag is not None:
            self.tags[id(self.records[-1])] = self.tag

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


@contextmanager
def storage_resizes(lb: RankLiveBytes):
    """Log ``UntypedStorage.resize_`` (FSDP2's way of freeing and re-allocating unsharded parameters); a storage
    FSDP2 re-allocates (``_fsdp_param.alloc_storage``) is labelled with its tensor's dtype and shape."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    original = torch.UntypedStorage.resize_

    def resize_(st, size):
        out = original(st, size)
        lb.free_storage(st)
        if size:
            lb.track_storage(st, "resize_", None)
        return out

    def labelled(alloc):
        def alloc_storage(tensor):
            alloc(tensor)
            rec = lb.record_of(tensor)
            if rec is not None and rec.op == "resize_":
                rec.dtype, rec.shape = str(tensor.dtype).replace("torch.", ""), tuple(tensor.shape)

        return alloc_storage

    torch.UntypedStorage.resize_ = resize_
    try:
        with patched(_fsdp_param, "alloc_storage", labelled):
            yield
    finally:
        torch.UntypedStorage.resize_ = original


@contextmanager
def host_meshes():
    """Build ``DeviceMesh`` bookkeeping tensors as real host tensors, with the fake mode set aside."""
    import torch.distributed.device_mesh as dm
    from torch.distributed.device_mesh import DeviceMesh

    init, mesh, init_mesh = DeviceMesh.__init__, DeviceMesh.mesh, dm.init_device_mesh

    def init_device_mesh(*args, **kwargs):
        with unset_fake_temporarily():
            return init_mesh(*args, **kwargs)

    def __init__(self, *args, **kwargs):
        with unset_fake_temporarily():
            init(self, *args, **kwargs)

    def mesh_tensor(self):
        with unset_fake_temporarily():
            return mesh.fget(self)

    DeviceMesh.__init__ = __init__
    DeviceMesh.mesh = property(mesh_tensor)
    dm.init_device_mesh = dist.init_device_mesh = init_device_mesh
    try:
        yield
    finally:
        DeviceMesh.__init__, DeviceMesh.mesh = init, mesh
        dm.init_device_mesh = dist.init_device_mesh = init_mesh


@contextmanager
def shadow_shapes():
    """DTensor's shape propagation runs in a fake mode of its own, as it does on a GPU (see module docstring)."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def non_cached(self, op_schema):
        with unset_fake_temporarily():
            return original(self, op_schema)

    ShardingPropagator._propagate_tensor_meta_non_cached = non_cached
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original


@contextmanager
def patched(obj, name: str, wrapper):
    """``obj.name`` replaced by ``wrapper(original)`` for the duration."""
    original = getattr(obj, name)
    setattr(obj, name, wrapper(original))
    try:
        yield original
    finally:
        setattr(obj, name, original)


def _tagged(lb: RankLiveBytes, kind: str, label=None):
    """Wrap a function so that what it allocates is tagged ``kind@label(args)``."""

    def wrap(fn):
        def inner(*args, **kwargs):
            old = lb.tag
            lb.tag = kind if label is None else f"{kind}@{label(*args, **kwargs)}"
            try:
                return fn(*args, **kwargs)
            finally:
                lb.tag = old

        return inner

    return wrap


def fsdp_group_name(group) -> str:
    """A readable name for an FSDP2 parameter group: the module path its first parameter lives in."""
    fqn = group.fsdp_params[0]._param_fqn if group.fsdp_params else ""
    parts = fqn.split(".")
    if "layers" in parts:
        i = parts.index("layers")
        return ".".join(parts[: i + 2])
    return "root"


@contextmanager
def tagging(lb: RankLiveBytes):
    """Tag the communication buffers the frameworks allocate (see module docstring)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg
    from torch.distributed.pipelining import stage as pp_stage

    name = lambda group, *args, **kwargs: fsdp_group_name(group)
    with ExitStack() as stack:
        stack.enter_context(patched(pg.FSDPParamGroup, "unshard", _tagged(lb, "fsdp_all_gather", name)))
        stack.enter_context(patched(pg.FSDPParamGroup, "wait_for_unshard", _tagged(lb, "fsdp_unsharded", name)))
        stack.enter_context(patched(pg.FSDPParamGroup, "post_backward", _tagged(lb, "fsdp_reduce_scatter", name)))
        stack.enter_context(patched(pp_stage, "_make_tensor_from_meta", _tagged(lb, "pp_recv")))
        yield


# Framework buffers that are neither model states nor activations, whatever their lifetime: FSDP2's gathered
# parameters and its all-gather / reduce-scatter buffers, DDP's buckets (unless they are the gradients), the
# pipeline's receive buffers.
BUFFER_KINDS = ("fsdp_unsharded", "fsdp_all_gather", "fsdp_reduce_scatter", "ddp_bucket", "pp_recv")


def kind(tag: str | None) -> str | None:
    """The kind of a tag (``fsdp_unsharded@model.layers.3`` -> ``fsdp_unsharded``)."""
    return tag.split("@")[0] if tag else None


@contextmanager
def offload_copies(lb: RankLiveBytes):
    """FSDP2's CPUOffloadPolicy copies between host and device, on a build whose one device is the host.

    With the parameters offloaded, FSDP2 copies each shard to the device before the all-gather
    (``FSDPParam.all_gather_inputs``: ``sharded_param_data.to(self.device)``) and each reduced gradient shard to
    the host (``foreach_reduce``: ``new_sharded_grad.to(torch.device("cpu"))``). Here both devices are the CPU,
    so ``Tensor.to`` returns the tensor itself and neither copy exists; inside those two functions a copy to a
    device is made a ``clone`` (a device copy in the first, a host copy, marked host, in the second), as CUDA
    allocates them.
    """
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives, _fsdp_param, _fsdp_param_group

    to = torch.Tensor.to
    where: list[str] = []

    def copying_to(t, *args, **kwargs):
        if where and args and isinstance(args[0], torch.device) and len(args) == 1 and "dtype" not in kwargs:
            out = t.clone()
            if where[-1] == "host":
                lb.record_of(out).host = True
            return out
        return to(t, *args, **kwargs)

    def inside(side):
        def wrap(fn):
            def inner(*args, **kwargs):
                where.append(side)
                try:
                    return fn(*args, **kwargs)
                finally:
                    where.pop()

            return inner

        return wrap

    inputs = _fsdp_param.FSDPParam.all_gather_inputs
    _fsdp_param.FSDPParam.all_gather_inputs = property(inside("device")(inputs.fget))
    torch.Tensor.to = copying_to
    try:
        with ExitStack() as stack:
            stack.enter_context(patched(_fsdp_collectives, "foreach_reduce", inside("host")))
            stack.enter_context(patched(_fsdp_param_group, "foreach_reduce", inside("host")))
            yield
    finally:
        torch.Tensor.to = to
        _fsdp_param.FSDPParam.all_gather_inputs = inputs
