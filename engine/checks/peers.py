"""What three public peer tools would say for a memsim configuration record `c`.

Each function re-derives one tool's published formula in plain Python from its source (file, function and the
commit read are cited in the comments), maps memsim's record onto the tool's inputs, and returns bytes per GPU:

    deepspeed_zero_estimate(c)       DeepSpeed's ZeRO-2/3 model-state estimators, GPU side (+ _host: CPU side)
    megatron_theoretical(c)          Megatron-LM's theoretical memory: weights+optimizer, activations, total
    llm_analysis(c)                  cli99/llm-analysis training memory: weights, grads, states, activations

They are comparisons, not the memory model: plain Python (no numba), floats where the tools use floats, rounded
to int bytes once at the end. Symbols as in engine/formulas: s seq_len, b micro_batch, h d_model, a n_heads,
g n_kv_heads, d head_dim, f d_ff, V vocab, L n_layers, E n_experts, t tp, p pp, v vpp, e ep, N data-parallel
ranks, P parameters. docs/peers.md tabulates the three against memsim and explains every difference;
`python -m engine.checks.peers` prints that table.
"""

import re

from engine.inputs.codes import (
    FFN,
    Attn,
    Bias,
    Ckpt,
    Norm,
    Offload,
    Optimizer,
    PPSchedule,
    Precision,
)
from engine.model import params as _params


def _ref(formula):
    """The plain-Python body of a memsim formula (no numba compile for a one-off comparison)."""
    return getattr(formula, "py_func", formula)


def n_gpus(c) -> int:
    """Total GPUs: n_gpus, else dp * tp * pp * cp (CONFIG.md)."""
    return int(c.n_gpus) if c.n_gpus > 0 else max(int(c.dp), 1) * c.tp * c.pp * c.cp


def dp_size(c) -> int:
    """Data-parallel ranks N: dp, else n_gpus / (tp * pp * cp)."""
    return int(c.dp) if c.dp > 0 else n_gpus(c) // (c.tp * c.pp * c.cp)


# ---------------------------------------------------------------------------------------------------- DeepSpeed
# deepspeedai/DeepSpeed, read at 02aa38c3 (stage_1_and_2.py) and 007cca6a (stage3.py):
#   stage_1_and_2.py  estimate_zero2_model_states_mem_needs(total_params, num_gpus_per_node, num_nodes,
#                     cpu_offload, additional_buffer_factor=1.5)
#       offload:  gpu = 2P                         cpu = P * max(4 * total_gpus, 16) * 1.5
#       else:     gpu = 2P + int(18P / total_gpus) cpu = P * 4 * gpus_per_node * 1.5
#     Before PR #5099 (merged April 2024) the no-offload line read gpu = 4P + int(16P / total_gpus); the
#     estimator output printed in docs/code-docs/source/memory.rst (t5-3b: 15.93GB on 8 GPUs) is that one.
#   stage3.py  estimate_zero3_model_states_mem_needs(total_params, largest_layer_params, ..., cpu_offload,
#              cpu_offload_params, zero_init=True, additional_buffer_factor=1.5)
#       params + optimizer offload:  gpu = 4*largest                       cpu = P * 18 / nodes * 1.5 (zero_init)
#       optimizer offload:           gpu = 4*largest + int(2P / total_gpus) cpu = P * 16 / nodes * 1.5 (zero_init)
#       none:                        gpu = 4*largest + int(18P / total_gpus) cpu = largest * 4 * gpus_per_node * 1.5
#     model_to_params(model): P counts shared tensors once; largest = max over modules of own params.
#   The *_all_live printers format gpu / 2**30 with '.2f' and call it 'GB'.


def deepspeed_params(c, with_head: bool = False) -> int:
    """P as the estimator counts it: `model_to_params(AutoModel.from_pretrained(...))`.

    The published runs (HF docs deepspeed.md, DeepSpeed memory.rst) load `AutoModel`, the base model without an
    LM head, so an untied head V*h is left out of memsim's count unless `with_head` (a CausalLM model passed to
    the estimator). T0_3B: 2,849,757,184 - 32128 * 2048 = 2,783,959,040, printed '2783M'. A tied head shares
    the embedding's storage, which model_to_params counts once, so nothing changes for tied models.
    """
    P = int(_ref(_params.param_count)(c))
    if c.lm_head and not c.tied_embeddings and not with_head:
        P -= c.vocab * c.d_model
    return P


