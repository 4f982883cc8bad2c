"""What one GPU of the most loaded pipeline stage does per optimizer step (-> Work, which time.py's device_times
turns into seconds): its micro-batches' FLOPs by kernel and the HBM bytes of the memory-bound ones
(microbatch_work.py; MEMORY_PASSES x what they produce), the bytes its collectives move (collectives.py), the
pipeline bubble, the optimizer step, and the host link:

    host offloaded weights (ZeRO-Infinity) and activations cross the host link beside the compute

In two parts, as the sweep's levels evaluate them: work_rates, once per shape (no micro_batch, no seq_len:
levels.shape_terms), gives each quantity per token, per token and key, per micro-batch or per step; step_work
multiplies them out for a micro_batch x seq_len, a few multiply-adds.
"""

from typing import NamedTuple

import numpy as np

from engine.inputs.codes import PPSchedule
from engine.model.collectives import cp_bytes, dp_bytes, ep_bytes, pp_bytes, tp_bytes
from engine.model.common import formula
from engine.model.flops import attention_flops_per_key, dense_model_flops_per_token, model_flops_of
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
def hbm_rates(c, r, dense, moe):
    """(per token, per token and key, per micro-batch): HBM bytes of the memory-bound kernels, MEMORY_PASSES x what
    the layers and the loss produce (microbatch_work.py produced_bytes; under torch.compile what Inductor's fused
    blocks keep), the layers' again where recomputed; plus fp8 casts and dequantization (microbatch_work.py)."""
    layers, scores, loss = produced_bytes(c, r, dense, moe)
    recomputed = 1.0 + recompute_traffic_share(c)
    casts, dequantized = cast_bytes(c, dense, moe)
    return MEMORY_PASSES * (layers * recomputed + loss) + casts, MEMORY_PASSES * scores * recomputed, dequantized


class WorkRates(NamedTuple):
    """The shape's side of Work (levels.shape_terms): what the most loaded stage does per token of a micro-batch, per
    token and key where attention's s x s terms scale with the sequence length, per micro-batch, or once per step,
    from the rank and the shape's inputs (never micro_batch or seq_len); step_work multiplies them out per step (NaN:
    no work)."""

    dense_flops: float = np.nan  # 6N: MFU's count per token without the attention's (flops.dense_model_flops_per_token)
    attention_flops_per_key: float = np.nan  # ... the attention's forward, per token and key
    matmul_flops: float = np.nan  # per token
    matmul_bytes: float = np.nan  # per token: the activations the matmuls read and write
    matmul_weight_bytes: float = np.nan  # per micro-batch: the weights they read
    expert_flops: float = np.nan  # per token
    expert_bytes: float = np.nan  # per token
    expert_weight_bytes: float = np.nan  # per micro-batch
    attention_core_flops: float = np.nan  # per token and key
    hbm_bytes: float = np.nan  # per token
    hbm_bytes_per_key: float = np.nan  # per token and key: the scores'
    dequant_bytes: float = np.nan  # per micro-batch
    tp_bytes: float = np.nan  # per token
    cp_bytes: float = np.nan  # per token
    ep_bytes: float = np.nan  # per token
    pp_bytes: float = np.nan  # per token
    optimizer_bytes: float = np.nan  # per step, as Work's
    stretch: float = np.nan
    dp_bytes: float = np.nan
    dp_window: float = np.nan
    offload_s: float = np.nan


NO_WORK_RATES = WorkRates()  # built here, with the defaults: numba does not apply a NamedTuple's defaults


@formula
def work_rates(c, r):
    """The shape's WorkRates (no micro_batch, no seq_len)."""
    dense, moe = stage_layers(c, r)
    mm_flops, mm_bytes, mm_weights = matmul_work(c, dense, moe)
    ex_flops, ex_bytes, ex_weights = expert_work(c, moe)
    hbm, hbm_per_key, dequantized = hbm_rates(c, r, dense, moe)
    dp, window = dp_bytes(c, r)
    states = float(r.columns.weight_bytes + r.columns.grad_bytes + r.columns.optimizer_bytes)
    return WorkRates(dense_model_flops_per_token(c), attention_flops_per_key(c), mm_flops, mm_bytes, mm_weights,
                     ex_flops, ex_bytes, ex_weights, attention_work(c, dense + moe), hbm, hbm_per_key, dequantized,
                     tp_bytes(c, 1.0, dense + moe), cp_bytes(c, 1.0, dense + moe), ep_bytes(c, 1.0, moe),
                     pp_bytes(c, 1.0), OPTIMIZER_PASSES * states if trains(c) else 0.0, 1.0 + pipeline_bubble(c),
                     dp, window, offload_seconds(c, r))


@formula
def step_work(c, r, layer, w):
    """Per GPU per optimizer step: FLOPs and bytes of the most loaded stage's micro-batches, and collectives, from
    the shape's WorkRates `w` (`layer`: one layer's activation bytes, stage.layer_bytes)."""
    if not has_dims(c):
        return NO_WORK
    # tokens per micro-batch, keys per token, micro-batches per step
    m, s, n = local_tokens_float(c), float(c.seq_len), float(c.grad_accum)
    dense, moe = stage_layers(c, r)
    tokens = float(c.seq_len) * c.micro_batch * c.grad_accum * c.dp
    return Work(model_flops_of(w.dense_flops, w.attention_flops_per_key, s), tokens / c.n_gpus,
                1e6 * c.n_gpus / tokens, n * (m * w.matmul_flops), n * (m * w.matmul_bytes + w.matmul_weight_bytes),
                n * (m * w.expert_flops), n * (m * w.expert_bytes + w.expert_weight_bytes),
                n * (m * (s * w.attention_core_flops)),
                n * (m * (w.hbm_bytes + s * w.hbm_bytes_per_key) + w.dequant_bytes), w.optimizer_bytes, w.stretch,
                n * (m * w.tp_bytes), n * (m * w.cp_bytes), n * (m * w.ep_bytes), n * (m * w.pp_bytes), w.dp_bytes,
                w.dp_window, n * host_link_bytes(c, r, layer, dense, moe) / HOST_LINK_BYTES_PER_S, w.offload_s)
