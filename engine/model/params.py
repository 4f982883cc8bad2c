"""Parameters of the whole model, counted from its dims as the Hugging Face modules build it.

Counts follow the Hugging Face modules (modeling_llama.py, modeling_gpt2.py, modeling_qwen2.py,
modeling_gemma2.py, modeling_mixtral.py, modeling_deepseek_v3.py, modeling_qwen3.py, modeling_qwen3_moe.py,
modeling_gemma3.py, modeling_olmo2.py, modeling_llama4.py, modeling_gpt_oss.py); tests/test_catalog.py checks
them against every catalog entry's published n_params exactly, and tests/test_hf_models.py against the modules
transformers instantiates. What one rank holds of them: split.py.
"""

from engine.inputs.codes import FFN, Bias, LoraTargets, Norm
from engine.model.common import formula


@formula
def head_dim(c):
    """Per-head size d: explicit (Gemma: 256, DeepSeek MLA: qk_nope) or h / a (0 for a model known by n_params
    alone: its rows are invalid, validity.NO_DIMS, but every term is still evaluated)."""
    return c.head_dim if c.head_dim > 0 else c.d_model // max(c.n_heads, 1)


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

    Standard / GQA: q h*a*d, k and v h*g*d each, o a*d*h; biases a*d + 2g*d (qkv), + h on o (all, or
    attn_out_bias: HF attention_bias = true); attention sinks a (modeling_gpt_oss.py GptOssAttention.sinks).
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
    qkv_bias = a * d + 2 * g * d if c.linear_bias != Bias.NONE else 0
    o_bias = h if c.linear_bias == Bias.ALL or c.attn_out_bias else 0
    sinks = a if c.attn_sinks else 0
    return weights + qkv_bias + o_bias + sinks


@formula
def qk_norm_params(c):
    """The q and k RMSNorms of one layer: d each, shared by the heads (modeling_qwen3.py, modeling_gemma3.py
    q_norm/k_norm over head_dim), or a*d + g*d when they span all heads (modeling_olmo2.py)."""
    if not c.qk_norm:
        return 0
    if c.qk_norm_all_heads:
        return (c.n_heads + kv_heads(c)) * head_dim(c)
    return 2 * head_dim(c)


@formula
def ffn_params(c, inner):
    """One FFN of inner size f: 3hf gated (SwiGLU) or 2hf, plus biases f (+f) + h when linear_bias = all."""
    h = c.d_model
    n_in = 2 if c.ffn_type == FFN.SWIGLU else 1  # gate + up, or up alone
    bias = n_in * inner + h if c.linear_bias == Bias.ALL else 0
    return (n_in + 1) * h * inner + bias


@formula
def expert_params(c):
    """One routed expert: an FFN of moe_d_ff, plus biases on its gate/up (2f, or f) and down (h) projections
    when expert_bias (modeling_gpt_oss.py GptOssExperts gate_up_proj_bias, down_proj_bias)."""
    f = c.moe_d_ff
    n_in = 2 if c.ffn_type == FFN.SWIGLU else 1
    bias = n_in * f + c.d_model if c.expert_bias and c.linear_bias != Bias.ALL else 0
    return ffn_params(c, f) + bias


@formula
def is_moe(c):
    return c.n_experts > 0


@formula
def n_moe_layers(c):
    """MoE blocks: every layer after the first_dense_layers (DeepSeek first_k_dense_replace), or with
    moe_layer_step s the layers i >= k with (i + 1) % s == 0 (modeling_llama4.py moe_layers,
    modeling_qwen3_moe.py decoder_sparse_step): L // s - k // s of them."""
    if not is_moe(c):
        return 0
    s = max(c.moe_layer_step, 1)
    return max(0, c.n_layers // s - c.first_dense_layers // s)  # more dense layers than layers: an invalid row


@formula
def moe_layers_between(c, first, last):
    """MoE blocks among layers first..last-1 (one pipeline stage): the i >= first_dense_layers with
    (i + 1) % s == 0, s = moe_layer_step (1 when 0); n_moe_layers is moe_layers_between(c, 0, L)."""
    if not is_moe(c):
        return 0
    s = max(c.moe_layer_step, 1)
    lo = max(first, c.first_dense_layers)
    return max(0, last // s - lo // s)


@formula
def router_params(c):
    """Router h*E (+ E with router_bias, gpt-oss), plus the shared-expert gate h (Qwen MoE): replicated, not
    split by EP."""
    bias = c.n_experts if c.router_bias else 0
    return c.d_model * c.n_experts + bias + (c.d_model if c.shared_expert_gate else 0)


@formula
def layer_params(c, moe_layer):
    """One transformer block: norms + q/k norms + attention + (dense FFN | router + shared + routed experts)."""
    block = c.norms_per_layer * norm_params(c) + qk_norm_params(c) + attention_matrix_params(c)
    if not moe_layer:
        return block + ffn_params(c, c.d_ff)
    shared = c.n_shared_experts * ffn_params(c, c.moe_d_ff)
    return block + router_params(c) + shared + c.n_experts * expert_params(c)


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
def largest_layer_params(c):
    """The largest single weight tensor (DeepSpeed's 'largest layer params'): embedding or a matrix."""
    h = c.d_model
    ffn = h * max(c.d_ff, c.moe_d_ff)
    return max(c.vocab * h, ffn, h * c.n_heads * head_dim(c))


@formula
def lora_params_layer(c, moe_layer):
    """LoRA adapters of one block, dense or MoE: r*(d_in + d_out) per adapted matrix (Hu et al. 2021, sec. 4.1).

    qv: q (h -> a*d) and v (h -> g*d); attn: q, k, v, o; all_linear: also the FFN's 2 or 3 matrices, or in an
    MoE block every routed and shared expert's (as PEFT's all-linear adapts each expert's nn.Linear).
    """
    r, h, a, g, d = c.lora_rank, c.d_model, c.n_heads, kv_heads(c), head_dim(c)
    q, v = r * (h + a * d), r * (h + g * d)
    if c.lora_targets == LoraTargets.QV:
        return q + v
    attn = q + 2 * v + r * (a * d + h)
    if c.lora_targets == LoraTargets.ATTN:
        return attn
    n_in = 2 if c.ffn_type == FFN.SWIGLU else 1
    if moe_layer:
        per_expert = n_in * r * (h + c.moe_d_ff) + r * (c.moe_d_ff + h)
        return attn + (c.n_experts + c.n_shared_experts) * per_expert
    return attn + n_in * r * (h + c.d_ff) + r * (c.d_ff + h)


@formula
def lora_params_per_layer(c):
    """LoRA adapters of one block as split.py multiplies them by the layers of a stage: an MoE block's whenever
    the model has experts (an upper bound where dense blocks sit between MoE blocks: lora_params_layer)."""
    return lora_params_layer(c, is_moe(c))
