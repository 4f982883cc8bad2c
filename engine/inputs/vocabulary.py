"""The configuration vocabulary of CONFIG.md as one record type shared by the formulas and the kernel.

Every input column has a kind and a default. A configuration is evaluated as a numpy record of dtype
`RECORD` (int64 everywhere but two floats); categorical values are the integer codes of engine.inputs.codes.
Model dims, the parallel layout and the GPU's attributes all live in that one record, so a formula reads
`c.seq_len`, `c.tp` or `c.capacity_bytes` alike, jitted or not.
"""

import numpy as np

from engine.inputs import codes
from engine.inputs.field import Field
from engine.inputs.model_fields import MODEL_FIELDS

WORKLOAD_FIELDS = [
    Field("seq_len", "int", 2048, "tokens per sample"),
    Field("micro_batch", "int", 1, "samples per GPU per forward pass"),
    Field("grad_accum", "int", 1, "micro-batches per optimizer step (with pp: per pipeline flush)"),
]

METHOD_FIELDS = [
    Field("precision", codes.Precision, codes.Precision.AMP_BF16, "numerics"),
    Field("optimizer", codes.Optimizer, codes.Optimizer.ADAMW, "optimizer"),
    Field("framework", codes.Framework, codes.Framework.PYTORCH, "whose buffer conventions apply"),
    Field("checkpointing", codes.Ckpt, codes.Ckpt.NONE, "activation recomputation"),
    Field("dropout", "float", 0.0, "dropout probability in the model"),
    Field("attention", codes.Attn, codes.Attn.FLASH, "whether the s^2 scores are kept"),
    Field("lora_rank", "int", 0, "0 = full training; > 0 = LoRA adapters of that rank"),
    Field("lora_targets", codes.LoraTargets, codes.LoraTargets.ALL_LINEAR, "adapted linear layers"),
    Field("base_quant", codes.Quant, codes.Quant.NONE, "frozen base weights quantized"),
    Field("offload", codes.Offload, codes.Offload.NONE, "states offloaded to host RAM"),
    Field("paged", "bool", False, "paged optimizer (bitsandbytes): states may spill to host"),
    Field("capacity_factor", "float", 1.0, "MoE expert capacity / the average load (1.0: dropless, average routing)"),
]

# CONFIG.md "Training recipe": how the framework runs the step. Defaults are plain PyTorch's.
RECIPE_FIELDS = [
    Field("optimizer_impl", codes.OptimizerImpl, codes.OptimizerImpl.FOREACH, "how torch.optim runs the step: foreach (state-sized intermediates), fused, forloop"),
    Field("optimizer_in_backward", "bool", False, "each parameter's step runs in its gradient hook; its gradient is freed at once (torchtune optimizer_in_bwd)"),
    Field("loss_impl", codes.LossImpl, codes.LossImpl.STANDARD, "standard (whole fp32 logits), chunked (torchtune), fused_linear (Liger, Cut Cross-Entropy)"),
    Field("loss_chunks", "int", 8, "token slices for loss_impl = chunked"),
    Field("checkpoint_every", "int", 1, "with checkpointing = full: checkpoint one layer in every n (torchtitan)"),
    Field("activation_offload", "bool", False, "saved activations move to host RAM and come back layer by layer"),
    Field("compile", "bool", False, "torch.compile over the model: fused elementwise kernels keep fewer intermediates"),
    Field("zero_grad", codes.ZeroGrad, codes.ZeroGrad.NONE, "none: gradients freed after each step; zeros: kept allocated"),
    Field("loss_parallel", "bool", False, "with tp > 1: the loss runs on vocabulary shards (Megatron always; torchtitan); false: logits gathered (HF tp_plan)"),
]

LAYOUT_FIELDS = [
    Field("n_gpus", "int", 0, "total GPUs (0 = dp * tp * pp * cp)"),
    Field("tp", "int", 1, "tensor parallel"),
    Field("pp", "int", 1, "pipeline parallel"),
    Field("cp", "int", 1, "context parallel"),
    Field("ep", "int", 1, "expert parallel"),
    Field("dp", "int", 0, "data parallel (0 = n_gpus / (tp * pp * cp))"),
    Field("sp", "bool", False, "sequence parallel (with tp)"),
    Field("zero_stage", "int", 0, "ZeRO stage 0-3 (FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2)"),
    Field("pp_schedule", codes.PPSchedule, codes.PPSchedule.ONE_F_ONE_B, "pipeline schedule"),
    Field("vpp", "int", 1, "virtual stages per pipeline rank (interleaved)"),
    Field("pp_first_layers", "int", 0, "layers on the first pipeline stage (0 = split as evenly as possible)"),
    Field("pp_last_layers", "int", 0, "layers on the last pipeline stage (0 = split as evenly as possible)"),
    Field("headroom", "float", 0.10, "fraction of GPU memory kept free when deciding fits"),
]

# The model and GPU are named by catalog keys; the record carries their row ids and attributes.
NAME_FIELDS = [
    Field("model", "str", "llama-3.1-8b", "catalog key or path to a Hugging Face config.json"),
    Field("gpu", "str", "h100-sxm-80gb", "GPU catalog key"),
]

INPUT_FIELDS = NAME_FIELDS + MODEL_FIELDS + WORKLOAD_FIELDS + METHOD_FIELDS + RECIPE_FIELDS + LAYOUT_FIELDS
INPUTS = {f.name: f for f in INPUT_FIELDS}

# Attributes copied from the GPU catalog into each record (see data/gpus.toml, data/overheads.toml).
GPU_ATTRIBUTES = [
    "capacity_bytes",
    "cuda_context_bytes",
    "cublas_workspace_bytes",
    "nccl_buffer_bytes",
    "host_ram_bytes",
]

# Quantities derived once per configuration (engine/formulas/derived.py) and read by the later formulas,
# so that the kernel computes the parameter split and the model states once, not once per term.
DERIVED_FIELDS = [
    "rank_params",
    "rank_trainable_params",
    "rank_block_params",
    "rank_weight_bytes",
    "rank_grad_bytes",
    "rank_optimizer_bytes",
    "rank_host_bytes",
    "rank_cast_bytes",
    "rank_gather_bytes",
    "rank_reduce_bytes",
    "rank_step_bytes",
    "rank_bucket_bytes",
    "rank_stream_bytes",
    "rank_replicated_per_token",
    "rank_split_per_token",
    "rank_moe_split_per_token",
    "rank_scores_per_key",
    "rank_head_per_token",
    "rank_layout_reason",
]

_FLOATS = {"dropout", "headroom", "capacity_factor"}
RECORD_FIELDS = ["model_id", "gpu_id"] + [f.name for f in INPUT_FIELDS[2:]] + GPU_ATTRIBUTES + DERIVED_FIELDS
RECORD = np.dtype([(n, np.float64 if n in _FLOATS else np.int64) for n in RECORD_FIELDS])


def empty_records(n: int) -> np.recarray:
    """n records holding every input's default (model and GPU attributes zero)."""
    rec = np.zeros(n, dtype=RECORD).view(np.recarray)
    for f in INPUT_FIELDS[2:]:
        rec[f.name] = f.default
    return rec
