"""Sharded parameters gathered for compute and gradients reduce-scattered: FSDP and ZeRO-3's transient buffers.

FSDP2 (torch/distributed/fsdp/_fully_shard, frameworks pytorch and fsdp at zero_stage 2 and 3): each decoder block
and the root (embedding, final norm, head) is one group, gathered in the parameter dtype (bf16 under a
MixedPrecisionPolicy, framework fsdp; fp32 under torch.autocast, framework pytorch). Measured rank by rank
(data/measured/PARALLEL.md, fsdp2 and fsdp2_noreshard):
- FULL_SHARD (zero_stage 3): the root is never resharded after forward, so it stays gathered from the forward to
  the end of backward; backward prefetches one block ahead: at the loss one block is in flight, during a block's
  backward that block and the next; each block's gradients are reduce-scattered from a full-size buffer in the
  reduce dtype (fp32 under the MixedPrecisionPolicy) into a 1/d-size output.
- SHARD_GRAD_OP (zero_stage 2, reshard_after_forward=False): every block stays gathered from its forward to its
  backward, so the whole model is gathered at the end of forward and at the loss.
DeepSpeed ZeRO-3 (arXiv:1910.02054 sec. 5.3; stage3 prefetch buckets): the current and the prefetched block
in the compute dtype, and one block's unsharded gradients before their reduce-scatter.

A quantized LoRA base (QLoRA) is sharded and gathered in its packed storage (bitsandbytes' quant_storage, which
is what lets FSDP and ZeRO-3 shard a 4-bit model: Answer.AI fsdp_qlora, PEFT's QLoRA + FSDP / ZeRO-3 guides), so a
gathered block is its nf4 or int8 bytes, not a 16-bit copy; the embedding, norms and head beside it stay 16-bit
(states.frozen_base_bytes). Under LoRA only the adapters have gradients to reduce-scatter.

d = dp * cp, the ranks that share one copy of the states; P_blk one block's parameters, P_root the rest.
"""

from engine.catalogs.conventions import (
    FRAMEWORK_AUTOCAST_CACHE,
    FRAMEWORK_DTENSOR_TP,
    FRAMEWORK_FSDP_GATHERS,
    FRAMEWORK_QUANT_STATE_SHARDED,
)
from engine.inputs.codes import FsdpGroups, GradSync
from engine.model.common import ceil_div, formula
from engine.model.params import ffn_params, lora_params_per_layer, n_moe_layers
from engine.model.split import layers_per_stage
from engine.model.states import (
    compute_bytes,
    grad_bytes_per_param,
    is_amp,
    packed_linear_bytes,
    quantized_base,
    quantized_linear_bytes,
    trains,
    weight_bytes_per_param,
)


@formula
def fsdp(c):
    """FSDP shards this rank's parameters: framework pytorch or fsdp at zero_stage 2 or 3, over d > 1 ranks."""
    return FRAMEWORK_FSDP_GATHERS[c.framework] and c.zero_stage >= 2 and c.dp * c.cp > 1


@formula
def accumulates_unsharded(c):
    """grad_sync = last under FSDP: the loop runs every micro-batch but the last under no_sync (HF accelerate's
    Accelerator.no_sync: `model.set_requires_gradient_sync(False)` for FSDP2, FSDP1's no_sync), so no gradient is
    reduce-scattered until the last backward and every rank accumulates its layers' unsharded gradients (one data
    parallel, non-pipelined loop: accelerate runs no pipeline)."""
    return (c.grad_sync == GradSync.LAST and c.grad_accum > 1 and c.pp == 1 and fsdp(c)
            and not c.optimizer_in_backward)


@formula
def deepspeed_zero3(c):
    return not FRAMEWORK_FSDP_GATHERS[c.framework] and c.zero_stage >= 3 and c.dp * c.cp > 1


