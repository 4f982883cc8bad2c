"""Record fields and kernel outputs as Arrow columns with the CONFIG.md names and spellings.

Categorical codes become dictionary-encoded strings (the dictionary is the enum's spellings, so encoding
costs nothing), booleans become bool, bytes stay int64, and the kernel's NULL (-1) becomes a null.
Shared by `memsim estimate` and the sweep store so both write the same schema.
"""

import numpy as np
import pyarrow as pa

from engine.inputs.codes import CHOICES, INVALID_REASONS, IntEnum, Invalid, names
from engine.inputs.vocabulary import INPUTS
from engine.model.outputs import BOOL_COLUMNS, CODE_COLUMNS, NULL, OUTPUTS

_REASON_STRINGS = [INVALID_REASONS[m] for m in Invalid]


def categorical(codes: np.ndarray, spellings: list[str], nulls: np.ndarray | None = None) -> pa.Array:
    indices = pa.array(codes.astype(np.int32), mask=nulls)
    return pa.DictionaryArray.from_arrays(indices, pa.array(spellings, pa.string()))


def input_column(name: str, values: np.ndarray) -> pa.Array:
    """One input field as CONFIG.md spells it."""
    kind = INPUTS[name].kind if name in INPUTS else "int"
    if isinstance(kind, type) and issubclass(kind, IntEnum):
        return categorical(values, names(kind))
    if kind == "bool":
        return pa.array(values.astype(bool))
    return pa.array(values)


def output_column(name: str, values: np.ndarray) -> pa.Array:
    """One kernel output row as its CONFIG.md column."""
    nulls = values == NULL
    mask = nulls if nulls.any() else None
    if name == "invalid_reason":  # NULL on rows that can run
        valid_rows = values == 0
        return categorical(values, _REASON_STRINGS, valid_rows if valid_rows.any() else None)
    if name in CODE_COLUMNS:
        return categorical(np.where(nulls, 0, values), names(CHOICES[name]), mask)
    if name in BOOL_COLUMNS:
        return pa.array(values.astype(bool), mask=mask)
    return pa.array(values, mask=mask)


# `[output] compact = true`: the columns feasibility questions need, for sweeps too large to keep every
# component (about half the bytes and twice the rows per second; breakdown-style queries need full rows).
COMPACT_OUTPUTS = ["device_peak_bytes", "peak_phase", "capacity_bytes", "fits", "bottleneck", "valid", "invalid_reason"]


def output_columns(out: np.ndarray, names: list[str] = OUTPUTS) -> dict[str, pa.Array]:
    return {name: output_column(name, out[OUTPUTS.index(name)]) for name in names}
