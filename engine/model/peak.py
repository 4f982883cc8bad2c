"""The phased peak: the memory high-water mark is not the sum of everything.

One training step, steady state (optimizer states exist, zero_grad(set_to_none=True)):
    forward    states + every activation in flight + logits and loss + gathers / casts
    backward   starts with all activations and the loss gradients; ends with all the gradients
    optimizer  states + gradients + the step's own buffers
The most loaded rank is the first pipeline stage (most micro-batches in flight), a middle one (the most layers)
or the last (the logits): the three are evaluated and the largest peak is reported (pipeline.py). Gradients are live in forward only when something keeps
them between steps: accumulation over micro-batches, pipeline schedules, or framework buffers (Megatron's
contiguous main-grad buffer, DeepSpeed ZeRO-3's gradient partitions). Between two steps an evaluation may run
(eval_peak, evaluation.py).

Every function takes the configuration `c` and the rank's per-layout quantities `r` (levels.Rank); those of a
rank's step also one layer's bytes for one micro-batch, `layer` (stage.layer_bytes), worked out once per step, and
the loss's, `loss` (loss.LossBytes: the shape's bytes per token times the step's tokens, loss.step_loss_bytes).
"""

from typing import NamedTuple

from engine.catalogs.conventions import (
    FRAMEWORK_DDP_BUCKET_COPY,
    FRAMEWORK_GRADS_KEPT_FROM_STAGE,
    FRAMEWORK_TORCH_PIPELINING,
)
from engine.inputs.codes import Ckpt, Phase, PPSchedule, ZeroGrad
from engine.model.common import ceil_div, formula
from engine.model.evaluation import eval_cast_bytes, eval_work_bytes, evaluates
from engine.model.held import cast_source_bytes, held_graph_bytes, held_logits_bytes
from engine.model.loss import head_gradient_bytes, micro_batch_loss_bytes
from engine.model.param_blocks import steady_reserved_bytes
from engine.model.params import has_dims
from engine.model.pipeline import in_flight, recv_buffer_bytes
from engine.model.sharding import accumulates_unsharded, fsdp, loss_prefetch_bytes, next_group_gather_bytes
from engine.model.split import evaluated_layers, stage_ranks
from engine.model.stage import (
    checkpointed_layers,
    in_flight_bytes,
    layer_bytes,
    pinned_segment_bytes,
    rank_microbatch_activation_bytes,
    stage_activations_from,
)
from engine.model.states import grad_bytes_per_param, trains
from engine.model.streams import side_stream_slack_bytes
from engine.model.temporaries import backward_workspace_bytes, head_cast_bytes, tied_gradient_sum_bytes


class Peak(NamedTuple):
    """The live tensor bytes at the peak of one step and what they are made of."""

    allocated_bytes: int
    phase: int  # a Phase code
    activation_bytes: int
    temp_bytes: int
    grads_live: bool
    saved_bytes: int  # the activations the stage's step saves for backward, which backward frees before the
    # optimizer step (overhead.loss_recut_bytes), whichever phase peaks
    pinned_bytes: int  # reserved in the segments that hold the checkpointed inputs (stage.pinned_segment_bytes)
    steady_bytes: int  # the step's reserve with its parameter-shaped blocks beside the forward's and backward's
    # (param_blocks.steady_reserved_bytes), whichever phase peaks; 0 where they find room in what those free


@formula
def grads_live_in_forward(c, rank):
    """Gradients exist when pipeline rank `rank` holds its most micro-batches in flight: kept by the
    framework's buffers or left allocated by zero_grad(set_to_none=False); accumulated over micro-batches
    (p = 1); in a pipeline, when a backward comes between two forwards (1F1B's and interleaving's steady
    state: fewer warmup micro-batches than the step has), not under GPipe, whose forwards all come first."""
    if c.optimizer_in_backward:
        return False
    if c.zero_stage >= FRAMEWORK_GRADS_KEPT_FROM_STAGE[c.framework] or c.zero_grad == ZeroGrad.ZEROS:
        return True
    if c.pp == 1:
        return c.grad_accum > 1 and not accumulates_unsharded(c)
    num, den = in_flight(c, rank)
    return c.pp_schedule != PPSchedule.GPIPE and num < c.grad_accum * den


