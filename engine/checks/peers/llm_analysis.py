"""cli99/llm-analysis's training memory (llm_analysis/analysis.py), re-derived in plain Python."""

import re

from engine.checks.peers.common import python_body, dp_size
from engine.inputs.codes import (
    Attn,
    Ckpt,
    Optimizer,
    Precision,
)
from engine.model import params as _params

# cli99/llm-analysis llm_analysis/analysis.py at 08d7f8f6 (GitHub main; ActivationRecomputation NONE,
# ATTN_COMPUTE, ATTN, NORM_ATTN_NORM, FULL), LLMAnalysis.training() and the get_* functions it calls, with the
# train() defaults: layernorm_dtype_bytes 4, master_weights_dtype_bytes 4, other_op_bytes None (Adam: 4 + 8),
# flash_attn True, softmax_dropout False, mlp_recompute_gelu False, sp_size = tp_size.
# The PyPI release 0.2.2 (Nov 2023) has only SELECTIVE/FULL recompute and asserts h divides f.
LLMA_RECOMPUTE = {Ckpt.NONE: 0, Ckpt.SELECTIVE: 1, Ckpt.FULL: 4}  # NONE, ATTN_COMPUTE (Korthikanti), FULL

# memsim precision -> (llm-analysis dtype config, master_weights_dtype_bytes = gradient bytes too)
LLMA_DTYPE = {
    Precision.FP32: ("w32a32e32", 4),  # not among its dtype_configs (4/8/16-bit weights): a DtypeConfig by hand
    Precision.AMP_BF16: ("w16a16e16", 4),
    Precision.AMP_FP16: ("w16a16e16", 4),
    Precision.BF16: ("w16a16e16", 2),
    Precision.FP16: ("w16a16e16", 2),
    Precision.FP8: ("w16a16e16", 4),  # no fp8-training config; 'w8a8' means int8-quantized weights
}
# optimizer states per parameter besides the master copy (other_op_bytes = states * bytes per state)
LLMA_STATES = {
    Optimizer.ADAMW: 2, Optimizer.ADAM: 2, Optimizer.LION: 1, Optimizer.SGD_MOMENTUM: 1,
    Optimizer.SGD: 0, Optimizer.ADAFACTOR: 0, Optimizer.NONE: 0, Optimizer.ADAMW_8BIT: 2,
}


def llm_analysis_dtype(c) -> tuple:
    """(weight, activation, embedding bytes, master bytes, other_op_bytes) for the record's precision/optimizer."""
    name, master = LLMA_DTYPE[Precision(c.precision)]
    w, a, e = (int(x) / 8 for x in re.fullmatch(r"w(\d+)a(\d+)e(\d+)", name).groups())
    state_bytes = 1 if c.optimizer == Optimizer.ADAMW_8BIT else (2 if master == 2 else 4)
    return w, a, e, master, LLMA_STATES[Optimizer(c.optimizer)] * state_bytes


def _llma_layer_params(c):
    """(attention, MLP, router, norms) per layer: 2h^2 + 2h*h*g'/a with g' = max(g/t, 1)*t; 2hfE (two matrices,
    gated or not); hE when E > 1; 2h. head_dim is taken as h/a; biases are not counted."""
    h, a, t = c.d_model, c.n_heads, c.tp
    g = max(python_body(_params.kv_heads)(c) / t, 1) * t
    E = max(c.n_experts, 1)
    f = c.moe_d_ff if E > 1 else c.d_ff
    return 2 * h**2 + 2 * h * (h * g / a), 2 * h * f * E, (h * E if E > 1 else 0), 2 * h


def _llma_shards(c, stage):
    """(sharded dp, MLP sharded dp) once ZeRO reaches `stage`: N and N/e, else 1."""
    N = dp_size(c)
    return (N, N / c.ep) if c.zero_stage >= stage else (1, 1)


