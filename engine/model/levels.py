"""The memory model in levels, each a pure function of the configuration and the levels above it.

    rank_terms(c)             what one rank holds and keeps per token: the model, method and layout decide it,
                              the workload and the GPU change none of it                -> Rank
    shape_terms(c, r)         what a few of the workload's inputs decide, never micro_batch or seq_len
                              (checkpointing, grad_accum, compile...: dependencies.py)   -> Shape
    step_terms(c, r, sh)      the phased peak of one training step for a workload      -> Step
    gpu_terms(c, r)           what a GPU type offers a layout: overheads, capacity, rates -> Gpu
    device_terms(s, g)        the step's peak on that GPU: device peak, fits, time, cost -> Device

Each output column of CONFIG.md is one field of one `*Columns` tuple, computed in exactly one place here; the
scalar reference `evaluate_one(c)` chains them, and the kernels call the same functions at the loop level of
the axes each depends on (engine/model/dependencies.py reads which inputs each level uses): device_terms reads
no input at all, so per configuration only a few additions and comparisons remain. Codes: peak_phase
and bottleneck are engine.inputs.codes members, valid and fits 0/1, NULL (-1) a value that needs a runnable
layout (or model dims) the configuration does not have.
"""

from typing import NamedTuple

import numpy as np

from engine.inputs.codes import Allocator, Component, Invalid, Phase
from engine.inputs.outputs import level_fields
from engine.model.activations import (
    has_dropout,
    head_bytes_per_token,
    head_input_bytes_per_token,
    projection_inputs_bytes_per_token,
    replicated_bytes_per_token,
    scores_bytes_per_key,
    split_bytes_per_token,
    stream_bytes,
)
from engine.model.common import formula
from engine.model.compiled import (
    compiled_replicated_bytes_per_token,
    compiled_scores_bytes_per_key,
    compiled_split_bytes_per_token,
)
from engine.model.evaluation import eval_segment_bytes, evaluates
from engine.model.gpu_rates import Rates, gpu_rates
from engine.model.load import load_bytes
from engine.model.loss import NOT_PROPORTIONAL, LossBytes, loss_bytes_per_token, step_loss_bytes
from engine.model.overhead import allocator_slack_bytes, loss_recut_bytes, overhead_bytes
from engine.model.params import has_dims, n_moe_layers
from engine.model.peak import (
    NO_STAGE_FIXED,
    Peak,
    StageFixed,
    evaluated_stage_fixed,
    most_loaded,
    pageable_bytes,
    save_peak,
    stage_peaks,
    stage_share,
)
from engine.model.save import save_gather_bytes
from engine.model.selective_op import (
    compiled_unsaved_bytes_per_token,
    selective_op_replicated_bytes_per_token,
    selective_op_scores_bytes_per_key,
    selective_op_split_bytes_per_token,
)
from engine.model.sharding import end_of_backward_bytes, gathered_bytes, prefetch_bytes, reduce_scatter_bytes
from engine.model.split import (
    block_params_per_gpu,
    evaluated_rank_layers,
    evaluated_rank_params,
    params_per_gpu,
    trainable_params_per_gpu,
)
from engine.model.stage import layer_bytes, offloaded_activation_bytes
from engine.model.states import device_grad_bytes, device_optimizer_bytes, device_weight_bytes, host_states_bytes
from engine.model.step_work import NO_WORK_RATES, Work, WorkRates, step_work, work_rates
from engine.model.streams import side_stream_bytes, side_stream_slack_bytes
from engine.model.temporaries import (
    autocast_cache_bytes,
    ddp_bucket_bytes,
    dequant_bytes,
    optimizer_step_bytes,
)
from engine.model.time import Times, device_times
from engine.model.validity import gpu_reason, layout_reason, sequence_reason

NULL = -1
NO_WORK = Work(*[np.nan] * len(Work._fields))  # a configuration that cannot run does no work
NO_TIMES = Times(*[np.nan] * len(Times._fields))


# The output columns each level computes, as the registry engine/inputs/outputs.py lists them.
RankColumns = NamedTuple("RankColumns", level_fields("rank"))
StepColumns = NamedTuple("StepColumns", level_fields("step"))
GpuColumns = NamedTuple("GpuColumns", level_fields("gpu"))
DeviceColumns = NamedTuple("DeviceColumns", level_fields("device"))


