"""What fake tensors need to run one rank's framework code as a GPU runs it, each a context confined to the run
(the world and the tracker: distributed.py):

* FSDP2 frees and re-allocates the unsharded parameters by resizing their storage
  (``_fsdp_param.free_storage`` / ``alloc_storage``: ``UntypedStorage.resize_``), not by dropping tensors;
  ``storage_resizes`` logs each resize as a free and a new allocation.
* A ``DeviceMesh`` keeps its rank layout in small host tensors; built under the fake mode they would be fake
  and unreadable, so mesh construction runs with the fake mode set aside (``host_meshes``). They are host
  memory on a GPU as well.
* DTensor derives an op's global output shape by running the op on global-shape fake tensors
  (``ShardingPropagator._propagate_tensor_meta_non_cached``, called directly by the loss-parallel handlers),
  in the active fake mode if there is one. On a GPU there is none and those "shadow" tensors live in a
  throw-away fake mode; ``shadow_shapes`` gives them one here too, so they are not logged as this rank's.
* FSDP2's CPUOffloadPolicy copies between host and device; on a build whose one device is the host those copies
  do not exist, and ``offload_copies`` makes them.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import unset_fake_temporarily

from engine.checks.measure.distributed import RankLiveBytes


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
