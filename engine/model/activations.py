"""Activations one transformer layer saves for the backward pass, per token (stage.py: per stage and micro-batch).

Korthikanti et al. 2022 (arXiv:2205.05198, Table 2) count a GPT layer as sbh(34 + 5as/h) bytes: 16-bit
tensors, 1-byte dropout masks, fused LayerNorm/GeLU/softmax kernels (Megatron). We rebuild that sum from the
tensors each op saves, so it generalises to GQA, SwiGLU, RMSNorm, no dropout and flash attention, and so the
Hugging Face modules that `framework = pytorch | fsdp` runs get their own accounting, measured op by op on real
training steps (data/measured/, `memsim measure`; per-layer anatomy in data/measured/README.md):

    per token, per layer          Megatron / DeepSpeed (fused)        Hugging Face modules
    norm (x2)                     input h                             LayerNorm: input h + fp32 mean, rstd
                                                                      RMSNorm: fp32 upcast 4h + normed h + rsqrt
    projection inputs             one h-sized input per group         under torch.autocast each matmul saves its own
                                                                      16-bit cast: q, k, v (3, or 1 fused) and
                                                                      gate, up (2, or 1); LoRA: each adapter's copy
    q, k, v; out-proj input       a*d, a*d, a*d, a*d (k, v expanded   same; flash keeps k, v unexpanded (g*d) and an
                                  to every head)                      fp32 logsumexp; sdpa_math upcasts q, k, v to fp32
    scores (eager, sdpa_math)     softmax a*s + dropout mask + out    softmax in fp32 (Llama; GPT-2 in its dtype
                                                                      unless autocast), then mask + out or a cast;
                                                                      PyTorch < 1.11: its input too (eager)
    FFN intermediates             GeLU: f in + f out; SwiGLU: 2f + f  GeLU f + f; gelu_new (GPT-2) five tensors;
                                                                      SwiGLU gate, silu, up, product: 4f
    dropout masks                 h after attention, h after the FFN  same (1-byte bool masks on CUDA)
With Megatron's conventions the GPT layer sums to exactly 34 sbh + 5 as^2 b (tests/test_golden.py).
Tensor parallelism splits everything but the norms, the projection inputs and the h-sized masks (Korthikanti's
10 sbh); sequence parallelism splits those too; context parallelism splits the sequence.
"""

from engine.catalogs.conventions import FRAMEWORK_AUTOCAST_CACHE, FRAMEWORK_FUSED_KERNELS
from engine.inputs.codes import (
    FFN,
    ActFn,
    Attn,
    LoraTargets,
    LossImpl,
    Norm,
    Precision,
    Quant,
)
from engine.model.common import ceil_div, formula
from engine.model.states import compute_bytes, fp32_adapters, pure_half, torchao_fp8


@formula
def fused_kernels(c):
    """Megatron and DeepSpeed run fused norm / activation / softmax kernels; PyTorch and FSDP run HF modules
    (data/frameworks.toml fused_kernels)."""
    return FRAMEWORK_FUSED_KERNELS[c.framework]


@formula
def autocast(c):
    """torch.autocast (framework pytorch, amp; fp8 under torchao): fp32 weights and residual stream, 16-bit
    matmuls."""
    p = c.precision
    amp = p == Precision.AMP_BF16 or p == Precision.AMP_FP16 or torchao_fp8(c)
    return FRAMEWORK_AUTOCAST_CACHE[c.framework] and amp


@formula
def stream_bytes(c):
    """Residual-stream element size: fp32 under autocast (its elementwise ops stay fp32), else compute."""
    return 4 if autocast(c) else compute_bytes(c)


@formula
def matmul_input_bytes(c):
    """Element size of a saved matmul input: 16-bit (autocast's cast copy), 4 in fp32, 1 in fp8 under Transformer
    Engine (torchao's Float8Linear saves the bf16 input: data/measured/RECIPES.md, precision = fp8)."""
    return 1 if c.precision == Precision.FP8 and not torchao_fp8(c) else compute_bytes(c)


@formula
def has_dropout(c):
    return c.dropout > 0.0


@formula
def local_tokens(c):
    """Tokens on one rank, s*b/cp (context parallel splits the sequence; arXiv:2310.01889)."""
    return ceil_div(c.seq_len, c.cp) * c.micro_batch