class Rank(NamedTuple):
    columns: RankColumns
    reason: int  # Invalid code of the layout rules
    host_states_bytes: int  # host RAM the offloaded states need (states.py)
    params: int  # parameters held, before ZeRO sharding
    trainable_params: int
    block_params: int  # one transformer block's parameters: what ZeRO-3 gathers at a time
    cast_bytes: int  # torch.autocast's 16-bit weight copies
    gather_bytes: int  # gathered from the end of forward through backward (sharding.py), LoRA's dequantized weight
    prefetch_bytes: int  # FSDP's block prefetched in backward
    reduce_bytes: int  # one block's gradients on their way to the shards
    side_stream_bytes: int  # what FSDP's all-gather and reduce-scatter streams keep reserved (streams.py)
    end_bytes: int  # sharding buffers when backward ends
    step_bytes: int  # what the optimizer step allocates
    bucket_bytes: int  # DDP / DeepSpeed gradient buckets
    replicated_per_token: int  # activation bytes per token per layer that TP leaves whole
    split_per_token: int  # ... that TP splits (dense layer)
    moe_split_per_token: int  # ... that TP splits (MoE layer)
    scores_per_key: int  # s^2 attention terms per token and key
    head_per_token: int  # the final norm and the LM head's input
    inputs_per_token: int  # the projections' saved inputs (part of replicated_per_token)
    head_input_per_token: int  # the LM head's saved input (part of head_per_token)
    sac_replicated_per_token: int  # the same under selective_op (selective_op.py)
    sac_split_per_token: int
    sac_moe_split_per_token: int
    sac_scores_per_key: int
    sac_compiled_unsaved_per_token: int  # what of sac_replicated_per_token a compiled dense block does not save
    compiled_replicated_per_token: int  # the same under torch.compile (compiled.py; dense layers)
    compiled_split_per_token: int
    compiled_scores_per_key: int
    stage_params: int  # non-expert parameters of the most loaded pipeline stage (0 when p = 1): split.py
    first_params: int  # ... of the first, middle and last ranks evaluated (peak.stage_share's proportions)
    middle_params: int
    last_params: int
    first_layers: int  # transformer layers on the first, middle and last ranks evaluated (split.rank_layers)
    middle_layers: int
    last_layers: int
    load_bytes: int  # what the GPU holds when the checkpoint's load peaks, where more than the step's weights (load.py)
    save_bytes: int  # the one tensor a checkpoint's save gathers beside the states (save.py)


NO_RANK_TERMS = (0,) * (len(Rank._fields) - 2)  # a layout too large to count: every term after columns and reason


@formula
def stage_params_of_ranks(c):
    """The most loaded stage's non-expert parameters, then those of the first, middle and last ranks; zeros when
    there is one stage (peak.stage_share needs none then)."""
    if c.pp == 1:
        return 0, 0, 0, 0
    first, middle, last = evaluated_rank_params(c)
    return max(first, middle, last), first, middle, last


@formula
def rank_terms(c):
    """The per-rank quantities of a model, method and layout (no workload, no GPU)."""
    reason = layout_reason(c).value
    if reason == Invalid.TOO_LARGE:  # nothing can be counted without wrapping
        return Rank(RankColumns(NULL, NULL, NULL), reason, *NO_RANK_TERMS)
    params = params_per_gpu(c)
    trainable = trainable_params_per_gpu(c)
    block = block_params_per_gpu(c)
    columns = RankColumns(weight_bytes=device_weight_bytes(c), grad_bytes=device_grad_bytes(c),
                          optimizer_bytes=device_optimizer_bytes(c))
    stage, first, middle, last = stage_params_of_ranks(c)
    first_layers, middle_layers, last_layers = evaluated_rank_layers(c)
    moe_split = split_bytes_per_token(c, True) if n_moe_layers(c) > 0 else 0
    return Rank(
        columns=columns,
        reason=reason,
        host_states_bytes=host_states_bytes(c),
        params=params,
        trainable_params=trainable,
        block_params=block,
        cast_bytes=autocast_cache_bytes(c, params),
        gather_bytes=gathered_bytes(c, params, block) + dequant_bytes(c),
        prefetch_bytes=prefetch_bytes(c, block),
        reduce_bytes=reduce_scatter_bytes(c, block, trainable),
        side_stream_bytes=side_stream_bytes(c, params, block, columns.grad_bytes),
        end_bytes=end_of_backward_bytes(c, params, block, trainable),
        step_bytes=optimizer_step_bytes(c, trainable),
        bucket_bytes=ddp_bucket_bytes(c, trainable),
        replicated_per_token=replicated_bytes_per_token(c),
        split_per_token=split_bytes_per_token(c, False),
        moe_split_per_token=moe_split,
        scores_per_key=scores_bytes_per_key(c),
        head_per_token=head_bytes_per_token(c),
        inputs_per_token=projection_inputs_bytes_per_token(c),
        head_input_per_token=head_input_bytes_per_token(c),
        sac_replicated_per_token=selective_op_replicated_bytes_per_token(c, stream_bytes(c), c.d_ff),
        sac_split_per_token=selective_op_split_bytes_per_token(c, c.d_ff),
        sac_moe_split_per_token=selective_op_split_bytes_per_token(c, c.moe_d_ff * max(c.top_k, 1)),
        sac_scores_per_key=selective_op_scores_bytes_per_key(c),
        sac_compiled_unsaved_per_token=compiled_unsaved_bytes_per_token(c, c.d_ff),
        compiled_replicated_per_token=compiled_replicated_bytes_per_token(c, stream_bytes(c), has_dropout(c)),
        compiled_split_per_token=compiled_split_bytes_per_token(c, c.d_ff),
        compiled_scores_per_key=compiled_scores_bytes_per_key(c, has_dropout(c)),
        stage_params=stage,
        first_params=first,
        middle_params=middle,
        last_params=last,
        first_layers=first_layers,
        middle_layers=middle_layers,
        last_layers=last_layers,
        load_bytes=load_bytes(c),
        save_bytes=save_gather_bytes(c),
    )


