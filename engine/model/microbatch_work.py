"""One micro-batch on the most loaded pipeline stage: the FLOPs and operand bytes of its matmuls, expert matmuls
and attention core (from flops.py's per-token counts), and the bytes its memory-bound kernels produce (time.py
turns them into seconds). Each is given per token of the micro-batch (per token and key where attention's s x s
terms scale with the sequence length) and per micro-batch, so that a shape's rates are worked out once and
step_work.py multiplies them by each micro_batch x seq_len (levels.shape_terms).

Memory-bound kernels (norms, activations, residuals, rotary embeddings, softmax, the loss) are counted by what
they produce: the tensors the memory model saves for backward per layer and token without recomputation
(activations.py, stage.py full_layer_bytes: the same ops, framework by framework) and the loss's buffers
(loss.py), which step_work.py scales by its calibrated HBM passes; fp8 casts and a quantized LoRA base's
dequantization are counted directly.

Symbols: s seq_len, h d_model, a n_heads, g kv heads, d head_dim, f d_ff, L n_layers, V vocab, k top_k,
E n_experts, t tp.
"""

import numpy as np

from engine.inputs.codes import LossImpl, Precision, Quant
from engine.model.activations import fused_kernels, kept_scores_bytes_per_key
from engine.model.common import formula
from engine.model.flops import (
    attention_core_flops_per_key,
    dense_io_per_token,
    dense_matmul_params,
    ffn_io_per_token,
    lora_flops_per_token_layer,
    matmul_passes,
    recompute_attention_share,
    recompute_matmul_share,
)
from engine.model.params import expert_params, n_moe_layers
from engine.model.split import params_per_gpu
from engine.model.states import compute_bytes, frozen

# fp8 matmuls (Transformer Engine, torchao Float8Linear) cast each input and each output gradient: an amax read
# (2 bytes), a read and an fp8 write (2 + 1) per element.
FP8_CAST_BYTES = 5.0
# Bytes the loss produces per logit (token x vocabulary entry), as the memory model measures its buffers with bf16
# logits (data/measured/RECIPES.md, engine/model/loss.py): HF ForCausalLMLoss 10 in forward (the logits, their
# fp32 copy, the fp32 log-probs) + 12 in backward (the nll gradient and log_softmax's, fp32, and the log-probs
# they read); Megatron's fused vocabulary-parallel cross-entropy 6 + 6 (16-bit logits and one fp32 buffer, the
# gradient made in place and cast back). torchtune's chunks produce the same, in pieces; Liger's fused linear
# cross-entropy one chunk of 16-bit logits at a time, its gradient in place: 2 + 2. Memory-bound, like the layers'
# elementwise ops: step_work.py applies the same MEMORY_PASSES.
LOSS_PRODUCED_BYTES = 22.0
FUSED_KERNEL_LOSS_PRODUCED_BYTES = 12.0
FUSED_LINEAR_LOSS_PRODUCED_BYTES = 4.0
# Bytes per weight of a quantized LoRA base as bitsandbytes stores it, by Quant code (int8: 1; nf4: 4 bits, with
# and without double quantization).
QUANT_BYTES = np.array([0.0, 1.0, 0.5, 0.5])


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
def stage_layers(c, r):
    """(dense, MoE) layers of the most loaded stage: the one with the most MoE blocks (split.py)."""
    lps = max(r.first_layers, r.middle_layers, r.last_layers)  # split.layers_per_stage, held by the layout's Rank
    moe = min(lps, n_moe_layers(c))
    return float(lps - moe), float(moe)


@formula
def matmul_work(c, dense, moe):
    """(FLOPs per token, operand bytes per token, weight bytes per micro-batch) of the dense matmuls of a stage of
    dense + moe layers and, on the last stage, the LM head (input and weight gradients; never recomputed). Operand
    bytes M·K + K·N + M·N per matmul, in the matmul's input precision, as many times as it runs: the activations
    K + N per token of M, the weights K·N once per micro-batch."""
    e, passes, per_t = matmul_operand_bytes(c), matmul_passes(c), 1.0 / c.tp
    weights, io = dense * dense_matmul_params(c, False), dense * dense_io_per_token(c, False)
    if moe > 0:
        weights += moe * dense_matmul_params(c, True)
        io += moe * dense_io_per_token(c, True)
    weights *= per_t
    flops = 2.0 * weights * passes
    if c.lora_rank > 0:
        flops += (dense + moe) * lora_flops_per_token_layer(c) * per_t
    per_token, per_microbatch = e * passes * io, e * passes * weights
    if c.lm_head:
        head = float(c.vocab) * c.d_model * per_t
        head_passes = 2.0 if frozen(c) else 3.0
        flops += 2.0 * head * head_passes
        per_token += e * head_passes * (c.d_model + float(c.vocab) * per_t)
        per_microbatch += e * head_passes * head
    return flops, per_token, per_microbatch


