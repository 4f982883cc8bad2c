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


# The CUDA stream each kind of buffer is allocated on, for the caching allocator's per-stream pools: FSDP2's
# foreach_all_gather allocates under all_gather_copy_in_stream, foreach_reduce (the reduce-scatter input, its
# output and the sharded gradients viewed out of it) under reduce_scatter_stream
# (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py); everything else on the default stream, 0.
STREAM_OF_KIND = {"fsdp_all_gather": 1, "fsdp_reduce_scatter": 2}


def stream_of(lb: RankLiveBytes):
    """Which stream allocated a record of ``lb``: by the kind of its tag (``STREAM_OF_KIND``)."""
    return lambda r: STREAM_OF_KIND.get(kind(lb.tags.get(id(r))), 0)


def kind(tag: str | None) -> str | None:
    """The kind of a tag (``fsdp_unsharded@model.layers.3`` -> ``fsdp_unsharded``)."""
    return tag.split("@")[0] if tag else None
