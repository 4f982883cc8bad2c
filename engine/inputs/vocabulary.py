"""The configuration vocabulary of CONFIG.md: every input, and the one encoder between its spellings.

Every input has a kind, a default, bounds and a help line (engine/inputs/field.py). A configuration is a numpy
record of dtype `RECORD` (int64 words; float64 for the float inputs; categorical values are the integer codes
of engine/inputs/codes.py), so a formula reads `c.seq_len`, `c.tp` or `c.capacity_bytes` alike, jitted or not.
What users write and read moves through the functions at the end of this module, and nowhere else:

    parse(name, raw)          text, a CSV cell or a TOML value -> the record's value (code, int, 0/1, float)
    spell(name, value)        the record's value -> what users read (the CONFIG.md string, int, bool, float)
    arrow_column(name, vals)  record values -> the Parquet column (categorical ones dictionary-encoded)
    sql_literal(name, value)  a value -> a DuckDB literal of the column's type
"""

import difflib
import math
import re

import numpy as np
import pyarrow as pa

from engine.errors import UserError
from engine.inputs import codes
from engine.inputs.codes import IntEnum, name_of, names
from engine.inputs.field import Field
from engine.inputs.model_fields import MODEL_FIELDS

WORKLOAD_FIELDS = [
    Field("seq_len", "int", 2048, "tokens per sample", low=1, high=2**31),
    Field("micro_batch", "int", 1, "samples per GPU per forward pass", low=1, high=2**20),
    Field("grad_accum", "int", 1, "micro-batches per optimizer step (with pp: per pipeline flush)", low=1, high=2**20),
    Field("eval_micro_batch", "int", 0, "samples per GPU per evaluation forward, run between optimizer steps over seq_len tokens each (the HF Trainer's per_device_eval_batch_size, 8 by default, whenever eval_strategy is set); 0: no evaluation", low=0, high=2**20),
]

METHOD_FIELDS = [
    Field("precision", codes.Precision, codes.Precision.AMP_BF16, "numerics"),
    Field("optimizer", codes.Optimizer, codes.Optimizer.ADAMW, "optimizer"),
    Field("framework", codes.Framework, codes.Framework.PYTORCH, "whose buffer conventions apply"),
    Field("checkpointing", codes.Ckpt, codes.Ckpt.NONE, "activation recomputation"),
    Field("dropout", "float", 0.0, "dropout probability in the model", low=0.0, high=0.99),
    Field("attention", codes.Attn, codes.Attn.FLASH, "whether the s^2 scores are kept"),
    Field("lora_rank", "int", 0, "0 = full training; > 0 = LoRA adapters of that rank", low=0, high=2**20),
    Field("lora_targets", codes.LoraTargets, codes.LoraTargets.ALL_LINEAR, "adapted linear layers"),
    Field("base_quant", codes.Quant, codes.Quant.NONE, "frozen base weights quantized (nf4: with double quantization, 4.127 bits; nf4_nodq: without, 4.5 bits)"),
    Field("lora_dropout", "float", 0.0, "dropout on each LoRA adapter's input (peft and LitGPT lora_dropout): a 1-byte mask and a dropped copy per adapter", low=0.0, high=0.99),
    Field("lora_dtype", codes.LoraDtype, codes.LoraDtype.FP32, "with precision bf16 or fp16 (a pure 16-bit base): the LoRA adapters' dtype. fp32: the adapters, their gradients and optimizer states in fp32, each adapter's input cast to fp32 (peft since 0.11, get_peft_model's autocast_adapter_dtype=True, peft #1706); compute: the adapters in the base's 16-bit dtype, no cast (torchtune's LoRALinear, LitGPT's bf16-true, peft before 0.11 and autocast_adapter_dtype=False). Under amp_* and fp32 the adapters train as the precision says"),
    Field("offload", codes.Offload, codes.Offload.NONE, "states offloaded to host RAM"),
    Field("paged", "bool", False, "paged optimizer (bitsandbytes): states may spill to host"),
    Field("capacity_factor", "float", 1.0, "MoE expert capacity / the average load (1.0: dropless, average routing)", low=0.01, high=1024.0),
]

