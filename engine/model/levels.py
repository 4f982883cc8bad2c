"""The memory model in three levels, each a pure function of the configuration and the levels above it.

    rank_terms(c)            what one rank holds and keeps per token: the model, method and layout decide it,
                             the workload and the GPU change none of it              -> Rank
    step_terms(c, r)         the phased peak of one training step for a workload   -> Step
    device_terms(c, r, s)    the peak on one GPU type: overheads, capacity, fits    -> Device

Each output column of CONFIG.md is one field of one `*Columns` tuple, computed in exactly one place here; the
scalar reference `evaluate_one(c)` chains the three, and the kernels call the same functions at the loop level
of the axes each depends on (engine/model/dependencies.py reads which inputs each level uses). Codes: peak_phase
and bottleneck are engine.inputs.codes members, valid and fits 0/1, NULL (-1) a value that needs a runnable
layout (or model dims) the configuration does not have.
"""

from typing import NamedTuple

from engine.inputs.codes import Invalid
from engine.model.activations import (
    head_bytes_per_token,
    replicated_bytes_per_token,
    scores_bytes_per_key,
    split_bytes_per_token,
)
from engine.model.common import formula
from engine.model.overhead import allocator_slack_bytes, overhead_bytes
from engine.model.params import has_dims, n_moe_layers
from engine.model.peak import peak
from engine.model.split import block_params_per_gpu, params_per_gpu, trainable_params_per_gpu
from engine.model.states import device_grad_bytes, device_optimizer_bytes, device_weight_bytes, host_bytes
from engine.model.temporaries import (
    autocast_cache_bytes,
    ddp_bucket_bytes,
    dequant_bytes,
    optimizer_step_bytes,
    zero3_gather_bytes,
    zero3_grad_bytes,
)
from engine.model.validity import layout_reason, sequence_reason

NULL = -1


class RankColumns(NamedTuple):
    """Output columns the workload and the GPU do not change: the model states resident on one GPU."""

    weight_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    host_bytes: int  # host RAM the offload needs per GPU


class Rank(NamedTuple):
    columns: RankColumns
    reason: int  # Invalid code of the layout rules
    params: int  # parameters held, before ZeRO sharding
    trainable_params: int
    block_params: int  # one transformer block's parameters: what ZeRO-3 gathers at a time
    cast_bytes: int  # torch.autocast's 16-bit weight copies
    gather_bytes: int  # ZeRO-3 gathered blocks in flight, LoRA's dequantized weight
    reduce_bytes: int  # ZeRO-3 unsharded block gradients before their reduce-scatter
    step_bytes: int  # what the optimizer step allocates
    bucket_bytes: int  # DDP / DeepSpeed gradient buckets
    replicated_per_token: int  # activation bytes per token per layer that TP leaves whole
    split_per_token: int  # ... that TP splits (dense layer)
    moe_split_per_token: int  # ... that TP splits (MoE layer)
    scores_per_key: int  # s^2 attention terms per token and key
    head_per_token: int  # the final norm and the LM head's input


@formula
def rank_terms(c):
    """The per-rank quantities of a model, method and layout (no workload, no GPU)."""
    params = params_per_gpu(c)
    trainable = trainable_params_per_gpu(c)
    block = block_params_per_gpu(c)
    columns = RankColumns(device_weight_bytes(c), device_grad_bytes(c), device_optimizer_bytes(c), host_bytes(c))
    return Rank(
        columns,
        layout_reason(c).value,
        params,
        trainable,
        block,
        autocast_cache_bytes(c, params),
        zero3_gather_bytes(c, block) + dequant_bytes(c),
        zero3_grad_bytes(c, block, trainable),
        optimizer_step_bytes(c, trainable),
        ddp_bucket_bytes(c, trainable),
        replicated_bytes_per_token(c),
        split_bytes_per_token(c, False),
        split_bytes_per_token(c, True) if n_moe_layers(c) > 0 else 0,
        scores_bytes_per_key(c),
        head_bytes_per_token(c),
    )


