"""The sweep kernel: decode configurations from their index, evaluate each level where it changes, store.

No memory arithmetic here. The axes are ordered rank, shape, step, device (engine/configure/grid.py), so in index
order a rank-level value holds for `rows_per_rank` consecutive rows, a step-level value for `rows_per_step`, and the
device axes cycle through their `rows_per_step` combinations `g` within every step. The kernel evaluates
levels.rank_terms when a rank axis moves (and levels.gpu_terms for every device combination of that rank, into
a small table), levels.shape_terms when a shape axis moves, levels.step_terms when any step axis moves (a shape's
too), and levels.device_terms (a few additions and comparisons) for every row. Each level but the shape, which has
no output column of its own, is stored once per slot of consecutive rows it holds for:

    rank_out[:, slot]                      RankColumns, then dp and n_gpus    slot = index // rows_per_rank - first
    gpu_out[:, slot * rows_per_step + g]   GpuColumns                         g = index % rows_per_step
    step_out[:, slot]                      StepColumns                        slot = index // rows_per_step - first
    device_out[:, row], time_out[:, row]   DeviceColumns, Times               row = index - start

Each prange block walks a contiguous index range with a mixed-radix odometer (no division per row) and owns three
scratch records, the configuration, its Rank (RANK_RECORD) and its Shape (SHAPE_RECORD), each written through its
int64 or float64 view and read as a record by the formulas. A slot is written
by the one row that opens it (or by the chunk's first row), so no two blocks write the same place.
"""

import numba
import numpy as np

from engine.inputs.vocabulary import RECORD
from engine.model import levels
from engine.model.gpu_rates import Rates
from engine.model.levels import device_terms, gpu_from_table
from engine.model.loss import LossBytes
from engine.model.peak import StageFixed
from engine.model.split import degrees
from engine.model.step_work import WorkRates

# The rank, shape, step and GPU levels compiled each on its own and called, rather than inlined into one function: a
# cold compile took 56-69 s instead of 94 s on two idle cores (78 s with the step alone inlined). The calls cost ~7%
# of the kernel's rate, which the step's layer counts held by the Rank (split.evaluated_layers) won back (paired runs
# of bench_sweep's 10^7 grid against one inlined kernel: 17.7-20.5 vs 17.2-19.6 M/s). device_terms, a few additions
# per row, stays inlined. Within each level LLVM inlines the formulas up to engine.LLVM_INLINE_THRESHOLD: 1.8x the
# kernel's rate for a compile ~1.3x as long (107-119 s against 85-103 s on this machine, loaded, stop 36).
rank_terms = numba.njit(cache=True, nogil=True)(levels.rank_terms)
shape_terms = numba.njit(cache=True, nogil=True)(levels.shape_terms)
step_terms = numba.njit(cache=True, nogil=True)(levels.step_terms)
gpu_terms = numba.njit(cache=True, nogil=True)(levels.gpu_terms)

N_RATES = len(Rates._fields)

# The rank level's result as a record, which the step's formulas read through a pointer. A Rank passed by value is
# 37 words copied at every call of a formula LLVM did not inline (~13 ns a call; the step makes dozens): passing
# its record instead takes a fifth off the step's time with the same formulas (stop 36's paired runs, docs/speed.md).
RANK_RECORD = np.dtype([("columns", [(name, np.int64) for name in levels.RankColumns._fields])]
                       + [(name, np.int64) for name in levels.Rank._fields[1:]])
# The shape level's result as a record too, for the same reason: its work rates (floats, step_work.WorkRates), then
# the three evaluated pipeline ranks' fixed bytes (int64, peak.StageFixed) and the loss's bytes per token (int64,
# loss.LossBytes).
STAGE_FIXED = [(name, np.int64) for name in StageFixed._fields]
SHAPE_RECORD = np.dtype([("work", [(name, np.float64) for name in WorkRates._fields]),
                         ("first", STAGE_FIXED), ("middle", STAGE_FIXED), ("last", STAGE_FIXED),
                         ("loss_bytes_per_token", [(name, np.int64) for name in LossBytes._fields])])


def block_scratch(blocks: int) -> tuple:
    """sweep_chunk's per-block scratch, in the order of its parameters: `scratch` (a configuration record per
    block, RECORD), its int64 view `scratch_words`, `rank_scratch` (a Rank record per block, RANK_RECORD), its
    int64 view `rank_words`, `shape_scratch` (a Shape record per block, SHAPE_RECORD), and its float64 and int64
    views `shape_floats` and `shape_words` (each field is 8 bytes: the work's are read as floats, the rest as
    ints)."""
    scratch, ranks = np.zeros(blocks, dtype=RECORD), np.zeros(blocks, dtype=RANK_RECORD)
    shapes = np.zeros(blocks, dtype=SHAPE_RECORD)
    return (scratch, scratch.view(np.int64).reshape(blocks, -1), ranks, ranks.view(np.int64).reshape(blocks, -1),
            shapes, shapes.view(np.float64).reshape(blocks, -1), shapes.view(np.int64).reshape(blocks, -1))


@numba.njit(cache=True)
def store_rank(r, words):
    """Write the Rank `r` into the int64 words of a RANK_RECORD: its columns, then its other fields in order."""
    n = len(r.columns)
    for q in range(n):
        words[q] = r.columns[q]
    rest = r[1:]
    for q in range(len(rest)):
        words[n + q] = rest[q]