# CONFIG.md "Training recipe": how the framework runs the step. Defaults are plain PyTorch's.
RECIPE_FIELDS = [
    Field("optimizer_impl", codes.OptimizerImpl, codes.OptimizerImpl.FOREACH, "how torch.optim runs the step: foreach (state-sized intermediates), fused, forloop"),
    Field("optimizer_in_backward", "bool", False, "each parameter's step runs in its gradient hook; its gradient is freed at once (torchtune optimizer_in_bwd)"),
    Field("loss_impl", codes.LossImpl, codes.LossImpl.STANDARD, "standard (whole fp32 logits), chunked (torchtune), fused_linear (Liger, Cut Cross-Entropy)"),
    Field("loss_chunks", "int", 8, "token slices for loss_impl = chunked", low=1, high=2**20),
    Field("checkpoint_every", "int", 1, "with checkpointing = full: checkpoint one layer in every n (torchtitan)", low=1, high=2**20),
    Field("activation_offload", "bool", False, "saved activations move to host RAM and come back layer by layer"),
    Field("compile", "bool", False, "torch.compile over the model: fused elementwise kernels keep fewer intermediates"),
    Field("compile_loss", "bool", True, "with compile: torch.compile covers the loss and its fp32 upcast too (torchtitan's compile.components, the HF Trainer); false: the blocks only (torchtitan before 2025: loss_fn left uncompiled; torchtune's eager fp32 output layer)"),
    Field("zero_grad", codes.ZeroGrad, codes.ZeroGrad.NONE, "none: gradients freed after each step; zeros: kept allocated"),
    Field("grad_sync", codes.GradSync, codes.GradSync.EVERY, "with grad_accum > 1, when data-parallel gradients are reduced: every (each micro-batch's as its backward makes them: FSDP2's default, torchtitan, DeepSpeed) or last (only the last micro-batch's: the loop runs the others under no_sync / set_requires_gradient_sync(False), as HF accelerate's accumulate() and so the Trainer do unless sync_each_batch; under FSDP every rank then accumulates its layers' unsharded gradients until the last backward reduces them; DDP's gradients are whole either way)"),
    Field("save_state_dict", codes.SaveStateDict, codes.SaveStateDict.SHARDED, "how the run saves its checkpoints between steps: sharded (each rank writes its own shards, nothing gathered on the GPU: torch.distributed.checkpoint as torchtitan saves, accelerate's FSDP2 default SHARDED_STATE_DICT, DeepSpeed's save_checkpoint) or full (the whole model gathered tensor by tensor to rank 0's host memory: torchtune's distributed recipes, FULL_STATE_DICT, DeepSpeed's stage3_gather_16bit_weights_on_model_save; a quantized base dequantized weight by weight: torchtune's QLoRA); the largest tensor gathered is on every rank at once (engine/model/save.py)"),
    Field("fsdp_groups", codes.FsdpGroups, codes.FsdpGroups.ROOT, "FSDP's parameter groups: root (fully_shard on each decoder block, then the model: the embedding, final norm and head are one root group, gathered from the end of forward through backward; torchtitan before 83e6941, 2025-07-28, accelerate's transformer auto-wrap); split (the embedding, and the final norm with the head, are groups of their own: the embedding resharded after forward, the head group kept gathered; torchtitan since 83e6941)"),
    Field("allocator", codes.Allocator, codes.Allocator.CACHING, "PyTorch's CUDA caching allocator as PYTORCH_CUDA_ALLOC_CONF sets it: caching (the default: segments of fixed size, cudaMalloc'd per request class; a freed segment is cut up by smaller blocks and a request it no longer fits makes a new one); expandable (expandable_segments:True: one virtual segment per stream, mapped page by page as it grows, so a request past its free tail maps only the difference; torchtitan's run_train.sh since a5e57e4, 2024-10-22)"),
    Field("reduce_bucket_size", "int", 0, "DeepSpeed ZeRO's reduce bucket in gradient elements, allocated whole however few the gradients (0: DeepSpeed's default, 5e8; the HF Trainer's \"auto\" sets d_model squared)", low=0, high=2**40),
    Field("overlap_comm", "bool", False, "DeepSpeed ZeRO-1/2 overlap_comm: a second reduce bucket beside the first (ZeRO-3 keeps one either way)"),
    Field("loss_parallel", "bool", False, "with tp > 1: the loss runs on vocabulary shards (Megatron always; torchtitan); false: logits gathered (HF tp_plan)"),
    Field("quant_saves_input", "bool", False, "bitsandbytes before 0.43.2: each quantized linear keeps its input on its autograd node (MatMul4Bit ctx.tensors = (A, B), bitsandbytes #1270) until the graph is freed"),
    Field("quant_lm_head", "bool", False, "with a quantized base (base_quant): the LM head quantized too, stored like the base's linears and dequantized for each of its matmuls (Lightning's BitsandbytesPrecision converts every nn.Linear, so LitGPT's --quantize bnb.*; transformers' bitsandbytes integration keeps the head in 16 bits). A head tied to the embedding stays in 16 bits"),
    Field("outputs_held", "bool", False, "the training loop keeps the last micro-step's logits (and their autograd graph) until the next forward returns (LitGPT's finetune loops)"),
    Field("outputs_fp32", "bool", False, "the training loop's wrapper returns the model's floating outputs cast to fp32, so the loss, and a loop holding them (outputs_held), see fp32 logits where the model made 16-bit ones (Lightning Fabric's bf16-true, 16-true and bitsandbytes precisions: convert_output to the default dtype; LitGPT's finetune scripts). With loss_impl = standard or chunked, not compiled; ignored where the framework's fused kernels make the loss (megatron, deepspeed)"),
    Field("shifted_logits", "bool", False, "transformers before 4.46: the causal LM upcasts its logits to fp32 in its forward and returns them so, and the loss copies the shifted logits (logits[..., :-1, :].contiguous()) before the cross-entropy; from 4.46 the model returns 16-bit logits (loss_utils.ForCausalLMLoss upcasts them), and since transformers #36607 (2025-03) the labels are shifted instead. With loss_impl = standard (ignored otherwise)"),
    Field("softmax_saves_input", "bool", False, "PyTorch before 1.11: softmax and log_softmax keep their input on their autograd node as well as their output (derivatives.yaml passed `self` to _softmax_backward_data; pytorch/pytorch #64000; transformers' pytorch_utils.softmax_backward_data, is_torch_less_than_1_11), so eager attention keeps its scores and the standard loss its fp32 logits until their backward. Ops that came with PyTorch 2 (flash and SDPA attention, torch.compile, chunked and fused losses) are as they are")
]

