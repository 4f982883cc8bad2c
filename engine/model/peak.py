"""The phased peak: the memory high-water mark is not the sum of everything.

One training step, steady state (optimizer states exist, zero_grad(set_to_none=True)):
    forward    states + every activation in flight + logits and loss + gathers / casts
    backward   starts with all activations and the loss gradients; ends with all the gradients
    optimizer  states + gradients + the step's own buffers
The most loaded rank is the first pipeline stage (most micro-batches in flight) or the last (the logits):
both are evaluated and the larger peak is reported. Gradients are live in forward only when something keeps
them between steps: accumulation over micro-batches, pipeline schedules, or framework buffers (Megatron's
contiguous main-grad buffer, DeepSpeed's gradient partitions).
"""

from engine.inputs.codes import (
    Ckpt,
    Framework,
    Invalid,
    Offload,
    Optimizer,
    Phase,
    PPSchedule,
    Quant,
)
from engine.model.activations import (
    activation_bytes,
    head_activation_bytes,
    layer_activation_bytes,
    recompute_bytes,
)
from engine.model.common import formula
from engine.model.overhead import allocator_slack_bytes
from engine.model.params import has_dims, kv_heads, n_moe_layers
from engine.model.split import layers_per_stage
from engine.model.temporaries import (
    backward_workspace_bytes,
    loss_backward_bytes,
    loss_forward_bytes,
)


@formula
def grads_live_in_forward(c):
    keeps = c.framework == Framework.MEGATRON or c.framework == Framework.DEEPSPEED
    return c.grad_accum > 1 or c.pp > 1 or keeps


@formula
def last_stage_activation_bytes(c):
    """The last stage of a pipeline holds one micro-batch of its L/p layers (1F1B)."""
    if c.pp == 1:
        return activation_bytes(c)
    moe = min(layers_per_stage(c), n_moe_layers(c))
    dense = layers_per_stage(c) - moe
    layers = dense * layer_activation_bytes(c, False) + moe * layer_activation_bytes(c, True)
    return layers + head_activation_bytes(c)


@formula
def states_bytes(c, with_grads):
    """Weights and optimizer states always, gradients when live (offloaded ones live on the host)."""
    return c.rank_weight_bytes + c.rank_optimizer_bytes + (c.rank_grad_bytes if with_grads else 0)


@formula
def buckets_bytes(c, with_grads):
    """Gradient buckets exist once the first backward has made them, alongside the gradients."""
    return c.rank_bucket_bytes if with_grads else 0


@formula
def pageable_bytes(c):
    """Paged optimizers (bitsandbytes) evict their states to host under pressure in forward and backward."""
    return c.rank_optimizer_bytes if c.paged else 0


@formula
def forward_temp_bytes(c, last):
    t = c.rank_cast_bytes + c.rank_gather_bytes
    if last:
        t += loss_forward_bytes(c)
    return t


@formula
def backward_temp_bytes(c, last):
    """Early in backward: the loss gradients (last stage) or, once they are gone, one layer's gradient
    workspace and its recomputed activations, whichever is larger; plus gathers and kept weight casts."""
    t = c.rank_gather_bytes + c.rank_reduce_bytes
    if c.checkpointing != Ckpt.FULL:
        t += c.rank_cast_bytes  # with recomputation the casts are redone, not kept
    layer = backward_workspace_bytes(c) + recompute_bytes(c)
    return t + max(layer, loss_backward_bytes(c) if last else 0)


@formula
def stage_phase_peaks(c, last, acts):
    """Forward, backward and optimizer peaks of the first (last=False) or last pipeline stage holding `acts`
    bytes of activations, each as (live tensor bytes, activations, temporaries, gradients live)."""
    g = grads_live_in_forward(c)
    live = states_bytes(c, g) - pageable_bytes(c)
    fwd_t = forward_temp_bytes(c, last) + buckets_bytes(c, g)
    forward = (live + acts + fwd_t, acts, fwd_t, g)
    bwd_t = backward_temp_bytes(c, last) + buckets_bytes(c, g)
    backward = (live + acts + bwd_t, acts, bwd_t, g)
    end_t = c.rank_gather_bytes + c.rank_reduce_bytes + buckets_bytes(c, True)
    backward_end = (states_bytes(c, True) - pageable_bytes(c) + end_t, 0, end_t, True)
    if backward_end[0] > backward[0]:
        backward = backward_end
    opt_t = c.rank_step_bytes + buckets_bytes(c, True)
    optimizer = (states_bytes(c, True) + opt_t, 0, opt_t, True)
    return forward, backward, optimizer


