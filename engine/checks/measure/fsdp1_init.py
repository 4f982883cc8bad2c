"""FSDP1's initialisation on rank 0 when the model was loaded into host RAM: what it allocates on the GPU.

Answer.AI's fsdp_qlora (``low_memory``, its default) and accelerate (``fsdp_cpu_ram_efficient_loading``) load the
checkpoint on rank 0 only, into host RAM (the other ranks build the model on the meta device), empty the CUDA
cache, and let ``FullyShardedDataParallel(..., device_id=..., sync_module_states=True)`` bring it to the GPUs.
FSDP1 does so unit by unit, children before their parent (torch/distributed/fsdp/_init_utils.py,
``_init_param_handle_from_module``):

1. ``_move_module_to_device``: the unit's host parameters and buffers are copied to the GPU (``param.data =
   param.to(device)``), each a new allocation;
2. ``_sync_module_params_and_buffers``: rank 0 broadcasts them (``dist._broadcast_coalesced``, buckets of
   ``PARAM_BROADCAST_BUCKET_SIZE`` = 250 MiB): torch/csrc/distributed/c10d/comm.cpp ``broadcast_coalesced``
   flattens each bucket into a new tensor (``BroadcastWork``: ``flatten_dense_tensors``), at most two buckets in
   flight, and frees each once copied back; a bucket closes when it reaches the size, so a larger tensor is a
   bucket of its own (``compute_bucket_assignment_by_size``, one open bucket per dtype);
3. ``FlatParamHandle``: the unit's parameters are flattened into one new tensor and sharded (a copy of this rank's
   chunk), the unsharded flat parameter and the copied parameters freed.

The harness runs FSDP1 itself on the simulated world, so step 3 is FSDP1's own code; steps 1 and 2 need a GPU
(``sync_module_states`` refuses host parameters) and are emulated here, by size, exactly as the code above
allocates. The caching allocator keeps what these transients reserved (the cache is not emptied after wrapping), and
training starts with it: ``torch.cuda.reset_peak_memory_stats()`` at the start of training sets the reserved peak to
what is reserved then, so a run's reported reserved peak is at least this phase's leftover.

With ``CPUOffload(offload_params=True)`` (offload = optimizer_params) each unit's shard goes back to the host once
made (``_init_param_handle_from_module``: ``handle.flat_param_to(cpu)``), is pinned (``_init_flat_param_attributes``,
with a pinned host gradient ``_cpu_grad``), and is copied to the device before each all-gather
(``FlatParamHandle.pre_unshard``: ``flat_param_to(self.device)``, on the pre-unshard stream) and dropped at reshard
(``_use_sharded_flat_param``: ``flat_param.data = flat_param._local_shard``); the reduced gradient shard is copied
into ``_cpu_grad`` (``_offload_grad``). On this build the host is the device, so those moves are no-ops: here the
shard is marked host when FSDP1 moves it there, pinning leaves a host tensor where it is, and ``pre_unshard`` makes
the device copy a ``clone``.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from engine.checks.measure.fake_tensor_patches import patched

BROADCAST_BUCKET_BYTES = 250 * 1024 * 1024  # torch/distributed/fsdp/_init_utils.py PARAM_BROADCAST_BUCKET_SIZE
BROADCASTS_IN_FLIGHT = 2  # torch/csrc/distributed/c10d/comm.cpp broadcast_coalesced: max_in_flight


def broadcast_buckets(tensors: list[torch.Tensor], limit: int = BROADCAST_BUCKET_BYTES) -> list[int]:
    """Bytes of each bucket ``broadcast_coalesced`` flattens, in the order it issues them: tensors join the open
    bucket of their dtype, which closes once it holds ``limit`` bytes or more, the rest close at the end, and the
    buckets go out by their first tensor (torch/csrc/distributed/c10d/reducer.cpp,
    ``compute_bucket_assignment_by_size``: sorted by minimum tensor index when no order is given)."""
    open_buckets: dict[torch.dtype, tuple[int, int]] = {}  # dtype -> (first tensor, bytes)
    buckets = []
    for i, t in enumerate(tensors):
        first, size = open_buckets.pop(t.dtype, (i, 0))
        size += t.numel() * t.element_size()
        if size >= limit:
            buckets.append((first, size))
        else:
            open_buckets[t.dtype] = (first, size)
    return [size for _, size in sorted(buckets + list(open_buckets.values()))]


def emulate_broadcast(tensors: list[torch.Tensor]) -> None:
    """Allocate and free the flattened buckets of rank 0's ``broadcast_coalesced``, two in flight."""
    in_flight = []
    for nbytes in broadcast_buckets(tensors):
        if len(in_flight) >= BROADCASTS_IN_FLIGHT:
            in_flight.pop(0)  # finish(): copied back into the tensors, the flat bucket freed
        in_flight.append(torch.empty(nbytes, dtype=torch.uint8))
    in_flight.clear()


