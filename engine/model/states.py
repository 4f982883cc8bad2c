"""Model states: weights, gradients and optimizer states resident on one GPU.

Bytes per parameter by precision and framework convention (full training, before ZeRO):

    precision / framework        weights  grads  optimizer (Adam)              source
    fp32                         4        4      8  (m, v)                     torch.optim.AdamW
    bf16, fp16 (pure)            2        2      4  (m, v in the param dtype)  torch.optim.AdamW
    amp_*  pytorch, fsdp         4        4      8  (fp32 params, autocast)    torch.amp; FSDP flat params
    amp_*  deepspeed             2        2      12 (fp32 master, m, v)        ZeRO, arXiv:1910.02054 sec. 3.1, K = 12
    amp_*  megatron              2        4      12 (fp32 main grads)          megatron/training/theoretical_memory_usage.py (18 B)
    fp8                          as amp_bf16 of the framework, + fp8 weight and transpose copies (Transformer Engine)

ZeRO (arXiv:1910.02054 sec. 5): stage >= 1 shards optimizer states, >= 2 gradients, 3 weights over the
data-parallel group (dp * cp, as Megatron's distributed optimizer does; routed experts over dp * cp / ep).
Offload (ZeRO-Offload, arXiv:2101.06840 sec. 4) moves optimizer states and fp32 gradients to host RAM;
`optimizer_params` (ZeRO-Infinity) moves the weights too. LoRA (arXiv:2106.09685): the base is frozen
(no gradients, no states) and stored as `base_quant` says (QLoRA, arXiv:2305.14314 sec. 3).
"""

from engine.catalogs.conventions import (
    FRAMEWORK_AMP_GRAD_BYTES,
    FRAMEWORK_AMP_MASTER_BYTES,
    FRAMEWORK_AMP_WEIGHT_BYTES,
    FRAMEWORK_DTENSOR_TP,
    FRAMEWORK_FP8_TORCHAO,
    FRAMEWORK_FSDP_GATHERS,
    FRAMEWORK_QUANT_STATE_SHARDED,
    OPTIMIZER_BLOCK,
    OPTIMIZER_FACTORED,
    OPTIMIZER_STATE_BITS,
    OPTIMIZER_STATES,
    OPTIMIZER_TRAINS,
)
from engine.inputs.codes import FFN, LoraDtype, Offload, Precision, Quant
from engine.model.common import ceil_div, formula
from engine.model.params import has_dims, head_dim, kv_heads
from engine.model.split import (
    expert_params_per_gpu,
    layers_per_stage,
    lora_params_per_gpu,
    nonexpert_params_per_gpu,
    params_per_gpu,
    trainable_params_per_gpu,
)


@formula
def is_amp(c):
    """fp32 master weights with half-precision compute: amp_bf16, amp_fp16, and fp8 (TE keeps a master)."""
    p = c.precision
    return p == Precision.AMP_BF16 or p == Precision.AMP_FP16 or p == Precision.FP8


@formula
def torchao_fp8(c):
    """precision = fp8 as torchao runs it (frameworks.toml fp8_torchao): amp_bf16's autocast over fp32 parameters,
    with every linear but the head converted to Float8Linear (torchao float8/float8_linear.py)."""
    return c.precision == Precision.FP8 and FRAMEWORK_FP8_TORCHAO[c.framework]


@formula
def compute_bytes(c):
    """Bytes of one activation element: 4 in fp32, else 2 (fp8 recipes keep activations in bf16)."""
    return 4 if c.precision == Precision.FP32 else 2


@formula
def weight_bytes_per_param(c):
    """Trainable weight element size: fp32, 16-bit in pure bf16/fp16, under amp_* as the framework keeps them
    (fp32 parameters under torch.autocast and FSDP, 16-bit beside an fp32 master in DeepSpeed and Megatron)."""
    if is_amp(c):
        return FRAMEWORK_AMP_WEIGHT_BYTES[c.framework]
    return 4 if c.precision == Precision.FP32 else 2


@formula
def pure_half(c):
    """Everything in half precision: bf16 or fp16, no fp32 master (precision = bf16 / fp16)."""
    return c.precision == Precision.BF16 or c.precision == Precision.FP16


@formula
def fp32_adapters(c):
    """LoRA adapters kept in fp32 over a pure 16-bit base (lora_dtype = fp32): peft since 0.11 upcasts them
    (get_peft_model's autocast_adapter_dtype=True, LoraModel._cast_adapter_dtype, peft #1706), so their gradients
    and optimizer moments are fp32 too, and each adapted linear casts its input to fp32 (lora/layer.py
    _cast_input_dtype). Measured: data/measured/qlora.csv (every peft row; the lora_compute_dtype family without)."""
    return c.lora_rank > 0 and c.lora_dtype == LoraDtype.FP32 and pure_half(c)


