"""The activations a pipeline stage holds: one layer's per-token terms (activations.py) times its tokens, the
layers on the stage and the micro-batches in flight, with recomputation.

Korthikanti et al. 2022 (arXiv:2205.05198): Table 2 per layer; Eq. 5 and sec. 6 for the pipeline schedules.
Every function takes the configuration `c` and the rank's per-layout quantities `r` (levels.Rank); those that
scale one layer's bytes by a rank's layers take them as a LayerBytes (`layer_bytes`), worked out once per step.
"""

from typing import NamedTuple

from engine.catalogs.conventions import FRAMEWORK_DTENSOR_TP
from engine.inputs.codes import Allocator, Ckpt, PPSchedule
from engine.model.activations import (
    fused_kernels,
    has_dropout,
    local_tokens,
    norm_bytes_per_token,
    norm_pack_duplicate_bytes_per_token,
    pack_duplicate_bytes_per_token,
    quant_kept_flash_out_bytes_per_token,
    quant_kept_replicated_bytes_per_token,
    quant_kept_split_bytes_per_token,
    stream_bytes,
)
from engine.model.common import ceil_div, formula
from engine.model.loss import pipeline_kept_loss_bytes
from engine.model.params import has_dims, n_moe_layers
from engine.model.pipeline import in_flight
from engine.model.split import evaluated_layers, layers_per_stage
from engine.model.states import compute_bytes


class LayerBytes(NamedTuple):
    """One transformer layer's bytes for one micro-batch of a step: the same on every pipeline rank, so the step
    works them out once (`layer_bytes`) and each rank scales them by its own layers and micro-batches in flight."""

    dense_saved: int  # what a dense layer keeps for backward under the step's checkpointing (layer_activation_bytes)
    moe_saved: int  # ... an MoE layer (0 in a dense model)
    dense_whole: int  # what a dense layer keeps without recomputation, its scores included (full_layer_bytes): a
    # layer full recomputation leaves unchecked, or one layer's evaluation forward; 0 where the step needs neither
    moe_whole: int  # ... an MoE layer
    recomputed: int  # what backward rebuilds of one layer at a time: all of it under full recomputation, scores
    # included; what the op policy did not keep under selective_op


NO_LAYER = LayerBytes(0, 0, 0, 0, 0)  # a model without dims keeps no layer activations


@formula
def layer_bytes(c, r):
    """The step's LayerBytes. The whole layers are worked out only where the step reads them: recomputation
    (full or selective_op) or an evaluation between steps (eval_micro_batch > 0, evaluation.py)."""
    if not has_dims(c):
        return NO_LAYER
    moe = n_moe_layers(c) > 0
    dense_saved = layer_activation_bytes(c, r, False)
    moe_saved = layer_activation_bytes(c, r, True) if moe else 0
    recomputes = c.checkpointing == Ckpt.FULL or c.checkpointing == Ckpt.SELECTIVE_OP
    dense_whole, moe_whole = 0, 0
    if recomputes or c.eval_micro_batch > 0:
        scores = attention_scores_bytes_per_token(c, r)
        dense_whole = full_layer_bytes(c, r, False, scores)
        moe_whole = full_layer_bytes(c, r, True, scores) if moe else 0
    recomputed = 0
    if recomputes:  # one layer at a time, an MoE one where the model has them
        whole, saved = (moe_whole, moe_saved) if moe else (dense_whole, dense_saved)
        if c.checkpointing == Ckpt.SELECTIVE_OP and c.compile and not moe:  # what a compiled backward rebuilds is
            saved = selective_op_layer_bytes(c, r, False, False)  # not traced: the eager policy's, as before compile
        recomputed = whole if c.checkpointing == Ckpt.FULL else max(0, whole - saved)
    return LayerBytes(dense_saved, moe_saved, dense_whole, moe_whole, recomputed)


@formula
def full_layer_bytes(c, r, moe_layer, scores):
    """Everything one layer keeps for one micro-batch, without recomputation (scores: the s^2 terms per token).

    The per-token terms depend only on the model, numerics and layout (levels.Rank)."""
    tokens, t = local_tokens(c), c.tp
    replicated = r.replicated_per_token * tokens
    split_per_token = r.moe_split_per_token if moe_layer else r.split_per_token
    split = (split_per_token + scores) * tokens
    if c.sp and FRAMEWORK_DTENSOR_TP[c.framework]:  # the projections save their all-gathered, whole inputs
        gathered = r.inputs_per_token * tokens
        return ceil_div(replicated - gathered + split, t) + gathered
    return ceil_div(replicated + split, t) if c.sp else replicated + ceil_div(split, t)


