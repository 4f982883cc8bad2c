"""The sweep kernel: decode configurations from their index, evaluate each level where it changes, store.

No memory arithmetic here. The axes are ordered rank, step, device (engine/inputs/grid.py), so in index order
a rank-level value holds for `rows_per_rank` consecutive rows and a step-level value for `rows_per_step`: the
kernel evaluates levels.rank_terms when a rank axis moves, levels.step_terms when a step axis moves, and
levels.device_terms for every row, and stores each level once per slot of consecutive rows it holds for:

    rank_out[:, slot]    RankColumns, then dp and n_gpus      slot = index // rows_per_rank - first
    step_out[:, slot]    StepColumns                          slot = index // rows_per_step - first
    device_out[:, row]   DeviceColumns                        row  = index - start

Each prange block walks a contiguous index range with a mixed-radix odometer (no division per row) and owns
one scratch record, written through its int64 view `words` and read as a record by the formulas. A slot is
written by the one row that opens it (or by the chunk's first row), so no two blocks write the same place.
"""

import numba
import numpy as np

from engine.model.levels import device_terms, rank_terms, step_terms
from engine.model.split import degrees


@numba.njit(cache=True)
def set_axis(words, k, digit, axis_words, axis_fields, axis_width):
    """Write axis k's value `digit` into the record words: every field the axis sets."""
    for j in range(axis_width[k]):
        words[axis_fields[k, j]] = axis_words[k, digit, j]


@numba.njit(cache=True)
def set_record(rec, words, base, digits, axis_words, axis_fields, axis_width, dp_mode):
    """Rebuild the record from the defaults and every axis' digit, then resolve its dp and n_gpus."""
    words[:] = base
    for k in range(digits.shape[0]):
        set_axis(words, k, digits[k], axis_words, axis_fields, axis_width)
    dp, n_gpus = degrees(rec, dp_mode)
    rec.dp = dp
    rec.n_gpus = n_gpus


@numba.njit(cache=True)
def store_rank(rec, r, out, slot):
    for q in range(len(r.columns)):
        out[q, slot] = r.columns[q]
    out[len(r.columns), slot] = rec.dp
    out[len(r.columns) + 1, slot] = rec.n_gpus


@numba.njit(cache=True)
def store_columns(columns, out, slot):
    for q in range(len(columns)):
        out[q, slot] = columns[q]


@numba.njit(parallel=True, cache=True, nogil=True)
def sweep_chunk(start, count, base, axis_words, axis_fields, axis_width, radices, n_rank_axes, n_step_axes, dp_mode,
                scratch, scratch_words, rank_out, step_out, device_out):
    """Evaluate configurations start .. start+count-1 into rank_out, step_out and device_out (see above)."""
    n_axes = radices.shape[0]
    rows_per_step = 1
    for k in range(n_rank_axes + n_step_axes, n_axes):
        rows_per_step *= radices[k]
    rows_per_rank = rows_per_step
    for k in range(n_rank_axes, n_rank_axes + n_step_axes):
        rows_per_rank *= radices[k]
    first_rank, first_step = start // rows_per_rank, start // rows_per_step
    n_blocks = scratch.shape[0]
    per_block = (count + n_blocks - 1) // n_blocks
    for b in numba.prange(n_blocks):
        lo = b * per_block
        hi = min(count, lo + per_block)
        if lo >= hi:
            continue
        words, rec = scratch_words[b], scratch[b]
        digits = np.empty(n_axes, dtype=np.int64)
        rest = start + lo
        for k in range(n_axes - 1, -1, -1):
            digits[k] = rest % radices[k]
            rest //= radices[k]
        set_record(rec, words, base, digits, axis_words, axis_fields, axis_width, dp_mode)
        r = rank_terms(rec)
        s = step_terms(rec, r)
        for i in range(lo, hi):
            index = start + i
            if i == 0 or index % rows_per_rank == 0:
                store_rank(rec, r, rank_out, index // rows_per_rank - first_rank)
            if i == 0 or index % rows_per_step == 0:
                store_columns(s.columns, step_out, index // rows_per_step - first_step)
            store_columns(device_terms(rec, r, s).columns, device_out, i)
            k = n_axes - 1  # advance the odometer
            while k >= 0:
                digits[k] += 1
                if digits[k] < radices[k]:
                    break
                digits[k] = 0
                k -= 1
            if k < 0 or i + 1 == hi:
                continue
            if k < n_rank_axes:  # a rank axis moved: rebuild the record, every level again
                set_record(rec, words, base, digits, axis_words, axis_fields, axis_width, dp_mode)
                r = rank_terms(rec)
                s = step_terms(rec, r)
                continue
            for j in range(k, n_axes):
                set_axis(words, j, digits[j], axis_words, axis_fields, axis_width)
            if k < n_rank_axes + n_step_axes:
                s = step_terms(rec, r)