@formula
def norm_bytes_per_token(c):
    """One norm's saved tensors per token (its output is counted as the next projection's input)."""
    h, st = c.d_model, stream_bytes(c)
    if fused_kernels(c):
        return st * h
    if c.norm_type == Norm.LAYERNORM:
        return st * h + 8  # input + fp32 mean and rstd (torch native_layer_norm)
    # fp32 upcast and rsqrt (modeling_llama.py LlamaRMSNorm); `weight * normed` keeps the normed copy only
    # when the weight trains, which under LoRA it does not.
    return 4 * h + (st * h if c.lora_rank == 0 else 0) + 4


@formula
def norm_pack_duplicate_bytes_per_token(c):
    """An op-by-op RMSNorm hands its fp32 input to saved-tensor hooks twice (pow and the multiply): 4h bytes
    that a hook copying every pack (activation_offload) copies once more (modeling_llama.py LlamaRMSNorm)."""
    if fused_kernels(c) or c.norm_type == Norm.LAYERNORM:
        return 0
    return 4 * c.d_model


@formula
def pack_duplicate_bytes_per_token(c):
    """What one layer hands to saved-tensor hooks beyond its distinct saved tensors, per token: its two norms'
    fp32 inputs, and outside autocast (which casts one copy per matmul) the projection input q, k and v share
    (two more packs) and gate and up share (one more). Traced: llama bf16 block, 14h."""
    shared = 0
    if c.lora_rank == 0 and not autocast(c) and not c.fused_projections and not fused_kernels(c):
        shared = (2 + (1 if c.ffn_type == FFN.SWIGLU else 0)) * matmul_input_bytes(c) * c.d_model
    return 2 * norm_pack_duplicate_bytes_per_token(c) + shared


@formula
def adapted(c, targets):
    """Whether LoRA adapts a projection group: lora_targets >= targets (qv < attn < all_linear)."""
    return c.lora_targets >= targets


@formula
def input_copies(c, separate, targets, adapters):
    """Saved copies of one projection group's input, in bytes per input element.

    Full training: one shared input, or under autocast one 16-bit cast per separate matmul (autocast caches
    weights, not activations). LoRA: a frozen weight needs no input (autograd saves mm's `self` only when `mat2`
    requires grad, tools/autograd/derivatives.yaml); each adapter saves its own input cast to its dtype (PEFT
    keeps adapters in fp32 over a 16-bit base, lora/layer.py _cast_input_dtype), shared when no cast is needed.
    """
    if c.lora_rank == 0:
        n = separate if autocast(c) and not c.fused_projections else 1
        return n * matmul_input_bytes(c)
    if not adapted(c, targets):
        return 0
    if c.precision == Precision.FP32:
        return 4
    # adapters in the base's dtype take x as it is: one tensor for the group, unless each drops its own copy
    shared = not autocast(c) and not adapter_casts_input(c) and c.lora_dropout == 0.0
    n = 1 if c.fused_projections or shared else adapters
    return n * adapter_input_bytes(c)


@formula
def adapter_casts_input(c):
    """LoRA adapters in fp32 over 16-bit inputs outside autocast: each adapted linear casts x to the adapters'
    dtype (peft lora/layer.py _cast_input_dtype). Not with lora_dtype = compute over a pure 16-bit base (the
    adapters are 16-bit too: fp32_adapters), nor under autocast (the matmuls run in 16 bits) or in fp32."""
    if c.lora_rank == 0 or autocast(c) or c.precision == Precision.FP32:
        return False
    return fp32_adapters(c) or not pure_half(c)


@formula
def adapter_input_bytes(c):
    """Element size of what a LoRA adapter saves (its input, its r-wide lora_A output): fp32 where it casts its
    input (adapter_casts_input), else the compute dtype."""
    return 4 if adapter_casts_input(c) else compute_bytes(c)


@formula
def cast_for_adapter(c, targets):
    """A LoRA adapter on the group saves an fp32 copy of its input, not the input (adapter_casts_input)."""
    return adapted(c, targets) and adapter_casts_input(c)


