"""What one GPU computes: the model FLOPs that MFU counts, and per micro-batch the hardware FLOPs of each kind of
kernel and the HBM bytes of the memory-bound ones (time.py turns them into seconds).

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

Memory-bound kernels (norms, activations, residuals, rotary embeddings, softmax, the loss) are counted by what
they produce: the tensors the memory model saves for backward per layer and token without recomputation
(activations.py, stage.py full_layer_bytes: the same ops, framework by framework) and the loss's buffers
(loss.py), which time.py scales by its calibrated HBM passes; fp8 casts and a quantized LoRA base's dequantization
are counted directly.

Symbols: s seq_len, h d_model, a n_heads, g kv heads, d head_dim, f d_ff, L n_layers, V vocab, k top_k,
E n_experts, t tp.
"""

import numpy as np

from engine.inputs.codes import FFN, Attn, Ckpt, LossImpl, Precision, Quant
from engine.model.activations import fused_kernels
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
from engine.model.split import layers_per_stage, params_per_gpu
from engine.model.states import compute_bytes, frozen

# FlashAttention-2's backward: five matmuls of the forward's size against the forward's two (dV, dP, dQ, dK and
# the recomputed S = QK^T): benchmark_flash_attention.py counts bwd = 2.5 x fwd.
FLASH_BACKWARD = 2.5
# fp8 matmuls (Transformer Engine, torchao Float8Linear) cast each input and each output gradient: an amax read
# (2 bytes), a read and an fp8 write (2 + 1) per element.
FP8_CAST_BYTES = 5.0
# Bytes the loss produces per logit (token x vocabulary entry), as the memory model measures its buffers with bf16
# logits (data/measured/RECIPES.md, engine/model/loss.py): HF ForCausalLMLoss 10 in forward (the logits, their
# fp32 copy, the fp32 log-probs) + 12 in backward (the nll gradient and log_softmax's, fp32, and the log-probs
# they read); Megatron's fused vocabulary-parallel cross-entropy 6 + 6 (16-bit logits and one fp32 buffer, the
# gradient made in place and cast back). torchtune's chunks produce the same, in pieces; Liger's fused linear
# cross-entropy one chunk of 16-bit logits at a time, its gradient in place: 2 + 2. Memory-bound, like the layers'
# elementwise ops: time.py applies the same MEMORY_PASSES.
LOSS_PRODUCED_BYTES = 22.0
FUSED_KERNEL_LOSS_PRODUCED_BYTES = 12.0
FUSED_LINEAR_LOSS_PRODUCED_BYTES = 4.0
# Bytes per weight of a quantized LoRA base as bitsandbytes stores it, by Quant code (int8: 1; nf4: 4 bits).
QUANT_BYTES = np.array([0.0, 1.0, 0.5])


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
def attention_flops_per_token(c):
    """Forward FLOPs of the scores and their weighted sum per token, all layers: 2·s·a·(d_qk + d_v) per layer."""
    if not has_dims(c):
        return 0.0
    d_qk, d_v = qk_v_dims(c)
    return 2.0 * c.n_layers * c.n_heads * (d_qk + d_v) * c.seq_len


@formula
def model_flops_per_token(c):
    """6·N + 12·L·a·d·s: the FLOPs MFU counts (forward and backward, no recomputation)."""
    return 6.0 * active_matmul_params(c) + 3.0 * attention_flops_per_token(c)


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
def attention_core_flops_per_token(c):
    """Attention core hardware FLOPs per token and layer, forward + backward + recompute, split by TP: causal
    FlashAttention computes half the s x s blocks (FlashAttention-2 sec. 3.1.1), eager and sdpa_math all."""
    d_qk, d_v = qk_v_dims(c)
    forward = 2.0 * c.seq_len * c.n_heads * (d_qk + d_v) / c.tp
    if c.attention == Attn.FLASH:
        return 0.5 * forward * (1.0 + FLASH_BACKWARD + recompute_attention_share(c))
    return forward * (3.0 + recompute_attention_share(c))


# --- one micro-batch on the most loaded pipeline stage ----------------------------------------------------------


@formula
def matmul_operand_bytes(c):
    """Bytes per element a matmul reads and writes: 1 for fp8 operands (Transformer Engine and torchao cast the
    inputs and weights to fp8 before the GEMM), else the compute dtype's."""
    return 1 if c.precision == Precision.FP8 else compute_bytes(c)


@formula
def local_tokens_float(c):
    """Tokens of one micro-batch on one rank, s·b/cp: the M of every matmul outside the experts."""
    return float(c.seq_len) / c.cp * c.micro_batch


@formula
def stage_layers(c):
    """(dense, MoE) layers of the most loaded stage: the one with the most MoE blocks (split.py)."""
    lps = layers_per_stage(c)
    moe = min(lps, n_moe_layers(c))
    return float(lps - moe), float(moe)


