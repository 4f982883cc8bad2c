"""Pipeline stages: the layers each rank holds, the micro-batches it keeps in flight, its receive buffers.

torch.distributed.pipelining (PipelineStage; Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B), measured
rank by rank (data/measured/PARALLEL.md, pp_1f1b, pp_gpipe, pp_interleaved, pp_uneven):
- layers: p·v virtual stages, rank r holding virtual stages r, r + p, ...; pp_first_layers / pp_last_layers fix
  the first and the last virtual stage, the rest are split as evenly as possible, the first ones taking one
  more (22 layers on 4 stages run 6-6-5-5, as torchtitan splits them);
- in flight at a rank's peak (the forward micro-batches whose activations wait for their backward): 1F1B
  min(p - r, m) (PipeDream-Flush, arXiv:2104.04473 sec. 2.2); GPipe all m; interleaved min(2(p - r - 1) +
  (v - 1)·p + 1, m·v) chunks of a virtual stage (Megatron's warmup + 1; Korthikanti et al. 2022 Eq. 5 for r = 0);
- receive buffers, allocated at the first step and kept: per local virtual stage and per micro-batch, one for
  the activation it receives (not the first stage) and one for the gradient (not the last stage), each
  s·b·h in the residual stream's dtype.
memsim evaluates rank 0 (the embedding, the most micro-batches), rank 1 (the most loaded middle stage) and
rank p - 1 (the head and the loss) and reports the largest peak.
"""

from engine.catalogs.conventions import FRAMEWORK_TORCH_PIPELINING
from engine.inputs.codes import PPSchedule
from engine.model.activations import local_tokens, stream_bytes
from engine.model.common import formula


@formula
def in_flight(c, rank):
    """Micro-batches of the rank's layers whose activations are alive at its peak, as (numerator, denominator)."""
    p, m, v = c.pp, c.grad_accum, c.vpp
    if p == 1:
        return 1, 1
    if c.pp_schedule == PPSchedule.GPIPE:
        return m, 1
    if c.pp_schedule == PPSchedule.INTERLEAVED:
        return min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v), v
    return min(p - rank, m), 1


@formula
def recv_buffer_bytes(c, rank):
    """PipelineStage's receive buffers on `rank`, kept for good (Megatron receives into transient tensors)."""
    if c.pp == 1 or not FRAMEWORK_TORCH_PIPELINING[c.framework]:
        return 0
    n = c.pp * c.vpp
    buffers = 0
    for j in range(c.vpp):
        i = rank + j * c.pp
        buffers += (1 if i > 0 else 0) + (1 if i < n - 1 else 0)
    return buffers * c.grad_accum * local_tokens(c) * c.d_model * stream_bytes(c)
