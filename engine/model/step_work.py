"""What one GPU of the most loaded pipeline stage does per optimizer step (-> Work, which time.py's device_times
turns into seconds): its micro-batches' FLOPs by kernel and the HBM bytes of the memory-bound ones
(microbatch_work.py; MEMORY_PASSES x what they produce), the bytes its collectives move (collectives.py), the
pipeline bubble, the optimizer step, and the host link:

    host offloaded weights (ZeRO-Infinity) and activations cross the host link beside the compute
"""

from typing import NamedTuple

import numpy as np

from engine.inputs.codes import PPSchedule
from engine.model.collectives import cp_bytes, dp_bytes, ep_bytes, pp_bytes, tp_bytes
from engine.model.common import formula
from engine.model.flops import model_flops_per_token
from engine.model.microbatch_work import (
    attention_work,
    cast_bytes,
    expert_work,
    local_tokens_float,
    matmul_work,
    produced_bytes,
    recompute_traffic_share,
    stage_layers,
)
from engine.model.params import has_dims
from engine.model.states import (
    compute_bytes,
    grad_bytes_per_param,
    offloads_optimizer,
    offloads_weights,
    sharded,
    trains,
)

# --- calibrated on data/golden/throughput.csv (THROUGHPUT.md "Calibration"; throughput/calibration.py fit) ---
MEMORY_PASSES = 7.92  # HBM bytes the memory-bound kernels move per byte the memory model saves for backward

# --- from sources, not fitted --------------------------------------------------------------------------------
# A fused optimizer step reads and writes every resident weight, gradient and state once.
OPTIMIZER_PASSES = 2.0
# Offload (ZeRO-Offload arXiv:2101.06840, ZeRO-Infinity arXiv:2104.07857, activation offloading) moves bytes over
# the GPU's host link: PCIe 4.0 x16, 32 GB/s per direction nominal, about 25 GB/s in pinned copies (the catalog
# has no host-link field yet; PCIe 5.0 parts are faster). The offloaded optimizer steps on the host CPU at its
# memory bandwidth: a DGX A100's 2 x 8 channels of DDR4-3200 (2 x 204.8 GB/s) shared by 8 GPUs.
HOST_LINK_BYTES_PER_S = 25e9
HOST_MEMORY_BYTES_PER_S = 51e9


class Work(NamedTuple):
    """What one GPU of the most loaded pipeline stage does per optimizer step (per GPU, floats; NaN: no work,
    a configuration without dims)."""

    model_flops_per_token: float = np.nan  # what MFU counts
    tokens_per_gpu: float = np.nan  # tokens per optimizer step, the whole job's over its GPUs
    gpu_s_per_mtok: float = np.nan  # 1e6 / tokens_per_gpu: GPU-steps per million tokens
    matmul_flops: float = np.nan  # dense matmuls (attention projections, dense FFN, shared experts, router, LM head)
    matmul_bytes: float = np.nan  # ... their operand bytes (inputs, weights, outputs)
    expert_flops: float = np.nan  # routed experts' matmuls
    expert_bytes: float = np.nan
    attention_flops: float = np.nan  # the attention core
    hbm_bytes: float = np.nan  # memory-bound kernels inside the pipeline
    optimizer_bytes: float = np.nan  # the optimizer step, after the pipeline flush
    stretch: float = np.nan  # 1 + the pipeline bubble: the stage's time over its compute
    tp_bytes: float = np.nan  # through each rank's link, exposed
    cp_bytes: float = np.nan  # overlapped with the attention core
    ep_bytes: float = np.nan  # exposed
    pp_bytes: float = np.nan  # exposed
    dp_bytes: float = np.nan  # overlapped with dp_window x the compute
    dp_window: float = np.nan
    host_s: float = np.nan  # over the host link beside the compute: offloaded weights and activations
    offload_s: float = np.nan  # the offloaded optimizer step: gradients down, weights up, the CPU's step


