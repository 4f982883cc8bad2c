"""Labels for what the frameworks allocate around their collectives, so that a rank's anatomy says which buffer is
which (distributed.py logs the records; ``RankLiveBytes.tags`` holds the labels):

* Tags: framework functions that allocate communication buffers are wrapped to label what they allocate
  (``tagging``): FSDP2's all-gather, copy-out (unsharded parameters) and reduce-scatter per parameter group,
  DDP's buckets, the pipeline's receive buffers; functional collectives are labelled by their op.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

from engine.checks.measure.distributed import RankLiveBytes
from engine.checks.measure.fake_tensor_patches import patched


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
    import torch
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg
    from torch.distributed.pipelining import stage as pp_stage

    name = lambda group, *args, **kwargs: fsdp_group_name(group)
    with ExitStack() as stack:
        stack.enter_context(patched(torch.cpu, "stream", stream_scopes(lb)))
        stack.enter_context(patched(pg.FSDPParamGroup, "unshard", _tagged(lb, "fsdp_all_gather", name)))
        stack.enter_context(patched(pg.FSDPParamGroup, "wait_for_unshard", _tagged(lb, "fsdp_unsharded", name)))
        stack.enter_context(patched(pg.FSDPParamGroup, "post_backward", _tagged(lb, "fsdp_reduce_scatter", name)))
        stack.enter_context(patched(pp_stage, "_make_tensor_from_meta", _tagged(lb, "pp_recv")))
        yield


# Framework buffers that are neither model states nor activations, whatever their lifetime: FSDP2's gathered
# parameters and its all-gather / reduce-scatter buffers, DDP's buckets (unless they are the gradients), the
# pipeline's receive buffers.
BUFFER_KINDS = ("fsdp_unsharded", "fsdp_all_gather", "fsdp_reduce_scatter", "ddp_bucket", "pp_recv")


def stream_scopes(lb: RankLiveBytes):
    """Wrap ``torch.cpu.stream`` (the device handle the frameworks call on this CPU build; on a GPU,
    ``torch.cuda.stream``) so that what is allocated inside ``with device_handle.stream(s)`` is logged on stream
    ``s``: each stream other than the current one gets a number of its own, in the order they are first entered
    (FSDP2's all-gather copy-in, reduce-scatter and all-reduce streams, torch/distributed/fsdp/_fully_shard/
    _fsdp_collectives.py). The caching allocator keeps one pool of cached blocks per stream."""
    import torch

    numbers: dict[int, int] = {}

    def wrap(original):
        @contextmanager
        def scope(stream):
            before = lb.stream
            if stream is None or stream is torch.cpu.current_stream():
                lb.stream = 0
            else:
                lb.stream = numbers.setdefault(id(stream), len(numbers) + 1)
            try:
                with original(stream):
                    yield
            finally:
                lb.stream = before

        return scope

    return wrap


def stream_of(lb: RankLiveBytes):
    """Which stream allocated a record of ``lb`` (``stream_scopes``; 0, the default stream, unless logged)."""
    return lambda r: lb.streams.get(id(r), 0)


def kind(tag: str | None) -> str | None:
    """The kind of a tag (``fsdp_unsharded@model.layers.3`` -> ``fsdp_unsharded``)."""
    return tag.split("@")[0] if tag else None