@formula
def layer_activation_bytes(c, r, moe_layer):
    """Bytes one layer keeps for backward for one micro-batch (Korthikanti Table 2, generalised).

    Full recomputation keeps only the layer input, sbh in the stream dtype (split by t with SP).
    """
    if c.checkpointing == Ckpt.FULL:
        kept = stream_bytes(c) * local_tokens(c) * c.d_model
        return (ceil_div(kept, c.tp) if c.sp else kept) + quant_kept_layer_bytes(c)
    if c.checkpointing == Ckpt.SELECTIVE_OP:
        return selective_op_layer_bytes(c, r, moe_layer, c.compile and not fused_kernels(c))
    if c.compile and c.checkpointing == Ckpt.NONE and not moe_layer and not fused_kernels(c) and c.lora_rank == 0:
        return compiled_layer_bytes(c, r)  # traced on full training: LoRA's and QLoRA's compiled blocks are not
    return full_layer_bytes(c, r, moe_layer, scores_bytes_per_token(c, r))


@formula
def compiled_layer_bytes(c, r):
    """What one dense layer keeps under torch.compile: the saved set of Inductor's partition (compiled.py)."""
    tokens, t = local_tokens(c), c.tp
    replicated = r.compiled_replicated_per_token * tokens
    split = (r.compiled_split_per_token + r.compiled_scores_per_key * ceil_div(c.seq_len, c.cp) * c.cp) * tokens
    return ceil_div(replicated + split, t) if c.sp else replicated + ceil_div(split, t)


@formula
def selective_op_layer_bytes(c, r, moe_layer, compiled):
    """What one layer keeps under torchtitan's op-level selective checkpointing (selective_op.py); `compiled`, a
    dense layer under torch.compile, less what Inductor's partition does not save of what the policy keeps
    (selective_op.compiled_unsaved_bytes_per_token: 0 for MoE layers, which it leaves as traced eagerly)."""
    tokens, t = local_tokens(c), c.tp
    replicated = r.sac_replicated_per_token * tokens
    if compiled and not moe_layer:
        replicated -= r.sac_compiled_unsaved_per_token * tokens
    split_per_token = r.sac_moe_split_per_token if moe_layer else r.sac_split_per_token
    split = (split_per_token + r.sac_scores_per_key * ceil_div(c.seq_len, c.cp) * c.cp) * tokens
    return ceil_div(replicated + split, t) if c.sp else replicated + ceil_div(split, t)


@formula
def checkpointed_layers(c, layers):
    """Layers that keep only their input: all under checkpointing = full, or one in every checkpoint_every
    (torchtitan's layer frequency: data/measured/recipes.csv knob checkpoint_every); none otherwise."""
    return layers // c.checkpoint_every if c.checkpointing == Ckpt.FULL else 0


