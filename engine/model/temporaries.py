"""Transient buffers: alive for part of a step, and often what sets the peak (the loss's: loss.py; FSDP and
ZeRO-3 gathers: sharding.py).

    DDP buckets         PyTorch DDP's gradient buckets, a second copy of the grads (gradient_as_bucket_view=False)
    autocast cache      torch.autocast's 16-bit copies of fp32 weights, saved for backward by each matmul
    optimizer step      foreach AdamW's sqrt(v) buffer, DeepSpeed's fp32 gradient partition, Adafactor's update
    backward workspace  one layer's gradient buffers; full recomputation's rebuilt layer
"""

from engine.catalogs.conventions import (
    FRAMEWORK_AUTOCAST_CACHE,
    FRAMEWORK_DDP_BUCKET_COPY,
    FRAMEWORK_REDUCE_BUCKET,
    FRAMEWORK_STEP_GRAD_FP32,
    FRAMEWORK_TIED_GRAD_COPIES,
    FRAMEWORK_TORCH_OPTIMIZER,
    STEP_LARGEST,
    STEP_LARGEST_FP32,
    STEP_STATE_SIZED,
    STEP_UPCASTS_FP32,
)
from engine.inputs.codes import Attn, Precision, Quant
from engine.model.activations import local_tokens, stream_bytes
from engine.model.common import ceil_div, formula
from engine.model.params import has_dims, largest_layer_params
from engine.model.states import (
    compute_bytes,
    grad_bytes_per_param,
    is_amp,
    offloads_optimizer,
    sharded,
    state_bytes,
    torchao_fp8,
    trains,
    weight_bytes_per_param,
)


@formula
def ddp_bucket_bytes(c, trainable_params):
    """PyTorch DDP buckets: a flat copy of every gradient (torch/nn/parallel/distributed.py, bucket views
    are off by default). DeepSpeed ZeRO: the reduce bucket, reduce_bucket_size elements (5e8 by default) in the
    gradients' dtype however few the gradients are, and on one GPU too: ZeRO-1/2 allocate it as each backward
    begins (stage_1_and_2.py setup_buckets; with overlap_comm a second one), ZeRO-3 once, after the optimizer
    states (stage3.py, "IPG"); reduce_bucket_size overrides the size; peak.py
    buckets_bytes says when each is alive. Which framework has which: data/frameworks.toml. Traced with DeepSpeed
    0.19.8 on a fake process group: data/measured/PARALLEL.md, "DeepSpeed's reduce bucket"."""
    if not trains(c):
        return 0
    if FRAMEWORK_REDUCE_BUCKET[c.framework] > 0 and c.zero_stage >= 1:
        bucket = c.reduce_bucket_size if c.reduce_bucket_size > 0 else FRAMEWORK_REDUCE_BUCKET[c.framework]
        copies = 2 if c.overlap_comm and c.zero_stage <= 2 else 1  # overlap_comm: a second bucket at ZeRO-1/2
        return copies * grad_bytes_per_param(c) * bucket
    if c.dp * c.cp > 1 and FRAMEWORK_DDP_BUCKET_COPY[c.framework] and c.zero_stage == 0:
        return grad_bytes_per_param(c) * trainable_params
    return 0


@formula
def tied_gradient_sum_bytes(c):
    """A tied embedding's gradient is complete only at the end of backward. Autograd keeps the head's V·h
    gradient until embedding_dense_backward's arrives and adds the two: two more V·h gradients, in the weights'
    dtype, beside all the others (measured: the fused AdamW rows of data/measured/recipes.csv, llama-3.2-1b's
    peak at that `add`). Megatron writes the head's into main_grad (gradient-accumulation fusion) and adds the
    embedding's in its hook: one (frameworks.toml tied_grad_copies). Pipelines hold the two on two stages."""
    if not (c.tied_embeddings and c.lm_head) or c.lora_rank > 0 or c.pp > 1 or not trains(c):
        return 0
    copies = FRAMEWORK_TIED_GRAD_COPIES[c.framework]
    return copies * weight_bytes_per_param(c) * ceil_div(c.vocab * c.d_model, c.tp)


@formula
def autocast_cache_bytes(c, params):
    """torch.autocast casts each fp32 weight to 16 bits once per forward and matmul saves the copy:
    2 bytes per matrix parameter, alive from forward until that layer's backward (torch/amp/autocast_mode.py).
    All of them are alive when forward ends only where autocast's cache holds them, for weights that require
    grad; LoRA's frozen base keeps only the casts its matmuls saved (peak.forward_cast_bytes)."""
    if not FRAMEWORK_AUTOCAST_CACHE[c.framework] or not is_amp(c):
        return 0
    if c.precision == Precision.FP8:  # torchao casts its converted linears to fp8 per call; the head stays bf16
        return 2 * ceil_div(c.vocab * c.d_model, c.tp) if torchao_fp8(c) and c.lm_head else 0
    if c.lora_rank > 0 and c.base_quant != Quant.NONE:
        return 0  # bitsandbytes dequantizes instead of casting
    # Lookup tables are never cast: the token embedding unless it doubles as the (cast) LM head, positions.
    lookups = (0 if c.tied_embeddings and c.lm_head else c.vocab * c.d_model) + c.n_positions * c.d_model
    return 2 * max(0, params - ceil_div(lookups, c.tp * c.pp))