class Shape(NamedTuple):
    """What the workload's inputs shape_terms reads decide (never micro_batch or seq_len), worked out once for every
    step that shares them (the sweep orders their axes before the step's: engine/configure/grid.py): the step's
    work per token (step_work.py WorkRates), what each evaluated pipeline rank holds in each phase apart from
    its activations and the temporaries that grow with the tokens (peak.py StageFixed), and the loss's bytes per
    token where each step's are a whole multiple of them (loss.py LossBytes). docs/step-coefficients.md plans the
    rest of the phased peak's coefficients here too."""

    work: WorkRates
    first: StageFixed  # the first, middle and last pipeline ranks evaluated (split.stage_ranks)
    middle: StageFixed
    last: StageFixed
    loss_bytes_per_token: LossBytes  # the loss's bytes per local token, or NOT_PROPORTIONAL (loss.loss_bytes_per_token)


@formula
def shape_terms(c, r):
    """The Shape of a layout's workload (no micro_batch, no seq_len)."""
    if r.reason != Invalid.OK or not has_dims(c):  # step_terms evaluates nothing of it
        return Shape(NO_WORK_RATES, NO_STAGE_FIXED, NO_STAGE_FIXED, NO_STAGE_FIXED, NOT_PROPORTIONAL)
    first, middle, last = evaluated_stage_fixed(c, r)
    return Shape(work_rates(c, r), first, middle, last, loss_bytes_per_token(c))


class Step(NamedTuple):
    columns: StepColumns
    reason: int  # Invalid code of the layout and sequence rules; OK: the peak is defined (device_terms adds the GPU's)
    work: Work  # FLOPs and collective bytes of the step (step_work.py)
    largest: int  # the largest component of the tensors at the peak (a Component code) ...
    largest_bytes: int  # ... and its bytes (device_terms weighs it against the overhead)
    releasable_bytes: int  # of the reserve, the segments the allocator releases before it runs out (param_blocks.py)


@formula
def largest_component(r, sc):
    """The largest of weights, grads, optimizer states, activations and temporaries with the allocator's slack
    at the peak, as (Component code, bytes); the first one wins a tie."""
    sizes = (r.columns.weight_bytes, sc.peak_grad_bytes, sc.peak_optimizer_bytes, sc.activation_bytes,
             sc.temp_bytes + sc.allocator_slack_bytes)
    best = 0
    for i in range(1, 5):
        if sizes[i] > sizes[best]:
            best = i
    return best, sizes[best]


@formula
def recut_bytes(c, r, p, block):
    """The loss's blocks the optimizer states made the loss stage cut again (overhead.loss_recut_bytes): the
    states the allocator places (a paged optimizer's are outside it), against what its backward freed, the saved
    activations and the rest of the segments that held them (stage.pinned_segment_bytes)."""
    states = stage_share(c, r, c.pp - 1, r.columns.optimizer_bytes - pageable_bytes(c, r))
    return loss_recut_bytes(c, states, p.saved_bytes + p.pinned_bytes, block)


