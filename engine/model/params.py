"""Parameters: the whole model and the share of the most loaded rank.

Counts follow the Hugging Face modules (modeling_llama.py, modeling_gpt2.py, modeling_qwen2.py,
modeling_gemma2.py, modeling_mixtral.py, modeling_deepseek_v3.py); tests/test_catalog.py checks them against
every catalog entry's published n_params exactly. The rank split follows Megatron-LM
(megatron/training/theoretical_memory_usage.py): TP splits every matrix and the vocabulary, PP splits layers
with the embedding on the first stage and the LM head on the last, EP splits routed experts.
"""

import math

from engine.inputs.codes import FFN, Bias, LoraTargets, Norm
from engine.model.common import ceil_div, formula


@formula
def head_dim(c):
    """Per-head size d: explicit (Gemma: 256, DeepSeek MLA: qk_nope) or h / a."""
    return c.head_dim if c.head_dim > 0 else c.d_model // c.n_heads


@formula
def kv_heads(c):
    """Key/value heads g: n_kv_heads, or a for plain multi-head attention."""
    return c.n_kv_heads if c.n_kv_heads > 0 else c.n_heads


@formula
def norm_params(c):
    """One norm layer: weight h (RMSNorm) or weight + bias 2h (LayerNorm)."""
    return c.d_model if c.norm_type == Norm.RMSNORM else 2 * c.d_model


@formula
def attention_matrix_params(c):
    """Attention weights of one layer, matrices and their biases (split by TP).

    Standard / GQA: q h*a*d, k and v h*g*d each, o a*d*h.
    MLA (DeepSeek-V2 sec. 2.1; modeling_deepseek_v3.py): q_a h*r_q + norm r_q + q_b r_q*a*(d + d_rope)
    (or q h*a*(d + d_rope)), kv_a h*(r_kv + d_rope) + norm r_kv, kv_b r_kv*a*(d + d_v), o a*d_v*h.
    """
    h, a, g, d = c.d_model, c.n_heads, kv_heads(c), head_dim(c)
    if c.kv_lora_rank > 0:
        rq, rkv, dr, dv = c.q_lora_rank, c.kv_lora_rank, c.qk_rope_head_dim, c.v_head_dim
        q = h * rq + rq + rq * a * (d + dr) if rq > 0 else h * a * (d + dr)
        kv = h * (rkv + dr) + rkv + rkv * a * (d + dv)
        return q + kv + a * dv * h
    weights = h * a * d + 2 * h * g * d + a * d * h
    if c.linear_bias == Bias.QKV:
        return weights + a * d + 2 * g * d
    if c.linear_bias == Bias.ALL:
        return weights + a * d + 2 * g * d + h
    return weights


@formula
def ffn_params(c, inner):
    """One FFN of inner size f: 3hf gated (SwiGLU) or 2hf, plus biases f (+f) + h when linear_bias = all."""
    h = c.d_model
    n_in = 2 if c.ffn_type == FFN.SWIGLU else 1  # gate + up, or up alone
    bias = n_in * inner + h if c.linear_bias == Bias.ALL else 0
    return (n_in + 1) * h * inner + bias


@formula
def is_moe(c):
    return c.n_experts > 0


@formula
def n_moe_layers(c):
    return c.n_layers - c.first_dense_layers if is_moe(c) else 0


@formula
def router_params(c):
    """Router h*E, plus the shared-expert gate h (Qwen MoE): replicated, not split by EP."""
    return c.d_model * c.n_experts + (c.d_model if c.shared_expert_gate else 0)


@formula
def layer_params(c, moe_layer):
    """One transformer block: norms + attention + (dense FFN | router + shared + routed experts)."""
    block = c.norms_per_layer * norm_params(c) + attention_matrix_params(c)
    if not moe_layer:
        return block + ffn_params(c, c.d_ff)
    shared = c.n_shared_experts * ffn_params(c, c.moe_d_ff)
    return block + router_params(c) + shared + c.n_experts * ffn_params(c, c.moe_d_ff)


