"""OUTPUTS: every output column of CONFIG.md, in its order, and the level that computes it (levels.py).

Each column is one field of RankColumns, StepColumns, GpuColumns, DeviceColumns or Times; nothing here computes a
value.
"""

from engine.model.levels import NULL, DeviceColumns, GpuColumns, RankColumns, StepColumns  # noqa: F401
from engine.model.time import Times

RANK_COLUMNS = RankColumns._fields
STEP_COLUMNS = StepColumns._fields
GPU_COLUMNS = GpuColumns._fields
DEVICE_COLUMNS = DeviceColumns._fields
TIME_COLUMNS = Times._fields  # float64; NaN (NULL) where unknown
LEVEL_OF = ({name: "rank" for name in RANK_COLUMNS} | {name: "step" for name in STEP_COLUMNS}
            | {name: "gpu" for name in GPU_COLUMNS} | {name: "device" for name in DEVICE_COLUMNS + TIME_COLUMNS})

OUTPUTS = [
    "weight_bytes",
    "grad_bytes",
    "optimizer_bytes",
    "activation_bytes",
    "temp_bytes",
    "allocated_peak_bytes",
    "reserved_peak_bytes",
    "overhead_bytes",
    "device_peak_bytes",
    "peak_phase",
    "capacity_bytes",
    "fits",
    "bottleneck",
    "host_bytes",
    "valid",
    "invalid_reason",
    "step_time_s",
    "tokens_per_gpu_s",
    "mfu",
    "cost_per_mtok",
    # Beyond CONFIG.md's first list: the states live at the peak (so that the components add up to
    # allocated_peak_bytes), the allocator's slack and the usable bytes behind `fits`.
    "peak_grad_bytes",
    "peak_optimizer_bytes",
    "allocator_slack_bytes",
    "usable_bytes",
]
assert sorted(OUTPUTS) == sorted(LEVEL_OF), "every level column is an output, once"
INT_OUTPUTS = [n for n in OUTPUTS if n not in TIME_COLUMNS]  # int64 columns of the kernels
BYTES_COLUMNS = [n for n in OUTPUTS if n.endswith("_bytes")]
CODE_COLUMNS = {"peak_phase", "bottleneck", "invalid_reason"}
BOOL_COLUMNS = {"fits", "valid"}