def _zero2_gpu_bytes(P, total_gpus, offload, legacy):
    if offload:
        return 2 * P
    if legacy:  # before DeepSpeed PR #5099: 2 + 2 bytes of fp16 weights and grads, 16/N of fp32 states
        return 4 * P + int(16 * P / total_gpus)
    return 2 * P + int(18 * P / total_gpus)  # 2 fp16 weights; 18/N = 2 + 4 grads, 4 master, 8 Adam


def _zero3_gpu_bytes(P, largest, total_gpus, offload, offload_params):
    largest_layer_memory = 4 * largest  # fp16 params gathered + fp16 grads of the largest layer
    if offload and offload_params:
        return largest_layer_memory
    if offload:
        return largest_layer_memory + int(2 * P / total_gpus)
    return largest_layer_memory + int(18 * P / total_gpus)


def deepspeed_zero_estimate(c, with_head: bool = False, legacy_zero2: bool = False) -> int | None:
    """DeepSpeed's GPU bytes for params, gradients and optimizer states (None below ZeRO-2: no estimator).

    What the estimator assumes that memsim does differently: fp16/bf16 weights + Adam in fp32 whatever the record's
    precision and optimizer say; every GPU a ZeRO data-parallel rank (TP/PP ignored, P is the whole model); no
    activations, logits, buffers, communication buckets, prefetch beyond the largest layer, CUDA context or
    allocator slack; ZeRO-3's '4 * largest layer' is the single largest tensor (the embedding), not a block.
    `legacy_zero2` selects the ZeRO-2 formula before PR #5099, which the published DeepSpeed docs printed.
    """
    if c.zero_stage < 2:
        return None
    P, gpus = deepspeed_params(c, with_head), n_gpus(c)
    offload = c.offload != Offload.NONE
    if c.zero_stage == 2:
        return _zero2_gpu_bytes(P, gpus, offload, legacy_zero2)
    largest = int(_ref(_params.largest_layer_params)(c))
    return _zero3_gpu_bytes(P, largest, gpus, offload, c.offload == Offload.OPTIMIZER_PARAMS)