LAYOUT_FIELDS = [
    Field("n_gpus", "int", 0, "total GPUs (0 = dp * tp * pp * cp)", low=0, high=2**24),
    Field("tp", "int", 1, "tensor parallel", low=1, high=2**12),
    Field("pp", "int", 1, "pipeline parallel", low=1, high=2**12),
    Field("cp", "int", 1, "context parallel", low=1, high=2**12),
    Field("ep", "int", 1, "expert parallel", low=1, high=2**12),
    Field("dp", "int", 0, "data parallel (0 = n_gpus / (tp * pp * cp))", low=0, high=2**24),
    Field("sp", "bool", False, "sequence parallel (with tp)"),
    Field("zero_stage", "int", 0, "ZeRO stage 0-3 (FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2)", low=0, high=3),
    Field("pp_schedule", codes.PPSchedule, codes.PPSchedule.ONE_F_ONE_B, "pipeline schedule"),
    Field("vpp", "int", 1, "virtual stages per pipeline rank (interleaved)", low=1, high=2**10),
    Field("pp_first_layers", "int", 0, "layers on the first pipeline stage (0 = split as evenly as possible)", low=0, high=2**31),
    Field("pp_last_layers", "int", 0, "layers on the last pipeline stage (0 = split as evenly as possible)", low=0, high=2**31),
    Field("headroom", "float", 0.10, "fraction of GPU memory kept free when deciding fits", low=0.0, high=0.99),
]

# The model and GPU are named by catalog keys; the record carries their row ids and attributes.
NAME_FIELDS = [
    Field("model", "str", "llama-3.1-8b", "catalog key or path to a Hugging Face config.json"),
    Field("gpu", "str", "h100-sxm-80gb", "GPU catalog key"),
]

