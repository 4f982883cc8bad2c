"""Kernel outputs as Arrow columns with the CONFIG.md names and spellings, for estimates and sweep chunks.

Categorical codes become dictionary-encoded strings (the dictionary is the enum's spellings, so encoding
costs nothing), booleans become bool, bytes stay int64, and the kernel's NULL (-1) becomes a null. A sweep
chunk arrives factored by level (engine/dataset/chunks.py): a rank- or step-level value is taken once per
row from its slot, axis digits come from the index by mixed radix, one level at a time.
"""

import numpy as np
import pyarrow as pa

from engine.dataset.chunks import Chunk
from engine.inputs.codes import CHOICES, INVALID_REASONS, Invalid, names
from engine.model.outputs import BOOL_COLUMNS, CODE_COLUMNS, NULL, OUTPUTS, TIME_COLUMNS, names_where

REASON_STRINGS = [INVALID_REASONS[m] for m in Invalid]
# `[output] compact = true`: the columns feasibility questions need, for sweeps too large to keep every
# component (about half the bytes; breakdown-style queries need full rows).
COMPACT_OUTPUTS = names_where(compact=True)
# Columns that may hold NULL (engine/inputs/outputs.py says which); the others are declared non-nullable in the
# Parquet schema, which spares the writer a definition level per value.
NULLABLE = set(names_where(nullable=True))


def categorical(codes: np.ndarray, spellings: list[str], nulls: np.ndarray | None = None) -> pa.Array:
    indices = pa.array(codes.astype(np.int8 if len(spellings) < 128 else np.int32), mask=nulls)
    return pa.DictionaryArray.from_arrays(indices, pa.array(spellings, pa.string()))


def output_column(name: str, values: np.ndarray) -> pa.Array:
    """One output for every row (int64 codes and bytes, NULL = -1) as its CONFIG.md column."""
    if name in TIME_COLUMNS:  # float: NaN is NULL
        nan = np.isnan(values)
        return pa.array(values, mask=nan if nan.any() else None)
    nulls = values == NULL
    mask = nulls if nulls.any() else None
    if name == "invalid_reason":  # NULL on rows that can run
        valid_rows = values == 0
        return categorical(values, REASON_STRINGS, valid_rows if valid_rows.any() else None)
    if name in CODE_COLUMNS:
        return categorical(np.where(nulls, 0, values), names(CHOICES[name]), mask)
    if name in BOOL_COLUMNS:
        return pa.array(values.astype(bool), mask=mask)
    return pa.array(values, mask=mask)


def output_columns(values: dict[str, np.ndarray], names_: list[str] = OUTPUTS) -> dict[str, pa.Array]:
    return {name: output_column(name, values[name]) for name in names_}


def digit_width(radix: int):
    return np.int8 if radix <= 127 else np.int16 if radix <= 32767 else np.int32


def axis_digits(chunk: Chunk, rows: np.ndarray | None) -> list[np.ndarray]:
    """Each axis' digit for every kept row, (index // stride) % radix, worked out once per slot of the level the
    axis belongs to (per rank slot, per step slot, per device combination) and expanded to the rows."""
    radices = chunk.grid.radices
    strides = np.r_[np.cumprod(radices[::-1])[::-1][1:], 1]  # rows per step of each axis' digit
    first_row = {
        "rank": (chunk.start // chunk.rows_per_rank + np.arange(len(chunk.rank_lengths))) * chunk.rows_per_rank,
        "step": (chunk.start // chunk.rows_per_step + np.arange(len(chunk.step_lengths))) * chunk.rows_per_step,
        "device": np.arange(chunk.rows_per_step),  # one step's rows: every device combination once
    }
    out = []
    for k, axis in enumerate(chunk.grid.axes):
        level = "step" if axis.level == "shape" else axis.level  # a shape's value holds for whole steps
        per_slot = ((first_row[level] // strides[k]) % radices[k]).astype(digit_width(radices[k]))
        if level == "device":
            out.append(per_slot[chunk.combination if rows is None else chunk.combination[rows]])
        else:
            out.append(chunk.expand(level, per_slot, rows))
    return out


def kept_rows(chunk: Chunk, keep: str) -> np.ndarray | None:
    """Row positions a sweep writes: all (None), valid ones, or valid ones that fit."""
    if keep == "all":
        return None
    mask = chunk.values("fits") == 1 if keep == "feasible" else chunk.values("valid") == 1
    return np.flatnonzero(mask)


def label_column(labels: list, digits: np.ndarray) -> pa.Array:
    """An axis column: booleans as booleans, numbers as numbers, anything else (names) dictionary-encoded in the
    axis' order (a linked input may repeat a value: its dictionary holds each value once). A number column is
    written PLAIN, where LZ4 shrinks its runs to a few hundredths of a byte a row, at 1.8-2.0 ns of the writer's CPU
    a row against 4.8-7.7 for the same values as a dictionary's indices (stop 48, one 2^20-row column written
    alone: a constant, runs of 10 and 180, and a new value every row)."""
    if isinstance(labels[0], (bool, int, float)):  # an input's labels share one Python type (vocabulary.spell)
        return pa.array(np.array(labels)[digits])
    values = list(dict.fromkeys(labels))
    if len(values) == len(labels):
        return pa.DictionaryArray.from_arrays(pa.array(digits), pa.array(labels))
    code = np.array([values.index(v) for v in labels], dtype=digits.dtype)
    return pa.DictionaryArray.from_arrays(pa.array(code[digits]), pa.array(values))


def chunk_table(chunk: Chunk, keep: str = "all", compact: bool = False) -> pa.Table:
    """One chunk as an Arrow table: index, the axes (label_column), derived dp / n_gpus, the outputs
    (all of them, or COMPACT_OUTPUTS when the spec says `[output] compact = true`, whose axes are not stored:
    the dataset's view derives them from the index: grid.index_axes)."""
    rows = kept_rows(chunk, keep)
    index = np.arange(chunk.start, chunk.start + chunk.count, dtype=np.int64)
    columns = {"index": pa.array(index if rows is None else index[rows])}
    if not compact:
        for axis, digits in zip(chunk.grid.axes, axis_digits(chunk, rows)):
            for name, labels in axis.columns:  # a linked axis ([link]) writes each input it links
                columns[name] = label_column(labels, digits)
    names_ = COMPACT_OUTPUTS if compact else OUTPUTS
    axes = set(chunk.grid.column_names)
    wanted = [n for n in ("dp", "n_gpus") if n not in axes] + names_
    values = {n: chunk.values(n, rows) for n in wanted}
    for name in ("dp", "n_gpus"):
        if name in values:
            columns[name] = pa.array(values[name])
    columns.update(output_columns(values, names_))
    schema = pa.schema([pa.field(n, a.type, nullable=n in NULLABLE) for n, a in columns.items()])
    return pa.Table.from_arrays(list(columns.values()), schema=schema)