@formula
def matmul_work(c, m, dense, moe):
    """(FLOPs, operand bytes) of one micro-batch of m tokens through the dense matmuls of a stage of dense + moe
    layers and, on the last stage, the LM head (input and weight gradients; never recomputed). Operand bytes
    M·K + K·N + M·N per matmul, in the matmul's input precision, as many times as it runs."""
    e, passes, per_t = matmul_operand_bytes(c), matmul_passes(c), 1.0 / c.tp
    weights, io = dense * dense_matmul_params(c, False), dense * dense_io_per_token(c, False)
    if moe > 0:
        weights += moe * dense_matmul_params(c, True)
        io += moe * dense_io_per_token(c, True)
    weights *= per_t
    flops = 2.0 * m * weights * passes
    if c.lora_rank > 0:
        flops += m * (dense + moe) * lora_flops_per_token_layer(c) * per_t
    nbytes = e * passes * (m * io + weights)
    if c.lm_head:
        head = float(c.vocab) * c.d_model * per_t
        head_passes = 2.0 if frozen(c) else 3.0
        flops += 2.0 * m * head * head_passes
        nbytes += e * head_passes * (m * (c.d_model + float(c.vocab) * per_t) + head)
    return flops, nbytes


@formula
def expert_work(c, m, moe):
    """(FLOPs, operand bytes) of the routed experts of moe layers for one micro-batch of m tokens on this GPU: its
    m·k routed visits (times capacity_factor on the most loaded rank) spread over its E/ep experts, each expert's
    matmul M that share."""
    if c.n_experts == 0:
        return 0.0, 0.0
    visits = m * c.top_k * c.capacity_factor
    e, t, passes = matmul_operand_bytes(c), c.tp, matmul_passes(c)
    weights = float(expert_params(c)) / t
    flops = 2.0 * visits * weights * passes * moe
    nbytes = e * passes * moe * (visits * ffn_io_per_token(c, c.moe_d_ff) + weights * c.n_experts / c.ep)
    return flops, nbytes


@formula
def attention_work(c, m, layers):
    """Attention core FLOPs of m tokens through `layers` layers (causal flash, backward, recompute:
    attention_core_flops_per_token)."""
    return m * layers * attention_core_flops_per_token(c)


@formula
def produced_bytes(c, r, m, dense, moe):
    """(layers, loss): bytes one micro-batch of m tokens makes its memory-bound kernels produce. The layers': the
    memory model's per-token terms (levels.Rank, activations.py) split over TP as stage.py's full_layer_bytes
    splits them (the norms and projection inputs whole unless SP), the s^2 scores included, as if nothing were
    recomputed; in floats, without full_layer_bytes' integer rounding per shard. The loss's: its logits (m·V/tp,
    vocabulary-parallel) times the bytes produced per logit above."""
    per_t = 1.0 / c.tp
    if c.compile:  # Inductor's fused blocks materialize what they keep (compiled.py; dense blocks)
        replicated_per_token, split_per_token = r.compiled_replicated_per_token, r.compiled_split_per_token
        scores = float(r.compiled_scores_per_key) * c.seq_len
    else:
        replicated_per_token, split_per_token = r.replicated_per_token, r.split_per_token
        scores = float(r.scores_per_key) * c.seq_len
    replicated = replicated_per_token * (per_t if c.sp else 1.0)
    split = dense * (split_per_token + scores) + moe * (r.moe_split_per_token + scores)
    layers = m * ((dense + moe) * replicated + split * per_t)
    if not c.lm_head:
        return layers, 0.0
    if c.loss_impl == LossImpl.FUSED_LINEAR:
        per_logit = FUSED_LINEAR_LOSS_PRODUCED_BYTES
    else:
        per_logit = FUSED_KERNEL_LOSS_PRODUCED_BYTES if fused_kernels(c) else LOSS_PRODUCED_BYTES
    return layers, per_logit * m * c.vocab * per_t


@formula
def recompute_traffic_share(c):
    """What recomputation adds to the memory-bound traffic: the forward's third of it, for the recomputed
    share of the layer."""
    return max(recompute_matmul_share(c), recompute_attention_share(c)) / 3.0


@formula
def cast_bytes(c, m, dense, moe):
    """HBM bytes of one micro-batch that depend on the numerics, not on the ops: fp8 casts of every matmul input
    and output gradient (FP8_CAST_BYTES per element); a quantized LoRA base dequantized for the forward, the
    input gradient and any recompute (read QUANT_BYTES, write 2)."""
    nbytes = 0.0
    if c.precision == Precision.FP8:
        routed = c.top_k * c.capacity_factor * ffn_io_per_token(c, c.moe_d_ff)
        io = dense * dense_io_per_token(c, False) + moe * (dense_io_per_token(c, True) + routed)
        nbytes += FP8_CAST_BYTES * m * io * (1.0 + recompute_matmul_share(c))
    if c.lora_rank > 0 and c.base_quant != Quant.NONE:
        nbytes += (2.0 + recompute_matmul_share(c)) * (QUANT_BYTES[c.base_quant] + 2.0) * params_per_gpu(c)
    return nbytes
