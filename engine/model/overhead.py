"""What the GPU holds beside the live tensors: driver context, library workspaces, allocator slack.

The per-GPU values (CUDA context by architecture and driver era, cuBLAS workspace, NCCL buffers per
communicator) come from data/overheads.toml, with their sources, through the record's GPU attributes.
"""

from engine.model.common import ceil_div, formula

# PyTorch's caching allocator keeps freed blocks and splits large segments (c10/cuda/CUDACachingAllocator.cpp:
# 2 MiB rounding for blocks > 1 MiB, 20 MiB segments for mid-size requests). What it reserves beyond the live
# peak grows with the bytes that churn within a step (activations, temporaries), not with the states, which are
# allocated once. 1/16 of the churn (6.25%) matches the measured nvidia-smi figures of the HF BERT-large rows
# (shared/reference/published.csv hf-bert-*) once the CUDA context is taken out; tests/test_golden.py checks it.
SLACK_DENOMINATOR = 16


@formula
def communicators(c):
    """Process groups with more than one rank, each with its own NCCL buffers: dp, tp, pp, cp, ep."""
    n = 0
    for size in (c.dp, c.tp, c.pp, c.cp, c.ep):
        if size > 1:
            n += 1
    return n


@formula
def overhead_bytes(c):
    """overhead_bytes: CUDA context + cuBLAS workspace + NCCL buffers per communicator."""
    return c.cuda_context_bytes + c.cublas_workspace_bytes + communicators(c) * c.nccl_buffer_bytes


@formula
def allocator_slack_bytes(churn_bytes):
    """reserved - allocated: the caching allocator's rounding and fragmentation on churning bytes."""
    return ceil_div(churn_bytes, SLACK_DENOMINATOR)
