"""The output columns by level and type, as the kernels and the dataset writer index them; read from the registry
engine/inputs/outputs.py (OUTPUT_COLUMNS), which says what each one is. Nothing here computes a value."""

from engine.inputs.outputs import OUTPUTS, names_where
from engine.model.levels import NULL, DeviceColumns, GpuColumns, RankColumns, StepColumns  # noqa: F401
from engine.model.time import Times

RANK_COLUMNS = RankColumns._fields
STEP_COLUMNS = StepColumns._fields
GPU_COLUMNS = GpuColumns._fields
DEVICE_COLUMNS = DeviceColumns._fields
TIME_COLUMNS = Times._fields  # float64; NaN (NULL) where unknown
INT_OUTPUTS = [n for n in OUTPUTS if n not in TIME_COLUMNS]  # int64 columns of the kernels
CODE_COLUMNS = set(names_where(dtype="category"))
BOOL_COLUMNS = set(names_where(dtype="bool"))