@formula
def accumulated_grad_bytes(c, r, rank):
    """The unsharded gradients accumulated under grad_sync = last, from the first micro-batch's backward until the
    last one reduce-scatters them: every trainable parameter the rank holds before sharding, in the gradients' dtype
    (FSDP2 accumulates in its reduce dtype: fsdp/_fully_shard/_fsdp_param.py to_accumulated_grad_if_needed).
    Measured: data/measured/parallel.csv, family fsdp2_sync_last (the sharded gradients appear only in the last
    backward)."""
    if not accumulates_unsharded(c):
        return 0
    return r.trainable_params * grad_bytes_per_param(c)  # pp = 1: the rank's share is all of it


@formula
def embedding_grad_temp_bytes(c, rank):
    """The first stage's embedding backward makes a dense V·h gradient, added into the accumulated one."""
    if rank != 0 or not has_dims(c) or c.lora_rank > 0 or not trains(c):
        return 0
    return grad_bytes_per_param(c) * ceil_div(c.vocab * c.d_model, c.tp)


@formula
def states_bytes(r, with_grads):
    """Weights and optimizer states always, gradients when live (offloaded ones live on the host)."""
    rc = r.columns
    return rc.weight_bytes + rc.optimizer_bytes + (rc.grad_bytes if with_grads else 0)


@formula
def buckets_bytes(c, r, in_backward):
    """Gradient buckets: PyTorch DDP allocates its buckets when it is constructed and never frees them, so
    they are alive in every phase (data/measured/PARALLEL.md, ddp: every row is the single-GPU peak plus
    P·grad_bytes), as is DeepSpeed ZeRO-3's reduce bucket; ZeRO-1/2's lives through each backward only (made
    as it begins, dropped before the optimizer step: PARALLEL.md, "DeepSpeed's reduce bucket")."""
    persistent = (FRAMEWORK_DDP_BUCKET_COPY[c.framework] and c.zero_stage == 0) or c.zero_stage >= 3
    return r.bucket_bytes if in_backward or persistent else 0


@formula
def pageable_bytes(c, r):
    """Paged optimizers (bitsandbytes) evict their states to host under pressure in forward and backward."""
    return r.columns.optimizer_bytes if c.paged else 0


@formula
def stage_share(c, r, rank, x):
    """x, the most loaded pipeline rank's bytes of a state-sized quantity, for `rank` (the first, middle or last
    rank evaluated): in proportion to the parameters the rank holds (states, casts, step buffers and buckets are
    per parameter; the counts are the layout's, levels.Rank)."""
    if c.pp == 1 or r.stage_params == 0:
        return x
    first, middle, _ = stage_ranks(c)
    held = r.first_params if rank == first else r.middle_params if rank == middle else r.last_params
    return int(x * (held / r.stage_params))


@formula
def stage_cast_bytes(c, r, rank):
    """The rank's autocast weight copies: torch.distributed.pipelining enters autocast per stage forward, so each
    micro-batch in flight keeps its own copies until its backward (PARALLEL.md: 1.6x and 3.3x the stage's
    16-bit weights, embedding included, with 2 and 4 in flight)."""
    casts = stage_share(c, r, rank, r.cast_bytes)
    if c.pp == 1 or not FRAMEWORK_TORCH_PIPELINING[c.framework]:
        return casts
    num, den = in_flight(c, rank)
    return casts * ceil_div(num, den)