@formula
def projection_inputs_bytes_per_token(c):
    """The column-parallel projections' saved inputs (q, k, v and the FFN's up projections), per token."""
    qv = 3 if c.lora_rank == 0 else (2 if c.lora_targets == LoraTargets.QV else 3)
    qkv_in = input_copies(c, 3, LoraTargets.QV, qv)
    n_up = 2 if c.ffn_type == FFN.SWIGLU else 1
    ffn_in = input_copies(c, n_up, LoraTargets.ALL_LINEAR, n_up)
    return (qkv_in + ffn_in) * c.d_model


@formula
def replicated_bytes_per_token(c):
    """Terms Korthikanti's TP leaves whole (10 sbh for GPT): norms, projection inputs, h-sized masks; a quantized
    base's kept inputs and LoRA dropout on the q/k/v and FFN-input adapters."""
    masks = 2 * c.d_model if has_dropout(c) else 0
    lora = (quant_kept_replicated_bytes_per_token(c, True) + lora_dropout_replicated_bytes_per_token(c)
            + lora_rank_bytes_per_token(c))
    return 2 * norm_bytes_per_token(c) + projection_inputs_bytes_per_token(c) + masks + lora


@formula
def adapters_per_layer(c):
    """LoRA adapters in one block: q and v (qv), q, k, v, o (attn), every linear (all_linear); a fused q/k/v
    projection (GPT-2's c_attn) is one adapter."""
    qkv = 1 if c.fused_projections else (2 if c.lora_targets == LoraTargets.QV else 3)
    o = 1 if adapted(c, LoraTargets.ATTN) else 0
    ffn = (3 if c.ffn_type == FFN.SWIGLU else 2) if adapted(c, LoraTargets.ALL_LINEAR) else 0
    return qkv + o + ffn


@formula
def lora_rank_bytes_per_token(c):
    """Each adapter's r-wide lora_A output, saved by lora_B for its weight gradient (Hu et al. 2021, sec. 4.1: B·A·x),
    in the adapters' dtype (adapter_input_bytes): fp32 where peft casts, 16-bit under autocast or with 16-bit
    adapters."""
    if c.lora_rank == 0:
        return 0
    return adapters_per_layer(c) * c.lora_rank * adapter_input_bytes(c)


@formula
def quant_kept(c):
    """bitsandbytes before 0.43.2 (quant_saves_input): MatMul4Bit.forward kept ctx.tensors = (A, B), each
    quantized linear's input A held by its autograd node until the graph is freed, though its backward reads only
    B (bitsandbytes #1270, commit 9e753741: 0.42.0 bitsandbytes/autograd/_functions.py line 523). As a node
    attribute, not a saved tensor, A escapes non-reentrant checkpointing and activation offloading."""
    return c.quant_saves_input and c.lora_rank > 0 and c.base_quant != Quant.NONE


@formula
def adapter_shares_input(c, targets):
    """Whether the LoRA adapter of a group saves the group's 16-bit input itself: adapted, no LoRA dropout, and
    no cast in between (under autocast peft passes x as is and autocast leaves a 16-bit x uncast; over a 16-bit
    base without autocast peft casts x to fp32 adapters: lora/bnb.py _cast_input_dtype, adapter_casts_input)."""
    return adapted(c, targets) and c.lora_dropout == 0.0 and not adapter_casts_input(c)


@formula
def quant_kept_replicated_bytes_per_token(c, shared):
    """The kept inputs of the q/k/v and FFN-input projections (quant_kept), per token: the norm's output in the
    compute dtype, once for the group, or under autocast each Linear4bit's own cast of the fp32 stream
    (x.to(compute_dtype) in Linear4bit.forward); without autocast the one norm output, which an adapter taking it
    uncast saves itself (fp32, or 16-bit adapters over a 16-bit base: lora_dtype = compute). `shared`: beside the
    layer's saved tensors, so a tensor an adapter saves is counted there; False where the adapter's copy is gone
    (checkpointed, offloaded, freed by backward: stage.quant_kept_layer_bytes). Measured: data/measured/qlora.csv,
    families qlora_old_bnb and outputs_fp32."""
    if not quant_kept(c):
        return 0
    e = compute_bytes(c)
    if not autocast(c):
        return (sum_unshared(c, e * c.d_model, LoraTargets.QV, shared)
                + sum_unshared(c, e * c.d_model, LoraTargets.ALL_LINEAR, shared))
    n_qkv = 1 if c.fused_projections else 3
    n_up = 1 if c.fused_projections or c.ffn_type != FFN.SWIGLU else 2
    return (n_qkv + n_up) * e * c.d_model