class StepColumns(NamedTuple):
    """Output columns of one training step's peak (NULL where the configuration cannot run)."""

    valid: int
    invalid_reason: int  # an Invalid code, 0 when valid
    activation_bytes: int  # saved for backward, live at the peak
    temp_bytes: int  # transient buffers live at the peak
    allocated_peak_bytes: int  # torch.cuda.max_memory_allocated()
    allocator_slack_bytes: int  # reserved - allocated: the caching allocator's rounding and fragmentation
    reserved_peak_bytes: int  # torch.cuda.max_memory_reserved()
    peak_phase: int  # a Phase code
    peak_grad_bytes: int  # gradients live at the peak
    peak_optimizer_bytes: int  # optimizer states live at the peak


class Step(NamedTuple):
    columns: StepColumns
    runs: bool  # a runnable layout with model dims: the peak is defined


@formula
def step_terms(c, r):
    """The peak of one training step: what is live at the high-water mark of forward, backward or the
    optimizer step, on the most loaded pipeline stage."""
    reason = r.reason if r.reason != Invalid.OK else sequence_reason(c).value
    valid = int(reason == Invalid.OK)
    if not has_dims(c) or reason != Invalid.OK:
        return Step(StepColumns(valid, reason, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), False)
    p = peak(c, r)
    slack = allocator_slack_bytes(p.activation_bytes + p.temp_bytes)
    grads = r.columns.grad_bytes if p.grads_live else 0
    optimizer = p.allocated_bytes - r.columns.weight_bytes - p.activation_bytes - p.temp_bytes - grads
    columns = StepColumns(valid, reason, p.activation_bytes, p.temp_bytes, p.allocated_bytes, slack,
                          p.allocated_bytes + slack, p.phase, grads, optimizer)
    return Step(columns, True)


class DeviceColumns(NamedTuple):
    """Output columns on one GPU type."""

    overhead_bytes: int  # CUDA context, cuBLAS workspace, NCCL buffers
    device_peak_bytes: int  # reserved + overhead: what nvidia-smi shows at the peak
    capacity_bytes: int
    usable_bytes: int  # capacity * (1 - headroom): what the job may use
    fits: int
    bottleneck: int  # a Component code


class Device(NamedTuple):
    columns: DeviceColumns


@formula
def usable_bytes(c):
    """What the user lets the job use: capacity minus the headroom kept for runtime variability."""
    return int(c.capacity_bytes * (1.0 - c.headroom))


@formula
def host_fits(c, r):
    """Offloaded states fit the host's RAM share of this GPU (gpus.toml host_ram_bytes_per_node / gpus_per_node);
    unknown host RAM (0) is not a constraint."""
    return c.host_ram_bytes == 0 or r.columns.host_bytes <= c.host_ram_bytes


@formula
def bottleneck(r, s, overhead):
    """The largest component at the peak (a Component code): weights, grads, optimizer, activations,
    temporaries with the allocator's slack, or the overhead beside the tensors."""
    rc, sc = r.columns, s.columns
    sizes = (rc.weight_bytes, sc.peak_grad_bytes, rc.optimizer_bytes, sc.activation_bytes,
             sc.temp_bytes + sc.allocator_slack_bytes, overhead)
    best = 0
    for i in range(1, 6):
        if sizes[i] > sizes[best]:
            best = i
    return best


@formula
def device_terms(c, r, s):
    """The step's peak on this GPU: beside-the-tensors overhead, capacity, and whether it fits."""
    overhead = overhead_bytes(c)
    usable = usable_bytes(c)
    if not s.runs:
        fits = 0 if s.columns.valid == 0 else NULL  # no dims: unknown
        return Device(DeviceColumns(overhead, NULL, c.capacity_bytes, usable, fits, NULL))
    device = s.columns.reserved_peak_bytes + overhead
    fits = int(device <= usable and host_fits(c, r))
    return Device(DeviceColumns(overhead, device, c.capacity_bytes, usable, fits, bottleneck(r, s, overhead)))


@formula
def evaluate_one(c):
    """The scalar reference: every level of one configuration."""
    r = rank_terms(c)
    s = step_terms(c, r)
    return r, s, device_terms(c, r, s)