@formula
def saved_cast_bytes(c, r, rank, last):
    """The weight casts the matmuls saved for backward, alive until each layer's backward: every one without
    recomputation; under full recomputation the head's (no checkpoint wraps it) and those of the layers left
    unchecked (a checkpointed layer's forward saves nothing, and its recomputation casts again); only the head's
    under selective_op and under activation_offload (outside the offloading context: the decoder's went to host)."""
    head = saved_head_cast_bytes(c, r, rank, last)
    if c.activation_offload:
        return head
    casts = stage_cast_bytes(c, r, rank)
    if c.checkpointing == Ckpt.FULL:
        layers = evaluated_layers(c, r, rank)
        return head + ceil_div((casts - head) * (layers - checkpointed_layers(c, layers)), max(layers, 1))
    return head if c.checkpointing == Ckpt.SELECTIVE_OP else casts


@formula
def saved_head_cast_bytes(c, r, rank, last):
    """Of saved_cast_bytes, the LM head's: its matmul saves its weight's 16-bit cast, outside every checkpoint and
    offloading context (the traced steps keep it through the layers' backward as well: the eager-attention rows of
    data/measured/cpu_fake.csv, whose peak is a layer's)."""
    return min(head_cast_bytes(c), stage_cast_bytes(c, r, rank)) if last else 0


@formula
def forward_cast_bytes(c, r, rank, last):
    """The weight casts alive when forward ends. torch.autocast caches the cast of an fp32 leaf that requires grad
    until autocast exits (aten/src/ATen/autocast_mode.cpp, cached_cast: arg.requires_grad() && arg.is_leaf()), so
    a trained model keeps every cast through forward, recomputed layers' included. LoRA's frozen base is never
    cached: its casts live only where a matmul saved them for backward (saved_cast_bytes), none in a checkpointed
    layer (checked with torch 2.13: tests/test_frozen_base.py)."""
    if c.lora_rank > 0:
        return saved_cast_bytes(c, r, rank, last)
    return stage_cast_bytes(c, r, rank)


@formula
def backward_fixed_temp_bytes(c, r, rank, last):
    """Of backward_temp_bytes, what no micro_batch or seq_len changes: what stays gathered, the kept weight casts
    and the head's gradient made in forward (a fused loss)."""
    t = r.gather_bytes + saved_cast_bytes(c, r, rank, last)  # autocast's cache is gone: only the saved casts
    return t + head_gradient_bytes(c) if last else t


@formula
def backward_temp_bytes(c, r, layer, rank, last, layer_acts, fixed, loss):
    """Early in backward: the loss gradients (last stage; `loss`: the micro-batch's LossBytes) or, once they
    are gone, one layer's gradient workspace and its recomputed activations with the block's gathers and
    reduce-scatter, whichever is larger; plus `fixed`, what no micro_batch or seq_len changes
    (StageFixed.backward_fixed_bytes: backward_fixed_temp_bytes with the buckets and accumulated gradients)
    (`layer_acts`: the activations of the rank's layers in flight, stage.rank_layer_activation_bytes)."""
    # A block's backward with the next one prefetched; its reduce-scatter runs beside the next block's
    # backward, once its own activations are freed (one layer's worth fewer: FSDP2's overlap).
    compute = backward_workspace_bytes(c) + layer.recomputed + 2 * r.prefetch_bytes
    freed = ceil_div(layer_acts, max(evaluated_layers(c, r, rank), 1))
    layer = compute + max(0, r.reduce_bytes - freed)
    gradients = loss_prefetch_bytes(c, r) + loss.backward if last else 0
    return fixed + max(layer, gradients)