@formula
def embedding_params(c):
    """Token embedding V*h plus learned positions n_positions*h (GPT-2, BERT)."""
    return c.vocab * c.d_model + c.n_positions * c.d_model


@formula
def head_params(c):
    """Final norm, plus the LM head V*h unless it is tied to the embedding."""
    untied = c.lm_head and not c.tied_embeddings
    return norm_params(c) + (c.vocab * c.d_model if untied else 0)


@formula
def dims_param_count(c):
    """P from the dims: embedding + L blocks + final norm and head."""
    dense = (c.n_layers - n_moe_layers(c)) * layer_params(c, False)
    moe = n_moe_layers(c) * layer_params(c, True)
    return embedding_params(c) + dense + moe + head_params(c)


@formula
def has_dims(c):
    return c.n_layers > 0 and c.d_model > 0 and c.n_heads > 0


@formula
def param_count(c):
    """P: the catalog's n_params when given (it overrides the dims), else the count from the dims."""
    return c.n_params if c.n_params > 0 else dims_param_count(c)


@formula
def layers_per_stage(c):
    return ceil_div(c.n_layers, c.pp)


@formula
def stage_nonexpert_params(c):
    """Non-expert parameters of the most loaded pipeline stage, before TP.

    A stage holds L/p blocks; the first also holds the embedding, the last the final norm and LM head
    (both, when p = 1). With tied embeddings and p > 1 the last stage keeps its own copy (Megatron).
    """
    lps = layers_per_stage(c)
    moe_layers = min(lps, n_moe_layers(c))  # the worst stage is the one with the most MoE blocks
    dense_layers = lps - moe_layers
    blocks = dense_layers * layer_params(c, False) + moe_layers * (
        layer_params(c, True) - c.n_experts * ffn_params(c, c.moe_d_ff)
    )
    last_head = head_params(c) + (c.vocab * c.d_model if c.tied_embeddings and c.pp > 1 else 0)
    ends = embedding_params(c) + head_params(c) if c.pp == 1 else max(embedding_params(c), last_head)
    return blocks + ends


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
def largest_layer_params(c):
    """The largest single weight tensor (DeepSpeed's 'largest layer params'): embedding or a matrix."""
    h = c.d_model
    ffn = h * max(c.d_ff, c.moe_d_ff)
    return max(c.vocab * h, ffn, h * c.n_heads * head_dim(c))


@formula
def block_params_per_gpu(c):
    """One transformer block on one rank, the unit FSDP and ZeRO-3 gather (Megatron-style TP/EP split)."""
    if not has_dims(c):
        return ceil_div(c.n_params, max(c.n_layers, 1) * c.tp)
    dense = layer_params(c, n_moe_layers(c) > 0) - c.n_experts * ffn_params(c, c.moe_d_ff)
    experts = ceil_div(c.n_experts * ffn_params(c, c.moe_d_ff), c.ep)
    return ceil_div(dense + experts, c.tp)


@formula
def lora_params_per_layer(c):
    """LoRA adapters of one block: r*(d_in + d_out) per adapted matrix (Hu et al. 2021, sec. 4.1).

    qv: q (h -> a*d) and v (h -> g*d); attn: q, k, v, o; all_linear: also the FFN's 2 or 3 matrices
    (every expert's too, as PEFT's all-linear adapts each expert's nn.Linear).
    """
    r, h, a, g, d = c.lora_rank, c.d_model, c.n_heads, kv_heads(c), head_dim(c)
    q, v = r * (h + a * d), r * (h + g * d)
    if c.lora_targets == LoraTargets.QV:
        return q + v
    attn = q + 2 * v + r * (a * d + h)
    if c.lora_targets == LoraTargets.ATTN:
        return attn
    n_in = 2 if c.ffn_type == FFN.SWIGLU else 1
    per_ffn = n_in * r * (h + c.d_ff) + r * (c.d_ff + h)
    if is_moe(c):
        per_expert = n_in * r * (h + c.moe_d_ff) + r * (c.moe_d_ff + h)
        return attn + (c.n_experts + c.n_shared_experts) * per_expert
    return attn + per_ffn


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
