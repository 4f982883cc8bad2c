"""Time and cost of one optimizer step: step_time_s, tokens_per_gpu_s, mfu, cost_per_mtok (CONFIG.md Outputs).

In the three levels of levels.py:

    step_work(c, r)      what a GPU does per optimizer step: FLOPs (flops.py), the bytes its collectives move,
                         the pipeline bubble                                                         -> Work
    gpu_rates(c, r)      how fast this GPU type does it: achievable matmul FLOP/s, HBM and link bandwidth
                         for each collective's group, $ per GPU-second                              -> Rates
    device_times(w, g)   step time = compute x (1 + bubble) + the communication backward cannot hide -> Times

Communication (ring algorithms, NCCL's bus bandwidth convention: an all-reduce moves 2(n-1)/n of its buffer per
rank, a reduce-scatter or all-gather (n-1)/n): TP's four all-reduces per layer and micro-batch (Megatron-LM,
arXiv:1909.08053 sec. 3: two in forward, two in backward; with SP the same volume as all-gathers and
reduce-scatters, arXiv:2205.05198 sec. 4.2.2), exposed; data parallelism's gradient all-reduce (ZeRO-2: reduce-
scatter; ZeRO-3 / FSDP also gathers the weights for forward and again for backward, arXiv:1910.02054 sec. 7),
overlapped with backward as DDP and FSDP overlap it; expert parallelism's all-to-all, dispatch and combine in
forward and backward (arXiv:2006.16668), exposed. The pipeline bubble is (p-1)/(m·v) of the compute
(arXiv:2104.04473 sec. 2.2). The constants of the efficiency model are calibrated against published training
throughput (data/golden/throughput.csv, `memsim validate --set throughput`).
"""

from typing import NamedTuple

import numpy as np

from engine.inputs.codes import PPSchedule, Precision
from engine.model.common import formula
from engine.model.flops import hardware_flops_per_token, model_flops_per_token
from engine.model.params import has_dims
from engine.model.split import layers_per_stage, params_per_gpu
from engine.model.states import compute_bytes, grad_bytes_per_param, trains

# Calibration (data/golden/throughput.csv): the share of a step's time outside the matmuls (attention kernels,
# norms, activations, the optimizer), as a fraction of the matmul time at the achievable rate.
NON_MATMUL_SHARE = 0.30
# Where a catalog entry has no measured matmul rate: the achievable share of the dense peak (the median ratio of
# the entries that have one, data/gpus.toml matmul_tflops_achievable / bf16_tflops).
ACHIEVABLE_SHARE = 0.80
# PyTorch keeps TF32 off for matmuls by default (torch.backends.cuda.matmul.allow_tf32 = False): fp32 runs on the
# CUDA cores, about 1/16 of the bf16 tensor-core peak on A100 (19.5 of 312 TFLOP/s) and H100 (67 of 989).
FP32_SHARE = 1.0 / 16.0


class Work(NamedTuple):
    """What one GPU does per optimizer step."""

    flops: float  # hardware FLOPs
    model_flops_per_token: float  # what MFU counts
    tokens: float  # tokens per optimizer step, the whole job
    n_gpus: float
    bubble: float  # pipeline bubble, a fraction of the compute time
    tp_bytes: float  # bytes through TP collectives, exposed
    dp_bytes: float  # bytes through data-parallel collectives, overlapped with backward
    ep_bytes: float  # bytes through expert-parallel all-to-alls, exposed


class Rates(NamedTuple):
    """How fast one GPU of this type does it, in this layout."""

    flops_per_s: float  # achievable matmul FLOP/s in the step's precision
    peak_bf16_flops_per_s: float  # MFU's denominator
    tp_bytes_per_s: float
    dp_bytes_per_s: float
    ep_bytes_per_s: float
    usd_per_s: float  # per GPU; NaN when the catalog has no price


class Times(NamedTuple):
    """Output columns of time and cost (NaN where the configuration cannot run, or no price is known)."""

    step_time_s: float
    tokens_per_gpu_s: float
    mfu: float
    cost_per_mtok: float


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
    return (c.pp - 1.0) / (c.grad_accum * v)