@contextmanager
def rank0_host_init(lb, model: torch.nn.Module):
    """While FSDP1 wraps ``model``: its parameters and buffers count as host memory (rank 0 loaded them there), and
    each unit FSDP1 moves to the device is copied there and broadcast (steps 1 and 2 above); an offloaded shard goes
    back to the host."""
    from torch.distributed.fsdp import _flat_param, _init_utils

    for t in list(model.parameters()) + list(model.buffers()):
        rec = lb.record_of(t)
        if rec is not None:
            rec.host = True

    def on_host(t: torch.Tensor) -> bool:
        rec = lb.record_of(t)
        return rec is not None and rec.host

    def move_and_broadcast(original):
        def move(params, buffers, device):
            params, buffers = [t for t in params if on_host(t)], [t for t in buffers if on_host(t)]
            with torch.no_grad():
                for t in params + buffers:  # _move_states_to_device's order
                    t.data = t.detach().clone()  # the host-to-device copy: a new device allocation
            emulate_broadcast(buffers + params)  # _sync_module_params_and_buffers: the buffers first
        return move

    def to_host_when_offloaded(original):
        def flat_param_to(handle, *args, **kwargs):
            original(handle, *args, **kwargs)
            if handle._offload_params and torch.device(*args[:1]) == torch.device("cpu"):
                lb.record_of(handle.flat_param).host = True
        return flat_param_to

    with patched(_init_utils, "_move_states_to_device", move_and_broadcast), \
            patched(_flat_param.FlatParamHandle, "flat_param_to", to_host_when_offloaded):
        yield


@contextmanager
def offloaded_shards(lb):
    """FSDP1's CPU offload in training (see above): pinned host tensors stay host, and each offloaded shard is copied
    to the device before its all-gather."""
    from torch.distributed.fsdp import _flat_param

    def pinned(original):
        def pin_memory(t, *args, **kwargs):
            rec = lb.record_of(t)
            if rec is not None:
                rec.host = True
            return t
        return pin_memory

    def copied_to_device(original):
        def pre_unshard(handle):
            ran = original(handle)
            rec = lb.record_of(handle.flat_param)
            if handle._offload_params and rec is not None and rec.host:
                with torch.no_grad():
                    handle.flat_param.data = handle.flat_param.detach().clone()  # the host-to-device copy
                return True
            return ran
        return pre_unshard

    had_synchronize = hasattr(torch.cpu.Stream, "synchronize")
    if not had_synchronize:  # the post-backward callback waits for the copies to the host; this build's streams are
        torch.cpu.Stream.synchronize = lambda stream: None  # synchronous and lack the method
    try:
        with patched(torch.Tensor, "pin_memory", pinned), \
                patched(_flat_param.FlatParamHandle, "pre_unshard", copied_to_device):
            yield
    finally:
        if not had_synchronize:
            del torch.cpu.Stream.synchronize


@contextmanager
def resharded_by_storage():
    """FSDP1's catch-all reshard at the end of backward (``_runtime_utils._catch_all_reshard``) asks whether a unit is
    resharded already by comparing ``data_ptr()`` of its flat parameter and its local shard, which fake tensors do not
    give (every fake ``data_ptr()`` is the same); here the check compares the storages themselves, so a unit left
    unsharded (a frozen one whose reshard hook did not run) is resharded as on a GPU."""
    from torch.distributed.fsdp import _runtime_utils

    def by_storage(original):
        def catch_all_reshard(state):
            handle = state._handle
            if handle:
                same = (handle.flat_param.untyped_storage()._cdata
                        == handle.flat_param._local_shard.untyped_storage()._cdata)
                if same and not handle._skipped_use_sharded_views:
                    return
                _runtime_utils._reshard(state, handle, _runtime_utils._should_free_in_backward(state, handle))
        return catch_all_reshard

    with patched(_runtime_utils, "_catch_all_reshard", by_storage):
        yield