# The GPU's attributes: from the catalog (data/gpus.toml, data/overheads.toml, data/architectures.toml) unless a case
# gives them.
GPU_FIELDS = [
    Field("capacity_bytes", "int", 0, "the GPU's memory in bytes (0 = the catalog's)", low=0, high=2**50),
    Field("cuda_context_bytes", "int", 0, "CUDA context on the GPU (0 = by architecture, data/overheads.toml)", low=0, high=2**50),
    Field("cublas_workspace_bytes", "int", 0, "cuBLAS workspace (0 = by architecture)", low=0, high=2**50),
    Field("nccl_buffer_bytes", "int", 0, "NCCL device memory per communicator (0 = derived from the layout, the framework's process groups and the GPU's link: data/golden/OVERHEADS.md)", low=0, high=2**50),
    Field("nccl_channels", "int", 0, "NCCL ring channels of a collective within a node (0 = by architecture and link, data/overheads.toml)", low=0, high=64),
    Field("nccl_p2p_channels", "int", 0, "NCCL channels per peer of send/recv and all-to-all within a node (0 = by architecture and link)", low=0, high=64),
    Field("nccl_connection_bytes", "int", 0, "device bytes of one NCCL channel's connection to one peer, send and receive side (12 MiB with P2P; 0 through host memory)", low=0, high=2**40),
    Field("nccl_nvls_bytes", "int", 0, "NVLink SHARP buffer per local rank of a communicator (32 MiB on Hopper NVLink switches; 0 = no NVLS, NCCL_NVLS_ENABLE=0)", low=0, high=2**40),
    Field("host_ram_bytes", "int", 0, "host RAM per GPU of a full node, for offload (0 = the catalog node's share); a job on fewer GPUs than a node shares the node's RAM among them", low=0, high=2**56),
    # For time and cost (engine/model/time.py): 0 = the catalog's.
    Field("bf16_tflops", "float", 0.0, "dense bf16 tensor-core peak, TFLOP/s (fp16 where the GPU has no bf16)", low=0.0, high=1e6),
    Field("fp8_tflops", "float", 0.0, "dense fp8 tensor-core peak, TFLOP/s (0: none known; fp8 then runs at the 16-bit rate where fp8_tensor_cores says it runs at all)", low=0.0, high=1e6),
    Field("matmul_tflops_achievable", "float", 0.0, "measured achievable bf16 matmul TFLOP/s (0: 80% of the peak)", low=0.0, high=1e6),
    Field("intra_node_bytes_per_s", "float", 0.0, "per-GPU collective bandwidth within a node (NVLink, xGMI, PCIe)", low=0.0, high=1e15),
    Field("inter_node_bytes_per_s", "float", 0.0, "per-GPU network bandwidth between nodes", low=0.0, high=1e15),
    Field("gpus_per_node", "int", 0, "GPUs per node (0 = the catalog's)", low=0, high=2**16),
    Field("usd_per_hour", "float", 0.0, "price per GPU-hour (0 = the catalog's; none: no cost)", low=0.0, high=1e6),
    Field("bandwidth_bytes_per_s", "float", 0.0, "HBM bandwidth, bytes/s (0 = the catalog's)", low=0.0, high=1e15),
    Field("fp8_matmul_tflops_achievable", "float", 0.0, "measured achievable fp8 matmul TFLOP/s (0: the bf16 one x fp8/bf16 peak)", low=0.0, high=1e6),
    Field("nvlink_domain_gpus", "int", 0, "GPUs that reach each other over the intra-node link (0 = gpus_per_node; an NVL72 rack: 72)", low=0, high=2**20),
    Field("fp8_tensor_cores", "bool", False, "the GPU's tensor cores multiply in FP8, which precision = fp8 needs (by architecture, data/architectures.toml)"),
    Field("bf16_tensor_cores", "bool", True, "the GPU's tensor cores multiply in BF16; without them (Volta, Turing) bf16 and amp_bf16 matmuls run emulated, about a tenth as fast (by architecture, data/architectures.toml)"),
]
GPU_ATTRIBUTES = [f.name for f in GPU_FIELDS]

# A training-recipe preset sets several inputs at once (data/recipes.toml); the record carries what it set.
PRESET_FIELDS = [
    Field("recipe", "str", "", "a preset of the inputs a project's recipe sets (torchtitan, torchtune-full, ...: "
          "data/recipes.toml); inputs given explicitly win"),
]

INPUT_FIELDS = (NAME_FIELDS + MODEL_FIELDS + WORKLOAD_FIELDS + METHOD_FIELDS + PRESET_FIELDS + RECIPE_FIELDS
                + LAYOUT_FIELDS + GPU_FIELDS)
INPUTS = {f.name: f for f in INPUT_FIELDS}
RECORD_FIELDS = [f for f in INPUT_FIELDS if f.kind != "str"]  # names (model, gpu, recipe) resolve to these
RECORD = np.dtype([(f.name, np.float64 if f.kind == "float" else np.int64) for f in RECORD_FIELDS])


def empty_records(n: int) -> np.recarray:
    """n records holding every input's default (model and GPU attributes zero)."""
    rec = np.zeros(n, dtype=RECORD).view(np.recarray)
    for f in RECORD_FIELDS:
        rec[f.name] = f.default
    return rec


# ---------------------------------------------------------------------------------------------------- encoding


def is_choice(field: Field) -> bool:
    return isinstance(field.kind, type) and issubclass(field.kind, IntEnum)


def check_columns(columns, extra: tuple[str, ...] = ()) -> None:
    """Unknown column names (neither inputs nor `extra`) are an error that names them and lists the nearest accepted
    ones."""
    accepted = list(INPUTS) + list(extra)
    for col in columns:
        if col not in accepted:
            near = difflib.get_close_matches(col, accepted, n=3, cutoff=0.5)
            hint = f" — did you mean: {', '.join(near)}?" if near else ""
            raise UserError(f"unknown column '{col}'{hint} (accepted: {', '.join(accepted)})")