@formula
def step_work(c, r):
    """Per GPU per optimizer step: hardware FLOPs of its share of the tokens and layers, and collective bytes."""
    if not has_dims(c):
        return Work(np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan)
    replica_tokens = float(c.seq_len) * c.micro_batch * c.grad_accum
    flops = hardware_flops_per_token(c) * replica_tokens / (c.tp * c.pp * c.cp)
    activation = float(c.seq_len) / c.cp * c.micro_batch * c.d_model * compute_bytes(c)
    layers = float(layers_per_stage(c)) * c.grad_accum
    tp_bytes = 4.0 * layers * activation * ring(c.tp, True) if c.tp > 1 else 0.0
    group = c.dp * c.cp
    dp_bytes = 0.0
    if group > 1 and trains(c):
        grads = float(grad_bytes_per_param(c)) * r.trainable_params
        dp_bytes = grads * ring(group, c.zero_stage < 2)
        if c.zero_stage == 3:  # weights gathered for forward and again for backward, every micro-batch
            dp_bytes += 2.0 * c.grad_accum * compute_bytes(c) * params_per_gpu(c) * ring(group, False)
    ep_bytes = 0.0
    if c.ep > 1 and c.n_experts > 0:
        routed = float(c.seq_len) / c.cp * c.micro_batch * c.top_k * c.d_model * compute_bytes(c)
        ep_bytes = 4.0 * layers * routed * ring(c.ep, False)
    tokens = replica_tokens * c.dp
    return Work(flops, model_flops_per_token(c), tokens, float(c.n_gpus), pipeline_bubble(c), tp_bytes, dp_bytes,
                ep_bytes)


@formula
def matmul_flops_per_s(c):
    """Achievable dense matmul FLOP/s in the precision the matmuls run in (measured where the catalog has it)."""
    peak = c.bf16_tflops * 1e12
    achievable = c.matmul_tflops_achievable * 1e12 if c.matmul_tflops_achievable > 0 else ACHIEVABLE_SHARE * peak
    if c.precision == Precision.FP8 and c.fp8_tflops > 0:
        return achievable * c.fp8_tflops / c.bf16_tflops
    if c.precision == Precision.FP32:
        return FP32_SHARE * peak
    return achievable


@formula
def link_bytes_per_s(c, group):
    """A collective's bandwidth per GPU: NVLink-class within a node, the network between nodes."""
    if group <= max(c.gpus_per_node, 1):
        return c.intra_node_bytes_per_s
    return c.inter_node_bytes_per_s


@formula
def gpu_rates(c, r):
    """This GPU type's rates for a layout (TP innermost, then context and data parallelism, as torchtitan's and
    Megatron's device meshes order them)."""
    usd = c.usd_per_hour / 3600.0 if c.usd_per_hour > 0 else np.nan
    tp_bw = link_bytes_per_s(c, c.tp)
    dp_bw = link_bytes_per_s(c, c.tp * c.cp * c.dp)
    ep_bw = link_bytes_per_s(c, c.tp * c.ep)
    return Rates(matmul_flops_per_s(c), c.bf16_tflops * 1e12, tp_bw, dp_bw, ep_bw, usd)


@formula
def seconds(nbytes, bytes_per_s):
    """Transfer time; an unknown link (0 bytes/s) moving nothing takes no time, moving something: NaN."""
    if nbytes == 0.0:
        return 0.0
    return nbytes / bytes_per_s if bytes_per_s > 0 else np.nan


@formula
def device_times(w, g):
    """Step time, tokens per second per GPU, MFU and dollars per million tokens."""
    if not (w.flops > 0.0) or not (g.flops_per_s > 0.0):
        return Times(np.nan, np.nan, np.nan, np.nan)
    compute = w.flops / g.flops_per_s * (1.0 + NON_MATMUL_SHARE)
    backward = compute * 2.0 / 3.0
    exposed = seconds(w.tp_bytes, g.tp_bytes_per_s) + seconds(w.ep_bytes, g.ep_bytes_per_s)
    exposed += max(0.0, seconds(w.dp_bytes, g.dp_bytes_per_s) - backward)
    step = compute * (1.0 + w.bubble) + exposed
    tokens_per_gpu_s = w.tokens / (w.n_gpus * step)
    mfu = w.model_flops_per_token * tokens_per_gpu_s / g.peak_bf16_flops_per_s
    cost = g.usd_per_s / tokens_per_gpu_s * 1e6
    return Times(step, tokens_per_gpu_s, mfu, cost)