def _llma_model_states(c, w, e, master, other):
    """get_weight_memory_per_layer / _last_layernorm / get_memory_embedding (ZeRO-3 shards weights),
    get_memory_optimizer_state_and_gradient_* (ZeRO-1 states, ZeRO-2 grads): int(L/p) layers, plus the embedding
    V*h (always tied: the output embedding is never counted) and the final norm h, on every GPU."""
    attn, mlp, router, ln = _llma_layer_params(c)
    t, ep, n = c.tp, c.ep, int(c.n_layers / c.pp)
    emb, last = c.vocab * c.d_model, c.d_model

    def per_gpu(nbytes, stage, emb_bytes):
        sh, mlp_sh = _llma_shards(c, stage)
        layer = nbytes * (attn + ln) / t / sh + nbytes * (mlp / ep + router) / t / mlp_sh
        return layer * n + (emb_bytes * emb + nbytes * last) / t / sh

    weight = per_gpu(w, 3, e)
    sh1, mlp1 = _llma_shards(c, 1)  # states: the router sits with attention and norms, not the MLP shard
    op = master + other
    states = (op * mlp / ep / t / mlp1 + op * (attn + router + ln) / t / sh1) * n + op * (emb + last) / t / sh1
    sh2, mlp2 = _llma_shards(c, 2)
    grads = (master * mlp / ep / t / mlp2 + master * (attn + router + ln) / t / sh2) * n
    grads += master * (emb + last) / t / sh2
    return weight, grads, states


def _llma_layer_activations(c, a_bytes, ln_bytes=4):
    """get_activation_memory_per_layer (training): attention + MLP + two layernorms, or sbh*a_bytes/t (FULL)."""
    s, b, h, heads, t = c.seq_len, c.micro_batch, c.d_model, c.n_heads, c.tp
    sp = t if c.sp else 1  # its default is sp_size = tp_size; memsim's sp = false means replicated norms
    mode = LLMA_RECOMPUTE[Ckpt(c.checkpointing)]
    if mode == 4:
        return s * b * h * a_bytes / t
    compute = 0
    if mode == 0:
        flash = c.attention == Attn.FLASH
        compute = (2 * s * b * h + 4 * heads * s * b) * a_bytes / t if flash else 2 * heads * s * s * b * a_bytes / t
        compute += heads * s * s * b / t if c.dropout > 0 else 0  # softmax_dropout: a 1-byte mask
    attn = (s * b * h / sp + 4 * s * b * h / t) * a_bytes + compute + s * b * h / sp  # attn_dropout mask, always
    E, k = (c.n_experts / c.ep, c.top_k) if c.n_experts > 0 else (1, 1)
    ratio = (c.moe_d_ff if c.n_experts > 0 else c.d_ff) / h  # expansion_ratio
    mlp = a_bytes * s * b * h * E * k / sp + 2 * a_bytes * ratio * s * b * h * E * k / t
    return attn + mlp + 2 * s * b * h / sp * ln_bytes


def llm_analysis(c) -> dict:
    """llm-analysis training(): per-GPU bytes of weight, gradient, optimizer_state, activation (of which
    activation_logits) and total = '(weight+op_state+grad+act)_memory_per_gpu'.

    What it assumes that memsim does differently: gradients in the master dtype (fp32: 4 B/param); embedding
    always tied (an untied LM head is not counted) and held by every pipeline stage; a gated FFN counted as two
    matrices; activations for all L layers on every stage (p micro-batches of L/p layers) with fp32 layernorm
    inputs, a 1-byte attention-dropout mask even without dropout, logits in the activation dtype and one final
    norm; GQA only in the parameter count; CP, offload and the pipeline schedule ignored; no fp32 logits/loss
    temporaries, optimizer-step buffers, ZeRO-3 gather buffers, CUDA context or allocator slack; a sum, not a
    peak over phases.
    """
    w, a, e, master, other = llm_analysis_dtype(c)
    weight, grads, states = _llma_model_states(c, w, e, master, other)
    s, b, sp = c.seq_len, c.micro_batch, (c.tp if c.sp else 1)
    logits = c.vocab * b * s * a / c.tp  # get_activation_memory_output_embedding
    act = _llma_layer_activations(c, a) * c.n_layers + logits + s * b * c.d_model / sp * 4  # + final layernorm
    parts = {"weight": weight, "gradient": grads, "optimizer_state": states, "activation": act,
             "activation_logits": logits}
    out = {k: round(v) for k, v in parts.items()}
    out["total"] = round(weight + grads + states + act)
    return out