@formula
def adapter_weight_bytes_per_param(c):
    """Element size of a trainable LoRA adapter weight: fp32 adapters, or as the precision keeps trainable weights."""
    return 4 if fp32_adapters(c) else weight_bytes_per_param(c)


@formula
def grad_bytes_per_param(c):
    """Gradient element size: Megatron accumulates fp32 main grads, DeepSpeed fp16/bf16 grads; fp32 LoRA adapters
    have fp32 gradients."""
    if is_amp(c):
        return FRAMEWORK_AMP_GRAD_BYTES[c.framework]
    return 4 if c.precision == Precision.FP32 or fp32_adapters(c) else 2


@formula
def state_bytes(c):
    """Element size of optimizer moments: fp32, except for pure bf16/fp16 where they follow the params (fp32
    LoRA adapters included)."""
    return 2 if pure_half(c) and not fp32_adapters(c) else 4


@formula
def trains(c):
    """The optimizer steps (optimizer = none: forward and backward only)."""
    return OPTIMIZER_TRAINS[c.optimizer]


@formula
def master_bytes_per_param(c):
    """fp32 master copy kept by the optimizer when the weights are half precision (K includes it)."""
    return FRAMEWORK_AMP_MASTER_BYTES[c.framework] if is_amp(c) and trains(c) else 0


@formula
def moment_bytes_per_param(c):
    """Optimizer moments per parameter.

    Adam/AdamW m and v; SGD with momentum and Lion (arXiv:2302.06675 Alg. 1) one buffer; 8-bit Adam
    (bitsandbytes, arXiv:2110.02861 sec. 2) 1 byte per moment + one fp32 absmax per 256-block:
    2 * (1 + 4/256) = 2.03125 bytes, counted block by block in eight_bit_bytes.
    Adafactor's factored moment is counted separately (adafactor_state_elements). Per optimizer: the number
    of parameter-sized states in data/optimizers.toml.
    """
    if OPTIMIZER_STATE_BITS[c.optimizer] != 0:
        return 0  # quantized states: eight_bit_bytes
    return OPTIMIZER_STATES[c.optimizer] * state_bytes(c)


@formula
def adafactor_state_elements(c):
    """Adafactor's factored second moment (arXiv:1804.04235 sec. 3): rows + cols per matrix, full vectors.

    Per block: q, o (h + a*d) each, k, v (h + g*d) each, FFN n*(h + f) ... the norms' vectors in full.
    The embedding and head factor to V + h each. Split over TP like the matrices.
    """
    if not has_dims(c):
        return 0
    h, a, g, d, f = c.d_model, c.n_heads, kv_heads(c), head_dim(c), max(c.d_ff, c.moe_d_ff)
    n_mats = 3 if c.ffn_type == FFN.SWIGLU else 2
    block = 2 * (h + a * d) + 2 * (h + g * d) + n_mats * (h + f) + c.norms_per_layer * h
    return ceil_div(layers_per_stage(c) * block + 2 * (c.vocab + h), c.tp)


