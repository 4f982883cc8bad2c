"""The sweep kernel: decode configurations from their index, evaluate, store. No memory arithmetic here.

Each prange block walks a contiguous index range with a mixed-radix odometer (no division per row): the
last axis advances every row; a carry into an outer axis re-derives the record's per-rank fields
(engine/formulas/derived.py), which the workload axes leave unchanged. Each block owns one scratch record,
written through its int64 view `words` and read as a record by the formulas; each iteration writes only its
own column of the outputs.
"""

import numba
import numpy as np

from engine.model.derived import derive, derive_layout
from engine.model.outputs import row_of_derived


@numba.njit(cache=True)
def set_axis(words, k, digit, axis_values, axis_kind, model_rows, model_ids, gpu_rows, gpu_ids):
    """Write axis k's value for `digit` into the record words (a model or GPU copies its catalog row)."""
    value = axis_values[k, digit]
    if axis_kind[k] == 1:
        for f in model_ids:
            words[f] = model_rows[value, f]
    elif axis_kind[k] == 2:
        for f in gpu_ids:
            words[f] = gpu_rows[value, f]
    else:
        words[axis_kind[k] - 3] = value


@numba.njit(cache=True)
def set_all(words, digits, axis_values, axis_kind, model_rows, model_ids, gpu_rows, gpu_ids):
    for k in range(digits.shape[0]):
        set_axis(words, k, digits[k], axis_values, axis_kind, model_rows, model_ids, gpu_rows, gpu_ids)


@numba.njit(parallel=True, cache=True, nogil=True)
def sweep_chunk(start, count, base, axis_values, axis_kind, radices, n_outer, model_rows, model_ids,
                gpu_rows, gpu_ids, dp_mode, scratch, scratch_words, out, digits_out, layout_out):
    """Evaluate configurations start .. start+count-1 into out (outputs), digits_out (axis digits) and
    layout_out (dp, n_gpus)."""
    n_blocks = scratch.shape[0]
    n_axes = radices.shape[0]
    per_block = (count + n_blocks - 1) // n_blocks
    for b in numba.prange(n_blocks):
        lo = b * per_block
        hi = min(count, lo + per_block)
        if lo >= hi:
            continue
        words = scratch_words[b]
        rec = scratch[b]
        digits = np.empty(n_axes, dtype=np.int64)
        rest = start + lo
        for k in range(n_axes - 1, -1, -1):
            digits[k] = rest % radices[k]
            rest //= radices[k]
        words[:] = base
        set_all(words, digits, axis_values, axis_kind, model_rows, model_ids, gpu_rows, gpu_ids)
        derive_layout(rec, dp_mode)
        derive(rec)
        for i in range(lo, hi):
            values = row_of_derived(rec)
            for q in range(len(values)):
                out[q, i] = values[q]
            for k in range(n_axes):
                digits_out[k, i] = digits[k]
            layout_out[0, i] = rec.dp
            layout_out[1, i] = rec.n_gpus
            k = n_axes - 1  # advance the odometer
            while k >= 0:
                digits[k] += 1
                if digits[k] < radices[k]:
                    break
                digits[k] = 0
                k -= 1
            if k >= n_outer:
                set_axis(words, k, digits[k], axis_values, axis_kind, model_rows, model_ids, gpu_rows, gpu_ids)
                for j in range(k + 1, n_axes):
                    set_axis(words, j, 0, axis_values, axis_kind, model_rows, model_ids, gpu_rows, gpu_ids)
            elif k >= 0:
                words[:] = base  # an outer axis moved: rebuild and re-derive
                set_all(words, digits, axis_values, axis_kind, model_rows, model_ids, gpu_rows, gpu_ids)
                derive_layout(rec, dp_mode)
                derive(rec)
