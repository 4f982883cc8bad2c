"""Time and cost of one optimizer step: step_time_s, tokens_per_gpu_s, mfu, cost_per_mtok (CONFIG.md Outputs).

In the levels of levels.py, so that per row only a few multiplications remain:

    step_work(c, r)      what one GPU of the most loaded pipeline stage does per optimizer step: FLOPs by kernel
                         and the HBM bytes of the memory-bound ones (flops.py), the bytes its collectives move -> Work
    gpu_rates(c, r)      seconds per FLOP, per HBM byte and per collective byte on this GPU type, for each
                         collective's group in this layout; $ per GPU-second                              -> Rates
    device_times(w, g)   the step time and what follows from it                                             -> Times

Compute, per micro-batch, kernels one after another on one stream:

    matmuls      a roofline per kind of matmul (dense layers and head; routed experts): max(FLOPs / achievable
                 rate, operand bytes / HBM bandwidth) (Williams et al. 2009, "Roofline", CACM 52(4)). The rate is
                 MATMUL_EFFICIENCY x the measured "maximum achievable matmul FLOPS" (MAMF, data/gpus.toml
                 matmul_tflops_achievable, fp8_matmul_tflops_achievable); operand bytes M·K + K·N + M·N per
                 matmul, so few tokens per matmul (a short micro-batch, an expert's share) turn memory-bound
    attention    the attention core at ATTENTION_EFFICIENCY x the bf16 MAMF
    elementwise  norms, activations, residuals, rotary embeddings, softmax, the loss: memory-bound, HBM bytes /
                 bandwidth, the bytes MEMORY_PASSES x what they produce (flops.py produced_bytes: the memory
                 model's per-token tensors, the compiled blocks' under torch.compile, and the loss's buffers);
                 fp8 casts and dequantization counted directly
    optimizer    once per step: every resident weight, gradient and state read and written (fused Adam); an
                 offloaded one steps on the CPU after its gradients cross the host link

Communication, by the ring algorithms of NCCL and its bus-bandwidth convention (nccl-tests doc/PERFORMANCE.md:
an all-reduce moves 2(n-1)/n of its buffer through each rank's link, an all-gather or reduce-scatter (n-1)/n):

    TP   an all-reduce of the layer's output after attention and after the FFN, forward and backward (Megatron-LM
         arXiv:1909.08053 sec. 3; with SP the same bytes as all-gather + reduce-scatter, arXiv:2205.05198
         sec. 4.2.2), again in full recompute; not overlapped (Megatron-LM's default)
    CP   ring attention passes K and V around the ring in forward, K, V, dK, dV in backward (arXiv:2310.01889),
         overlapped with the attention core (exposed: what the attention does not hide)
    EP   all-to-all dispatch and combine of the routed tokens, forward and backward (GShard arXiv:2006.16668),
         exposed
    PP   the activation and its gradient between adjacent stages, per micro-batch and virtual stage, exposed;
         the bubble (p-1)/(m·v) of the stage's time (arXiv:2104.04473 sec. 2.2)
    DP   ZeRO-0: gradient all-reduce once per step, behind the last micro-batch's backward (PyTorch DDP buckets,
         arXiv:2006.15704 sec. 3.2.3); ZeRO-1/2: reduce-scatter of the gradients and all-gather of the updated
         weights, behind that backward and the next forward (Megatron-LM --overlap-grad-reduce,
         --overlap-param-gather); ZeRO-3 / FSDP: each micro-batch gathers the weights for forward and again for
         backward and reduce-scatters the gradients, prefetched behind the compute of the layers before
         (FSDP arXiv:2304.11277 sec. 3.3; FSDP2 reshard_after_forward): exposed = what compute does not hide
    host offloaded weights (ZeRO-Infinity) and activations cross the host link beside the compute

Links: a group inside one NVLink domain runs at the intra-node bandwidth; a group across domains is limited by
its ranks' network links: a ring crosses each domain once per channel, and NCCL runs one channel per NIC, so the
group's bus bandwidth is its ranks per domain x the per-GPU network bandwidth, at most the intra-node one
(nccl-tests multi-node all_reduce on 8 x 400 Gb/s H100 nodes: 400-450 GB/s bus bandwidth). Mesh order as
Megatron-LM and torchtitan build it: TP innermost, then CP, then DP, PP outermost.

The three calibrated constants are fitted on data/golden/throughput.csv by engine/checks/throughput.py (fit:
least squares on log tokens/s with a soft-L1 loss, every row); THROUGHPUT.md "Calibration" gives the values,
the rows each one is sensitive to, and the leave-one-source-out errors.
"""

