"""Activations saved for the backward pass, on the most loaded (first) pipeline stage.

Korthikanti et al. 2022 (arXiv:2205.05198, Table 2) count a GPT layer as sbh(34 + 5as/h) bytes: 16-bit
tensors, 1-byte dropout masks, fused LayerNorm/GeLU/softmax kernels (Megatron). We rebuild that sum from the
tensors each op saves, so it generalises to GQA, SwiGLU, RMSNorm, no dropout and flash attention, and so the
Hugging Face eager modules (what `framework = pytorch | fsdp` runs) get their own, measured, accounting:

    term (elements per token)          Megatron (fused)            Hugging Face eager modules
    norm, per norm                     input h                     LayerNorm: input h; RMSNorm: fp32 copy + normed h
    q/k/v and FFN matmul inputs        h each                     same (a 16-bit cast copy under autocast)
    q, k for QK^T; v                   a*d + a*d; a*d (GQA: k, v   same; flash saves q, k, v unexpanded,
                                       expanded to a heads)        out and an fp32 logsumexp (FlashAttention-2)
    scores (eager)                     softmax out a*s             fp32 softmax out + 16-bit cast a*s
    dropout                            mask a*s + out a*s; masks h same
    out-proj input                     a*d                         same
    FFN inner                          GeLU: in f + out f          GeLU: in f + out f; SwiGLU: gate, up, silu, prod 4f
                                       SwiGLU: gate|up 2f + out f
For the GPT layer with Megatron conventions this sums to exactly 34 sbh + 5 as^2 b (tests/test_golden.py).
Tensor parallelism splits everything but the norms, the q/k/v and FFN inputs and the h-sized masks (10 sbh);
sequence parallelism splits those too; context parallelism splits the sequence.
"""

from engine.codes import FFN, Attn, Ckpt, Framework, LoraTargets, Norm, PPSchedule, Precision
from engine.formulas.common import ceil_div, formula
from engine.formulas.params import has_dims, head_dim, kv_heads, layers_per_stage, n_moe_layers
from engine.formulas.states import compute_bytes


@formula
def fused_kernels(c):
    """Megatron and DeepSpeed run fused norm / activation / softmax kernels; PyTorch and FSDP run HF modules."""
    return c.framework == Framework.MEGATRON or c.framework == Framework.DEEPSPEED


@formula
def stream_bytes(c):
    """Residual-stream element size: fp32 under torch.autocast (its elementwise ops stay fp32), else compute."""
    if c.framework == Framework.PYTORCH and c.precision != Precision.BF16 and c.precision != Precision.FP16:
        return 4
    return compute_bytes(c)


@formula
def matmul_input_bytes(c):
    """Element size of a saved matmul input: 16-bit (autocast's cast copy), 4 in fp32, 1 in fp8 (TE)."""
    if c.precision == Precision.FP8:
        return 1
    return compute_bytes(c)


@formula
def has_dropout(c):
    return c.dropout > 0.0


@formula
def local_tokens(c):
    """Tokens on one rank, s*b/cp (context parallel splits the sequence; arXiv:2310.01889)."""
    return ceil_div(c.seq_len, c.cp) * c.micro_batch


@formula
def norm_bytes_per_token(c):
    """One norm's saved tensors per token: the input; HF RMSNorm also keeps its fp32 upcast and normed copy."""
    h, st = c.d_model, stream_bytes(c)
    if fused_kernels(c) or c.norm_type == Norm.LAYERNORM:
        return st * h
    return 4 * h + st * h  # hidden.to(float32) and hidden.to(input_dtype) (modeling_llama.py LlamaRMSNorm)


@formula
def saves_input(c, targets):
    """Whether a linear layer keeps its input for backward: always in full training; under LoRA only when
    adapted (lora_targets >= targets), since a frozen weight's gradient, the only user of x, is not computed
    (autograd saves mm's `self` only when `mat2` requires grad; tools/autograd/derivatives.yaml)."""
    return c.lora_rank == 0 or c.lora_targets >= targets


@formula
def replicated_bytes_per_token(c):
    """Terms Korthikanti's TP leaves whole (10 sbh for GPT): norms, q/k/v and FFN inputs, h-sized masks."""
    masks = 2 * c.d_model if has_dropout(c) else 0
    inputs = 1 + (1 if saves_input(c, LoraTargets.ALL_LINEAR) else 0)  # q/k/v input always (q, v adapted)
    return 2 * norm_bytes_per_token(c) + inputs * matmul_input_bytes(c) * c.d_model + masks


@formula
def attention_bytes_per_token(c):
    """q, k, v kept for the attention backward, and the out-projection input (split by TP)."""
    a, g, d, e = c.n_heads, kv_heads(c), head_dim(c), compute_bytes(c)
    if c.attention == Attn.FLASH:
        # FlashAttention-2 (arXiv:2307.08691 Alg. 2) saves q, k, v, the output and an fp32 logsumexp.
        return e * (a * d + 2 * g * d) + e * a * d + 4 * a
    kv_expanded = a * d  # repeat_kv / Megatron expand k and v to every query head before QK^T
    out_proj = matmul_input_bytes(c) * a * d if saves_input(c, LoraTargets.ATTN) else 0
    return e * a * d + e * 2 * kv_expanded + out_proj


@formula
def attention_scores_bytes_per_token(c):
    """The s-by-s attention terms per token (Korthikanti's 5as/h for Megatron with dropout); 0 with flash."""
    if c.attention == Attn.FLASH:
        return 0
    a, s, e = c.n_heads, c.seq_len, compute_bytes(c)
    softmax = e if fused_kernels(c) or e == 4 else 4 + e  # HF: softmax(dtype=float32).to(dtype)
    dropout = 1 + e if has_dropout(c) else 0
    return a * s * (softmax + dropout)