class StageFixed(NamedTuple):
    """What a pipeline rank's step holds in each phase apart from its activations and the temporaries that grow with
    the tokens: the same for every micro_batch and seq_len of a shape, so the sweep works them out once per shape
    (levels.Shape) and stage_training_peak adds the rest per step. Bytes; grads_live 0 or 1."""

    grads_live: int  # gradients live in forward (grads_live_in_forward)
    live_bytes: int  # the states live in forward and backward, less a paged optimizer's
    forward_fixed_bytes: int  # forward's fixed temporaries: casts, gathers, buckets, accumulated, a fused head's grad
    model_fixed_bytes: int  # ... the same where the model's forward has returned (outputs_held): no head gradient yet
    backward_fixed_bytes: int  # backward's fixed temporaries: backward_fixed_temp_bytes, buckets, accumulated
    with_grads_bytes: int  # the states with every gradient, less a paged optimizer's
    second_end_temp_bytes: int  # the second backward's end (pipelines): the embedding's gradient, the buckets
    end_states_bytes: int  # the states when backward ends
    end_temp_bytes: int  # ... and its fixed temporaries: sharding buffers, buckets, a tied gradient's sum (or the
    # optimizer steps' buffers, optimizer_in_backward)
    optimizer_temp_bytes: int  # the optimizer step's buffers and buckets
    unpaged_bytes: int  # the states with every gradient, a paged optimizer's back for its step
    reduce_temp_bytes: int  # FSDP's first reduce-scatter with the next group gathered


@formula
def stage_fixed(c, r, rank):
    """Pipeline rank `rank`'s StageFixed."""
    last = rank == c.pp - 1
    g = grads_live_in_forward(c, rank)
    accumulated = accumulated_grad_bytes(c, r, rank)
    model_t = forward_cast_bytes(c, r, rank, last) + r.gather_bytes + accumulated
    model_t += stage_share(c, r, rank, buckets_bytes(c, r, False))
    bwd_t = backward_fixed_temp_bytes(c, r, rank, last) + stage_share(c, r, rank, buckets_bytes(c, r, True))
    with_grads = stage_share(c, r, rank, states_bytes(r, True) - pageable_bytes(c, r))
    if c.optimizer_in_backward:  # no gradient outlives its hook: the steps' buffers (r.step_bytes) in backward
        end_states = stage_share(c, r, rank, states_bytes(r, False) - pageable_bytes(c, r))
        end_t = r.end_bytes + r.step_bytes
    else:
        end_states = with_grads
        end_t = r.end_bytes + stage_share(c, r, rank, buckets_bytes(c, r, True)) + tied_gradient_sum_bytes(c)
    return StageFixed(
        grads_live=1 if g else 0,
        live_bytes=stage_share(c, r, rank, states_bytes(r, g) - pageable_bytes(c, r)),
        forward_fixed_bytes=model_t + (head_gradient_bytes(c) if last else 0),
        model_fixed_bytes=model_t,
        backward_fixed_bytes=bwd_t + accumulated,
        with_grads_bytes=with_grads,
        second_end_temp_bytes=embedding_grad_temp_bytes(c, rank) + stage_share(c, r, rank, r.bucket_bytes),
        end_states_bytes=end_states,
        end_temp_bytes=end_t,
        optimizer_temp_bytes=(stage_share(c, r, rank, r.step_bytes)
                              + stage_share(c, r, rank, buckets_bytes(c, r, False))),
        unpaged_bytes=stage_share(c, r, rank, states_bytes(r, True)),
        reduce_temp_bytes=r.reduce_bytes + next_group_gather_bytes(c, r),
    )


NO_STAGE_FIXED = StageFixed(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)  # a layout whose step evaluates nothing


@formula
def evaluated_stage_fixed(c, r):
    """StageFixed of the first, middle and last pipeline ranks evaluated (stage_ranks; one and the same when
    p = 1)."""
    first_rank, middle_rank, last_rank = stage_ranks(c)
    first = stage_fixed(c, r, first_rank)
    if c.pp == 1:
        return first, first, first
    middle = first if middle_rank == first_rank else stage_fixed(c, r, middle_rank)
    return first, middle, stage_fixed(c, r, last_rank)


@formula
def stage_peak(c, r, layer, loss, rank, with_eval, fixed):
    """The largest of the forward, backward and optimizer peaks of pipeline rank `rank` (the only one when
    p = 1), and `with_eval`, of the evaluation forward between steps (eval_micro_batch); `layer` and `loss`: one
    micro-batch's LayerBytes and LossBytes; `fixed`: its StageFixed."""
    best = stage_training_peak(c, r, layer, loss, rank, fixed)
    return with_evaluation(c, r, layer, rank, best) if with_eval else best


