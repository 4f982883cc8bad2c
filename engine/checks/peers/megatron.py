"""Megatron-LM's theoretical memory (megatron/training/theoretical_memory_usage.py), re-derived in plain Python."""


from engine.checks.peers.common import python_body, dp_size, n_gpus
from engine.inputs.codes import (
    FFN,
    Bias,
    Ckpt,
    Norm,
    PPSchedule,
)
from engine.model import params as _params

# NVIDIA/Megatron-LM megatron/training/theoretical_memory_usage.py, main after PR #4687 (merged May 2026, TP /
# replicated / expert split of the weights; tests/unit_tests/training/test_weight_and_optimizer_memory.py at
# 1ab94968 checks it). The stored snapshot 00caa53a predates #4687 and divides every parameter, norms
# included, by TP; 38644dd7 and older returned nothing unless SP + selective recompute.
MEGATRON_VOCAB_DIVISOR = 128  # --make-vocab-size-divisible-by default; _vocab_size_with_padding multiplies by t


def megatron_padded_vocab(c) -> int:
    """padded_vocab_size: V rounded up to a multiple of 128 * t (megatron/training/tokenizer/tokenizer.py)."""
    m = MEGATRON_VOCAB_DIVISOR * c.tp
    return -(-int(c.vocab) // m) * m


def _megatron_attention_params(c):
    """self_attn_term: 2h*h*(1 + g/a)*(d*a/h) = 2h(a + g)d for MHA/GQA; the MLA form with q/kv low-rank norms."""
    h, a, g, d = c.d_model, c.n_heads, python_body(_params.kv_heads)(c), python_body(_params.head_dim)(c)
    if c.kv_lora_rank == 0:
        return 2 * h * h * ((1 + g / a) * (d * a / h))
    ns = 1 if c.norm_type == Norm.RMSNORM else 2
    dr, dv, rq, rkv = c.qk_rope_head_dim, c.v_head_dim, c.q_lora_rank, c.kv_lora_rank
    q = h * a * (d + dr) if rq == 0 else rq * (h + a * (d + dr) + ns)
    return q + rkv * (h + a * (d + dv) + ns) + h * dr + a * dv * h


def _megatron_block_params(c):
    """(TP-sharded, replicated, expert-sharded) parameters of the transformer block, as compute_weight_and_
    optimizer_memory splits them: attention + dense MLP (or shared expert) / norms, router, gate, final norm /
    routed experts. SwiGLU is 3/2 of a 2hf MLP; memsim's first_dense_layers is moe_layer_freq = [0]*k + [1]*(L-k)."""
    h, L, gm = c.d_model, c.n_layers, (1.5 if c.ffn_type == FFN.SWIGLU else 1)
    norm = 1 if c.norm_type == Norm.RMSNORM else 2
    attn = _megatron_attention_params(c)
    n_moe = L - c.first_dense_layers if c.n_experts > 0 else 0
    n_dense = L - n_moe
    shared_ffn = c.n_shared_experts * c.moe_d_ff
    shared = 2 * h * shared_ffn * gm
    routed = 2 * h * c.moe_d_ff * c.n_experts * gm
    router = h * c.n_experts + (c.n_experts if c.linear_bias != Bias.NONE else 0) if c.n_experts > 0 else 0
    gate = h if shared_ffn > 0 and c.shared_expert_gate else 0
    layernorms = 2 * h * norm
    tp_sharded = (attn + 2 * h * c.d_ff * gm) * n_dense + (attn + shared) * n_moe
    replicated = layernorms * n_dense + (layernorms + router + gate) * n_moe + norm * h
    return tp_sharded, replicated, routed * n_moe


def megatron_weight_and_optimizer_bytes(c) -> float:
    """compute_weight_and_optimizer_memory: the most loaded shard (first stage: L/p layers + embedding) times
    18 B/param (bf16 weight 2, fp32 main grad 4, fp32 main param 4, Adam 8) or, with the distributed optimizer
    (memsim zero_stage >= 1), 6 + 12/N; routed experts shard over ETP*EP (ETP = TP) and N_expert = world/(t*e*p)."""
    t, p, h = c.tp, c.pp, c.d_model
    tp_block, replicated, experts = _megatron_block_params(c)
    embedding = h * megatron_padded_vocab(c)
    untied = c.lm_head and not c.tied_embeddings
    tp_shard = (tp_block / p + embedding) / t + (embedding / t if untied and p == 1 else 0)
    expert_shard = experts / p / (t * c.ep)
    expert_dp = n_gpus(c) // (t * c.ep * p)

    def bytes_per_param(data_parallel):
        return 18 if c.zero_stage == 0 else 6 + 12 / data_parallel

    return (tp_shard + replicated / p) * bytes_per_param(dp_size(c)) + expert_shard * bytes_per_param(expert_dp)


def _megatron_pipeline_scale(c):
    """Interleaved: x (1 + (p-1)/(p*v)); 1F1B with p > 1: x min(1, microbatches/p); else 1 (both activation paths)."""
    p = c.pp
    if c.pp_schedule == PPSchedule.INTERLEAVED:  # virtual_pipeline_model_parallel_size = vpp
        return 1 + (p - 1) / (p * c.vpp)
    if p > 1:
        return min(1, c.grad_accum / p)  # num_microbatches = grad_accum
    return 1


def megatron_activation_bytes_sp(c) -> float:
    """compute_activation_memory (Korthikanti Table 2, SP + selective): sbh(18 + 4f/h) per layer for all L layers
    (p stages x L/p layers in flight on the first stage), + 8sbp input ids + sbhp embedding dropout mask, scaled
    for the schedule; with p = 1 also 4sbh(1 + V/h) for the output layer and loss; all / t."""
    s, b, h, p, t = c.seq_len, c.micro_batch, c.d_model, c.pp, c.tp
    act = s * b * h * (18 + 4 * (c.d_ff / h)) * c.n_layers
    act += 8 * s * b * p + s * b * h * p
    act *= _megatron_pipeline_scale(c)
    if p == 1:
        act += s * b * h * 4 * (1 + megatron_padded_vocab(c) / h)
    return act / t


def megatron_activation_bytes_no_sp(c) -> float:
    """compute_activation_memory_without_sp: sbh(10 + 24/t) per layer (attention scores never counted), the same
    embedding and schedule terms, with p = 1 2(sbV/t + sbh) for logits and final norm output, x 1.05."""
    s, b, h, p, t = c.seq_len, c.micro_batch, c.d_model, c.pp, c.tp
    act = s * b * h * (10 + 24 / t) * c.n_layers
    act += 8 * s * b * p + s * b * h * p
    act *= _megatron_pipeline_scale(c)
    if p == 1:
        act += (s * b * megatron_padded_vocab(c) / t + s * b * h) * 2
    return act * 1.05  # "buffer for optimizer and miscellaneous temporaries (5% overhead)"


def megatron_theoretical(c) -> dict:
    """report_theoretical_memory: {weight_and_optimizer, activation, total} bytes of the most loaded GPU.

    It takes compute_activation_memory only for SP + selective recompute, else the without-SP formula, which
    ignores recompute altogether (full recompute included) and the attention scores. What Megatron assumes that
    memsim does differently: bf16 + fp32 main grads + Adam whatever the precision/optimizer; its own parameter
    count (no linear biases, learned positions or MLA details beyond the above); activations ignore GQA,
    head_dim != h/a, SwiGLU's third matrix, dropout off, flash attention, CP; no temporaries (logits upcast,
    gradient buckets, optimizer-step buffers), CUDA context, NCCL or allocator slack; the peak phase is implicit.
    """
    weights = megatron_weight_and_optimizer_bytes(c)
    sp_path = c.sp and c.checkpointing == Ckpt.SELECTIVE
    act = megatron_activation_bytes_sp(c) if sp_path else megatron_activation_bytes_no_sp(c)
    return {"weight_and_optimizer": round(weights), "activation": round(act), "total": round(weights + act)}