@numba.njit(cache=True)
def store_shape(sh, floats, words):
    """Write the Shape `sh` into a SHAPE_RECORD through its float64 and int64 views: its work rates, then each
    evaluated rank's fixed bytes, then the loss's bytes per token."""
    n = len(sh.work)
    for q in range(n):
        floats[q] = sh.work[q]
    for stage in (sh.first, sh.middle, sh.last):
        for q in range(len(stage)):
            words[n + q] = stage[q]
        n += len(stage)
    for q in range(len(sh.loss_bytes_per_token)):
        words[n + q] = sh.loss_bytes_per_token[q]


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
def fill_gpu_table(rec, r, words, radices, n_outer, axis_words, axis_fields, axis_width, table, reasons, host_ram,
                   rates):
    """levels.gpu_terms of every device combination g, for the record's rank r: its columns, what it cannot run,
    the host RAM per GPU, and its rates (levels.gpu_from_table reads them back)."""
    for g in range(table.shape[1]):
        rest = g
        for k in range(radices.shape[0] - 1, n_outer - 1, -1):
            set_axis(words, k, rest % radices[k], axis_words, axis_fields, axis_width)
            rest //= radices[k]
        terms = gpu_terms(rec, r)
        for q in range(len(terms.columns)):
            table[q, g] = terms.columns[q]
        reasons[g] = terms.reason
        host_ram[g] = terms.host_ram_bytes
        for q in range(len(terms.rates)):
            rates[q, g] = terms.rates[q]


@numba.njit(cache=True)
def store_columns(columns, out, slot):
    for q in range(len(columns)):
        out[q, slot] = columns[q]


@numba.njit(parallel=True, cache=True, nogil=True)
def sweep_chunk(start, count, base, axis_words, axis_fields, axis_width, radices, n_rank_axes, n_shape_axes,
                n_step_axes, dp_mode, scratch, scratch_words, rank_scratch, rank_words, shape_scratch, shape_floats,
                shape_words, rank_out, gpu_out, step_out, device_out, time_out):
    """Evaluate configurations start .. start+count-1 into rank_out, gpu_out, step_out, device_out and time_out
    (above; time_out[:, row] holds the float Times). Each block owns one record of `scratch` (the configuration),
    one of `rank_scratch` (its Rank, RANK_RECORD) and one of `shape_scratch` (its Shape, SHAPE_RECORD), written
    through their int64 and float64 views (block_scratch)."""
    n_axes = radices.shape[0]
    n_shaping = n_rank_axes + n_shape_axes  # the axes the shape reads: when one moves, it is evaluated again
    n_outer = n_shaping + n_step_axes
    rows_per_step = 1
    for k in range(n_outer, n_axes):
        rows_per_step *= radices[k]
    rows_per_rank = rows_per_step
    for k in range(n_rank_axes, n_outer):
        rows_per_rank *= radices[k]
    first_rank, first_step = start // rows_per_rank, start // rows_per_step
    n_gpu_columns = gpu_out.shape[0]
    n_blocks = scratch.shape[0]
    per_block = (count + n_blocks - 1) // n_blocks
    for b in numba.prange(n_blocks):
        lo = b * per_block
        hi = min(count, lo + per_block)
        if lo >= hi:
            continue
        words, rec = scratch_words[b], scratch[b]
        held_rank, held_shape = rank_scratch[b], shape_scratch[b]
        table = np.empty((n_gpu_columns, rows_per_step), dtype=np.int64)
        reasons = np.empty(rows_per_step, dtype=np.int64)
        host_ram = np.empty(rows_per_step, dtype=np.int64)
        rates = np.empty((N_RATES, rows_per_step), dtype=np.float64)
        digits = np.empty(n_axes, dtype=np.int64)
        rest = start + lo
        for k in range(n_axes - 1, -1, -1):
            digits[k] = rest % radices[k]
            rest //= radices[k]
        g = (start + lo) % rows_per_step
        rank_slot = (start + lo) // rows_per_rank - first_rank
        step_slot = (start + lo) // rows_per_step - first_step
        set_record(rec, words, base, digits, axis_words, axis_fields, axis_width, dp_mode)
        r = rank_terms(rec)
        store_rank(r, rank_words[b])
        store_shape(shape_terms(rec, held_rank), shape_floats[b], shape_words[b])
        s = step_terms(rec, held_rank, held_shape)
        fill_gpu_table(rec, r, words, radices, n_outer, axis_words, axis_fields, axis_width, table, reasons, host_ram,
                       rates)
        opens_rank = lo == 0 or (start + lo) % rows_per_rank == 0
        opens_step = lo == 0 or g == 0
        for i in range(lo, hi):
            if opens_rank:
                store_columns(r.columns, rank_out, rank_slot)
                rank_out[len(r.columns), rank_slot] = rec.dp
                rank_out[len(r.columns) + 1, rank_slot] = rec.n_gpus
                gpu_out[:, rank_slot * rows_per_step: (rank_slot + 1) * rows_per_step] = table
                opens_rank = False
            if opens_step:
                store_columns(s.columns, step_out, step_slot)
                opens_step = False
            d = device_terms(s, gpu_from_table(table, reasons, host_ram, rates, g))
            store_columns(d.columns, device_out, i)
            store_columns(d.times, time_out, i)
            g += 1
            if g < rows_per_step:
                continue
            g = 0  # the step ends: advance the odometer over the rank and step axes
            step_slot += 1
            opens_step = True
            k = n_outer - 1
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
                store_rank(r, rank_words[b])
                fill_gpu_table(rec, r, words, radices, n_outer, axis_words, axis_fields, axis_width, table, reasons,
                               host_ram, rates)
                rank_slot += 1
                opens_rank = True
            else:
                for j in range(k, n_outer):
                    set_axis(words, j, digits[j], axis_words, axis_fields, axis_width)
            if k < n_shaping:
                store_shape(shape_terms(rec, held_rank), shape_floats[b], shape_words[b])
            s = step_terms(rec, held_rank, held_shape)