@formula
def sum_unshared(c, nbytes, targets, shared):
    """nbytes of a group's kept input, unless `shared` and its adapter saves that very tensor."""
    return 0 if shared and adapter_shares_input(c, targets) else nbytes


@formula
def quant_kept_split_bytes_per_token(c, shared):
    """The kept inputs of the out-projection and the FFN's down projection (quant_kept), per token, where no
    other saved tensor is the same: the out-projection's input is flash attention's saved output; an adapter that
    saves its 16-bit input shares it (`shared`: as quant_kept_replicated_bytes_per_token)."""
    if not quant_kept(c):
        return 0
    e = compute_bytes(c)
    out = 0 if c.attention == Attn.FLASH else sum_unshared(c, e * c.n_heads * c.head_dim, LoraTargets.ATTN, shared)
    # the down projection's input is in the FFN's dtype (ffn_bytes): fp32 under autocast, cast apart from any adapter
    down = e * c.d_ff if ffn_bytes(c) != e else sum_unshared(c, e * c.d_ff, LoraTargets.ALL_LINEAR, shared)
    return out + down


@formula
def quant_kept_flash_out_bytes_per_token(c):
    """The out-projection's kept input under flash attention: flash's saved output itself, counted by
    attention_bytes_per_token where flash's saves stay, kept by the quantized linear alone where they do not
    (recomputation, offload: stage.quant_kept_layer_bytes)."""
    if not quant_kept(c) or c.attention != Attn.FLASH:
        return 0
    return compute_bytes(c) * c.n_heads * c.head_dim


@formula
def lora_dropout_replicated_bytes_per_token(c):
    """LoRA dropout on the q/k/v and FFN-input adapters (peft LoraLayer.lora_dropout, nn.Dropout before lora_A),
    per token: a 1-byte mask per adapter (CUDA's native_dropout); the dropped copy takes the place of the input
    the adapter would have saved. Measured: data/measured/qlora.csv, family lora_dropout."""
    if c.lora_rank == 0 or c.lora_dropout == 0.0:
        return 0
    qkv = 1 if c.fused_projections else (2 if c.lora_targets == LoraTargets.QV else 3)
    up = 0 if not adapted(c, LoraTargets.ALL_LINEAR) else (1 if c.fused_projections or c.ffn_type != FFN.SWIGLU else 2)
    return (qkv + up) * c.d_model


@formula
def lora_dropout_split_bytes_per_token(c):
    """LoRA dropout on the out- and down-projection adapters, per token: the 1-byte masks, and a 16-bit dropped
    copy where the adapter, taking its input uncast (autocast, fp32, 16-bit adapters), would have shared one that
    stays alive anyway (flash attention's output, a kept quantized input)."""
    if c.lora_rank == 0 or c.lora_dropout == 0.0:
        return 0
    e, ad = compute_bytes(c), c.n_heads * c.head_dim
    shared = not adapter_casts_input(c)
    total = 0
    if adapted(c, LoraTargets.ATTN):
        total += ad + (e * ad if shared and (c.attention == Attn.FLASH or quant_kept(c)) else 0)
    if adapted(c, LoraTargets.ALL_LINEAR):
        total += c.d_ff + (e * c.d_ff if c.precision == Precision.FP32 and quant_kept(c) else 0)
    return total


@formula
def attention_bytes_per_token(c):
    """q, k, v kept for the attention backward, the out-projection input, and q/k norms (split by TP)."""
    a, g, d, e = c.n_heads, c.n_kv_heads, c.head_dim, compute_bytes(c)
    out = input_copies(c, 1, LoraTargets.ATTN, 1) * a * d
    if c.attention == Attn.FLASH:
        # FlashAttention-2 (arXiv:2307.08691 Alg. 2): q, k, v (GQA unexpanded), the output, an fp32 logsumexp. The
        # out-projection saves that output itself, unless a LoRA adapter over a 16-bit base casts it to fp32 first
        # (data/measured/qlora.csv: 4·a·d of cast beside flash's 2·a·d).
        flash_out = e * a * d + out if cast_for_adapter(c, LoraTargets.ATTN) else max(out, e * a * d)
        return e * (a * d + 2 * g * d) + flash_out + 4 * a + qk_norm_bytes_per_token(c)
    qkv = 4 if c.attention == Attn.SDPA_MATH and not fused_kernels(c) else e  # the math path works in fp32
    return qkv * 3 * a * d + out + qk_norm_bytes_per_token(c)  # k, v expanded to every query head (repeat_kv)