from typing import NamedTuple

import numpy as np

from engine.inputs.codes import Ckpt, PPSchedule, Precision
from engine.model.common import formula
from engine.model.flops import (
    attention_work,
    cast_bytes,
    expert_work,
    local_tokens_float,
    matmul_work,
    model_flops_per_token,
    produced_bytes,
    recompute_attention_share,
    recompute_matmul_share,
    recompute_traffic_share,
    stage_layers,
)
from engine.model.params import has_dims, head_dim, kv_heads
from engine.model.stage import layer_activation_bytes
from engine.model.states import (
    compute_bytes,
    grad_bytes_per_param,
    offloads_optimizer,
    offloads_weights,
    sharded,
    trains,
)

# --- calibrated on data/golden/throughput.csv (THROUGHPUT.md "Calibration"; engine/checks/throughput.py fit) ---
MATMUL_EFFICIENCY = 0.829  # the training matmuls' FLOP rate over the MAMF (the best shape's)
ATTENTION_EFFICIENCY = 0.274  # the attention core's FLOP rate over the bf16 MAMF
MEMORY_PASSES = 7.92  # HBM bytes the memory-bound kernels move per byte the memory model saves for backward

# --- from sources, not fitted --------------------------------------------------------------------------------
# Achieved over nominal link bandwidth of large NCCL collectives: nccl-tests all_reduce bus bandwidth 230-250 GB/s
# on 8 x A100 SXM (NVLink 3, 300 GB/s per direction), 400-450 GB/s across 8 x 400 Gb/s H100 nodes.
BUS_EFFICIENCY = 0.8
# A fused optimizer step reads and writes every resident weight, gradient and state once.
OPTIMIZER_PASSES = 2.0
# Offload (ZeRO-Offload arXiv:2101.06840, ZeRO-Infinity arXiv:2104.07857, activation offloading) moves bytes over
# the GPU's host link: PCIe 4.0 x16, 32 GB/s per direction nominal, about 25 GB/s in pinned copies (the catalog
# has no host-link field yet; PCIe 5.0 parts are faster). The offloaded optimizer steps on the host CPU at its
# memory bandwidth: a DGX A100's 2 x 8 channels of DDR4-3200 (2 x 204.8 GB/s) shared by 8 GPUs.
HOST_LINK_BYTES_PER_S = 25e9
HOST_MEMORY_BYTES_PER_S = 51e9
# PyTorch keeps TF32 off for matmuls by default (torch.backends.cuda.matmul.allow_tf32 = False): fp32 runs on the
# CUDA cores, about 1/16 of the bf16 tensor-core peak on A100 (19.5 of 312 TFLOP/s) and H100 (67 of 989).
FP32_SHARE = 1.0 / 16.0
# Where a catalog entry has no measured matmul rate: the median MAMF / dense peak of those that have one
# (data/gpus.toml: 0.73-0.87 on NVIDIA parts).
ACHIEVABLE_SHARE = 0.80


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


class Rates(NamedTuple):
    """How fast one GPU of this type does it, in this layout: seconds per unit (NaN: unknown)."""

    s_per_matmul_flop: float  # 1 / achievable matmul FLOP/s in the step's precision
    s_per_attention_flop: float
    s_per_hbm_byte: float
    s_per_peak_flop: float  # 1 / the dense bf16 peak: MFU's denominator
    s_per_tp_byte: float
    s_per_cp_byte: float
    s_per_ep_byte: float
    s_per_pp_byte: float
    s_per_dp_byte: float
    usd_per_s: float  # per GPU; NaN when the catalog has no price


class Times(NamedTuple):
    """Output columns of time and cost (NaN where the configuration cannot run, or no price is known)."""

    step_time_s: float
    tokens_per_gpu_s: float
    mfu: float
    cost_per_mtok: float


