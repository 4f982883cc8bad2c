"""Floating-point work per token: the model FLOPs that MFU counts, and the hardware FLOPs a GPU executes.

Model FLOPs per token, the PaLM / Megatron-LM definition (PaLM arXiv:2204.02311 App. B; torchtitan
get_num_flop_per_token): 6·N for the matmuls of forward (2N) and backward (4N), N the parameters a token's matmuls
touch (the input embedding is a lookup, the routed experts it is not sent to are idle; a tied LM head still
multiplies), plus the attention scores and their weighted sum, 12·L·a·d·s (QK^T and PV: 2·2·a·d·s forward, twice
that in backward).

Hardware FLOPs add what the recipe recomputes (Korthikanti et al. 2022, arXiv:2205.05198 sec. 5: full recompute
repeats every layer's forward, selective only the attention core) and drop what a frozen base never computes
(LoRA: no weight gradients for the base matrices, arXiv:2106.09685). Symbols: s seq_len, h d_model, a n_heads,
d head_dim, L n_layers, V vocab, k top_k, E n_experts.
"""

from engine.inputs.codes import Ckpt
from engine.model.common import formula
from engine.model.params import (
    dims_param_count,
    embedding_params,
    expert_params,
    has_dims,
    lora_params_per_layer,
    n_moe_layers,
)


@formula
def active_matmul_params(c):
    """N: parameters a token's matmuls touch. The input embedding is a lookup (a tied head multiplies with the
    same matrix); of the E routed experts of an MoE layer a token visits top_k."""
    if not has_dims(c):
        return float(c.n_params)
    tied_head = c.vocab * c.d_model if c.tied_embeddings and c.lm_head else 0
    idle_experts = max(c.n_experts - c.top_k, 0) * expert_params(c) * n_moe_layers(c)
    return float(dims_param_count(c) - embedding_params(c) + tied_head - idle_experts)


@formula
def attention_flops_per_token(c):
    """Forward FLOPs of the scores and their weighted sum per token: 2·2·a·d·s per layer (QK^T, PV)."""
    if not has_dims(c):
        return 0.0
    return 4.0 * c.n_layers * c.n_heads * c.head_dim * c.seq_len


@formula
def model_flops_per_token(c):
    """6·N + 12·L·a·d·s: the FLOPs MFU counts (forward and backward, no recomputation)."""
    return 6.0 * active_matmul_params(c) + 3.0 * attention_flops_per_token(c)


@formula
def recompute_fraction(c):
    """Share of the layers whose forward runs again in backward: with checkpointing = full, one layer in every
    checkpoint_every (torchtitan's layer frequency; 1 = every layer)."""
    if c.checkpointing != Ckpt.FULL:
        return 0.0
    return 1.0 / c.checkpoint_every


@formula
def hardware_flops_per_token(c):
    """FLOPs a GPU executes per token: forward (2N + attention), backward (4N + 2·attention; a frozen base only
    the 2N of its input gradients, its adapters all of theirs), and what recomputation repeats."""
    n, attention = active_matmul_params(c), attention_flops_per_token(c)
    forward = 2.0 * n + attention
    if c.lora_rank > 0:
        adapters = float(lora_params_per_layer(c)) * c.n_layers  # the whole model's adapters
        backward = 2.0 * n + 2.0 * attention + 4.0 * adapters
    else:
        backward = 4.0 * n + 2.0 * attention
    recompute = recompute_fraction(c) * forward
    if c.checkpointing == Ckpt.SELECTIVE:
        recompute += attention  # Megatron recomputes the attention core (Korthikanti sec. 4.2)
    if c.checkpointing == Ckpt.SELECTIVE_OP:
        recompute += n  # torchtitan's op policy recomputes every other matmul's output: about half the forward
    return forward + backward + recompute