@formula
def gathered_param_bytes(c):
    """Element size of a gathered parameter: the MixedPrecisionPolicy's bf16 (framework fsdp under amp), else
    the parameters' own dtype (fp32 under autocast)."""
    if is_amp(c) and not FRAMEWORK_AUTOCAST_CACHE[c.framework]:
        return compute_bytes(c)
    return weight_bytes_per_param(c)


@formula
def gathered_block_bytes(c, n):
    """n parameters of decoder blocks, gathered: a quantized LoRA base as stored, its quantization constants only
    where they shard with it (else every rank keeps them whole: states.replicated_quant_state_bytes), else each in
    the gathered dtype (gathered_param_bytes)."""
    if not quantized_base(c):
        return gathered_param_bytes(c) * n
    return quantized_linear_bytes(c, n) if FRAMEWORK_QUANT_STATE_SHARDED[c.framework] else packed_linear_bytes(c, n)


@formula
def gathered_root_bytes(c, n):
    """n parameters of the root group (embedding, final norm, head), gathered: 16-bit beside a quantized base."""
    return 2 * n if quantized_base(c) else gathered_param_bytes(c) * n


@formula
def block_trainable_params(c, block_params, trainable_params):
    """The parameters of one block that have gradients: its LoRA adapters, or the whole block."""
    if c.lora_rank > 0:
        return min(trainable_params, ceil_div(lora_params_per_layer(c), c.tp))
    return min(block_params, trainable_params)


@formula
def reduce_bytes_per_param(c):
    """Element size of a reduce-scatter: fp32 (the MixedPrecisionPolicy's reduce_dtype, or autocast's fp32
    gradients), the gradients' dtype in pure bf16."""
    if is_amp(c) and not FRAMEWORK_AUTOCAST_CACHE[c.framework]:
        return 4
    return grad_bytes_per_param(c)


@formula
def root_params(c, params, block_params):
    """The group FSDP keeps gathered through backward: everything outside the decoder blocks (embedding, final
    norm, head: fully_shard on the blocks, then the root). With expert parallelism, transformers' FSDP plan
    (DistributedConfig(fsdp_size, ep_size): the PyTorch-native expert parallelism measured) shards the embedding
    as a group of its own and keeps the final norm and the head (PARALLEL.md, moe_ep: 2·V·h at the loss)."""
    outside = max(0, params - layers_per_stage(c) * block_params)
    if c.ep > 1:
        return min(outside, ceil_div(c.vocab * c.d_model, c.tp) + c.d_model)
    return outside


@formula
def split_groups(c):
    """fsdp_groups = split: the embedding, and the final norm with the head, are FSDP groups of their own
    (torchtitan/models/llama3/infra/parallelize.py apply_fsdp since 83e6941, 2025-07-28: fully_shard on
    tok_embeddings, on each block, on [norm, output] with reshard_after_forward only under the 'always' policy, then
    on the model). Not with a tied head (it is the embedding's own weight) nor under transformers' expert plan."""
    return c.fsdp_groups == FsdpGroups.SPLIT and not c.tied_embeddings and c.ep == 1


@formula
def embedding_group_params(c):
    """The embedding's parameters on this rank (a group of its own under split groups)."""
    return ceil_div(c.vocab * c.d_model, c.tp)


@formula
def kept_group_params(c, params, block_params):
    """What FULL_SHARD keeps gathered from the end of forward through backward: the root group, or under split
    groups the final norm and head (the embedding is resharded after forward)."""
    root = root_params(c, params, block_params)
    if split_groups(c):
        return max(0, root - embedding_group_params(c))
    return root


@formula
def loss_prefetch_bytes(c, r):
    """At the loss, FSDP2's root has prefetched the last block for its backward; transformers' plan (with
    expert parallelism) gathers it when that backward starts."""
    return r.prefetch_bytes if c.ep == 1 else 0