# --- the step's work ------------------------------------------------------------------------------------------


@formula
def ring(n, all_reduce):
    """Bytes per rank per buffer byte of a ring collective over n ranks: 2(n-1)/n all-reduce, else (n-1)/n."""
    share = (n - 1.0) / n
    return 2.0 * share if all_reduce else share


@formula
def pipeline_bubble(c):
    """(p-1)/(m·v): idle time of a pipeline flush over its compute (GPipe, 1F1B; interleaved divides by v)."""
    if c.pp == 1:
        return 0.0
    v = c.vpp if c.pp_schedule == PPSchedule.INTERLEAVED else 1
    return (c.pp - 1.0) / (c.grad_accum * max(v, 1))


@formula
def tp_bytes(c, m, layers):
    """TP collectives of one micro-batch of m tokens: four per layer (two in forward, two in backward), two more
    where the forward runs again, of the m·h activation (arXiv:1909.08053 sec. 3)."""
    if c.tp == 1:
        return 0.0
    count = 4.0 + 2.0 * (1.0 / max(c.checkpoint_every, 1) if c.checkpointing == Ckpt.FULL else 0.0)
    return count * layers * m * c.d_model * compute_bytes(c) * ring(c.tp, True)


@formula
def cp_bytes(c, m, layers):
    """Ring attention of one micro-batch of m tokens per rank: each rank receives the other ranks' K and V in
    forward, K, V and sends dK, dV in backward (3x), per layer (arXiv:2310.01889)."""
    if c.cp == 1:
        return 0.0
    kv = 2.0 * kv_heads(c) * head_dim(c) / c.tp * m * compute_bytes(c)
    return (3.0 + recompute_attention_share(c)) * layers * kv * (c.cp - 1.0)


@formula
def ep_bytes(c, m, moe):
    """Expert-parallel all-to-alls of one micro-batch of m tokens: dispatch and combine of each routed copy of a
    token, in forward and backward, per MoE layer (GShard arXiv:2006.16668)."""
    if c.ep == 1 or c.n_experts == 0:
        return 0.0
    routed = m * c.top_k * c.capacity_factor * c.d_model * compute_bytes(c)
    count = 4.0 + 2.0 * recompute_matmul_share(c)
    return count * moe * routed * ring(c.ep, False)


@formula
def pp_bytes(c, m):
    """Point-to-point of one micro-batch: the activation forward, its gradient backward, per virtual stage; each
    TP rank sends its 1/t (Megatron-LM's scatter/gather, arXiv:2104.04473 sec. 4.1; with SP the activation is
    split already)."""
    if c.pp == 1:
        return 0.0
    v = c.vpp if c.pp_schedule == PPSchedule.INTERLEAVED else 1
    return 2.0 * max(v, 1) * m * c.d_model * compute_bytes(c) / c.tp


@formula
def dp_bytes(c, r):
    """Data-parallel collectives of one optimizer step over dp·cp ranks, and the share of the compute they hide
    behind (the module docstring)."""
    n = c.dp * c.cp
    if n == 1:
        return 0.0, 0.0
    grads = float(grad_bytes_per_param(c)) * r.trainable_params if trains(c) else 0.0
    if c.zero_stage == 3:
        gathers = 2.0 * compute_bytes(c) * r.params
        return c.grad_accum * (gathers + grads) * ring(n, False), 1.0
    if c.zero_stage == 0:
        return grads * ring(n, True), 2.0 / 3.0 / c.grad_accum
    updated = float(compute_bytes(c)) * r.trainable_params if trains(c) else 0.0
    return (grads + updated) * ring(n, False), 1.0 / c.grad_accum