@formula
def pinned_segment_bytes(c, r, layer, rank):
    """What the caching allocator reserves beyond the checkpointed inputs of rank `rank`'s dense layers, under full
    recomputation. Each checkpointed layer's forward makes its FFN intermediate (d_ff per token, its largest
    transient) in segments of that size, and the layer's output, the next one's checkpointed input kept until
    backward, goes to the smallest free block that fits (CUDACachingAllocator.cpp get_free_block): a freed
    intermediate's segment, which then holds floor(intermediate / input) inputs while the next layers make new
    segments for their intermediates. So ceil(layers / that) segments hold the inputs, and what they do not fill
    stays reserved (none with expandable segments, whose one segment grows by what a request lacks, or when the
    inputs go to host RAM). Counted where an intermediate holds two inputs or more, as in the traces below; under
    autocast the kept input is the fp32 stream, more than half a 16-bit intermediate, and the replays of such steps
    (recipes.csv, data/measured/recompute_cases.csv) reserve no more than memsim without it. The replayed traces
    of Llama 2 7B LoRA at 2,048 tokens make 16 such segments for 32 layers at micro-batch 6 (258 MiB each, 96 MiB
    inputs; 16 here) and 17 at micro-batch 10 (430, 160; 16 here): data/measured/PARALLEL.md, "Full recomputation:
    inputs in the intermediates' segments". One micro-batch's inputs: a pipeline rank that keeps several in flight
    is counted as if it kept one (no pipelined trace to say how their inputs share the segments)."""
    if c.checkpointing != Ckpt.FULL or c.activation_offload or c.allocator != Allocator.CACHING or not has_dims(c):
        return 0
    layers = evaluated_layers(c, r, rank)
    kept = checkpointed_layers(c, layers - min(layers, n_moe_layers(c)))
    inputs = layer.dense_saved
    intermediate = ceil_div(local_tokens(c) * c.d_ff * compute_bytes(c), c.tp)
    if kept == 0 or inputs == 0 or intermediate < 2 * inputs:
        return 0
    return ceil_div(kept, intermediate // inputs) * intermediate - kept * inputs


@formula
def layers_activation_bytes(c, layer, dense, moe):
    """What `dense` dense and `moe` MoE layers keep on the device for one micro-batch: what they save, or none
    of it under activation_offload (torchtune OffloadActivations copies every saved tensor of the decoder to
    host RAM at pack time; data/measured/RECIPES.md: device saved 2.27 -> 2.02 GiB with full checkpointing,
    4.84 -> 0.52 GiB without)."""
    if c.activation_offload:
        return dense * quant_kept_layer_bytes(c)
    return layers_saved_bytes(c, layer, dense, moe)


@formula
def quant_kept_layer_bytes(c):
    """One dense layer's kept quantized inputs (activations.quant_kept) for one micro-batch: node attributes, not
    saved tensors, so neither non-reentrant checkpointing nor saved-tensor hooks touch them, the out-projection's
    included (flash attention's output, which it is, is no longer saved there). Measured: data/measured/qlora.csv,
    qlora_old_bnb with checkpointing = full (block 1 keeps 2f + 2h + 2h + 2·a·d + its 2h input, bf16). Every one
    counted, those an adapter also saves included: the adapter's copy is not on the device here."""
    tokens = local_tokens(c)
    split = quant_kept_split_bytes_per_token(c, False) + quant_kept_flash_out_bytes_per_token(c)
    return tokens * quant_kept_replicated_bytes_per_token(c, False) + ceil_div(tokens * split, c.tp)


@formula
def layers_saved_bytes(c, layer, dense, moe):
    """What `dense` dense and `moe` MoE layers save for backward for one micro-batch; under full recomputation
    the layers left unchecked keep everything, their scores included."""
    if c.checkpointing != Ckpt.FULL:  # no layer checkpointed: each keeps what one keeps
        return dense * layer.dense_saved + moe * layer.moe_saved
    dense_kept, moe_kept = checkpointed_layers(c, dense), checkpointed_layers(c, moe)
    return (dense_kept * layer.dense_saved + (dense - dense_kept) * layer.dense_whole
            + moe_kept * layer.moe_saved + (moe - moe_kept) * layer.moe_whole)


@formula
def offloaded_activation_bytes(c, r, layer):
    """Host RAM activation_offload fills in one step on the first stage (torchtune OffloadActivations): one host
    copy per pack of every tensor of at least 1 KiB the decoder saves that is not a parameter. That is the
    checkpoint input of a checkpointed layer; all that another layer saves, its repeated packs
    (activations.pack_duplicate_bytes_per_token) and the 16-bit weight views its matmuls save; the final
    norm's packs. Measured host (data/measured/recipes.csv): t·(L·B_r·h + 10h + 16) with full checkpointing
    (llama-3.2-1b bf16), 6.46 GiB for 4.32 GiB off the device without (llama-400m bf16 s2048 b2)."""
    if not c.activation_offload or not has_dims(c):
        return 0
    lps = layers_per_stage(c)
    moe_layers = min(lps, n_moe_layers(c))
    unchecked = lps - checkpointed_layers(c, lps)
    packs = local_tokens(c) * pack_duplicate_bytes_per_token(c) + compute_bytes(c) * r.block_params
    per_microbatch = layers_saved_bytes(c, layer, lps - moe_layers, moe_layers) + unchecked * packs
    num, den = in_flight(c, 0)
    final_norm = norm_bytes_per_token(c) + norm_pack_duplicate_bytes_per_token(c) if c.pp == 1 else 0
    return ceil_div(per_microbatch * num, den) + local_tokens(c) * final_norm


@formula
def rank_microbatch_activation_bytes(c, r, layer, rank):
    """What the transformer layers of pipeline rank `rank` keep for one micro-batch."""
    layers = evaluated_layers(c, r, rank)
    moe_layers = min(layers, n_moe_layers(c))
    return layers_activation_bytes(c, layer, layers - moe_layers, moe_layers)


@formula
def in_flight_bytes(c, rank, per_microbatch, fewer):
    """`per_microbatch` bytes times the micro-batches pipeline rank `rank` keeps in flight at its peak
    (pipeline.in_flight), less `fewer` of them."""
    num, den = in_flight(c, rank)
    return ceil_div(per_microbatch * max(num - fewer * den, 0), den)


@formula
def rank_layer_activation_bytes(c, r, layer, rank, fewer):
    """All transformer layers' activations alive on pipeline rank `rank` at its peak: its layers times the
    micro-batches it keeps in flight, less `fewer` of them."""
    return in_flight_bytes(c, rank, rank_microbatch_activation_bytes(c, r, layer, rank), fewer)


@formula
def stage_layer_activation_bytes(c, r):
    """All transformer layers' activations alive on the first stage at the end of the forward pass."""
    return rank_layer_activation_bytes(c, r, layer_bytes(c, r), 0, 0)


@formula
def embedding_activation_bytes(c):
    """First stage, per micro-batch in flight: the embedding dropout mask (GPT-2, BERT); else nothing."""
    if not has_dropout(c):
        return 0
    kept = local_tokens(c) * c.d_model
    return ceil_div(kept, c.tp) if c.sp else kept


@formula
def head_activation_bytes(c, r):
    """Last stage, one micro-batch: the final norm and the LM head's input (a frozen head under LoRA keeps
    none). The loss's own tensors are temporaries (temporaries.py)."""
    if not c.lm_head:
        return 0
    kept = local_tokens(c) * r.head_per_token
    if c.sp and FRAMEWORK_DTENSOR_TP[c.framework]:  # the head saves its all-gathered input
        gathered = local_tokens(c) * r.head_input_per_token
        return ceil_div(kept - gathered, c.tp) + gathered
    return ceil_div(kept, c.tp) if c.sp else kept


@formula
def stage_activation_bytes(c, r, rank, fewer):
    """Everything saved for backward on pipeline rank `rank` at its peak, with `fewer` micro-batches than its
    most in flight: its layers' activations, the embedding's on the first rank, the head's on the last (one
    micro-batch's under 1F1B, every one's in flight under GPipe)."""
    if not has_dims(c):
        return 0
    return stage_activations_from(c, r, rank, fewer, rank_microbatch_activation_bytes(c, r, layer_bytes(c, r), rank))


@formula
def stage_activations_from(c, r, rank, fewer, per_microbatch):
    """stage_activation_bytes from its layers' bytes for one micro-batch (rank_microbatch_activation_bytes), which
    peak.stage_peak works out once for all its phases."""
    if not has_dims(c):
        return 0
    return in_flight_bytes(c, rank, per_microbatch, fewer) + edge_activation_bytes(c, r, rank, fewer)


@formula
def edge_activation_bytes(c, r, rank, fewer):
    """What pipeline rank `rank` saves outside its transformer layers (stage_activation_bytes): the embedding's on
    the first rank, the head's and the loss's on the last."""
    num, den = in_flight(c, rank)
    num = max(num - fewer * den, 0)
    total = 0
    if rank == 0:
        total += ceil_div(embedding_activation_bytes(c) * num, den)
    if rank == c.pp - 1:
        microbatches = ceil_div(num, den) if c.pp_schedule == PPSchedule.GPIPE else 1
        total += microbatches * head_activation_bytes(c, r) + pipeline_kept_loss_bytes(c, microbatches)
    return total


@formula
def activation_bytes(c, r):
    """Everything saved for backward on the first stage at the end of forward (with the head when p = 1)."""
    return stage_activation_bytes(c, r, 0, 0)


@formula
def attention_scores_bytes_per_token(c, r):
    """The s-by-s terms per token: each token's query attends to all s keys (ring attention too)."""
    return r.scores_per_key * ceil_div(c.seq_len, c.cp) * c.cp


@formula
def scores_bytes_per_token(c, r):
    """Scores kept for backward: none under selective recomputation (Korthikanti sec. 4.2)."""
    return 0 if c.checkpointing == Ckpt.SELECTIVE else attention_scores_bytes_per_token(c, r)