NO_WORK = Work()  # built here, with the defaults: numba does not apply a NamedTuple's defaults


@formula
def pipeline_bubble(c):
    """(p-1)/(m·v): idle time of a pipeline flush over its compute (GPipe, 1F1B; interleaved divides by v)."""
    if c.pp == 1:
        return 0.0
    v = c.vpp if c.pp_schedule == PPSchedule.INTERLEAVED else 1
    return (c.pp - 1.0) / (c.grad_accum * max(v, 1))


@formula
def host_link_bytes(c, r, layer, dense, moe):
    """Bytes one micro-batch moves over the host link beside the compute: ZeRO-Infinity's offloaded weights,
    fetched for forward and again for backward; offloaded activations, down in forward and up in backward."""
    nbytes = 0.0
    if offloads_weights(c):
        nbytes += 2.0 * compute_bytes(c) * sharded(c, r.params, 3, False)
    if c.activation_offload:
        nbytes += 2.0 * (dense * layer.dense_saved + moe * layer.moe_saved)
    return nbytes


@formula
def offload_seconds(c, r):
    """The offloaded optimizer step (ZeRO-Offload): its gradient partition down and the updated 16-bit weights
    up the host link, then the CPU's step through host memory, not overlapped (DeepSpeed's default)."""
    if not offloads_optimizer(c) or not trains(c):
        return 0.0
    partition = float(sharded(c, r.trainable_params, 1, False))
    transfer = partition * (grad_bytes_per_param(c) + compute_bytes(c)) / HOST_LINK_BYTES_PER_S
    return transfer + OPTIMIZER_PASSES * r.host_states_bytes / HOST_MEMORY_BYTES_PER_S


@formula
def hbm_bytes(c, r, m, dense, moe):
    """HBM bytes of one micro-batch's memory-bound kernels: MEMORY_PASSES x what its layers and its loss produce
    (microbatch_work.py produced_bytes; under torch.compile what Inductor's fused blocks keep), the layers' again
    where recomputed; plus fp8 casts and dequantization (microbatch_work.py)."""
    layers, loss = produced_bytes(c, r, m, dense, moe)
    layers *= 1.0 + recompute_traffic_share(c)
    return MEMORY_PASSES * (layers + loss) + cast_bytes(c, m, dense, moe)


@formula
def step_work(c, r, layer):
    """Per GPU per optimizer step: FLOPs and bytes of the most loaded stage's micro-batches, and collectives
    (`layer`: one layer's activation bytes, stage.layer_bytes)."""
    if not has_dims(c):
        return NO_WORK
    m, n = local_tokens_float(c), float(c.grad_accum)  # tokens per micro-batch, micro-batches per step
    dense, moe = stage_layers(c, r)
    mm_flops, mm_bytes = matmul_work(c, m, dense, moe)
    ex_flops, ex_bytes = expert_work(c, m, moe)
    dp, window = dp_bytes(c, r)
    states = float(r.columns.weight_bytes + r.columns.grad_bytes + r.columns.optimizer_bytes)
    tokens = float(c.seq_len) * c.micro_batch * c.grad_accum * c.dp
    return Work(model_flops_per_token(c), tokens / c.n_gpus, 1e6 * c.n_gpus / tokens, n * mm_flops, n * mm_bytes,
                n * ex_flops, n * ex_bytes, n * attention_work(c, m, dense + moe), n * hbm_bytes(c, r, m, dense, moe),
                OPTIMIZER_PASSES * states if trains(c) else 0.0, 1.0 + pipeline_bubble(c),
                n * tp_bytes(c, m, dense + moe), n * cp_bytes(c, m, dense + moe), n * ep_bytes(c, m, moe),
                n * pp_bytes(c, m), dp, window,
                n * host_link_bytes(c, r, layer, dense, moe) / HOST_LINK_BYTES_PER_S, offload_seconds(c, r))
