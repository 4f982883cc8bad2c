"""What FSDP's own CUDA streams keep reserved: the caching allocator's pools are per stream.

PyTorch's caching allocator caches freed blocks per stream: a free block is found by (stream, size) and a freed
block goes back to the pool of the stream it was allocated on (c10/cuda/CUDACachingAllocator.cpp: get_free_block
looks up BlockPool.blocks from (stream, size); free_block keeps block->stream). Memory one stream has cached is
not handed to another stream's requests, so what a side stream once held stays reserved beside the default
stream's pool (until a cudaMalloc fails: the allocator then frees every unsplit cached block, of every stream, and
retries, so these pools raise max_memory_reserved more than they bring an out-of-memory error closer).

FSDP2 allocates on streams of its own (torch 2.13, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):
- ``foreach_all_gather`` allocates the group's flat all-gather input (1/d) and output under
  ``all_gather_copy_in_stream``; the unsharded parameters are copied out of it on the default stream, and the
  output is kept until the next group's copy-out (_fsdp_param_group.py), so two neighbouring groups' outputs are
  cached at once;
- ``foreach_reduce`` allocates the reduce-scatter input on the current (default) stream and only its 1/d output
  under ``reduce_scatter_stream``; the sharded gradients are views of that output, so zero_grad(set_to_none)
  frees them into the reduce-scatter stream's pool.

In a single-stream model (what allocated bytes count) the default stream reuses those blocks for the next
forward's activations; on a GPU it cannot. The side pools hold, each at its own high-water mark: the sharded
gradients, and the all-gather outputs of two neighbouring groups: the root (embedding, final norm, LM head:
fully_shard on the blocks, then on the model; under fsdp_groups = split the larger of the embedding and the head
group) next to a block, or two blocks when a block is larger.

Checked against the traced FSDP2 steps replayed through the caching-allocator model, each allocation on the
stream whose context it was made in (measure/buffer_tags.stream_scopes; data/measured/PARALLEL.md, "Reserved
memory by stream": `python -m engine.checks.reserved`).

d = dp * cp, the ranks that share one copy of the states.
"""

from engine.model.common import ceil_div, formula
from engine.model.sharding import (
    embedding_group_params,
    fsdp,
    gathered_block_bytes,
    gathered_root_bytes,
    kept_group_params,
    root_params,
    split_groups,
)


@formula
def all_gather_buffer_bytes(c, params, block_params):
    """Two neighbouring groups' flat all-gather outputs and their 1/d inputs (the copy-in stream's blocks): FSDP2
    keeps a group's all-gather output until the next group's copy-out (_fsdp_param_group.py), so the largest
    neighbours are held at once: the root (or under split groups the larger of the embedding and the head, each
    next to a block) with a block, or two blocks when a block is larger."""
    block = gathered_block_bytes(c, block_params)
    if split_groups(c):  # the head group is what FULL_SHARD keeps gathered (kept_group_params)
        outer = gathered_root_bytes(c, max(embedding_group_params(c), kept_group_params(c, params, block_params)))
    else:
        outer = gathered_root_bytes(c, root_params(c, params, block_params))
    both = max(outer, block) + block
    return both + ceil_div(both, c.dp * c.cp)


@formula
def side_stream_bytes(c, params, block_params, grad_bytes):
    """What FSDP's side streams keep reserved: the sharded gradients (``grad_bytes``, this rank's device gradients,
    views of the reduce-scatter output) and two neighbouring groups' all-gathers; 0 without FSDP."""
    if not fsdp(c):
        return 0
    return grad_bytes + all_gather_buffer_bytes(c, params, block_params)


@formula
def side_stream_slack_bytes(side_stream, live_grads):
    """Reserved beyond the allocated peak for the side streams: their pools less the gradients the peak already
    counts (gradients live at the peak sit in the reduce-scatter stream's pool, not the default stream's)."""
    return max(0, side_stream - live_grads)
