"""Saving a checkpoint between steps: what a GPU holds beyond the states while the state dict is written.

Input `save_state_dict`. Read in torch 2.14.1, torchtune bd2a0fc, accelerate 16cb6eb, DeepSpeed edaa722 and
torchtitan b5bcd76:

    sharded  nothing gathered. torch.distributed.checkpoint writes each rank's own shards, copied to the host one
             item at a time (torchtitan's interval saves; accelerate's FSDP2 default SHARDED_STATE_DICT,
             _offload_state_dict_to_cpu); DeepSpeed's save_checkpoint repartitions the parameters first and torch.save
             copies each storage of the partitions to the host.
    full     the whole state dict on rank 0's host, one tensor at a time, each gathered whole on every rank first:
             FSDP  torch/distributed/_state_dict_utils.py _iterate_state_dict (get_model_state_dict and
                   get_optimizer_state_dict with full_state_dict=True, cpu_offload=True: torchtune's distributed
                   recipes, accelerate's FULL_STATE_DICT under FSDP2): each DTensor redistributed to Replicate, then
                   `.to(cpu_device)`, so the largest parameter or optimizer state, unsharded, in its own dtype; an NF4
                   weight (torchtune training/_distributed.py gather_cpu_state_dict) all-gathered quantized and then
                   `param.to(param.dtype)`, the packed weight and its 16-bit copy together.
             ZeRO-3 without FSDP (DeepSpeed's stage3_gather_16bit_weights_on_model_save: runtime/engine.py
                   _zero3_consolidated_16bit_state_dict): GatheredParameters(module.parameters(recurse=False)),
                   one module's own parameters at a time, in 16 bits.
             unsharded (one GPU, DDP): the tensors are whole already and torch.save copies them to the host; a
                   quantized base is dequantized weight by weight (torchtune modules/common_utils.py
                   reparametrize_as_dtype_state_dict_post_hook: `v.to(dtype)`, then `.cpu()`), one 16-bit weight.

The largest weight is the embedding (or an untied head), V x h, one FFN projection, h x f, or an MoE layer's experts,
which transformers 5 and torchtitan keep as 3D parameters of every expert at once (transformers 5.25
modeling_mixtral.py MixtralExperts: gate_up_proj [E, 2f, h] and down_proj [E, h, f]; torchtitan GroupedExperts), so
a full state dict gathers all E experts' gate and up projections as one tensor, and DeepSpeed's consolidation both
of the experts module's parameters together. The save runs between optimizer steps, so the GPU holds what outlives
the step (the states; the gradients where they do; DDP's and ZeRO-3's buckets, the pipeline's receive buffers and
the held logits, as in an evaluation) and that one tensor (peak.save_peak). Every pipeline rank is taken to gather
a V x h tensor, though only the first and last hold one (a small over-count on a middle rank).

Its reserve: the tensor gets a block of a segment the step cached where one is free and large enough, else a new
segment; a request that cannot be met makes the allocator free its cached segments and retry before it reports out of
memory (CUDACachingAllocator.cpp malloc: release_cached_blocks), so the run's reserve is taken as the larger of the
save's allocation and the step's reserve (as load.py takes the load's), not their sum.

Not modelled: FSDP1's FULL_STATE_DICT, which unshards a whole FSDP unit at a time (rank 0 keeping the root unit
gathered while its children are saved; memsim's fsdp is FSDP2); Megatron's checkpoints, written per rank (nothing is
counted for a full save there); torchtitan's last save with an export_dtype other than its fp32 default, which converts
every local shard at once (checkpointer/base.py _save_last_step: a dict comprehension of `v.to(export_dtype)`).
"""

from engine.catalogs.conventions import OPTIMIZER_STATE_BITS, OPTIMIZER_STATES
from engine.inputs.codes import FFN, Framework, Quant, SaveStateDict
from engine.model.common import ceil_div, formula
from engine.model.params import has_dims
from engine.model.sharding import fsdp
from engine.model.states import (
    compute_bytes,
    quantized_base,
    quantized_linear_bytes,
    state_bytes,
    trains,
    weight_bytes_per_param,
)


@formula
def embedding_elements(c):
    """The embedding's (and an untied head's) weight, V x h."""
    return c.vocab * c.d_model


@formula
def linear_elements(c):
    """The largest dense linear weight of a layer: an FFN projection, h x f."""
    return c.d_model * c.d_ff


@formula
def experts_elements(c, both):
    """An MoE layer's experts as one 3D parameter: gate and up projections of all E experts, E x n_in·f x h (and,
    `both`, the down projection beside them: DeepSpeed gathers a module's own parameters together); 0 without
    experts."""
    if c.n_experts == 0:
        return 0
    n_in = 2 if c.ffn_type == FFN.SWIGLU else 1
    return c.n_experts * c.moe_d_ff * c.d_model * (n_in + (1 if both else 0))


@formula
def largest_elements(c, both):
    """The largest weight tensor (or, `both`, module) of the model: the embedding, a dense FFN projection, or an MoE
    layer's experts."""
    return max(embedding_elements(c), linear_elements(c), experts_elements(c, both))


@formula
def element_bytes(c):
    """Bytes of a weight element as the model keeps it: the trained weights' (states.weight_bytes_per_param), a
    frozen LoRA base's in the compute dtype."""
    return compute_bytes(c) if c.lora_rank > 0 else weight_bytes_per_param(c)


@formula
def gathered_weight_bytes(c):
    """FSDP's largest weight, whole: the embedding, a dense FFN projection (a quantized one packed beside its 16-bit
    copy) or an MoE layer's experts (bitsandbytes quantizes nn.Linear modules only: 3D experts stay unquantized)."""
    linear = linear_elements(c)
    if quantized_base(c):
        linear_bytes = quantized_linear_bytes(c, linear) + compute_bytes(c) * linear
    else:
        linear_bytes = element_bytes(c) * linear
    unquantized = max(embedding_elements(c), experts_elements(c, False))
    return max(unquantized * element_bytes(c), linear_bytes)


@formula
def gathered_state_bytes(c):
    """FSDP's largest optimizer state, whole: one moment of the largest trained tensor (a LoRA adapter's, r x the
    larger of its sides), in the optimizer's state dtype (8-bit optimizers' bytes, their absmax left out)."""
    if not trains(c) or OPTIMIZER_STATES[c.optimizer] == 0:
        return 0
    if c.lora_rank > 0:
        largest = c.lora_rank * max(c.d_model, c.d_ff, c.moe_d_ff)
    else:
        largest = largest_elements(c, False)
    bits = OPTIMIZER_STATE_BITS[c.optimizer]
    return ceil_div(largest * bits, 8) if bits != 0 else largest * state_bytes(c)


@formula
def save_gather_bytes(c):
    """The one tensor the save holds on a GPU beside the states (above): 0 for a sharded save."""
    if c.save_state_dict != SaveStateDict.FULL or not has_dims(c):
        return 0
    if fsdp(c):
        return max(gathered_weight_bytes(c), gathered_state_bytes(c))
    if c.framework == Framework.DEEPSPEED and c.zero_stage >= 3 and c.dp * c.cp > 1:  # one module's 16-bit params
        return compute_bytes(c) * largest_elements(c, True)
    if c.framework != Framework.MEGATRON and quantized_base(c) and c.base_quant != Quant.INT8:
        # whole on the GPU already: each NF4 weight dequantized on its way to the host (torchtune's hook; bitsandbytes'
        # int8 weights are saved as int8), a TP rank's own shard of it
        return compute_bytes(c) * ceil_div(linear_elements(c), c.tp)
    return 0
