"""Optimizers and framework conventions as the formulas read them: arrays indexed by their codes.

The numbers live in data/optimizers.toml and data/frameworks.toml, each with its source; this module only
checks them and lays them out for numba (module-level arrays are compile-time constants of the kernels, and
engine/__init__.py keys the kernel cache on these files). Indexing: OPTIMIZER_STATES[c.optimizer],
STEP_STATE_SIZED[c.optimizer, c.optimizer_impl], FRAMEWORK_AMP_WEIGHT_BYTES[c.framework], ...
"""

import tomllib

import numpy as np

from engine import DATA_DIR
from engine.errors import UserError
from engine.inputs.codes import Framework, Optimizer, OptimizerImpl, name_of

OPTIMIZER_KEYS = {"source", "states", "state_bits", "block", "factored", "trains", "step"}
STEP_KEYS = {"state_sized", "largest", "largest_fp32", "upcasts_fp32"}
FRAMEWORK_KEYS = {"source", "amp_weight_bytes", "amp_grad_bytes", "amp_master_bytes", "fused_kernels",
                  "grads_kept_from_stage", "autocast_cache", "ddp_bucket_copy", "reduce_bucket", "torch_optimizer", "step_grad_fp32",
                  "tied_grad_copies", "fp8_torchao", "fsdp_gathers",
                  "dtensor_tp", "torch_pipelining", "quantized_load_whole",
                  "quant_state_sharded"}


def load(file: str, known: set[str]) -> dict[str, dict]:
    """A conventions file, every table checked: a source, known keys only, non-negative numbers."""
    with open(DATA_DIR / file, "rb") as f:
        tables = tomllib.load(f)
    for key, table in tables.items():
        unknown = set(table) - known
        if unknown or "source" not in table:
            raise UserError(f"{file} [{key}]: needs a source; unknown keys {sorted(unknown)} (known: {sorted(known)})")
    return tables


OPTIMIZERS = load("optimizers.toml", OPTIMIZER_KEYS)
FRAMEWORKS = load("frameworks.toml", FRAMEWORK_KEYS)


def column(tables: dict, key: str, default, dtype) -> np.ndarray:
    return np.array([t.get(key, default) for t in tables.values()], dtype=dtype)


def step_buffers(key: str) -> np.ndarray:
    """(optimizer, optimizer_impl) -> count of `key` buffers the step allocates."""
    out = np.zeros((len(Optimizer), len(OptimizerImpl)), dtype=np.int64)
    for o, table in enumerate(OPTIMIZERS.values()):
        for impl in OptimizerImpl:
            out[o, impl] = table.get("step", {}).get(name_of(impl), {}).get(key, 0)
    return out


OPTIMIZER_TRAINS = column(OPTIMIZERS, "trains", True, np.bool_)
OPTIMIZER_STATES = column(OPTIMIZERS, "states", 0, np.int64)
OPTIMIZER_STATE_BITS = column(OPTIMIZERS, "state_bits", 0, np.int64)
OPTIMIZER_BLOCK = column(OPTIMIZERS, "block", 0, np.int64)
OPTIMIZER_FACTORED = column(OPTIMIZERS, "factored", 0, np.int64)
STEP_STATE_SIZED = step_buffers("state_sized")
STEP_LARGEST = step_buffers("largest")
STEP_LARGEST_FP32 = step_buffers("largest_fp32")
STEP_UPCASTS_FP32 = step_buffers("upcasts_fp32")

FRAMEWORK_AMP_WEIGHT_BYTES = column(FRAMEWORKS, "amp_weight_bytes", 4, np.int64)
FRAMEWORK_AMP_GRAD_BYTES = column(FRAMEWORKS, "amp_grad_bytes", 4, np.int64)
FRAMEWORK_AMP_MASTER_BYTES = column(FRAMEWORKS, "amp_master_bytes", 0, np.int64)
FRAMEWORK_FUSED_KERNELS = column(FRAMEWORKS, "fused_kernels", False, np.bool_)
FRAMEWORK_GRADS_KEPT_FROM_STAGE = column(FRAMEWORKS, "grads_kept_from_stage", 4, np.int64)
FRAMEWORK_AUTOCAST_CACHE = column(FRAMEWORKS, "autocast_cache", False, np.bool_)
FRAMEWORK_DDP_BUCKET_COPY = column(FRAMEWORKS, "ddp_bucket_copy", False, np.bool_)
FRAMEWORK_REDUCE_BUCKET = column(FRAMEWORKS, "reduce_bucket", 0, np.int64)
FRAMEWORK_TORCH_OPTIMIZER = column(FRAMEWORKS, "torch_optimizer", True, np.bool_)
FRAMEWORK_STEP_GRAD_FP32 = column(FRAMEWORKS, "step_grad_fp32", 0, np.int64)
FRAMEWORK_TIED_GRAD_COPIES = column(FRAMEWORKS, "tied_grad_copies", 2, np.int64)
FRAMEWORK_FP8_TORCHAO = column(FRAMEWORKS, "fp8_torchao", False, np.bool_)
FRAMEWORK_FSDP_GATHERS = column(FRAMEWORKS, "fsdp_gathers", False, np.bool_)
FRAMEWORK_DTENSOR_TP = column(FRAMEWORKS, "dtensor_tp", False, np.bool_)
FRAMEWORK_TORCH_PIPELINING = column(FRAMEWORKS, "torch_pipelining", False, np.bool_)
FRAMEWORK_QUANTIZED_LOAD_WHOLE = column(FRAMEWORKS, "quantized_load_whole", False, np.bool_)
FRAMEWORK_QUANT_STATE_SHARDED = column(FRAMEWORKS, "quant_state_sharded", False, np.bool_)

assert [name_of(m) for m in Optimizer] == list(OPTIMIZERS) and [name_of(m) for m in Framework] == list(FRAMEWORKS)