@formula
def zero_group(c, expert):
    """Ranks that share one copy of the states: dp * cp, or dp * cp / ep for routed experts."""
    n = c.dp * c.cp
    return max(1, n // c.ep) if expert else n


@formula
def sharded(c, n, min_stage, expert):
    """n bytes, divided over the ZeRO group when zero_stage >= min_stage."""
    if c.zero_stage >= min_stage:
        return ceil_div(n, zero_group(c, expert))
    return n


@formula
def weight_shard_stage(c):
    """The ZeRO stage from which the weights are sharded: 2 under FSDP (SHARD_GRAD_OP keeps sharded parameters
    and gathers them for compute: sharding.py), 3 under DeepSpeed (ZeRO-2 replicates the 16-bit weights)."""
    return 2 if FRAMEWORK_FSDP_GATHERS[c.framework] else 3


@formula
def frozen(c):
    """The base model does not train: LoRA adapters train instead, or there is no optimizer at all."""
    return c.lora_rank > 0 or not trains(c)


@formula
def trainable_weight_bytes(c):
    """Weights that train: every parameter, split into non-expert and expert ZeRO groups."""
    b = weight_bytes_per_param(c)
    if frozen(c):
        return sharded(c, adapter_weight_bytes_per_param(c) * lora_params_per_gpu(c), weight_shard_stage(c), False)
    dense = sharded(c, b * nonexpert_params_per_gpu(c), weight_shard_stage(c), False)
    return dense + sharded(c, b * expert_params_per_gpu(c), weight_shard_stage(c), True)


@formula
def quantized_params(c):
    """The frozen base's weights on this rank that base_quant quantizes (base_bytes)."""
    if c.base_quant == Quant.NONE:
        return 0
    return max(0, params_per_gpu(c) - unquantized_params(c))


@formula
def unquantized_params(c):
    """The embedding and the head on this rank (unquantized_model_params split by TP and PP)."""
    return ceil_div(unquantized_model_params(c), c.tp * c.pp)


@formula
def unquantized_model_params(c):
    """The model's embedding and head, unless quantized with the linears or tied to the embedding (the norms' few
    weights are counted with the quantized ones)."""
    return c.vocab * c.d_model * (1 if c.tied_embeddings or c.quant_lm_head else 2)


@formula
def base_bytes(c, n, unquantized):
    """n parameters of LoRA's frozen base, `unquantized` of them the embedding and head: linear weights as
    base_quant says, embedding/head/norms in 16 bits (the head as the linears with quant_lm_head, unless tied to the
    embedding).

    int8 (LLM.int8, arXiv:2208.07339): 1 byte per weight + an fp32 scale per output row (~0.1%, left out).
    """
    if c.base_quant == Quant.NONE:
        return weight_bytes_per_param(c) * n
    return quantized_linear_bytes(c, max(0, n - unquantized)) + 2 * unquantized


@formula
def whole_frozen_base_bytes(c):
    """This rank's share of LoRA's frozen base by TP and PP, before ZeRO shards it."""
    return base_bytes(c, params_per_gpu(c), unquantized_params(c))


@formula
def frozen_base_bytes(c):
    """LoRA's frozen base as ZeRO / FSDP shards it: the parameters, and the quantization constants every rank
    keeps whole (replicated_quant_state_bytes)."""
    states = replicated_quant_state_bytes(c)
    return sharded(c, whole_frozen_base_bytes(c) - states, weight_shard_stage(c), False) + states


@formula
def replicated_quant_state_bytes(c):
    """The quantization constants of the whole base, on every rank whatever shards or offloads the weights, where
    they are not parameters (frameworks.toml quant_state_sharded = false). bitsandbytes' QuantState is an attribute
    of the weight and of its module (nn/modules.py Params4bit._quantize: `self.module.quant_state = quant_state`),
    neither a parameter nor a buffer: FSDP shards and offloads the packed weights only (FSDP1
    torch/distributed/fsdp/_init_utils.py flattens and moves parameters and buffers; FSDP2's fully_shard shards the
    module's parameters; Linear4bit.forward's fix_4bit_weight_quant_state_from_module restores the state from the
    module, "for example for fsdp"), and ZeRO-3 partitions parameters only. Traced: the qlora_fsdp family of
    data/measured/qlora.csv (FSDP2 over bitsandbytes' statistics), weights within 0.2%. torchao's NF4Tensor
    (torchtune) carries its scalers inside the tensor, sharded and gathered with it."""
    if FRAMEWORK_QUANT_STATE_SHARDED[c.framework]:
        return 0
    return quant_state_bytes(c, quantized_params(c))


@formula
def quantized_linear_bytes(c, n):
    """n linear weights of a quantized frozen base as stored, the packed weights and their quantization constants:
    NF4 with double quantization 4 + 8/64 + 32/(64*256) = 4.127 bits a weight (QLoRA, arXiv:2305.14314 sec. 3), NF4
    without 4.5 bits (bitsandbytes quantize_4bit with compress_statistics=False: transformers' BitsAndBytesConfig
    default, LitGPT's --quantize bnb.nf4; measured: data/measured/qlora.csv, the nf4_nodq rows), int8 a byte."""
    return packed_linear_bytes(c, n) + quant_state_bytes(c, n)


@formula
def packed_linear_bytes(c, n):
    """n quantized linear weights' packed storage, what ZeRO-3 and FSDP shard and gather: half a byte each in
    NF4, one in int8."""
    return n if c.base_quant == Quant.INT8 else ceil_div(n, 2)


@formula
def quant_state_bytes(c, n):
    """The quantization constants of n NF4 weights (bitsandbytes QuantState): with double quantization an 8-bit
    absmax per 64 weights and an fp32 absmax per 256 of those, without an fp32 absmax per 64; int8's per-row scales
    are left out (whole_frozen_base_bytes)."""
    if c.base_quant == Quant.NF4:
        return ceil_div(n, 64) + 4 * ceil_div(n, 64 * 256)
    return 4 * ceil_div(n, 64) if c.base_quant == Quant.NF4_NODQ else 0


@formula
def quantized_base(c):
    """LoRA over a base quantized by bitsandbytes (QLoRA: nf4; LLM.int8: int8)."""
    return c.lora_rank > 0 and c.base_quant != Quant.NONE


@formula
def fp8_weight_copy_bytes(c):
    """Transformer Engine caches an fp8 copy of each linear weight and its transpose: 1 + 1 bytes; torchao casts
    per call and keeps none."""
    if c.precision != Precision.FP8 or torchao_fp8(c):
        return 0
    linear = max(0, params_per_gpu(c) - ceil_div(c.vocab * c.d_model, c.tp))
    return 2 * linear


@formula
def offloads_weights(c):
    return c.offload == Offload.OPTIMIZER_PARAMS


@formula
def offloads_optimizer(c):
    return c.offload != Offload.NONE


@formula
def device_weight_bytes(c):
    """Weights resident on the GPU (between gathers): trainable + frozen base + fp8 copies."""
    total = trainable_weight_bytes(c) + fp8_weight_copy_bytes(c)
    if frozen(c):
        total += frozen_base_bytes(c)
    if offloads_weights(c):  # to the host, but for the quantization constants that are not parameters
        return replicated_quant_state_bytes(c) if frozen(c) else 0
    return total


@formula
def device_grad_bytes(c):
    """Gradients resident on the GPU: sharded from ZeRO-2; on the host when the optimizer is offloaded."""
    if offloads_optimizer(c) or not trains(c):
        return 0
    b = grad_bytes_per_param(c)
    if c.lora_rank > 0:
        return sharded(c, b * lora_params_per_gpu(c), 2, False)
    dense = sharded(c, b * nonexpert_params_per_gpu(c), 2, False)
    return dense + sharded(c, b * expert_params_per_gpu(c), 2, True) + replicated_embedding_grad_bytes(c)


@formula
def replicated_embedding_grad_bytes(c):
    """DTensor's embedding_dense_backward strategy gives the vocabulary-parallel embedding a Replicate V·h
    gradient on every TP rank while the weight is Shard(0): (1 - 1/t)·V·h more than its share
    (data/measured/PARALLEL.md, tp: 2,101,346,304 B on llama-3.1-8b dims at an optimizer-step peak)."""
    if c.tp == 1 or not FRAMEWORK_DTENSOR_TP[c.framework] or c.zero_stage >= 2:
        return 0  # under FSDP it is reduce-scattered with the root group's gradients (sharding.py)
    vh = c.vocab * c.d_model
    return grad_bytes_per_param(c) * (vh - ceil_div(vh, c.tp))


@formula
def optimizer_bytes_unplaced(c):
    """Master weights + moments for the trainable parameters on this rank, after ZeRO-1 sharding."""
    per_param = master_bytes_per_param(c) + moment_bytes_per_param(c)
    if c.lora_rank > 0:
        n_dense, n_expert = lora_params_per_gpu(c), 0
    else:
        n_dense, n_expert = nonexpert_params_per_gpu(c), expert_params_per_gpu(c)
    dense = per_param * n_dense + eight_bit_bytes(c, n_dense)
    expert = per_param * n_expert + eight_bit_bytes(c, n_expert)
    if OPTIMIZER_FACTORED[c.optimizer]:
        dense += state_bytes(c) * (adafactor_state_elements(c) if c.lora_rank == 0 else n_dense)
    return sharded(c, dense, 1, False) + sharded(c, expert, 1, True)


@formula
def eight_bit_bytes(c, n):
    """8-bit states: one byte per value + an fp32 absmax per block, per state (bitsandbytes blockwise: AdamW8bit
    keeps two, 2 * (1 + 4/256) = 2.03125 bytes per parameter)."""
    if OPTIMIZER_STATE_BITS[c.optimizer] != 8:
        return 0
    return OPTIMIZER_STATES[c.optimizer] * (n + 4 * ceil_div(n, OPTIMIZER_BLOCK[c.optimizer]))


@formula
def device_optimizer_bytes(c):
    return 0 if offloads_optimizer(c) else optimizer_bytes_unplaced(c)


@formula
def host_states_bytes(c):
    """Host RAM the states' offload needs per GPU: fp32 states and fp32 gradients (ZeRO-Offload), and weights.
    Offloaded activations add theirs per step (stage.offloaded_activation_bytes)."""
    total = 0
    if offloads_optimizer(c):
        total += optimizer_bytes_unplaced(c) + sharded(c, 4 * trainable_params_per_gpu(c), 1, False)
    if offloads_weights(c):
        total += trainable_weight_bytes(c)
        if frozen(c):  # the quantization constants stay on the GPU (device_weight_bytes)
            total += frozen_base_bytes(c) - replicated_quant_state_bytes(c)
    return total