def is_empty(raw) -> bool:
    """An empty cell means the default (CONFIG.md)."""
    return raw is None or (isinstance(raw, str) and raw.strip() == "") or (isinstance(raw, float) and math.isnan(raw))


def parse(name: str, raw):
    """One input value from text, a CSV cell or a TOML value to its record value.

    Examples
    --------
    >>> parse("precision", "AMP_BF16") == codes.Precision.AMP_BF16, parse("sp", "true"), parse("seq_len", "4096")
    (True, 1, 4096)
    """
    field = INPUTS[name]
    if is_choice(field):
        return _parse_choice(name, field.kind, raw)
    if field.kind == "bool":
        return _parse_bool(name, raw)
    if field.kind == "str":
        return str(raw).strip()
    value = _parse_number(name, raw, int if field.kind == "int" else float)
    if field.low is not None and value < field.low:
        raise UserError(f"{name} must be at least {field.low:g}, got {shown(raw)}")
    if field.high is not None and value > field.high:
        raise UserError(f"{name} must be at most {field.high:g}, got {shown(raw)}")
    return value


def shown(raw) -> str:
    """A value as an error message quotes it: a long one (a 400-digit number) by its start and its length."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 64:
        return f"an integer of about {int(raw.bit_length() * math.log10(2)) + 1} digits"  # str() stops at 4,300
    text = repr(raw)
    return text if len(text) <= 60 else f"{text[:24]}... ({len(text)} characters)"


def _parse_choice(name: str, enum: type[IntEnum], raw) -> int:
    text = str(raw).strip().lower()
    spelled = {name_of(m): m for m in enum}
    if text in spelled:
        return int(spelled[text])
    raise UserError(f"unknown {name} '{raw}' (accepted: {', '.join(names(enum))})")


def _parse_bool(name: str, raw) -> int:
    if isinstance(raw, (bool, np.bool_)):
        return int(raw)
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "1.0"):
        return 1
    if text in ("false", "0", "no", "0.0"):
        return 0
    raise UserError(f"{name} must be true or false, got {raw!r}")


_INTEGER = re.compile(r"\s*[+-]?\d+\s*")


def _parse_number(name: str, raw, kind):
    """A number from text or a TOML/JSON/CSV value; integers of any size exactly (the range check follows)."""
    if isinstance(raw, (bool, np.bool_)):
        raise UserError(f"{name} must be a number, got {raw!r}")
    if isinstance(raw, (int, np.integer)) or (isinstance(raw, str) and _INTEGER.fullmatch(raw)):
        try:
            value = int(raw)
            return value if kind is int else float(value)
        except (ValueError, OverflowError):  # more digits than Python converts (4,300), or than a float holds
            raise UserError(f"{name} is out of range, got {shown(raw)}") from None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number, got {shown(raw)}") from None
    if not math.isfinite(value):
        raise UserError(f"{name} must be a finite number, got {shown(raw)}")
    if kind is int:
        if value != int(value):
            raise UserError(f"{name} must be an integer, got {shown(raw)}")
        return int(value)
    return value


def spell(name: str, value):
    """The record's value as users read it: the CONFIG.md string of a code, a bool, an int or a float.

    Examples
    --------
    >>> spell("pp_schedule", 0), spell("sp", 1), spell("seq_len", 4096)
    ('1f1b', True, 4096)
    """
    field = INPUTS[name]
    if is_choice(field):
        return name_of(field.kind(int(value)))
    if field.kind == "bool":
        return bool(value)
    if field.kind == "float":
        return float(value)
    if field.kind == "int":
        return int(value)
    return value


def arrow_column(name: str, values: np.ndarray) -> pa.Array:
    """Record values of one input as its Parquet column: categorical ones as dictionary-encoded strings."""
    field = INPUTS[name]
    if is_choice(field):
        return pa.DictionaryArray.from_arrays(pa.array(values.astype(np.int32)), pa.array(names(field.kind)))
    if field.kind == "bool":
        return pa.array(values.astype(bool))
    return pa.array(values)


def sql_literal(name: str, value=None) -> str:
    """A DuckDB literal of the input's column type holding `value` (default: the input's default)."""
    field = INPUTS[name]
    value = field.default if value is None else value
    if is_choice(field):
        return f"'{spell(name, value)}'"
    if field.kind == "bool":
        return "TRUE" if value else "FALSE"
    if field.kind == "float":
        return f"{float(value)}::DOUBLE"
    if field.kind == "str":
        return "'" + str(value).replace("'", "''") + "'"
    return f"{int(value)}::BIGINT"