@formula
def peak(c):
    """(allocated_peak_bytes, phase, activations, temporaries, gradients live) on the most loaded stage."""
    best = (-1, 0, 0, 0, False)
    for last in (False, True):
        if last and c.pp == 1:
            continue
        acts = last_stage_activation_bytes(c) if last else activation_bytes(c)
        forward, backward, optimizer = stage_phase_peaks(c, last or c.pp == 1, acts)
        if forward[0] > best[0]:
            best = (forward[0], Phase.FORWARD.value, forward[1], forward[2], forward[3])
        if backward[0] > best[0]:
            best = (backward[0], Phase.BACKWARD.value, backward[1], backward[2], backward[3])
        if optimizer[0] > best[0]:
            best = (optimizer[0], Phase.OPTIMIZER.value, optimizer[1], optimizer[2], optimizer[3])
    return best


@formula
def usable_bytes(c):
    """What the user lets the job use: capacity minus the headroom kept for runtime variability."""
    return int(c.capacity_bytes * (1.0 - c.headroom))


@formula
def host_fits(c):
    """Offloaded states fit the host's RAM share of this GPU (gpus.toml host_ram_bytes_per_node / gpus_per_node);
    unknown host RAM (0) is not a constraint."""
    return c.host_ram_bytes == 0 or c.rank_host_bytes <= c.host_ram_bytes


@formula
def bottleneck(c, at_peak, overhead):
    """The largest component at the peak (a Component code): weights, grads, optimizer, activations,
    temporaries with the allocator's slack, or the overhead beside the tensors."""
    allocated, phase, act, temp, grads = at_peak
    sizes = (
        c.rank_weight_bytes,
        c.rank_grad_bytes if grads else 0,
        c.rank_optimizer_bytes,
        act,
        temp + allocator_slack_bytes(act + temp),
        overhead,
    )
    best = 0
    for i in range(1, 6):
        if sizes[i] > sizes[best]:
            best = i
    return best


@formula
def invalid_reason(c):
    """0 when the layout can run, else the Invalid code of the first rule it breaks."""
    reason = layout_reason(c)
    return reason if reason != Invalid.OK else sequence_reason(c)


@formula
def layout_reason(c):
    """The rules the sequence length plays no part in (derive() keeps the result: rank_layout_reason)."""
    if c.n_gpus != c.dp * c.tp * c.pp * c.cp:
        return Invalid.GPUS_LAYOUT
    if c.vpp > 1 and (c.pp_schedule != PPSchedule.INTERLEAVED or c.pp == 1):
        return Invalid.VPP_SCHEDULE
    if c.lora_rank == 0 and c.base_quant != Quant.NONE and c.optimizer != Optimizer.NONE:
        return Invalid.QUANT_FULL_TRAINING
    if (c.offload != Offload.NONE and c.zero_stage == 0) or (
        c.offload == Offload.OPTIMIZER_PARAMS and c.zero_stage < 3
    ):
        return Invalid.OFFLOAD_ZERO
    if c.zero_stage > 0 and c.dp * c.cp == 1 and c.offload == Offload.NONE:
        return Invalid.ZERO_ONE_REPLICA
    if not has_dims(c):
        return Invalid.OK if c.tp == 1 and c.pp == 1 else Invalid.NO_DIMS
    return model_layout_reason(c)


@formula
def sequence_reason(c):
    """Rules on the sequence length: SP splits it over tp, load-balanced ring attention into 2 * cp chunks."""
    if c.sp and c.seq_len % c.tp != 0:
        return Invalid.SP_SEQ
    if c.cp > 1 and c.seq_len % (2 * c.cp) != 0:
        return Invalid.CP_SEQ
    return Invalid.OK


@formula
def model_layout_reason(c):
    """Rules that need the model's dims: heads over TP, layers over PP stages, experts over EP."""
    if c.n_heads % c.tp != 0:
        return Invalid.TP_HEADS
    if kv_heads(c) % c.tp != 0:
        return Invalid.TP_KV_HEADS
    if c.n_layers % (c.pp * c.vpp) != 0:
        return Invalid.PP_LAYERS
    if c.ep > 1 and c.n_experts % c.ep != 0:
        return Invalid.EP_EXPERTS
    if c.ep > 1 and (c.dp * c.cp) % c.ep != 0:
        return Invalid.EP_DP
    if c.n_experts > 0 and c.top_k > c.n_experts:
        return Invalid.TOP_K
    return Invalid.OK