@formula
def with_evaluation(c, r, layer, rank, best):
    """The larger of pipeline rank `rank`'s training peak `best` and its evaluation forward between steps, which
    keeps no activation (best's saved and pinned bytes: what the steps around it leave, eval_peak)."""
    if not evaluates(c):
        return best
    last = rank == c.pp - 1
    evaluation = eval_peak(c, r, layer, rank, last, best.saved_bytes, best.pinned_bytes, best.steady_bytes)
    return evaluation if evaluation.allocated_bytes > best.allocated_bytes else best


@formula
def stage_training_peak(c, r, layer, loss, rank, fixed):
    """The largest of the forward, backward and optimizer peaks of pipeline rank `rank`: its states, the
    activations it keeps in flight, its receive buffers (`layer` and `loss`: one micro-batch's LayerBytes and
    LossBytes; `fixed`: its StageFixed, what no micro_batch or seq_len changes)."""
    last = rank == c.pp - 1
    per_microbatch = rank_microbatch_activation_bytes(c, r, layer, rank)  # its layers', one micro-batch
    acts = stage_activations_from(c, r, rank, 0, per_microbatch)
    pinned = pinned_segment_bytes(c, r, layer, rank)
    kept = recv_buffer_bytes(c, rank)
    g = fixed.grads_live == 1
    live = fixed.live_bytes
    fwd_t = fixed.forward_fixed_bytes + kept + (loss.forward if last else 0)
    best = Peak(live + acts + fwd_t, Phase.FORWARD.value, acts, fwd_t, g, acts, pinned, 0)
    held = held_logits_bytes(c, last)  # outputs_held: this micro-step's logits, alive to the next forward's end
    graph = held_graph_bytes(c, evaluated_layers(c, r, rank))  # ... and what its graph's nodes hold after backward
    if c.outputs_held:
        # the model's forward has returned and its loss not begun: these logits (and the 16-bit ones they are cast
        # from, outputs_fp32), and the last micro-step's logits and graph, alive together (held.py)
        model_t = fixed.model_fixed_bytes + kept + 2 * held + graph + cast_source_bytes(c, last)
        if live + acts + model_t > best.allocated_bytes:
            best = Peak(live + acts + model_t, Phase.FORWARD.value, acts, model_t, g, acts, pinned, 0)
    layer_acts = in_flight_bytes(c, rank, per_microbatch, 0)
    bwd_t = backward_temp_bytes(c, r, layer, rank, last, layer_acts, fixed.backward_fixed_bytes, loss)
    bwd_t += kept + held
    backward = Peak(live + acts + bwd_t, Phase.BACKWARD.value, acts, bwd_t, g, acts, pinned, 0)
    if c.pp > 1 and not g and c.grad_accum > 1:
        # The second backward: the gradients exist (made by the first), one micro-batch fewer in flight; at its
        # end the first stage's embedding gradient is a temporary added into them, its own layers freed.
        states = fixed.with_grads_bytes
        second_acts = stage_activations_from(c, r, rank, 1, per_microbatch)
        second_t = bwd_t  # its buckets too: bwd_t holds them (buckets_bytes in backward)
        second = Peak(states + second_acts + second_t, Phase.BACKWARD.value, second_acts, second_t, True, acts,
                      pinned, 0)
        end_acts = stage_activations_from(c, r, rank, 2, per_microbatch)
        end_t = kept + fixed.second_end_temp_bytes
        if states + end_acts + end_t > second.allocated_bytes:
            second = Peak(states + end_acts + end_t, Phase.BACKWARD.value, end_acts, end_t, True, acts, pinned, 0)
        if second.allocated_bytes > backward.allocated_bytes:
            backward = second
    states = fixed.end_states_bytes
    if c.optimizer_in_backward:  # no gradient outlives its hook: the steps' buffers (r.step_bytes) in backward
        end_t = fixed.end_temp_bytes + kept
        backward_end = Peak(states + end_t, Phase.BACKWARD.value, 0, end_t, False, acts, pinned, 0)
        optimizer = backward_end
    else:
        end_t = fixed.end_temp_bytes + kept + held + graph
        backward_end = Peak(states + end_t, Phase.BACKWARD.value, 0, end_t, True, acts, pinned, 0)
        opt_t = fixed.optimizer_temp_bytes + kept + held + graph
        optimizer = Peak(fixed.unpaged_bytes + opt_t, Phase.OPTIMIZER.value, 0, opt_t, True, acts, pinned, 0)
    if fsdp(c) and not c.optimizer_in_backward:
        # FSDP: the first block's gradients reduce-scattering after its backward, every other gradient made, the
        # next group gathered for its backward: the peak when gradients are not sharded (experts held by one
        # rank, whose "reduce-scatter" copies and divides them: PARALLEL.md, moe_ep).
        reduce_t = fixed.reduce_temp_bytes + kept
        reduce = Peak(states + reduce_t, Phase.BACKWARD.value, 0, reduce_t, True, acts, pinned, 0)
        if reduce.allocated_bytes > backward_end.allocated_bytes:
            backward_end = reduce
    forward_backward = best if best.allocated_bytes >= backward.allocated_bytes else backward
    if max(backward.allocated_bytes, backward_end.allocated_bytes) > best.allocated_bytes:
        best = backward if backward.allocated_bytes >= backward_end.allocated_bytes else backward_end
    if optimizer.allocated_bytes > best.allocated_bytes:
        best = optimizer
    fb = forward_backward
    pools = side_stream_slack_bytes(r.side_stream_bytes, r.columns.grad_bytes if fb.grads_live else 0)
    steady = steady_reserved_bytes(c, fb.allocated_bytes, fb.activation_bytes + fb.temp_bytes, fb.pinned_bytes + pools,
                                   fb.grads_live, evaluated_layers(c, r, rank), rank == 0, last)
    return Peak(best.allocated_bytes, best.phase, best.activation_bytes, best.temp_bytes, best.grads_live,
                best.saved_bytes, best.pinned_bytes, steady)


