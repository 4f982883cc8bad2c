"""Time and cost of one optimizer step: step_time_s, tokens_per_gpu_s, mfu, cost_per_mtok (CONFIG.md Outputs).

In the levels of levels.py, so that per row only a few multiplications remain:

    step_work(c, r, ..)  what one GPU of the most loaded pipeline stage does per optimizer step: FLOPs by kernel
                         and the HBM bytes of the memory-bound ones, the bytes its collectives move -> Work
                         (step_work.py; from the shape's per-token rates, work_rates)
    gpu_rates(c, r)      seconds per FLOP, per HBM byte and per collective byte on this GPU type, for each
                         collective's group in this layout; $ per GPU-second -> Rates (gpu_rates.py)
    device_times(w, g)   the step time and what follows from it -> Times (here)

Compute, per micro-batch, kernels one after another on one stream:

    matmuls      a roofline per kind of matmul (dense layers and head; routed experts): max(FLOPs / achievable
                 rate, operand bytes / HBM bandwidth) (Williams et al. 2009, "Roofline", CACM 52(4)). The rate is
                 MATMUL_EFFICIENCY x the measured "maximum achievable matmul FLOPS" (MAMF, data/gpus.toml
                 matmul_tflops_achievable, fp8_matmul_tflops_achievable); operand bytes M·K + K·N + M·N per
                 matmul, so few tokens per matmul (a short micro-batch, an expert's share) turn memory-bound
    attention    the attention core at ATTENTION_EFFICIENCY x the bf16 MAMF
    elementwise  norms, activations, residuals, rotary embeddings, softmax, the loss: memory-bound, HBM bytes /
                 bandwidth, the bytes MEMORY_PASSES x what they produce (microbatch_work.py produced_bytes: the
                 memory model's per-token tensors, the compiled blocks' under torch.compile, and the loss's
                 buffers); fp8 casts and dequantization counted directly
    optimizer    once per step: every resident weight, gradient and state read and written (fused Adam); an
                 offloaded one steps on the CPU after its gradients cross the host link

Communication and its links: collectives.py (the bytes each collective moves, the bus bandwidth of its group).

Not modelled: the compute that overlapped collectives slow down (NCCL kernels take SMs and memory bandwidth;
arXiv:2507.03114 measures 18.9% on average). It is what the model misses on torchtitan's 405B FSDP 16 x TP 8 run
(+31%: 9.5 s of FSDP traffic hidden behind 12.3 s of compute); README "Accuracy" gives the figures with and without
it, and why it is not in yet.

The three calibrated constants (MATMUL_EFFICIENCY and ATTENTION_EFFICIENCY in gpu_rates.py, MEMORY_PASSES in
step_work.py) are fitted on data/golden/throughput.csv by engine/checks/throughput/calibration.py (fit: least
squares on log tokens/s with a soft-L1 loss, every row); THROUGHPUT.md "Calibration" gives the values, the rows
each one is sensitive to, and the leave-one-source-out errors.
"""

from typing import NamedTuple

import numpy as np

from engine.inputs.outputs import level_fields
from engine.model.common import formula


Times = NamedTuple("Times", level_fields("time"))  # the time and cost outputs: engine/inputs/outputs.py


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
        return Times(step_time_s=np.nan, tokens_per_gpu_s=np.nan, mfu=np.nan, cost_per_mtok=np.nan)
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
    return Times(step_time_s=step, tokens_per_gpu_s=tokens_per_gpu_s, mfu=mfu,
                 cost_per_mtok=g.usd_per_s * step * w.gpu_s_per_mtok)
