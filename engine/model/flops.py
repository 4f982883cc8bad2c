"""What one GPU computes per token: the model FLOPs that MFU counts, and the hardware FLOPs of each kind of kernel
per token of its micro-batch and per layer (microbatch_work.py adds them up over a stage's layers, time.py turns
them into seconds).

Model FLOPs per token, the PaLM / Megatron-LM definition (PaLM arXiv:2204.02311 App. B; torchtitan
get_num_flop_per_token): 6·N for the matmuls of forward (2N) and backward (4N), N the parameters a token's matmuls
touch (the input embedding is a lookup, the routed experts it is not sent to are idle; a tied LM head still
multiplies), plus the attention scores and their weighted sum, 12·L·a·d·s (QK^T and PV: 2·2·a·d·s forward, twice
that in backward). Every causal token is counted against all s keys, as PaLM counts them.

Hardware FLOPs, what one GPU executes per token of its micro-batch (time.py turns them into seconds), split by
the kernels that run them:

    matmuls      2·(weights a token multiplies) forward; backward 2x that (input and weight gradients), or 1x for
                 a frozen weight (LoRA's base: no weight gradient, arXiv:2106.09685); split by TP
    experts      the routed experts' matmuls, k experts per token (Switch, arXiv:2101.03961), their own shapes
    attention    QK^T and PV, 2·s·a·(d_qk + d_v) forward; FlashAttention skips the blocks a causal mask
                 hides (half) and recomputes QK^T in backward: backward = 2.5 x forward (FlashAttention-2,
                 arXiv:2307.08691 sec. 3.1 and its benchmark's FLOP count); eager attention computes the whole
                 s x s square, backward 2 x forward
    recompute    what checkpointing runs again in backward (Korthikanti et al. 2022, arXiv:2205.05198 sec. 5):
                 full: the checkpointed layers' forward (one layer in checkpoint_every); selective: the attention
                 core; selective_op: torchtitan's op policy saves every other matmul's output, so half the
                 matmuls run again (torchtitan activation_checkpoint.py _save_list, "mm" every second)

Symbols: s seq_len, h d_model, a n_heads, g kv heads, d head_dim, f d_ff, L n_layers, V vocab, k top_k,
E n_experts, t tp.
"""

from engine.inputs.codes import FFN, Attn, Ckpt
from engine.model.common import formula
from engine.model.params import (
    attention_matrix_params,
    embedding_params,
    expert_params,
    ffn_params,
    has_dims,
    head_dim,
    kv_heads,
    lora_params_per_layer,
    n_moe_layers,
    param_count,
    router_params,
)
from engine.model.states import frozen

# FlashAttention-2's backward: five matmuls of the forward's size against the forward's two (dV, dP, dQ, dK and
# the recomputed S = QK^T): benchmark_flash_attention.py counts bwd = 2.5 x fwd.
FLASH_BACKWARD = 2.5


@formula
def active_matmul_params(c):
    """N: parameters a token's matmuls touch. The input embedding is a lookup (a tied head multiplies with the
    same matrix); of the E routed experts of an MoE layer a token visits top_k."""
    if not has_dims(c):
        return float(c.n_params)
    tied_head = c.vocab * c.d_model if c.tied_embeddings and c.lm_head else 0
    idle_experts = max(c.n_experts - c.top_k, 0) * expert_params(c) * n_moe_layers(c)
    return float(param_count(c) - embedding_params(c) + tied_head - idle_experts)


@formula
def qk_v_dims(c):
    """(d_qk, d_v): the per-head sizes of the scores' and the values' matmuls (MLA: nope + rope, v_head_dim)."""
    d = head_dim(c)
    if c.kv_lora_rank > 0:
        return d + c.qk_rope_head_dim, c.v_head_dim
    return d, d


@formula
def attention_flops_per_key(c):
    """Forward FLOPs of the scores and their weighted sum per token and key, all layers: 2·a·(d_qk + d_v) per
    layer (each token attends to s keys)."""
    if not has_dims(c):
        return 0.0
    d_qk, d_v = qk_v_dims(c)
    return 2.0 * c.n_layers * c.n_heads * (d_qk + d_v)


@formula
def attention_flops_per_token(c):
    """Forward FLOPs of the scores and their weighted sum per token, all layers: 2·s·a·(d_qk + d_v) per layer."""
    return attention_flops_per_key(c) * c.seq_len


@formula
def dense_model_flops_per_token(c):
    """6·N: the forward and backward FLOPs of the matmuls per token, the part of MFU's count that no sequence length
    changes."""
    return 6.0 * active_matmul_params(c)