@formula
def eval_grads_live(c):
    """Gradients outlive the step into an evaluation where they outlive it into the next forward: zeroed in place,
    or kept by the framework's buffers (the Trainer's model.zero_grad() sets torch's to None)."""
    if c.optimizer_in_backward:
        return False
    return c.zero_stage >= FRAMEWORK_GRADS_KEPT_FROM_STAGE[c.framework] or c.zero_grad == ZeroGrad.ZEROS


@formula
def eval_temp_bytes(c, r, layer, rank, last):
    """An evaluation forward's transient buffers (evaluation.py): autocast's casts, the gathered groups, the
    gradient buckets DDP never frees, the pipeline's receive buffers, what a loop holds from its last step
    (outputs_held), and the larger of one layer's forward and the loss's."""
    casts = stage_share(c, r, rank, eval_cast_bytes(c, r))
    buckets = stage_share(c, r, rank, buckets_bytes(c, r, False))
    held = held_logits_bytes(c, last) + held_graph_bytes(c, evaluated_layers(c, r, rank))
    return casts + r.gather_bytes + buckets + recv_buffer_bytes(c, rank) + held + eval_work_bytes(c, r, layer, last)


@formula
def eval_peak(c, r, layer, rank, last, saved, pinned, steady):
    """An evaluation forward between optimizer steps: the persistent states, no activation kept (`saved`,
    `pinned` and `steady`: the training steps' around it, Peak.saved_bytes, pinned_bytes and steady_bytes)."""
    g = eval_grads_live(c)
    live = stage_share(c, r, rank, states_bytes(r, g) - pageable_bytes(c, r))
    t = eval_temp_bytes(c, r, layer, rank, last)
    return Peak(live + t, Phase.EVAL.value, 0, t, g, saved, pinned, steady)