@formula
def block_expert_params(c):
    """One MoE block's routed experts on this rank (E/ep experts, split by TP)."""
    if n_moe_layers(c) == 0:
        return 0
    return ceil_div(ceil_div(c.n_experts * ffn_params(c, c.moe_d_ff), c.ep), c.tp)


@formula
def gathered_bytes(c, params, block_params):
    """Gathered from the end of forward through backward: FSDP's root (FULL_SHARD) or whole model
    (SHARD_GRAD_OP); DeepSpeed's current and prefetched block."""
    if fsdp(c):
        root = root_params(c, params, block_params)
        if c.zero_stage == 3:
            return gathered_root_bytes(c, kept_group_params(c, params, block_params))
        return gathered_root_bytes(c, root) + gathered_block_bytes(c, params - root)
    if deepspeed_zero3(c):
        return 2 * (gathered_block_bytes(c, block_params) if quantized_base(c) else compute_bytes(c) * block_params)
    return 0


@formula
def prefetch_bytes(c, block_params):
    """FSDP FULL_SHARD's backward prefetch: one block in flight at the loss, two during a block's backward."""
    return gathered_block_bytes(c, block_params) if fsdp(c) and c.zero_stage == 3 else 0


@formula
def reduce_scatter_bytes(c, block_params, trainable_params):
    """One block's gradients on their way to the shards: FSDP's full-size reduce-scatter input and its 1/d
    output; DeepSpeed ZeRO-3's unsharded block gradients."""
    if not trains(c):
        return 0
    n = block_trainable_params(c, block_params, trainable_params)
    if fsdp(c):
        # The experts reduce over the dp·cp/ep ranks that hold them; with one (ep = dp) transformers still copies
        # their gradients to fp32 and divides them out of place: two full copies (PARALLEL.md, moe_ep).
        experts = min(n, block_expert_params(c))
        dense = n - experts
        expert_group = max(1, c.dp * c.cp // c.ep)
        rs = dense + ceil_div(dense, c.dp * c.cp) + experts + ceil_div(experts, expert_group)
        return reduce_bytes_per_param(c) * rs
    if deepspeed_zero3(c):
        return grad_bytes_per_param(c) * n
    return 0


@formula
def end_of_backward_bytes(c, params, block_params, trainable_params):
    """Sharding buffers when backward ends, at the embedding's backward: FSDP's root, still gathered, with its
    unsharded gradients in the parameters' dtype (under DTensor TP the embedding's is a whole, replicated V·h)
    and the last block's reduce-scatter input still alive (PARALLEL.md, fsdp2_tp 70b-2l: its peak to the byte);
    DeepSpeed's gathered blocks and last block's gradients."""
    if not fsdp(c):
        return gathered_bytes(c, params, block_params) + reduce_scatter_bytes(c, block_params, trainable_params)
    pb = gathered_param_bytes(c)
    root = root_params(c, params, block_params)
    # the group whose backward ends the step: the root, or under split groups the embedding (the head's group
    # was resharded after its own backward)
    gathered = gathered_root_bytes(c, embedding_group_params(c) if split_groups(c) else root)
    if not trains(c):
        return gathered
    block_rs = reduce_bytes_per_param(c) * block_trainable_params(c, block_params, trainable_params)
    if c.lora_rank > 0:  # the root is frozen: no gradient of its own
        return gathered + block_rs
    vh = c.vocab * c.d_model
    replicated = pb * (vh - ceil_div(vh, c.tp)) if FRAMEWORK_DTENSOR_TP[c.framework] else 0
    return 2 * gathered + replicated + block_rs


@formula
def next_group_gather_bytes(c, r):
    """What is gathered while the first block's gradients reduce-scatter: FSDP2's root (kept gathered); under split
    groups and under transformers' plan (expert parallelism) the embedding, gathered for its own backward."""
    if c.ep == 1 and not split_groups(c):
        return r.gather_bytes
    return gathered_root_bytes(c, embedding_group_params(c))