@formula
def head_cast_bytes(c):
    """The LM head's share of the autocast cache: its V·h weight cast to 16 bits, saved by the head's matmul. (Asked
    of autocast_cache_bytes with the head beside the lookup tables it never casts: an untied embedding's, positions.)"""
    head_and_lookups = (1 if c.tied_embeddings else 2) * c.vocab * c.d_model + c.n_positions * c.d_model
    if not c.lm_head or autocast_cache_bytes(c, head_and_lookups) == 0:
        return 0
    return 2 * ceil_div(c.vocab * c.d_model, c.tp)


@formula
def dequant_bytes(c):
    """QLoRA / int8 LoRA: the largest quantized weight dequantized to 16 bits, one at a time (bitsandbytes
    MatMul4Bit: `F.dequantize_4bit(B, quant_state).to(A.dtype)`), the LM head's V·h with quant_lm_head. Weights
    quantized from fp16 come back in fp16 and are copied to a bf16 compute dtype, 4 B per weight: bitsandbytes
    before 0.43 quantized `self.data.half()` (Params4bit.cuda, 0.42.0 nn/modules.py), and Lightning's plugin always
    quantizes `weight.to(dtype=torch.half)` (fabric/plugins/precision/bitsandbytes.py _Linear4bit._quantize_weight);
    quant_saves_input stands for that era, quant_lm_head for Lightning."""
    if c.lora_rank == 0 or c.base_quant == Quant.NONE:
        return 0
    largest = c.d_model * max(c.d_ff, c.moe_d_ff)
    if c.quant_lm_head and c.lm_head and not c.tied_embeddings:
        largest = max(largest, c.vocab * c.d_model)
    fp16_compute = c.precision == Precision.FP16 or c.precision == Precision.AMP_FP16
    fp16_copy = (c.quant_saves_input or c.quant_lm_head) and compute_bytes(c) == 2 and not fp16_compute
    return (4 if fp16_copy else 2) * ceil_div(largest, c.tp)


@formula
def optimizer_step_bytes(c, trainable_params):
    """Buffers the optimizer step allocates, as data/optimizers.toml gives them by optimizer_impl.

    torch AdamW (foreach, the CUDA default; torch/optim/adamw.py _multi_tensor_adamw): torch._foreach_sqrt
    of exp_avg_sq, one state-sized buffer. Adafactor (transformers/optimization.py) and Lion work per tensor:
    update buffers of the largest tensor. Megatron and DeepSpeed step with fused Adam (no such buffer);
    DeepSpeed casts the fp16 gradient partition to fp32 first (stage_1_and_2.py): data/frameworks.toml.
    An offloaded optimizer allocates nothing on the GPU for its step.
    """
    n, o, impl = trainable_params, c.optimizer, c.optimizer_impl
    if not trains(c) or offloads_optimizer(c):
        return 0  # an offloaded optimizer steps on the host (ZeRO-Offload, arXiv:2101.06840 sec. 4.1: CPU Adam)
    if not FRAMEWORK_TORCH_OPTIMIZER[c.framework]:
        return sharded(c, FRAMEWORK_STEP_GRAD_FP32[c.framework] * n, 1, False) if is_amp(c) else 0
    largest = min(n, ceil_div(largest_layer_params(c), c.tp))
    fp32 = STEP_LARGEST_FP32[o, impl] + (STEP_UPCASTS_FP32[o, impl] if grad_bytes_per_param(c) == 2 else 0)
    per_tensor = (STEP_LARGEST[o, impl] * state_bytes(c) + fp32 * 4) * largest
    if c.optimizer_in_backward:
        # torchtune optimizer_in_bwd: one optimizer per parameter, stepped in its gradient's hook, the gradient
        # freed at once: at most the largest parameter's gradient and its own step buffers exist at a time
        # (data/measured/recipes.csv, knob optimizer_in_backward).
        state_sized = STEP_STATE_SIZED[o, impl] * state_bytes(c) * largest
        return grad_bytes_per_param(c) * largest + state_sized + per_tensor
    return sharded(c, STEP_STATE_SIZED[o, impl] * state_bytes(c) * n, 1, False) + per_tensor


@formula
def backward_workspace_bytes(c):
    """One layer's gradient buffers in backward: the grads of its widest intermediates (FFN f or the
    s-by-s scores in eager attention, fp32 in HF's softmax), plus the incoming and outgoing grads of h."""
    if not has_dims(c):
        return 0
    tokens, e = local_tokens(c), compute_bytes(c)
    ffn = 2 * e * tokens * max(c.d_ff, c.moe_d_ff * max(c.top_k, 1))
    scores = 0
    if c.attention != Attn.FLASH:
        scores = (4 + e) * c.micro_batch * c.n_heads * ceil_div(c.seq_len, c.cp) * c.seq_len
    h_grads = 2 * stream_bytes(c) * tokens * c.d_model
    return ceil_div(max(ffn, scores), c.tp) + h_grads
