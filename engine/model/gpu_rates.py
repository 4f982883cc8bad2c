"""How fast one GPU of a catalog type works in a layout: seconds per matmul FLOP (in the step's precision), per
attention FLOP, per HBM byte and per byte of each collective's group (collectives.py's links), and dollars per
GPU-second (-> Rates, which time.py's device_times applies to step_work.py's Work).

The matmul rate is MATMUL_EFFICIENCY x the measured "maximum achievable matmul FLOPS" (MAMF, data/gpus.toml
matmul_tflops_achievable, fp8_matmul_tflops_achievable); the attention core's ATTENTION_EFFICIENCY x the bf16
MAMF (time.py's module docstring: the roofline they enter).
"""

from typing import NamedTuple

import numpy as np

from engine.inputs.codes import Precision
from engine.model.collectives import group_bytes_per_s, p2p_bytes_per_s
from engine.model.common import formula

# --- calibrated on data/golden/throughput.csv (THROUGHPUT.md "Calibration"; throughput/calibration.py fit) ---
MATMUL_EFFICIENCY = 0.829  # the training matmuls' FLOP rate over the MAMF (the best shape's)
ATTENTION_EFFICIENCY = 0.274  # the attention core's FLOP rate over the bf16 MAMF

# --- from sources, not fitted --------------------------------------------------------------------------------
# PyTorch keeps TF32 off for matmuls by default (torch.backends.cuda.matmul.allow_tf32 = False): fp32 runs on the
# CUDA cores, about 1/16 of the bf16 tensor-core peak on A100 (19.5 of 312 TFLOP/s) and H100 (67 of 989).
FP32_SHARE = 1.0 / 16.0
# Where a catalog entry has no measured matmul rate: the median MAMF / dense peak of those that have one
# (data/gpus.toml: 0.73-0.87 on NVIDIA parts).
ACHIEVABLE_SHARE = 0.80
# BF16 on tensor cores that multiply FP16 only (Volta, Turing: data/architectures.toml bf16_tensor_cores), emulated
# by cuBLAS: 9.6 TFLOP/s on a V100 at m = 2048 where fp16 reached 95-100 in the same run (lablup/mlxcel issue #1654,
# 2026-08-31), so 9.6 / 97.5 of the 16-bit rate. One measurement, on Volta; Turing is taken to emulate alike.
BF16_EMULATED_SHARE = 9.6 / 97.5


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


@formula
def bf16_matmul_flops_per_s(c):
    """Achievable dense 16-bit matmul FLOP/s: the measured MAMF, else ACHIEVABLE_SHARE of the peak."""
    if c.matmul_tflops_achievable > 0:
        return c.matmul_tflops_achievable * 1e12
    return ACHIEVABLE_SHARE * c.bf16_tflops * 1e12


@formula
def bf16_emulated(c):
    """bf16 or amp_bf16 on a GPU whose tensor cores cannot multiply BF16: its matmuls run emulated."""
    return (c.precision == Precision.BF16 or c.precision == Precision.AMP_BF16) and not c.bf16_tensor_cores


@formula
def sixteen_bit_flops_per_s(c):
    """Achievable 16-bit matmul FLOP/s in the step's 16-bit dtype: the tensor cores' rate, or BF16_EMULATED_SHARE
    of it where they cannot multiply BF16."""
    rate = bf16_matmul_flops_per_s(c)
    return BF16_EMULATED_SHARE * rate if bf16_emulated(c) else rate


@formula
def matmul_flops_per_s(c):
    """Achievable matmul FLOP/s in the precision the matmuls run in: fp8 at its own MAMF (else the bf16 one
    scaled by the peaks; where the catalog has no fp8 peak for a GPU with FP8 tensor cores, the GeForce parts, the
    16-bit rate, a floor; a GPU without them cannot run fp8: validity.gpu_reason), fp32 on the CUDA cores, bf16
    emulated where the tensor cores cannot multiply it."""
    if c.precision == Precision.FP8 and c.fp8_tflops > 0:
        if c.fp8_matmul_tflops_achievable > 0:
            return c.fp8_matmul_tflops_achievable * 1e12
        return bf16_matmul_flops_per_s(c) * c.fp8_tflops / c.bf16_tflops if c.bf16_tflops > 0 else 0.0
    if c.precision == Precision.FP32:
        return FP32_SHARE * c.bf16_tflops * 1e12
    return sixteen_bit_flops_per_s(c)


@formula
def per_unit(rate):
    """Seconds per unit of a rate; NaN when the rate is unknown (0)."""
    return 1.0 / rate if rate > 0 else np.nan


@formula
def gpu_rates(c, r):
    """This GPU type's rates for a layout (TP innermost, then CP, DP, PP outermost)."""
    usd = c.usd_per_hour / 3600.0 if c.usd_per_hour > 0 else np.nan
    attention = ATTENTION_EFFICIENCY * (FP32_SHARE * c.bf16_tflops * 1e12 if c.precision == Precision.FP32
                                        else sixteen_bit_flops_per_s(c))
    return Rates(per_unit(MATMUL_EFFICIENCY * matmul_flops_per_s(c)), per_unit(attention),
                 per_unit(c.bandwidth_bytes_per_s), per_unit(c.bf16_tflops * 1e12),
                 per_unit(group_bytes_per_s(c, 1, c.tp)), per_unit(group_bytes_per_s(c, c.tp, c.cp)),
                 per_unit(group_bytes_per_s(c, c.tp, c.ep)), per_unit(p2p_bytes_per_s(c)),
                 per_unit(group_bytes_per_s(c, c.tp, c.dp * c.cp)), usd)