@formula
def host_link_bytes(c, r, dense, moe):
    """Bytes one micro-batch moves over the host link beside the compute: ZeRO-Infinity's offloaded weights,
    fetched for forward and again for backward; offloaded activations, down in forward and up in backward."""
    nbytes = 0.0
    if offloads_weights(c):
        nbytes += 2.0 * compute_bytes(c) * sharded(c, r.params, 3, False)
    if c.activation_offload:
        saved = dense * layer_activation_bytes(c, r, False)
        if moe > 0:
            saved += moe * layer_activation_bytes(c, r, True)
        nbytes += 2.0 * saved
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
    (flops.py produced_bytes; under torch.compile what Inductor's fused blocks keep), the layers' again where
    recomputed; plus fp8 casts and dequantization (flops.py)."""
    layers, loss = produced_bytes(c, r, m, dense, moe)
    layers *= 1.0 + recompute_traffic_share(c)
    return MEMORY_PASSES * (layers + loss) + cast_bytes(c, m, dense, moe)


@formula
def step_work(c, r):
    """Per GPU per optimizer step: FLOPs and bytes of the most loaded stage's micro-batches, and collectives."""
    if not has_dims(c):
        return NO_WORK
    m, n = local_tokens_float(c), float(c.grad_accum)  # tokens per micro-batch, micro-batches per step
    dense, moe = stage_layers(c)
    mm_flops, mm_bytes = matmul_work(c, m, dense, moe)
    ex_flops, ex_bytes = expert_work(c, m, moe)
    dp, window = dp_bytes(c, r)
    states = float(r.columns.weight_bytes + r.columns.grad_bytes + r.columns.optimizer_bytes)
    tokens = float(c.seq_len) * c.micro_batch * c.grad_accum * c.dp
    return Work(model_flops_per_token(c), tokens / c.n_gpus, 1e6 * c.n_gpus / tokens, n * mm_flops, n * mm_bytes, n * ex_flops,
                n * ex_bytes, n * attention_work(c, m, dense + moe), n * hbm_bytes(c, r, m, dense, moe),
                OPTIMIZER_PASSES * states if trains(c) else 0.0, 1.0 + pipeline_bubble(c), n * tp_bytes(c, m, dense + moe),
                n * cp_bytes(c, m, dense + moe), n * ep_bytes(c, m, moe), n * pp_bytes(c, m), dp, window,
                n * host_link_bytes(c, r, dense, moe) / HOST_LINK_BYTES_PER_S, offload_seconds(c, r))


# --- the GPU's rates ------------------------------------------------------------------------------------------


@formula
def bf16_matmul_flops_per_s(c):
    """Achievable dense 16-bit matmul FLOP/s: the measured MAMF, else ACHIEVABLE_SHARE of the peak."""
    if c.matmul_tflops_achievable > 0:
        return c.matmul_tflops_achievable * 1e12
    return ACHIEVABLE_SHARE * c.bf16_tflops * 1e12


@formula
def matmul_flops_per_s(c):
    """Achievable matmul FLOP/s in the precision the matmuls run in: fp8 at its own MAMF (else the bf16 one
    scaled by the peaks; a GPU without fp8 runs them in 16 bits), fp32 on the CUDA cores."""
    if c.precision == Precision.FP8 and c.fp8_tflops > 0:
        if c.fp8_matmul_tflops_achievable > 0:
            return c.fp8_matmul_tflops_achievable * 1e12
        return bf16_matmul_flops_per_s(c) * c.fp8_tflops / c.bf16_tflops if c.bf16_tflops > 0 else 0.0
    if c.precision == Precision.FP32:
        return FP32_SHARE * c.bf16_tflops * 1e12
    return bf16_matmul_flops_per_s(c)


@formula
def per_unit(rate):
    """Seconds per unit of a rate; NaN when the rate is unknown (0)."""
    return 1.0 / rate if rate > 0 else np.nan


@formula
def nvlink_domain(c):
    """GPUs that reach each other over the intra-node link: the catalog's NVLink domain (an NVL72 rack's 72),
    else the node's GPUs."""
    return max(c.nvlink_domain_gpus if c.nvlink_domain_gpus > 0 else c.gpus_per_node, 1)


@formula
def group_bytes_per_s(c, inner, size):
    """Bus bandwidth of a collective over `size` ranks placed `inner` apart (the product of the mesh dims inside
    it): the intra-node link inside one NVLink domain, else its ranks per domain x the network link."""
    domain = nvlink_domain(c)
    if inner * size <= domain:
        return BUS_EFFICIENCY * c.intra_node_bytes_per_s
    per_domain = max(1, min(size, domain // inner))
    network = per_domain * c.inter_node_bytes_per_s
    if c.intra_node_bytes_per_s > 0:
        network = min(network, c.intra_node_bytes_per_s)
    return BUS_EFFICIENCY * network


@formula
def p2p_bytes_per_s(c):
    """Pipeline sends between adjacent stages: the intra-node link when the whole pipeline sits in one NVLink
    domain, else each rank's own network link."""
    if c.tp * c.cp * c.dp * c.pp <= nvlink_domain(c):
        return BUS_EFFICIENCY * c.intra_node_bytes_per_s
    return BUS_EFFICIENCY * c.inter_node_bytes_per_s


@formula
def gpu_rates(c, r):
    """This GPU type's rates for a layout (TP innermost, then CP, DP, PP outermost)."""
    usd = c.usd_per_hour / 3600.0 if c.usd_per_hour > 0 else np.nan
    attention = ATTENTION_EFFICIENCY * (FP32_SHARE * c.bf16_tflops * 1e12 if c.precision == Precision.FP32
                                        else bf16_matmul_flops_per_s(c))
    return Rates(per_unit(MATMUL_EFFICIENCY * matmul_flops_per_s(c)), per_unit(attention), per_unit(c.bandwidth_bytes_per_s),
                 per_unit(c.bf16_tflops * 1e12), per_unit(group_bytes_per_s(c, 1, c.tp)),
                 per_unit(group_bytes_per_s(c, c.tp, c.cp)), per_unit(group_bytes_per_s(c, c.tp, c.ep)),
                 per_unit(p2p_bytes_per_s(c)), per_unit(group_bytes_per_s(c, c.tp, c.dp * c.cp)), usd)


# --- per row --------------------------------------------------------------------------------------------------


@formula
def seconds(amount, s_per_unit):
    """Time to move `amount`; nothing takes no time, even over a link of unknown speed (NaN per byte)."""
    return amount * s_per_unit if amount > 0.0 else 0.0


@formula
def slower(a, b):
    """The larger of two times (a roofline's two bounds)."""
    return max(a, b)


@formula
def overlapped(comm, window):
    """Time a collective adds when it runs beside `window` seconds of compute: what the window does not hide
    (an unknown link, NaN, stays unknown)."""
    exposed = comm - window
    return exposed if exposed > 0.0 else exposed - exposed  # 0, or NaN when the link is unknown


@formula
def device_times(w, g):
    """Step time, tokens per second per GPU, MFU and dollars per million tokens (NaN where a rate is unknown).

    Per row, so branch-light: matmuls on their roofline, then the attention core and the memory-bound kernels,
    the collectives that are exposed and those that hide behind the compute, the bubble, the optimizer."""
    if not (w.matmul_flops > 0.0 and g.s_per_matmul_flop > 0.0 and g.s_per_hbm_byte > 0.0):
        return Times(np.nan, np.nan, np.nan, np.nan)
    matmuls = slower(w.matmul_flops * g.s_per_matmul_flop, w.matmul_bytes * g.s_per_hbm_byte)
    if w.expert_flops > 0.0:
        matmuls += slower(w.expert_flops * g.s_per_matmul_flop, w.expert_bytes * g.s_per_hbm_byte)
    attention = w.attention_flops * g.s_per_attention_flop
    compute = matmuls + attention + w.hbm_bytes * g.s_per_hbm_byte
    exposed = seconds(w.tp_bytes, g.s_per_tp_byte) + seconds(w.ep_bytes, g.s_per_ep_byte)
    if w.cp_bytes > 0.0:
        exposed += overlapped(w.cp_bytes * g.s_per_cp_byte, attention)
    if w.host_s > 0.0:
        exposed += overlapped(w.host_s, compute)
    stage = (compute + exposed) * w.stretch + seconds(w.pp_bytes, g.s_per_pp_byte)
    data_parallel = overlapped(seconds(w.dp_bytes, g.s_per_dp_byte), w.dp_window * compute)
    step = stage + data_parallel + w.optimizer_bytes * g.s_per_hbm_byte + w.offload_s
    tokens_per_gpu_s = w.tokens_per_gpu / step
    mfu = w.model_flops_per_token * tokens_per_gpu_s * g.s_per_peak_flop
    return Times(step, tokens_per_gpu_s, mfu, g.usd_per_s * step * w.gpu_s_per_mtok)
