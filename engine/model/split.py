"""The parameters one rank holds: the most loaded rank's share of the model (params.py counts the whole).

The split follows Megatron-LM (megatron/training/theoretical_memory_usage.py): TP splits every matrix and the
vocabulary, PP splits layers with the embedding on the first stage and the LM head on the last, EP splits
routed experts. LoRA adapters split like the layers they adapt.
"""

import math

from engine.model.common import ceil_div, formula
from engine.model.params import (
    dims_param_count,
    embedding_params,
    ffn_params,
    has_dims,
    head_params,
    is_moe,
    layer_params,
    lora_params_per_layer,
    n_moe_layers,
)


@formula
def degrees(c, dp_mode):
    """(dp, n_gpus) of a layout: dp = n_gpus / (tp*pp*cp) unless given (dp_mode 0); n_gpus = dp*tp*pp*cp when
    only dp is (1); both given (2): kept, and a mismatch makes the row invalid (CONFIG.md, Parallel layout)."""
    group = c.tp * c.pp * c.cp
    if dp_mode == 0 or c.dp == 0:  # dp = 0 in a row is "derive it", as the default is
        n_gpus = c.n_gpus if c.n_gpus > 0 else group
        return max(1, n_gpus // group), n_gpus
    if dp_mode == 1:
        return c.dp, c.dp * group
    return c.dp, c.n_gpus


@formula
def virtual_stage_layers(c, i):
    """Layers of virtual stage i of the p·v (rank r holds virtual stages r, r + p, ...): pp_first_layers and
    pp_last_layers fix the first and the last, the rest are split as evenly as possible, the first ones taking one
    more (22 layers on 4 stages run 6-6-5-5, as torchtitan splits them; data/measured/PARALLEL.md, pp_uneven)."""
    n = c.pp * c.vpp
    first, last = c.pp_first_layers, c.pp_last_layers
    if n == 1:
        return c.n_layers
    if i == 0 and first > 0:
        return first
    if i == n - 1 and last > 0:
        return last
    rest, j, k = c.n_layers, i, n  # the stages split evenly, and i's index among them
    if first > 0:
        rest, j, k = rest - first, j - 1, k - 1
    if last > 0:
        rest, k = rest - last, k - 1
    return rest // k + (1 if j < rest % k else 0)


@formula
def rank_layers(c, rank):
    """Layers on pipeline rank `rank`: its v virtual stages."""
    total = 0
    for j in range(c.vpp):
        total += virtual_stage_layers(c, rank + j * c.pp)
    return total


@formula
def evaluated_rank_layers(c):
    """Layers of the first, middle and last ranks evaluated (stage_ranks)."""
    first, middle, last = stage_ranks(c)
    return rank_layers(c, first), rank_layers(c, middle), rank_layers(c, last)


@formula
def evaluated_layers(c, r, rank):
    """rank_layers(c, rank) of a rank the step evaluates (stage_ranks), as the layout's levels.Rank holds it: worked
    out once per layout rather than in every phase of every workload."""
    first, middle, last = stage_ranks(c)
    if rank == first:
        return r.first_layers
    if rank == middle:
        return r.middle_layers
    if rank == last:
        return r.last_layers
    return rank_layers(c, rank)


@formula
def stage_ranks(c):
    """The ranks evaluated: first, middle (the most loaded one; the first when p < 3) and last."""
    return 0, 1 if c.pp > 2 else 0, c.pp - 1


@formula
def most_loaded_rank_layers(c):
    first, middle, last = stage_ranks(c)
    return max(rank_layers(c, first), rank_layers(c, middle), rank_layers(c, last))


@formula
def layers_per_stage(c):
    """Layers on the most loaded pipeline rank."""
    return most_loaded_rank_layers(c)


@formula
def rank_nonexpert_params(c, rank):
    """Non-expert parameters of pipeline rank `rank`, before TP: its blocks; the first rank also holds the
    embedding, the last the final norm and LM head (both, when p = 1). With tied embeddings and p > 1 the last
    stage keeps its own copy (Megatron)."""
    layers = rank_layers(c, rank)
    moe_layers = min(layers, n_moe_layers(c))  # the worst case: the stage with the most MoE blocks
    blocks = (layers - moe_layers) * layer_params(c, False) + moe_layers * (
        layer_params(c, True) - c.n_experts * ffn_params(c, c.moe_d_ff)
    )
    if c.pp == 1:
        return blocks + embedding_params(c) + head_params(c)
    if rank == 0:
        return blocks + embedding_params(c)
    if rank == c.pp - 1:
        return blocks + head_params(c) + (c.vocab * c.d_model if c.tied_embeddings else 0)
    return blocks


@formula
def evaluated_rank_params(c):
    """Non-expert parameters of the first, middle and last ranks evaluated (stage_ranks), before TP."""
    first, middle, last = stage_ranks(c)
    return rank_nonexpert_params(c, first), rank_nonexpert_params(c, middle), rank_nonexpert_params(c, last)


@formula
def stage_nonexpert_params(c):
    """Non-expert parameters of the most loaded pipeline stage, before TP."""
    first, middle, last = evaluated_rank_params(c)
    return max(first, middle, last)


@formula
def stage_expert_params(c):
    """Routed-expert parameters of the most loaded stage, before EP and TP."""
    moe_layers = min(layers_per_stage(c), n_moe_layers(c))
    return moe_layers * c.n_experts * ffn_params(c, c.moe_d_ff)


@formula
def nonexpert_params_per_gpu(c):
    """Non-expert parameters on the most loaded rank: the stage's share split over TP.

    Norms are replicated on TP ranks, but they are < 0.1% of a block; splitting everything by t keeps the
    count a single ceil_div (Megatron's estimate does the same). With only n_params known, P / (t*p).
    """
    if not has_dims(c):
        return ceil_div(c.n_params, c.tp * c.pp)
    n = ceil_div(stage_nonexpert_params(c), c.tp)
    if c.n_params > 0:  # the published total rules: scale the dims' split to it (float: n * P overflows)
        dims = dims_param_count(c)
        if dims != c.n_params:
            n = int(math.ceil(n * (c.n_params / dims)))
    return n


@formula
def expert_params_per_gpu(c):
    """Routed-expert parameters on the most loaded rank: E/e experts per rank, each split over TP."""
    if not has_dims(c) or not is_moe(c):
        return 0
    return ceil_div(ceil_div(stage_expert_params(c), c.ep), c.tp)


@formula
def params_per_gpu(c):
    """Every parameter a rank holds (before ZeRO sharding)."""
    return nonexpert_params_per_gpu(c) + expert_params_per_gpu(c)


@formula
def block_params_per_gpu(c):
    """One transformer block on one rank, the unit FSDP and ZeRO-3 gather (Megatron-style TP/EP split)."""
    if not has_dims(c):
        return ceil_div(c.n_params, max(c.n_layers, 1) * c.tp)
    dense = layer_params(c, n_moe_layers(c) > 0) - c.n_experts * ffn_params(c, c.moe_d_ff)
    experts = ceil_div(c.n_experts * ffn_params(c, c.moe_d_ff), c.ep)
    return ceil_div(dense + experts, c.tp)


@formula
def lora_params_per_gpu(c):
    """Trainable adapter parameters on the most loaded rank (split like the layers they adapt)."""
    if c.lora_rank == 0 or not has_dims(c):
        return 0
    return ceil_div(layers_per_stage(c) * lora_params_per_layer(c), c.tp)


@formula
def trainable_params_per_gpu(c):
    """Parameters that get gradients and optimizer states: all of them, or the LoRA adapters only."""
    return lora_params_per_gpu(c) if c.lora_rank > 0 else params_per_gpu(c)