@formula
def stage_slack_bytes(c, r, p, block):
    """reserved - allocated on a pipeline rank at its peak `p`: the default stream's slack (with `block`, the
    loss-sized block, on the rank that holds the loss), the segments its checkpointed inputs pin, and FSDP's stream
    pools."""
    grads = r.columns.grad_bytes if p.grads_live else 0
    default_stream = allocator_slack_bytes(p.activation_bytes + p.temp_bytes, block, recut_bytes(c, r, p, block))
    return default_stream + p.pinned_bytes + side_stream_slack_bytes(r.side_stream_bytes, grads)


@formula
def reserve_slack_bytes(c, r, p, holds_loss, last, block):
    """reserved - allocated at the peak `p` of the most loaded rank, or more where the last stage, less loaded,
    reserves more: the loss block is its own."""
    slack = stage_slack_bytes(c, r, p, block if holds_loss else 0)
    if not holds_loss and block > 0:
        slack = max(slack, last.allocated_bytes + stage_slack_bytes(c, r, last, block) - p.allocated_bytes)
    return slack


@formula
def load_peak(r):
    """The checkpoint's load at its peak (load.py): the weights this rank keeps, and as temporaries the rest of the
    whole model it holds until ZeRO-3 partitions it; no gradient, optimizer state or activation yet."""
    return Peak(r.load_bytes, Phase.LOAD.value, 0, r.load_bytes - r.columns.weight_bytes, False, 0, 0, 0)


@formula
def step_terms(c, r, sh):
    """The peak of one training step: what is live at the high-water mark of forward, backward or the
    optimizer step, on the most loaded pipeline stage; its reserved peak is that stage's, or the last stage's
    where the loss-sized block makes the last one reserve more (`sh`: the workload's Shape)."""
    reason = r.reason if r.reason != Invalid.OK else sequence_reason(c).value
    if reason != Invalid.OK:  # a model without dims is one (validity.layout_reason: NO_DIMS)
        columns = StepColumns(activation_bytes=NULL, temp_bytes=NULL, allocated_peak_bytes=NULL,
                              reserved_peak_bytes=NULL, peak_phase=NULL, host_bytes=NULL, peak_grad_bytes=NULL,
                              peak_optimizer_bytes=NULL, allocator_slack_bytes=NULL)
        return Step(columns, reason, NO_WORK, NULL, NULL, 0)
    layer = layer_bytes(c, r)  # one layer's activations, the same on every rank
    loss = step_loss_bytes(c, sh.loss_bytes_per_token)
    training = stage_peaks(c, r, layer, loss, False, (sh.first, sh.middle, sh.last))  # then weighed against evaluations
    p, holds_loss, last = most_loaded(c, r, layer, training, True)
    grads = r.columns.grad_bytes if p.grads_live else 0
    block = loss.block if c.allocator == Allocator.CACHING else 0
    slack = reserve_slack_bytes(c, r, p, holds_loss, last, block)
    if evaluates(c) and block > 0:
        # the loss stage's step segments stay cached beside its evaluation's own, whichever phase peaks
        step_last = training[2]
        last_reserved = step_last.allocated_bytes + stage_slack_bytes(c, r, step_last, block) + eval_segment_bytes(c)
        slack = max(slack, last_reserved - p.allocated_bytes)
    # the step's gradients and optimizer buffers that no block its forward and backward freed takes sit in segments of
    # their own beside those blocks (param_blocks.py): whole free segments by turns, which the allocator releases and
    # retries with before it reports out of memory, so they raise max_memory_reserved() more than they bring an
    # out-of-memory error closer; fits counts them, on the safe side, as it counts FSDP's stream pools (explain says
    # how much of the reserve they are: Step.releasable_bytes)
    steady = max(p.steady_bytes, training[0].steady_bytes, training[1].steady_bytes, training[2].steady_bytes)
    releasable = max(0, steady - p.allocated_bytes - slack)  # on whichever stage reserves the most
    slack += releasable
    save = save_peak(c, r) if r.save_bytes > 0 else p  # a sharded save gathers nothing (save.py)
    if save.allocated_bytes > p.allocated_bytes:  # the save holds more than any step; the reserve is the larger
        reserved = p.allocated_bytes + slack
        p, grads = save, r.columns.grad_bytes if save.grads_live else 0
        slack = max(0, reserved - p.allocated_bytes)
    if r.load_bytes > p.allocated_bytes:  # the load holds more than any step; the reserve is the larger (load.py)
        reserved = p.allocated_bytes + slack
        p, grads = load_peak(r), 0
        slack = max(0, reserved - p.allocated_bytes)
    optimizer = p.allocated_bytes - r.columns.weight_bytes - p.activation_bytes - p.temp_bytes - grads
    host = r.host_states_bytes + offloaded_activation_bytes(c, r, layer)
    columns = StepColumns(activation_bytes=p.activation_bytes,
                          temp_bytes=p.temp_bytes, allocated_peak_bytes=p.allocated_bytes,
                          reserved_peak_bytes=p.allocated_bytes + slack, peak_phase=p.phase, host_bytes=host,
                          peak_grad_bytes=grads, peak_optimizer_bytes=optimizer, allocator_slack_bytes=slack)
    largest, largest_bytes = largest_component(r, columns)
    return Step(columns, reason, step_work(c, r, layer, sh.work), largest, largest_bytes, min(releasable, slack))