@formula
def rank_save_peak(c, r, rank):
    """A checkpoint saved between optimizer steps on pipeline rank `rank` (save.py): what outlives the step there, as
    for an evaluation (the states less a paged optimizer's, which stay paged out as the save copies them to the host
    one by one; the gradients where they outlive the step; DDP's and ZeRO-3's buckets, the receive buffers, the held
    logits and graph), and the one tensor the save gathers (r.save_bytes); no activation."""
    g = eval_grads_live(c)
    live = stage_share(c, r, rank, states_bytes(r, g) - pageable_bytes(c, r))
    kept = stage_share(c, r, rank, buckets_bytes(c, r, False)) + recv_buffer_bytes(c, rank)
    kept += held_logits_bytes(c, rank == c.pp - 1) + held_graph_bytes(c, evaluated_layers(c, r, rank))
    t = kept + r.save_bytes
    return Peak(live + t, Phase.SAVE.value, 0, t, g, 0, 0, 0)


@formula
def save_peak(c, r):
    """The save's peak on the most loaded of the first, middle and last pipeline ranks (one when p = 1)."""
    first_rank, middle_rank, last_rank = stage_ranks(c)
    best = rank_save_peak(c, r, first_rank)
    if c.pp > 1:
        for rank in (middle_rank, last_rank):
            p = rank_save_peak(c, r, rank)
            if p.allocated_bytes > best.allocated_bytes:
                best = p
    return best


@formula
def stage_peaks(c, r, layer, loss, with_eval, fixed):
    """The peaks of the first, the most loaded middle and the last pipeline rank (one and the same when
    p = 1); `layer` and `loss`: one micro-batch's LayerBytes and LossBytes; `fixed`: their StageFixed
    (evaluated_stage_fixed)."""
    first_rank, middle_rank, last_rank = stage_ranks(c)
    first = stage_peak(c, r, layer, loss, first_rank, with_eval, fixed[0])
    if c.pp == 1:
        return first, first, first
    middle = first
    if middle_rank != first_rank:
        middle = stage_peak(c, r, layer, loss, middle_rank, with_eval, fixed[1])
    return first, middle, stage_peak(c, r, layer, loss, last_rank, with_eval, fixed[2])


@formula
def peak_of_ranks(c, r, with_eval):
    """The peak of one training step (and `with_eval`, of the evaluations between steps) on the most loaded
    pipeline rank, whether that rank is the last stage (the one with the LM head and the loss), and the last
    stage's peak (the same when p = 1)."""
    layer = layer_bytes(c, r)
    training = stage_peaks(c, r, layer, micro_batch_loss_bytes(c), False, evaluated_stage_fixed(c, r))
    return most_loaded(c, r, layer, training, with_eval)


@formula
def most_loaded(c, r, layer, training, with_eval):
    """peak_of_ranks from the first, middle and last ranks' `training` peaks (stage_peaks without evaluation),
    each weighed against its evaluation forward first when `with_eval`: levels.step_terms keeps the training
    peaks for the loss stage's reserve, so no stage's step is worked out twice."""
    first, middle, last = training
    if with_eval:
        first_rank, middle_rank, last_rank = stage_ranks(c)
        first = with_evaluation(c, r, layer, first_rank, first)
        if c.pp == 1:
            middle, last = first, first
        else:
            middle = with_evaluation(c, r, layer, middle_rank, middle)
            last = with_evaluation(c, r, layer, last_rank, last)
    best, holds_loss = first, c.pp == 1
    if middle.allocated_bytes > best.allocated_bytes:
        best = middle
    if last.allocated_bytes > best.allocated_bytes:
        best, holds_loss = last, True
    return best, holds_loss, last


@formula
def peak(c, r):
    """The peak of a run's steps and evaluations on the most loaded pipeline rank."""
    return peak_of_ranks(c, r, True)[0]
