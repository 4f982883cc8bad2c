"""What FSDP's own CUDA streams keep reserved: the caching allocator's pools are per stream.

PyTorch's caching allocator caches freed blocks per stream: a free block is found by (stream, size) and a freed
block goes back to the pool of the stream it was allocated on (c10/cuda/CUDACachingAllocator.cpp: get_free_block
looks up BlockPool.blocks from (stream, size); free_block keeps block->stream). Memory one stream has cached is
never handed to another stream's requests, so what a side stream once held stays reserved beside the default
stream's pool, whatever the default stream needs later.

FSDP allocates on two streams of its own (FSDP2, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py; FSDP1
does the same on its _unshard_stream and _post_backward_stream, torch/distributed/fsdp/_runtime_utils.py):
- ``foreach_all_gather`` allocates the group's flat all-gather input (1/d) and output under
  ``all_gather_copy_in_stream``; the unsharded parameters are copied out of it on the default stream;
- ``foreach_reduce`` allocates the reduce-scatter input (the group's unsharded gradients in the reduce dtype) and its
  1/d output under ``reduce_scatter_stream``, and the sharded gradients are views of that output: they become
  ``param.grad``, so zero_grad(set_to_none) frees them into the reduce-scatter stream's pool.

In a single-stream model (what allocated bytes count) the default stream reuses those blocks for the next
forward's activations; on a GPU it cannot. The side pools hold, each at its own high-water mark: the sharded
gradients with the largest group's reduce-scatter buffers, and the largest group's all-gather buffers. The largest
group is the root (embedding, final norm, LM head: fully_shard on the blocks, then on the model) whenever it holds
more than a block.

Checked against the traced FSDP2 steps replayed through the caching-allocator model with each buffer on the stream
that allocates it (data/measured/PARALLEL.md, "Reserved memory by stream": `python -m engine.checks.reserved`).

d = dp * cp, the ranks that share one copy of the states.
"""

from engine.model.common import ceil_div, formula
from engine.model.sharding import (
    fsdp,
    gathered_block_bytes,
    gathered_root_bytes,
    reduce_bytes_per_param,
    reduce_scatter_bytes,
    root_params,
)
from engine.model.states import trains


@formula
def root_reduce_scatter_bytes(c, params, block_params):
    """The root group's reduce-scatter input and its 1/d output, in the reduce dtype (a frozen root under LoRA
    reduces nothing)."""
    if not trains(c) or c.lora_rank > 0:
        return 0
    root = root_params(c, params, block_params)
    return reduce_bytes_per_param(c) * (root + ceil_div(root, c.dp * c.cp))


@formula
def all_gather_buffer_bytes(c, params, block_params):
    """The largest group's flat all-gather output and its 1/d input (the copy-in stream's blocks)."""
    largest = max(gathered_block_bytes(c, block_params), gathered_root_bytes(c, root_params(c, params, block_params)))
    return largest + ceil_div(largest, c.dp * c.cp)


@formula
def side_stream_bytes(c, params, block_params, trainable_params, grad_bytes):
    """What FSDP's all-gather and reduce-scatter streams keep reserved: the sharded gradients (``grad_bytes``, this
    rank's device gradients) with the largest reduce-scatter, and the largest all-gather; 0 without FSDP."""
    if not fsdp(c):
        return 0
    reduce_scatter = max(reduce_scatter_bytes(c, block_params, trainable_params),
                         root_reduce_scatter_bytes(c, params, block_params))
    return grad_bytes + reduce_scatter + all_gather_buffer_bytes(c, params, block_params)


@formula
def side_stream_slack_bytes(side_stream, live_grads):
    """Reserved beyond the allocated peak for the side streams: their pools less the gradients the peak already
    counts (gradients live at the peak sit in the reduce-scatter stream's pool, not the default stream's)."""
    return max(0, side_stream - live_grads)
