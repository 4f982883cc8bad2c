"""Integer codes for the categorical inputs and outputs of CONFIG.md.

numba compiles IntEnum members as constants, so the formulas compare `c.precision == Precision.AMP_BF16`
at no cost. The Parquet writer turns the codes back into the CONFIG.md strings (`NAMES[Enum]`).
The order of members is part of nothing public: only the strings are. Optimizers and frameworks are data
(data/optimizers.toml, data/frameworks.toml): their codes are the order of their tables there.
"""

import tomllib
from enum import IntEnum

from engine import DATA_DIR


def enum_of_tables(name: str, file: str) -> type[IntEnum]:
    """An IntEnum whose members are the tables of a data file, in file order (`adamw_8bit` -> ADAMW_8BIT)."""
    with open(DATA_DIR / file, "rb") as f:
        keys = list(tomllib.load(f))
    return IntEnum(name, [(key.upper(), code) for code, key in enumerate(keys)])


class Precision(IntEnum):
    FP32 = 0
    AMP_BF16 = 1
    AMP_FP16 = 2
    BF16 = 3
    FP16 = 4
    FP8 = 5


Optimizer = enum_of_tables("Optimizer", "optimizers.toml")
Framework = enum_of_tables("Framework", "frameworks.toml")


class Ckpt(IntEnum):
    NONE = 0
    SELECTIVE = 1  # Megatron: the attention core recomputed
    FULL = 2  # only each checkpointed layer's input kept
    SELECTIVE_OP = 3  # PyTorch selective activation checkpointing with torchtitan's op policy


class OptimizerImpl(IntEnum):
    FOREACH = 0  # torch.optim's default on CUDA: state-sized intermediates
    FUSED = 1  # one kernel per parameter group, no intermediates
    FORLOOP = 2  # one parameter at a time


class LossImpl(IntEnum):
    STANDARD = 0  # the whole s*b*V logits, upcast to fp32
    CHUNKED = 1  # torchtune: the loss over loss_chunks slices of the tokens
    FUSED_LINEAR = 2  # Liger / Cut Cross-Entropy: LM head and loss fused, logits never whole


class FsdpGroups(IntEnum):
    ROOT = 0  # fully_shard on each decoder block, then the model: embedding, final norm and head in one root group
    SPLIT = 1  # the embedding, and the final norm with the head, are groups of their own (torchtitan since 83e6941)


class Allocator(IntEnum):
    CACHING = 0  # PyTorch's CUDA caching allocator as it comes: fixed segments, a freed one cut up by smaller blocks
    EXPANDABLE = 1  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one growing segment per stream


class GradSync(IntEnum):
    EVERY = 0  # each micro-batch's gradients reduced as its backward makes them (FSDP2's default, torchtitan)
    LAST = 1  # only the last micro-batch's: no_sync / set_requires_gradient_sync(False) before (HF accelerate)


class SaveStateDict(IntEnum):
    SHARDED = 0  # each rank writes its own shards (torch.distributed.checkpoint, DeepSpeed's save_checkpoint)
    FULL = 1  # the whole model's state dict, gathered tensor by tensor to rank 0's host memory (engine/model/save.py)


class ZeroGrad(IntEnum):
    NONE = 0  # set_to_none=True: gradients freed after each step
    ZEROS = 1  # set_to_none=False: kept allocated between steps


class Attn(IntEnum):
    EAGER = 0
    SDPA_MATH = 1
    FLASH = 2


class LoraTargets(IntEnum):
    QV = 0
    ATTN = 1
    ALL_LINEAR = 2


class LoraDtype(IntEnum):
    FP32 = 0  # adapters, their gradients and optimizer states in fp32 over a 16-bit base (peft >= 0.11)
    COMPUTE = 1  # adapters in the base's 16-bit dtype (torchtune, LitGPT, peft before 0.11)


class Quant(IntEnum):
    NONE = 0
    INT8 = 1
    NF4 = 2  # NF4 with double quantization (QLoRA's; bitsandbytes compress_statistics=True): 4.127 bits
    NF4_NODQ = 3  # NF4, one fp32 absmax per 64 weights (compress_statistics=False; LitGPT bnb.nf4): 4.5 bits


class Offload(IntEnum):
    NONE = 0
    OPTIMIZER = 1
    OPTIMIZER_PARAMS = 2


class PPSchedule(IntEnum):
    ONE_F_ONE_B = 0
    INTERLEAVED = 1
    GPIPE = 2


class FFN(IntEnum):
    GELU = 0  # two matrices: up, down (GPT-2, BERT, T5 v1.0)
    SWIGLU = 1  # three matrices: gate, up, down (Llama, Mistral, Qwen, gated-GELU)


class ActFn(IntEnum):
    """How the FFN's activation is implemented, which decides what it saves for backward."""

    GELU = 0  # one fused/erf kernel (torch gelu, Megatron bias-gelu): saves its input
    GELU_NEW = 1  # Hugging Face's Python tanh formula (GPT-2 "gelu_new"): five saved tensors
    SILU = 2  # the gate of a SwiGLU FFN