@formula
def qk_norm_bytes_per_token(c):
    """RMSNorms on q and k (Qwen3, Gemma 3, OLMo 2): per head (or over all heads, qk_norm_all_heads), each
    saving what a norm saves over its a·d and g·d elements (Qwen3Attention's q_norm / k_norm; measured: the
    moe_ep qwen3 rows of data/measured/parallel.csv, 27.8 KB per token per layer)."""
    if not c.qk_norm:
        return 0
    a, g, d, st = c.n_heads, c.n_kv_heads, c.head_dim, stream_bytes(c)
    rows = 2 if c.qk_norm_all_heads else a + g
    elements = (a + g) * d
    if fused_kernels(c):
        return st * elements
    return 4 * elements + (st * elements if c.lora_rank == 0 else 0) + 4 * rows


@formula
def scores_bytes_per_key(c):
    """The s-by-s attention terms per token and per key attended to (Korthikanti's 5a for Megatron with
    dropout: softmax output, mask, dropped probabilities); 0 with flash."""
    if c.attention == Attn.FLASH:
        return 0
    a, e = c.n_heads, compute_bytes(c)
    dropout = has_dropout(c)
    if fused_kernels(c):
        return a * (e + (1 + e if dropout else 0))
    if c.attention == Attn.SDPA_MATH:
        return a * (4 + (5 if dropout else 0))
    softmax = 4 if c.softmax_fp32 or autocast(c) else e
    kept_input = kept_scores_bytes_per_key(c)
    if dropout:
        return a * (softmax + 1 + e) + kept_input  # mask + dropped probabilities in the value dtype
    return a * (softmax + (e if softmax != e else 0)) + kept_input  # the cast back to the value dtype, for p @ v


@formula
def kept_scores_bytes_per_key(c):
    """What PyTorch before 1.11 kept beside the softmax's output on its node (softmax_saves_input): the scores as the
    kernel took them, per head, token and key, with eager attention's own softmax (not a fused kernel's, and not
    under torch.no_grad: evaluation.py). at::softmax(x, dim, dtype) runs an fp16 x with dtype fp32 in the kernel
    (half_to_float) and converts any other x to the dtype first (x.toType(dtype), a copy kept instead), and autocast
    gives softmax dtype fp32 (fp32_set_opt_dtype; aten/src/ATen/native/SoftMax.cpp, autocast_mode.cpp at 1.10). So
    4 bytes: under autocast, where the models of that era had already made the scores fp32 by adding the extended
    attention mask in the parameters' dtype (modeling_utils.get_extended_attention_mask: `self.dtype`, fp32; an fp16
    x with no such mask kept 2, counted as 4 on the safe side), for fp32 compute, and for bf16 scores given
    `dtype=torch.float32` (softmax_fp32); else the compute dtype."""
    if not c.softmax_saves_input or c.attention != Attn.EAGER or fused_kernels(c):
        return 0
    e = compute_bytes(c)
    bf16_upcast = c.softmax_fp32 and e == 2 and c.precision != Precision.FP16
    return c.n_heads * (4 if autocast(c) or e == 4 or bf16_upcast else e)


@formula
def ffn_bytes(c):
    """Element size of the FFN's intermediates: the compute dtype, or under autocast over a bitsandbytes base the
    fp32 stream's (Linear4bit.forward returns its output cast back to its input's dtype, `.to(inp_dtype)`, and the
    stream is fp32: data/measured/qlora.csv, amp_bf16 rows)."""
    if autocast(c) and c.lora_rank > 0 and c.base_quant != Quant.NONE:
        return stream_bytes(c)
    return compute_bytes(c)