@formula
def scores_bytes_per_token(c):
    """Scores kept for backward: none under selective recomputation (Korthikanti sec. 4.2)."""
    return 0 if c.checkpointing == Ckpt.SELECTIVE else attention_scores_bytes_per_token(c)


@formula
def ffn_inner_bytes_per_token(c, inner, tokens_factor_num, tokens_factor_den):
    """FFN intermediate tensors per token (inner size f), scaled for routed tokens."""
    e = compute_bytes(c)
    mi = matmul_input_bytes(c) if saves_input(c, LoraTargets.ALL_LINEAR) else 0  # the down projection's input
    if c.ffn_type == FFN.SWIGLU:
        per = (2 * e + mi) * inner if fused_kernels(c) else (3 * e + mi) * inner
    else:
        per = (e + mi) * inner
    return ceil_div(per * tokens_factor_num, tokens_factor_den)


@formula
def split_bytes_per_token(c, moe_layer):
    """Terms that tensor parallelism splits: attention internals and the FFN intermediates."""
    attn = attention_bytes_per_token(c) + scores_bytes_per_token(c)
    if not moe_layer:
        return attn + ffn_inner_bytes_per_token(c, c.d_ff, 1, 1)
    return attn + moe_bytes_per_token(c)


@formula
def moe_bytes_per_token(c):
    """A MoE block per token: fp32 router logits and probs, k routed copies of the token, expert intermediates.

    Each token visits top_k experts (Switch, arXiv:2101.03961 sec. 2.1; Mixtral arXiv:2401.04088 sec. 2):
    on average s*b*k expert-tokens reach the experts of one EP group; the shared experts see every token.
    """
    e, k = compute_bytes(c), c.top_k
    router = 2 * 4 * c.n_experts  # logits and softmax probabilities in fp32
    dispatch = e * k * c.d_model  # permuted token copies, the experts' input
    routed = ffn_inner_bytes_per_token(c, c.moe_d_ff, k, 1)
    shared = ffn_inner_bytes_per_token(c, c.moe_d_ff * c.n_shared_experts, 1, 1)
    return router + dispatch + routed + shared


@formula
def layer_activation_bytes(c, moe_layer):
    """Bytes one layer keeps for backward for one micro-batch (Korthikanti Table 2, generalised).

    Full recomputation keeps only the layer input, sbh in the stream dtype (split by t with SP).
    """
    tokens, t = local_tokens(c), c.tp
    if c.checkpointing == Ckpt.FULL:
        kept = stream_bytes(c) * tokens * c.d_model
        return ceil_div(kept, t) if c.sp else kept
    replicated = replicated_bytes_per_token(c) * tokens
    split = split_bytes_per_token(c, moe_layer) * tokens
    if c.sp:
        return ceil_div(replicated + split, t)
    return replicated + ceil_div(split, t)


@formula
def in_flight_layer_factor(c):
    """Micro-batches x layers the first stage holds, as (numerator, denominator) of L/p layers.

    1F1B: min(p, m) micro-batches (PipeDream-Flush, arXiv:2104.04473 sec. 2.2); interleaved with v virtual
    stages: p * (1 + (p-1)/(p*v)) (Korthikanti Eq. 5 and sec. 6); GPipe: all m micro-batches.
    """
    p, m, v = c.pp, c.grad_accum, c.vpp
    if p == 1:
        return 1, 1
    if c.pp_schedule == PPSchedule.GPIPE:
        return m, 1
    if c.pp_schedule == PPSchedule.INTERLEAVED:
        return p * v + p - 1, v
    return min(p, m), 1


@formula
def stage_layer_activation_bytes(c):
    """All transformer layers' activations alive on the first stage at the end of the forward pass."""
    lps = layers_per_stage(c)
    moe_layers = min(lps, n_moe_layers(c))
    per_microbatch = (lps - moe_layers) * layer_activation_bytes(c, False)
    per_microbatch += moe_layers * layer_activation_bytes(c, True)
    num, den = in_flight_layer_factor(c)
    return ceil_div(per_microbatch * num, den)


@formula
def embedding_activation_bytes(c):
    """First stage, per micro-batch in flight: the embedding dropout mask (GPT-2, BERT); else nothing."""
    if not has_dropout(c):
        return 0
    kept = local_tokens(c) * c.d_model
    return ceil_div(kept, c.tp) if c.sp else kept


@formula
def activation_bytes(c):
    """activation_bytes: everything saved for backward on the first stage at the end of forward."""
    if not has_dims(c):
        return 0
    num, den = in_flight_layer_factor(c)
    return stage_layer_activation_bytes(c) + ceil_div(embedding_activation_bytes(c) * num, den)


@formula
def recompute_bytes(c):
    """Full recomputation rebuilds one layer's activations, scores included, during backward."""
    if c.checkpointing != Ckpt.FULL or not has_dims(c):
        return 0
    tokens, t = local_tokens(c), c.tp
    replicated = replicated_bytes_per_token(c) * tokens
    inner = moe_bytes_per_token(c) if n_moe_layers(c) > 0 else ffn_inner_bytes_per_token(c, c.d_ff, 1, 1)
    split = (attention_bytes_per_token(c) + attention_scores_bytes_per_token(c) + inner) * tokens
    return ceil_div(replicated + split, t) if c.sp else replicated + ceil_div(split, t)