class Norm(IntEnum):
    LAYERNORM = 0  # weight + bias
    RMSNORM = 1  # weight only


class Bias(IntEnum):
    NONE = 0  # Llama, Mistral
    QKV = 1  # Qwen2: biases on q, k, v only
    ALL = 2  # GPT-2, BERT: every linear layer


class Phase(IntEnum):
    FORWARD = 0
    BACKWARD = 1
    OPTIMIZER = 2
    EVAL = 3  # an evaluation forward between optimizer steps (eval_micro_batch)
    LOAD = 4  # the checkpoint loaded, before the first step (engine/model/load.py)
    SAVE = 5  # a checkpoint saved between steps (engine/model/save.py)


class Component(IntEnum):
    WEIGHTS = 0
    GRADS = 1
    OPTIMIZER = 2
    ACTIVATIONS = 3
    TEMP = 4
    OVERHEAD = 5


class Invalid(IntEnum):
    """Why a configuration cannot run (its layout, its sequence, or on its GPU); 0 means it can."""

    OK = 0
    TP_HEADS = 1
    TP_KV_HEADS = 2
    PP_LAYERS = 3
    GPUS_LAYOUT = 4
    EP_EXPERTS = 5
    EP_DP = 6
    SP_SEQ = 7
    CP_SEQ = 8
    VPP_SCHEDULE = 9
    QUANT_FULL_TRAINING = 10
    OFFLOAD_ZERO = 11
    TOP_K = 12
    NO_DIMS = 13
    ZERO_ONE_REPLICA = 14  # no longer produced: on one replica zero_stage shards nothing and runs as stage 0
    TOO_LARGE = 15
    SEQ_POSITIONS = 16
    DENSE_LAYERS = 17
    NO_FP8 = 18  # the GPU's, not the layout's: levels.gpu_terms


INVALID_REASONS = {
    Invalid.OK: "",
    Invalid.TP_HEADS: "tp does not divide n_heads",
    Invalid.TP_KV_HEADS: "tp does not divide n_kv_heads",
    Invalid.PP_LAYERS: "the layers do not fill every pipeline stage (pp * vpp stages, pp_first_layers, pp_last_layers)",
    Invalid.GPUS_LAYOUT: "n_gpus is not dp * tp * pp * cp",
    Invalid.EP_EXPERTS: "ep does not divide n_experts",
    Invalid.EP_DP: "ep does not divide dp * cp",
    Invalid.SP_SEQ: "sp needs tp to divide seq_len",
    Invalid.CP_SEQ: "cp needs 2 * cp to divide seq_len (load-balanced ring attention)",
    Invalid.VPP_SCHEDULE: "vpp > 1 needs pp_schedule = interleaved and pp > 1",
    Invalid.QUANT_FULL_TRAINING: "base_quant needs lora_rank > 0 or optimizer none (quantized weights cannot be trained)",
    Invalid.OFFLOAD_ZERO: "offload needs zero_stage >= 1 (optimizer_params needs zero_stage 3)",
    Invalid.TOP_K: "top_k exceeds n_experts",
    Invalid.NO_DIMS: "model has n_params only: the peak needs the dims (n_layers, d_model, n_heads, vocab)",
    Invalid.ZERO_ONE_REPLICA: "zero_stage > 0 with one data-parallel replica shards nothing: it is zero_stage 0",
    Invalid.TOO_LARGE: "its bytes exceed 2^62 (beyond any GPU, and beyond what a 64-bit count can hold)",
    Invalid.SEQ_POSITIONS: "seq_len exceeds the model's learned positions (n_positions)",
    Invalid.DENSE_LAYERS: "first_dense_layers exceeds n_layers",
    Invalid.NO_FP8: "precision fp8 needs FP8 tensor cores (Ada, Hopper, Blackwell, MI300 and later): this GPU has none",
}

# The CONFIG.md strings of each categorical column, in code order.
CHOICES = {
    "precision": Precision,
    "optimizer": Optimizer,
    "framework": Framework,
    "checkpointing": Ckpt,
    "attention": Attn,
    "lora_targets": LoraTargets,
    "base_quant": Quant,
    "offload": Offload,
    "pp_schedule": PPSchedule,
    "optimizer_impl": OptimizerImpl,
    "loss_impl": LossImpl,
    "zero_grad": ZeroGrad,
    "grad_sync": GradSync,
    "save_state_dict": SaveStateDict,
    "fsdp_groups": FsdpGroups,
    "ffn_type": FFN,
    "act_fn": ActFn,
    "norm_type": Norm,
    "linear_bias": Bias,
    "peak_phase": Phase,
    "bottleneck": Component,
}

def name_of(member: IntEnum) -> str:
    """The CONFIG.md spelling of a code: Precision.AMP_BF16 -> 'amp_bf16', PPSchedule.ONE_F_ONE_B -> '1f1b'."""
    return "1f1b" if member is PPSchedule.ONE_F_ONE_B else member.name.lower()


def names(enum: type[IntEnum]) -> list[str]:
    """Every CONFIG.md spelling of an enum, in code order."""
    return [name_of(m) for m in enum]