@formula
def expert_work(c, moe):
    """(FLOPs per token, operand bytes per token, weight bytes per micro-batch) of the routed experts of moe layers
    on this GPU: each token's k routed visits (times capacity_factor on the most loaded rank) spread over its E/ep
    experts, each expert's matmul M that share; every expert's weights read once per micro-batch."""
    if c.n_experts == 0:
        return 0.0, 0.0, 0.0
    visits = c.top_k * c.capacity_factor
    e, t, passes = matmul_operand_bytes(c), c.tp, matmul_passes(c)
    weights = float(expert_params(c)) / t
    flops = 2.0 * visits * weights * passes * moe
    per_token = e * passes * moe * visits * ffn_io_per_token(c, c.moe_d_ff)
    return flops, per_token, e * passes * moe * weights * c.n_experts / c.ep


@formula
def attention_work(c, layers):
    """Attention core FLOPs per token and key through `layers` layers (causal flash, backward, recompute:
    attention_core_flops_per_key); a micro-batch of m tokens of length s does m·s times as many."""
    return layers * attention_core_flops_per_key(c)


@formula
def produced_bytes(c, r, dense, moe):
    """(layers, scores, loss): bytes one token of a micro-batch makes its memory-bound kernels produce, the scores'
    per key (s of them). The layers': the memory model's per-token terms (levels.Rank, activations.py) split over
    TP as stage.py's full_layer_bytes splits them (the norms and projection inputs whole unless SP), as if nothing
    were recomputed; in floats, without full_layer_bytes' integer rounding per shard. The scores': the s^2 terms,
    split over TP. The loss's: its logits (V/tp per token, vocabulary-parallel) times the bytes produced per logit
    above."""
    per_t = 1.0 / c.tp
    if c.compile:  # Inductor's fused blocks materialize what they keep (compiled.py; dense blocks)
        replicated_per_token, split_per_token = r.compiled_replicated_per_token, r.compiled_split_per_token
        scores_per_key = float(r.compiled_scores_per_key)
    else:
        replicated_per_token, split_per_token = r.replicated_per_token, r.split_per_token
        # the softmax's input kept by PyTorch before 1.11 is made either way: not more work
        scores_per_key = float(r.scores_per_key - kept_scores_bytes_per_key(c))
    replicated = replicated_per_token * (per_t if c.sp else 1.0)
    split = dense * split_per_token + moe * r.moe_split_per_token
    layers = (dense + moe) * replicated + split * per_t
    scores = (dense + moe) * scores_per_key * per_t
    if not c.lm_head:
        return layers, scores, 0.0
    if c.loss_impl == LossImpl.FUSED_LINEAR:
        per_logit = FUSED_LINEAR_LOSS_PRODUCED_BYTES
    else:
        per_logit = FUSED_KERNEL_LOSS_PRODUCED_BYTES if fused_kernels(c) else LOSS_PRODUCED_BYTES
    return layers, scores, per_logit * c.vocab * per_t


@formula
def recompute_traffic_share(c):
    """What recomputation adds to the memory-bound traffic: the forward's third of it, for the recomputed
    share of the layer."""
    return max(recompute_matmul_share(c), recompute_attention_share(c)) / 3.0


@formula
def cast_bytes(c, dense, moe):
    """(per token, per micro-batch): HBM bytes that depend on the numerics, not on the ops. Per token, fp8 casts of
    every matmul input and output gradient (FP8_CAST_BYTES per element); per micro-batch, a quantized LoRA base
    dequantized for the forward, the input gradient and any recompute (read QUANT_BYTES, write 2)."""
    per_token, per_microbatch = 0.0, 0.0
    if c.precision == Precision.FP8:
        routed = c.top_k * c.capacity_factor * ffn_io_per_token(c, c.moe_d_ff)
        io = dense * dense_io_per_token(c, False) + moe * (dense_io_per_token(c, True) + routed)
        per_token = FP8_CAST_BYTES * io * (1.0 + recompute_matmul_share(c))
    if c.lora_rank > 0 and c.base_quant != Quant.NONE:
        per_microbatch = (2.0 + recompute_matmul_share(c)) * (QUANT_BYTES[c.base_quant] + 2.0) * params_per_gpu(c)
    return per_token, per_microbatch