@formula
def ffn_inner_bytes_per_token(c, inner, tokens_num, tokens_den):
    """FFN intermediates per token (inner size f), scaled for routed tokens (tokens_num / tokens_den)."""
    e = ffn_bytes(c)
    down_in = input_copies(c, 1, LoraTargets.ALL_LINEAR, 1)
    if c.ffn_type == FFN.SWIGLU:
        kept = 2 * e if fused_kernels(c) else 3 * e  # [gate|up] | gate, silu(gate), up
    elif c.act_fn == ActFn.GELU_NEW and not fused_kernels(c):
        math = 4 if autocast(c) else e  # pow runs in fp32 under autocast: x, tanh, 1 + tanh in fp32
        kept = 3 * math + e  # + 0.5 * x (modeling_gpt2 NewGELUActivation)
    else:
        kept = e  # the GeLU input
    return ceil_div((kept + down_in) * inner * tokens_num, tokens_den)


@formula
def moe_bytes_per_token(c):
    """A MoE block per token: fp32 router logits and probs, k routed copies of the token, expert intermediates.

    Each token visits top_k experts (Switch, arXiv:2101.03961 sec. 2.1; Mixtral arXiv:2401.04088 sec. 2):
    on average s*b*k expert-tokens reach the experts of one EP group; the most loaded rank's experts take up
    to capacity_factor times the average (Switch eq. 3: capacity = tokens * k / E * capacity_factor, the
    buffers sized to it). The shared experts see every token.
    """
    e, k = compute_bytes(c), c.top_k
    load = int(c.capacity_factor * 1000 + 0.5)  # in thousandths, so the byte count stays an integer
    router = 2 * 4 * c.n_experts
    shared = ffn_inner_bytes_per_token(c, c.moe_d_ff * c.n_shared_experts, 1, 1)
    if not fused_kernels(c):
        return router + grouped_experts_bytes_per_token(c, load) + shared
    dispatch = ceil_div(e * k * c.d_model * load, 1000)
    routed = ffn_inner_bytes_per_token(c, c.moe_d_ff, k * load, 1000)
    return router + dispatch + routed + shared


@formula
def grouped_experts_bytes_per_token(c, load):
    """transformers' grouped-matmul experts (grouped_mm_experts_forward), per token and its k routed pairs:
    the tokens gathered by expert (h), the gate_up output (2F), silu(gate) and silu·up (F each), and the down
    output the routing-weight multiply saves (h), in the expert weights' dtype: grouped_mm is not autocast, so
    under autocast with fp32 weights the experts run in fp32 (data/measured/PARALLEL.md, moe: S·(2h + 4F)·4
    under amp). With expert parallelism (AllToAllEP) a rank receives up to capacity_factor times its share of
    the pairs, R = cf·S, with two int64 indices and a mask per received pair, and combines the S it sent back
    into one h-wide buffer: R·(B·h + 4F·B + 19) + S·h·B (moe_ep)."""
    b, k, h, f = expert_compute_bytes(c), c.top_k, c.d_model, c.moe_d_ff
    if c.ep == 1:
        return k * (2 * h + 4 * f) * b
    received = ceil_div(k * (b * h + 4 * f * b + 19) * load, 1000)
    return received + k * h * b


@formula
def expert_compute_bytes(c):
    """The experts run in their weights' dtype: fp32 under autocast (fp32 parameters), else the compute dtype."""
    return 4 if autocast(c) else compute_bytes(c)


@formula
def split_bytes_per_token(c, moe_layer):
    """Terms that tensor parallelism splits, but the s^2 scores: attention internals and FFN intermediates."""
    if not moe_layer:
        lora = quant_kept_split_bytes_per_token(c, True) + lora_dropout_split_bytes_per_token(c)
        return attention_bytes_per_token(c) + ffn_inner_bytes_per_token(c, c.d_ff, 1, 1) + lora
    return attention_bytes_per_token(c) + moe_bytes_per_token(c)


@formula
def head_bytes_per_token(c):
    """The final norm's saved tensors and the LM head's input (none for a frozen head under LoRA, nor for a
    loss fused with the head, which computes the head's gradients in the forward: loss.py)."""
    return norm_bytes_per_token(c) + head_input_bytes_per_token(c)


@formula
def head_input_bytes_per_token(c):
    """The LM head's saved input (none for a frozen head, nor for a loss fused with the head)."""
    head_in = matmul_input_bytes(c) if c.lora_rank == 0 and c.loss_impl != LossImpl.FUSED_LINEAR else 0
    return head_in * c.d_model