class Gpu(NamedTuple):
    columns: GpuColumns
    reason: int  # Invalid code of what its hardware cannot run (validity.gpu_reason)
    host_ram_bytes: int  # this GPU's share of its node's RAM (gpus.toml; 0: unknown, not a constraint)
    rates: Rates  # how fast it computes and communicates (gpu_rates.py)


@formula
def gpu_from_table(table, reasons, host_ram, rates, g):
    """The Gpu held in column g of a table of GpuColumns rows (the sweep kernel's per-rank table)."""
    return Gpu(GpuColumns(table[0, g], table[1, g], table[2, g]), reasons[g], host_ram[g],
               Rates(rates[0, g], rates[1, g], rates[2, g], rates[3, g], rates[4, g], rates[5, g], rates[6, g],
                     rates[7, g], rates[8, g], rates[9, g]))


@formula
def usable_bytes(c):
    """What the user lets the job use: capacity minus the headroom kept for runtime variability."""
    return int(c.capacity_bytes * (1.0 - c.headroom))


@formula
def host_ram_per_gpu(c):
    """Host RAM one GPU of the job may fill: host_ram_bytes is one GPU's share of a full node; a job on fewer GPUs
    than a node holds shares the node's RAM among its own (ZeRO-Offload trains a 13B model on one V100 of a node
    with 1.5 TB: arXiv:2101.06840 sec. 6.2)."""
    per_node, on_node = c.gpus_per_node, min(c.n_gpus, c.gpus_per_node)
    if per_node <= 1 or on_node >= per_node or on_node < 1:
        return c.host_ram_bytes
    return int(min(float(c.host_ram_bytes) * per_node / on_node, 2.0**62))


@formula
def gpu_terms(c, r):
    """The GPU type's side of a layout: its overheads, capacity and usable bytes (no workload)."""
    columns = GpuColumns(overhead_bytes=overhead_bytes(c), capacity_bytes=c.capacity_bytes, usable_bytes=usable_bytes(c))
    return Gpu(columns, gpu_reason(c).value, host_ram_per_gpu(c), gpu_rates(c, r))


class Device(NamedTuple):
    columns: DeviceColumns
    times: Times  # step_time_s, tokens_per_gpu_s, mfu, cost_per_mtok (time.py)


@formula
def device_terms(s, g):
    """The step's peak on this GPU: device peak, whether it fits, what dominates, and whether it runs there at all
    (the layout's and the sequence's rules first, then the GPU's). On a GPU that cannot run it the step's own
    columns stay what it holds where it runs; this GPU's are NULL."""
    reason = s.reason if s.reason != Invalid.OK else g.reason
    if reason != Invalid.OK:
        columns = DeviceColumns(device_peak_bytes=NULL, fits=0, bottleneck=NULL, valid=0, invalid_reason=reason)
        return Device(columns, NO_TIMES)
    overhead = g.columns.overhead_bytes
    device = s.columns.reserved_peak_bytes + overhead
    host_fits = g.host_ram_bytes == 0 or s.columns.host_bytes <= g.host_ram_bytes  # 0: unknown, no constraint
    fits = int(device <= g.columns.usable_bytes and host_fits)
    bottleneck = Component.OVERHEAD.value if overhead > s.largest_bytes else s.largest
    columns = DeviceColumns(device_peak_bytes=device, fits=fits, bottleneck=bottleneck, valid=1,
                            invalid_reason=reason)
    return Device(columns, device_times(s.work, g.rates))


@formula
def evaluate_one(c):
    """The scalar reference: every level of one configuration."""
    r = rank_terms(c)
    s = step_terms(c, r, shape_terms(c, r))
    g = gpu_terms(c, r)
    return r, s, g, device_terms(s, g)
