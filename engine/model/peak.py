"""The phased peak: the memory high-water mark is not the sum of everything.

One training step, steady state (optimizer states exist, zero_grad(set_to_none=True)):
    forward    states + every activation in flight + logits and loss + gathers / casts
    backward   starts with all activations and the loss gradients; ends with all the gradients
    optimizer  states + gradients + the step's own buffers
The most loaded rank is the first pipeline stage (most micro-batches in flight) or the last (the logits):
both are evaluated and the larger peak is reported. Gradients are live in forward only when something keeps
them between steps: accumulation over micro-batches, pipeline schedules, or framework buffers (Megatron's
contiguous main-grad buffer, DeepSpeed's gradient partitions).

Every function takes the configuration `c` and the rank's per-layout quantities `r` (levels.Rank).
"""

from typing import NamedTuple

from engine.inputs.codes import Ckpt, Phase, ZeroGrad
from engine.model.common import ceil_div, formula
from engine.model.conventions import FRAMEWORK_DDP_BUCKET_COPY, FRAMEWORK_GRADS_KEPT
from engine.model.loss import head_gradient_bytes, loss_backward_bytes, loss_forward_bytes
from engine.model.params import n_moe_layers
from engine.model.split import layers_per_stage
from engine.model.stage import (
    activation_bytes,
    checkpointed_layers,
    head_activation_bytes,
    layers_activation_bytes,
    recompute_bytes,
)
from engine.model.temporaries import backward_workspace_bytes, head_cast_bytes, tied_gradient_sum_bytes


class Peak(NamedTuple):
    """The live tensor bytes at the peak of one step and what they are made of."""

    allocated_bytes: int
    phase: int  # a Phase code
    activation_bytes: int
    temp_bytes: int
    grads_live: bool


@formula
def grads_live_in_forward(c):
    """Gradients exist before this step's backward makes them: accumulated over micro-batches or pipeline
    stages, kept by the framework's buffers, or left allocated by zero_grad(set_to_none=False)."""
    if c.optimizer_in_backward:
        return False
    return c.grad_accum > 1 or c.pp > 1 or FRAMEWORK_GRADS_KEPT[c.framework] or c.zero_grad == ZeroGrad.ZEROS


@formula
def last_stage_activation_bytes(c, r):
    """The last stage of a pipeline holds one micro-batch of its L/p layers (1F1B)."""
    if c.pp == 1:
        return activation_bytes(c, r)
    moe = min(layers_per_stage(c), n_moe_layers(c))
    return layers_activation_bytes(c, r, layers_per_stage(c) - moe, moe) + head_activation_bytes(c, r)


@formula
def states_bytes(r, with_grads):
    """Weights and optimizer states always, gradients when live (offloaded ones live on the host)."""
    rc = r.columns
    return rc.weight_bytes + rc.optimizer_bytes + (rc.grad_bytes if with_grads else 0)


@formula
def buckets_bytes(c, r, with_grads):
    """Gradient buckets: PyTorch DDP allocates its buckets when it is constructed and never frees them, so
    they are alive in every phase (data/measured/PARALLEL.md, ddp: every row is the single-GPU peak plus
    P·grad_bytes); DeepSpeed's reduce bucket exists alongside the gradients."""
    ddp = FRAMEWORK_DDP_BUCKET_COPY[c.framework] and c.zero_stage == 0
    return r.bucket_bytes if with_grads or ddp else 0


@formula
def pageable_bytes(c, r):
    """Paged optimizers (bitsandbytes) evict their states to host under pressure in forward and backward."""
    return r.columns.optimizer_bytes if c.paged else 0


@formula
def forward_temp_bytes(c, r, last):
    t = r.cast_bytes + r.gather_bytes
    if last:
        t += loss_forward_bytes(c) + head_gradient_bytes(c)
    return t


@formula
def backward_temp_bytes(c, r, last):
    """Early in backward: the loss gradients (last stage) or, once they are gone, one layer's gradient
    workspace and its recomputed activations with the block's gathers and reduce-scatter, whichever is larger;
    plus what stays gathered and the kept weight casts."""
    t = r.gather_bytes
    if c.activation_offload:  # the decoder's saved casts went to host; the head's (outside the context) stays
        t += head_cast_bytes(c) if last else 0
    elif c.checkpointing == Ckpt.FULL:  # recomputed layers cast their weights again; the others kept theirs
        lps = layers_per_stage(c)
        t += ceil_div(r.cast_bytes * (lps - checkpointed_layers(c, lps)), lps)
    elif c.checkpointing != Ckpt.SELECTIVE_OP:
        t += r.cast_bytes
    layer = backward_workspace_bytes(c) + recompute_bytes(c, r) + 2 * r.prefetch_bytes + r.reduce_bytes
    loss = r.prefetch_bytes + loss_backward_bytes(c) if last else 0
    if last:
        t += head_gradient_bytes(c)
    return t + max(layer, loss)


@formula
def stage_peak(c, r, last, acts):
    """The largest of the forward, backward and optimizer peaks of the first (last=False) or last pipeline
    stage, holding `acts` bytes of activations."""
    g = grads_live_in_forward(c)
    live = states_bytes(r, g) - pageable_bytes(c, r)
    fwd_t = forward_temp_bytes(c, r, last) + buckets_bytes(c, r, g)
    best = Peak(live + acts + fwd_t, Phase.FORWARD.value, acts, fwd_t, g)
    bwd_t = backward_temp_bytes(c, r, last) + buckets_bytes(c, r, g)
    backward = Peak(live + acts + bwd_t, Phase.BACKWARD.value, acts, bwd_t, g)
    if c.optimizer_in_backward:  # no gradient outlives its hook: the steps' buffers (r.step_bytes) in backward
        end_t = r.end_bytes + r.step_bytes
        backward_end = Peak(states_bytes(r, False) - pageable_bytes(c, r) + end_t, Phase.BACKWARD.value, 0, end_t, False)
        optimizer = backward_end
    else:
        end_t = r.end_bytes + buckets_bytes(c, r, True) + tied_gradient_sum_bytes(c)
        backward_end = Peak(states_bytes(r, True) - pageable_bytes(c, r) + end_t, Phase.BACKWARD.value, 0, end_t, True)
        opt_t = r.step_bytes + buckets_bytes(c, r, True)
        optimizer = Peak(states_bytes(r, True) + opt_t, Phase.OPTIMIZER.value, 0, opt_t, True)
    if max(backward.allocated_bytes, backward_end.allocated_bytes) > best.allocated_bytes:
        best = backward if backward.allocated_bytes >= backward_end.allocated_bytes else backward_end
    if optimizer.allocated_bytes > best.allocated_bytes:
        best = optimizer
    return best


@formula
def stage_peaks(c, r):
    """The peaks of the first and the last pipeline stage (the same stage when p = 1)."""
    first = stage_peak(c, r, c.pp == 1, activation_bytes(c, r))  # with one stage it is also the last
    if c.pp == 1:
        return first, first
    return first, stage_peak(c, r, True, last_stage_activation_bytes(c, r))


@formula
def peak(c, r):
    """The peak of one training step on the most loaded pipeline stage."""
    first, last = stage_peaks(c, r)
    return last if last.allocated_bytes > first.allocated_bytes else first