def deepspeed_zero_estimate_host(
    c, with_head: bool = False, gpus_per_node: int = 8, zero_init: bool = True
) -> int | None:
    """DeepSpeed's CPU bytes per node (the 'per CPU' column), additional_buffer_factor 1.5 as the printers use.

    Nodes are ceil(n_gpus / gpus_per_node), equally filled. memsim's host_bytes is per GPU: divide by the GPUs
    of a node to compare.
    """
    if c.zero_stage < 2:
        return None
    total = n_gpus(c)
    nodes = -(-total // gpus_per_node)
    per_node, abf = total // nodes, 1.5
    P, offload = deepspeed_params(c, with_head), c.offload != Offload.NONE
    if c.zero_stage == 2:
        return int(P * (max(4 * total, 16) if offload else 4 * per_node) * abf)
    largest = int(_ref(_params.largest_layer_params)(c))
    if not offload:
        return int((largest if zero_init else P) * 4 * per_node * abf)
    states = 18 if c.offload == Offload.OPTIMIZER_PARAMS else 16  # + fp32 params, or fp16 params stay on GPU
    return int(P * (states / nodes if zero_init else max(4 * per_node, states / nodes)) * abf)


# ---------------------------------------------------------------------------------------------------- Megatron-LM
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
    h, a, g, d = c.d_model, c.n_heads, _ref(_params.kv_heads)(c), _ref(_params.head_dim)(c)
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


# ---------------------------------------------------------------------------------------------------- llm-analysis
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
    g = max(_ref(_params.kv_heads)(c) / t, 1) * t
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


# ---------------------------------------------------------------------------------------------------- the table
DOC_CASES = {
    "Llama-2-13B, ZeRO-3, full ckpt, mb 4 x 4096, 8 x A100-80GB": dict(
        model="llama-2-13b", n_layers=40, d_model=5120, n_heads=40, n_kv_heads=40, d_ff=13824, vocab=32000,
        ffn_type="swiglu", tied_embeddings=False, norm_type="rmsnorm", zero_stage=3, checkpointing="full",
        precision="amp_bf16", optimizer="adamw", micro_batch=4, seq_len=4096, n_gpus=8, dp=8, gpu="a100-sxm-80gb",
        attention="flash", framework="deepspeed"),
    "Llama-3.1-8B, 1 x H100-80GB, flash, mb 1 x 8192, selective": dict(
        model="llama-3.1-8b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, vocab=128256,
        ffn_type="swiglu", tied_embeddings=False, norm_type="rmsnorm", zero_stage=0, checkpointing="selective",
        precision="amp_bf16", optimizer="adamw", micro_batch=1, seq_len=8192, n_gpus=1, gpu="h100-sxm-80gb",
        attention="flash"),
    "GPT-3 175B, TP 8 PP 8 vpp 3, SP + selective, mb 1 x 2048, 64 micro-batches": dict(
        model="gpt-3-175b", n_layers=96, d_model=12288, n_heads=96, d_ff=49152, vocab=51200, ffn_type="gelu",
        tied_embeddings=True, norm_type="layernorm", linear_bias="all", n_positions=2048, tp=8, pp=8, dp=1,
        n_gpus=64, sp=True, pp_schedule="interleaved", vpp=3, checkpointing="selective", micro_batch=1,
        seq_len=2048, grad_accum=64, precision="amp_bf16", optimizer="adam", dropout=0.1,
        framework="megatron", gpu="a100-sxm-80gb", attention="flash"),
}


def record(**fields):
    """A memsim record from CONFIG.md names and values ('swiglu', True, 8, ...), without the catalogs."""
    from engine.inputs.codes import CHOICES, name_of
    from engine.inputs.vocabulary import empty_records

    c = empty_records(1)[0]
    for name, value in fields.items():
        if name in ("model", "gpu"):
            continue
        if isinstance(value, str):
            value = next(m for m in CHOICES[name] if name_of(m) == value)
        c[name] = value
    if c.dp == 0:
        c.dp = dp_size(c)
    return c


def _memsim(case: dict) -> dict | None:
    """memsim's own outputs through engine.ask.explain.evaluate_case, when it runs (None otherwise)."""
    try:
        from engine.ask.explain import evaluate_case

        return evaluate_case(case)
    except Exception:  # the memsim column is optional: the peers do not depend on it
        return None


def table(with_memsim: bool = True) -> str:
    """docs/peers.md's table: model states, activations and total per tool, GiB per GPU."""
    gib = lambda x: "—" if x is None else f"{x / 2**30:.2f}"  # noqa: E731
    lines = ["| configuration | quantity | DeepSpeed estimator | Megatron theoretical | llm-analysis | memsim |",
             "|---|---|---:|---:|---:|---:|"]
    for label, case in DOC_CASES.items():
        c = record(**case)
        ds, mg, la = deepspeed_zero_estimate(c), megatron_theoretical(c), llm_analysis(c)
        ms = _memsim(case) if with_memsim else None
        states = la["weight"] + la["gradient"] + la["optimizer_state"]
        mine = (ms["weight_bytes"] + ms["grad_bytes"] + ms["optimizer_bytes"], ms["activation_bytes"],
                ms["allocated_peak_bytes"], ms["device_peak_bytes"]) if ms else (None,) * 4
        rows = [("model states", ds, mg["weight_and_optimizer"], states, mine[0]),
                ("activations", None, mg["activation"], la["activation"], mine[1]),
                ("total", ds, mg["total"], la["total"], mine[2]),
                ("device peak (nvidia-smi)", None, None, None, mine[3])]
        for i, (what, *vals) in enumerate(rows):
            lines.append(f"| {label if i == 0 else ''} | {what} | " + " | ".join(gib(v) for v in vals) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(table(with_memsim="--no-memsim" not in sys.argv))