@formula
def model_flops_of(dense_flops, attention_per_key, s):
    """6·N + 12·L·a·d·s: MFU's count at sequence length s, from the 6·N of the matmuls (`dense_flops`) and the
    attention's forward per key (the shape's WorkRates hold both; step_work.py evaluates them per seq_len)."""
    return dense_flops + 3.0 * (attention_per_key * s)


@formula
def model_flops_per_token(c):
    """6·N + 12·L·a·d·s: the FLOPs MFU counts (forward and backward, no recomputation)."""
    return model_flops_of(dense_model_flops_per_token(c), attention_flops_per_key(c), c.seq_len)


# --- what one GPU runs, per token of its micro-batch and per layer (split by TP) -----------------------------


@formula
def matmul_passes(c):
    """Forward + backward + recomputed passes of a weight's matmul, in forward units: 1 + 2 (or 1 + 1 when the
    weight is frozen) + what checkpointing runs again."""
    backward = 1.0 if frozen(c) else 2.0
    return 1.0 + backward + recompute_matmul_share(c)


@formula
def recompute_matmul_share(c):
    """Share of a layer's forward matmuls that backward runs again: full (one layer in checkpoint_every),
    selective_op (every other matmul); Megatron's selective recomputes no matmul with weights."""
    if c.checkpointing == Ckpt.FULL:
        return 1.0 / max(c.checkpoint_every, 1)
    if c.checkpointing == Ckpt.SELECTIVE_OP:
        return 0.5
    return 0.0


@formula
def recompute_attention_share(c):
    """Share of the attention core's forward that backward runs again: full recompute and Megatron's selective
    (the attention core is what it recomputes); torchtitan's op policy saves the attention output."""
    if c.checkpointing == Ckpt.FULL:
        return 1.0 / max(c.checkpoint_every, 1)
    if c.checkpointing == Ckpt.SELECTIVE:
        return 1.0
    return 0.0


@formula
def dense_matmul_params(c, moe_layer):
    """Weights one token multiplies in one layer outside the routed experts: attention projections and the
    dense FFN, or the router and the shared experts of an MoE layer."""
    block = float(attention_matrix_params(c))
    if not moe_layer:
        return block + ffn_params(c, c.d_ff)
    return block + router_params(c) + c.n_shared_experts * ffn_params(c, c.moe_d_ff)


@formula
def lora_flops_per_token_layer(c):
    """LoRA adapters of one layer, forward + backward (both gradients): 6 x their parameters."""
    return 6.0 * lora_params_per_layer(c) if c.lora_rank > 0 else 0.0


@formula
def attention_io_per_token(c):
    """Activation elements the attention projections read and write per token, after TP: q/k/v in h, out
    (a + 2g)·d/t; o in a·d/t, out h."""
    h, a, g, d = float(c.d_model), c.n_heads, kv_heads(c), head_dim(c)
    return 2.0 * h + (2.0 * a + 2.0 * g) * d / c.tp


@formula
def ffn_io_per_token(c, inner):
    """Activation elements an FFN of inner size f reads and writes per token, after TP: up (and gate) in h, out
    n·f/t; down in f/t, out h."""
    n_in = 2.0 if c.ffn_type == FFN.SWIGLU else 1.0
    return 2.0 * c.d_model + (n_in + 1.0) * inner / c.tp


@formula
def dense_io_per_token(c, moe_layer):
    """Activation elements of one layer's matmuls outside the routed experts, per token."""
    if not moe_layer:
        return attention_io_per_token(c) + ffn_io_per_token(c, c.d_ff)
    return attention_io_per_token(c) + c.n_shared_experts * ffn_io_per_token(c, c.moe_d_ff)


@formula
def attention_core_flops_per_key(c):
    """Attention core hardware FLOPs per token, key and layer, forward + backward + recompute, split by TP: causal
    FlashAttention computes half the s x s blocks (FlashAttention-2 sec. 3.1.1), eager and sdpa_math all."""
    d_qk, d_v = qk_v_dims(c)
    forward = 2.0 * c.n_heads * (d_qk + d_v) / c.tp
    if c.attention == Attn.FLASH:
        return 0.5 * forward * (1.0 + FLASH_BACKWARD + recompute_attention_share(c))
    return forward * (3.0 + recompute_attention_share(c))


@formula
def attention_core_flops_per_token(c):
    """attention_core_flops_per_key over the s keys a token attends to."""
    return attention_core_flops_per_key(c) * c.seq_len
