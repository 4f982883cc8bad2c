"""The sweep kernel's input arrays, built once per sweep, and its output for one chunk of the index range.

A chunk is factored as the kernel computed it (engine/model/sweep_kernel.py): rank-level columns once per run
of rows sharing a layout, step-level columns once per run sharing a workload, device-level columns per row.
`Chunk.runs(level)` gives, for every row, the slot its value sits in, and how many rows each slot covers;
engine/dataset/columns.py turns that into Parquet columns without repeating a value per row where a
dictionary index does.
"""

from dataclasses import dataclass, field
from functools import cached_property

import numba
import numpy as np

from engine.configure.grid import FIELD_INDEX, Grid, decode
from engine.model.kernel import (
    UNSET,
    PlainRecord,
    announced_compile,
    cold,
    loaded,
    uses_kernel,
)
from engine.model.levels import device_terms, gpu_terms, rank_terms, shape_terms, step_terms
from engine.model.outputs import DEVICE_COLUMNS, GPU_COLUMNS, RANK_COLUMNS, STEP_COLUMNS, TIME_COLUMNS
from engine.model.sweep_kernel import block_scratch, sweep_chunk

RANK_ROWS = list(RANK_COLUMNS) + ["dp", "n_gpus"]  # rank_out's rows: the columns, then the resolved layout
BUFFER_SETS = 3  # output buffer sets in turn: one the kernel fills, one whose table is built, one being written
# The per-row buffers hold each column in a row of its own. Rows exactly a chunk long (2^20 values, 8 MiB) put the
# kernel's nine per-row columns at addresses equal modulo every power of two up to 8 MiB: each of its stores fell in
# the same set of the L1 and L2 caches, which hold eight lines a set on this EPYC, so nine streams evicted each other.
# Rows a whole number of 4 KiB pages and one cache line long put row k of each buffer k lines along, whatever the
# chunk's size: the nine streams fall in five sets, two at most in each (the two buffers start alike modulo 4 KiB).
# One thread's kernel 28.8 -> 39.4 M/s on bench_sweep's 10^7 grid (stop 48, in turn).
ROW_PADDING = 8  # values: one cache line


def padded_width(count: int) -> int:
    """The length of a per-row buffer's rows for chunks of `count` rows: whole pages of int64 values, and a line."""
    return -(-count // 512) * 512 + ROW_PADDING


def run_lengths(start: int, count: int, period: int) -> np.ndarray:
    """For rows start .. start+count-1 grouped in runs of `period` (aligned to multiples of it): each run's number
    of rows in the chunk, the run holding `start` first."""
    first, last = start // period, (start + count - 1) // period
    lengths = np.full(last - first + 1, period, dtype=np.int64)
    lengths[0] = min(count, (first + 1) * period - start)
    if last > first:
        lengths[-1] = start + count - last * period
    return lengths


@dataclass
class Chunk:
    grid: Grid
    start: int
    count: int
    rank: np.ndarray  # (len(RANK_ROWS), rank slots)
    gpu: np.ndarray  # (len(GPU_COLUMNS), rank slots * rows_per_step)
    step: np.ndarray  # (len(STEP_COLUMNS), step slots)
    device: np.ndarray  # (len(DEVICE_COLUMNS), count)
    times: np.ndarray  # (len(TIME_COLUMNS), count), float64
    rows_per_rank: int
    rows_per_step: int
    kept: dict = field(default_factory=dict, repr=False)  # level -> (rows, their slots): see slots_of

    @cached_property
    def rank_lengths(self) -> np.ndarray:
        """Rows of the chunk per rank slot."""
        return run_lengths(self.start, self.count, self.rows_per_rank)

    @cached_property
    def step_lengths(self) -> np.ndarray:
        """Rows of the chunk per step slot."""
        return run_lengths(self.start, self.count, self.rows_per_step)

    @cached_property
    def combination(self) -> np.ndarray:
        """Each row's device combination (the digits of the device axes, as one number)."""
        return np.arange(self.start, self.start + self.count, dtype=np.int64) % self.rows_per_step

    def slots_of(self, level: str, rows: np.ndarray | None) -> np.ndarray:
        """Each row's (or kept row's) slot of `level` ('rank', 'step' or 'gpu': its rank slot's table, at its device
        combination), by arithmetic on the row index; worked out once per level for the rows a table keeps, which
        every column of that level then gathers by."""
        hit = self.kept.get(level)
        if hit is not None and hit[0] is rows:
            return hit[1]
        index = np.arange(self.start, self.start + self.count, dtype=np.int64) if rows is None else self.start + rows
        if level == "step":
            slots = index // self.rows_per_step - self.start // self.rows_per_step
        else:
            slots = index // self.rows_per_rank - self.start // self.rows_per_rank
            if level == "gpu":
                slots = slots * self.rows_per_step + index % self.rows_per_step
        self.kept[level] = (rows, slots)
        return slots

    def expand(self, level: str, per_slot: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Values held once per slot of `level` ('rank', 'step', 'gpu' or 'device'), one per row (or per kept
        row): runs are repeated rather than gathered where every row is kept."""
        if level == "device":
            return per_slot if rows is None else per_slot[rows]
        if rows is None and level != "gpu":
            return np.repeat(per_slot, self.rank_lengths if level == "rank" else self.step_lengths)
        return per_slot[self.slots_of(level, rows)]

    def values(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """One output (or dp / n_gpus) for every row of the chunk (or every kept row), as int64."""
        if name in DEVICE_COLUMNS:
            return self.expand("device", self.device[DEVICE_COLUMNS.index(name)], rows)
        if name in TIME_COLUMNS:
            return self.expand("device", self.times[TIME_COLUMNS.index(name)], rows)
        if name in GPU_COLUMNS:
            return self.expand("gpu", self.gpu[GPU_COLUMNS.index(name)], rows)
        if name in STEP_COLUMNS:
            return self.expand("step", self.step[STEP_COLUMNS.index(name)], rows)
        return self.expand("rank", self.rank[RANK_ROWS.index(name)], rows)

    def count_rows(self, name: str, value: int) -> int:
        """Rows where an integer column equals `value` (a rank- or step-level one counted slot by slot)."""
        if name in DEVICE_COLUMNS:
            return int((self.device[DEVICE_COLUMNS.index(name)] == value).sum())
        if name in STEP_COLUMNS:
            return int(self.step_lengths[self.step[STEP_COLUMNS.index(name)] == value].sum())
        return int(self.rank_lengths[self.rank[RANK_ROWS.index(name)] == value].sum())

    def reasons(self) -> np.ndarray:
        """Rows per invalid_reason code."""
        return np.bincount(self.device[DEVICE_COLUMNS.index("invalid_reason")], minlength=1).astype(np.int64)


class SweepKernel:
    """The grid as the arrays sweep_chunk reads, and reusable output buffers.

    compiled: None lets the grid's size decide (engine/model/kernel.uses_kernel: a sweep of a few hundred rows
    answers sooner in plain Python than through a compile); True or False forces it (`memsim plan` runs many small
    grids of one large search through the compiled kernel)."""

    def __init__(self, grid: Grid, compiled: bool | None = None):
        self.grid = grid
        self.compiled = uses_kernel(grid.total, sweep_chunk) if compiled is None else compiled
        # its first evaluate compiles sweep_chunk
        self.compiles = self.compiled and not loaded(sweep_chunk) and cold(sweep_chunk)
        self.said = False  # ... and says so first
        axes = grid.axes
        width = max(len(a.fields) for a in axes)
        values = max(len(a.labels) for a in axes)
        self.axis_words = np.zeros((len(axes), values, width), dtype=np.int64)
        self.axis_fields = np.zeros((len(axes), width), dtype=np.int64)
        self.axis_width = np.array([len(a.fields) for a in axes], dtype=np.int64)
        for k, axis in enumerate(axes):
            self.axis_words[k, : len(axis.labels), : len(axis.fields)] = axis.words
            self.axis_fields[k, : len(axis.fields)] = [FIELD_INDEX[f] for f in axis.fields]
        self.radices = grid.radices
        self.n_rank, self.n_shape, self.n_step = grid.count("rank"), grid.count("shape"), grid.count("step")
        self.rows_per_step = int(np.prod(self.radices[self.n_rank + self.n_shape + self.n_step:]))
        self.rows_per_shape = int(np.prod(self.radices[self.n_rank + self.n_shape:]))
        self.rows_per_rank = int(np.prod(self.radices[self.n_rank:]))
        self.blocks = 8 * numba.get_num_threads()
        self.block_scratch = block_scratch(self.blocks)  # sweep_chunk's scratch arrays, in its order
        self.buffers = [None] * BUFFER_SETS
        self.adopted = [False] * BUFFER_SETS
        self.turn = 0

    def adopt(self, other: "SweepKernel") -> None:
        """Use another kernel's output buffers where they are large enough (a search over many small grids, as
        `memsim plan` runs, spares a fresh allocation per grid); they are reset to UNSET before this grid writes."""
        self.buffers = list(other.buffers)
        self.adopted = [b is not None for b in self.buffers]
        self.turn = other.turn

    def slots(self, count: int, period: int) -> int:
        return count // period + 2  # a chunk of `count` rows spans at most this many runs of `period`

    def evaluate(self, start: int, count: int) -> Chunk:
        """Configurations start .. start+count-1, factored by level.

        BUFFER_SETS buffer sets take turns (fresh pages for every chunk cost more than the kernel): what a call
        returns stays valid while the next two calls run — the writer's threads build its table during the first
        and write it during the second (engine/dataset/sweep.py ChunkWriter) — and is overwritten by the one
        after. Buffers start at UNSET, so a slot the kernel never writes shows."""
        self.turn = (self.turn + 1) % BUFFER_SETS
        buffers = self.buffers[self.turn]
        rank_slots = self.slots(count, self.rows_per_rank)
        sizes = (rank_slots, rank_slots * self.rows_per_step, self.slots(count, self.rows_per_step), count, count)
        if buffers is None or any(b.shape[1] < n for b, n in zip(buffers, sizes)):
            buffers = (np.full((len(RANK_ROWS), sizes[0]), UNSET, dtype=np.int64),
                       np.full((len(GPU_COLUMNS), sizes[1]), UNSET, dtype=np.int64),
                       np.full((len(STEP_COLUMNS), sizes[2]), UNSET, dtype=np.int64),
                       np.full((len(DEVICE_COLUMNS), padded_width(count)), UNSET, dtype=np.int64),
                       np.full((len(TIME_COLUMNS), padded_width(count)), np.inf))
            self.buffers[self.turn] = buffers
        elif self.adopted[self.turn]:  # another kernel's buffers: back to the sentinel before this grid writes
            for b in buffers:
                b.fill(np.inf if b.dtype == np.float64 else UNSET)
            self.adopted[self.turn] = False
        n_rank = (start + count - 1) // self.rows_per_rank - start // self.rows_per_rank + 1 if count else 0
        n_step = (start + count - 1) // self.rows_per_step - start // self.rows_per_step + 1 if count else 0
        if count and not self.compiled:
            self.evaluate_in_python(start, count, *buffers)
        elif count:  # whole buffers, always C-contiguous: one compiled signature (slices would vary with the chunk)
            arrays = (self.grid.base, self.axis_words, self.axis_fields, self.axis_width, self.radices, self.n_rank,
                      self.n_shape, self.n_step, self.grid.dp_mode, *self.block_scratch, *buffers)
            if self.compiles and not self.said:  # once: the first call compiles and caches it, on one row
                self.said = True
                with announced_compile(sweep_chunk):
                    sweep_chunk(start, 1, *arrays)  # (the row is evaluated again below)
            sweep_chunk(start, count, *arrays)
        rank, gpu = buffers[0][:, :n_rank], buffers[1][:, : n_rank * self.rows_per_step]
        step, device, times = buffers[2][:, :n_step], buffers[3][:, :count], buffers[4][:, :count]
        return Chunk(self.grid, start, count, rank, gpu, step, device, times, self.rows_per_rank, self.rows_per_step)

    def evaluate_in_python(self, start: int, count: int, rank, gpu, step, device, times) -> None:
        """What sweep_chunk stores, from the scalar reference, factored as the kernel factors it: each row decoded
        the obvious way (grid.decode), levels.rank_terms once per rank slot, gpu_terms once per device combination
        of that slot, shape_terms once per run of steps sharing a shape, step_terms once per step slot,
        device_terms per row."""
        first_rank, first_step = start // self.rows_per_rank, start // self.rows_per_step
        last_rank = last_shape = last_step = -1
        r = sh = s = None
        gpus: dict = {}
        for i, index in enumerate(range(start, start + count)):
            rec = PlainRecord(decode(self.grid, index))
            rank_slot = index // self.rows_per_rank - first_rank
            step_slot = index // self.rows_per_step - first_step
            g = index % self.rows_per_step
            if rank_slot != last_rank:
                r, gpus, last_rank = rank_terms(rec), {}, rank_slot
                rank[:, rank_slot] = (*r.columns, rec.dp, rec.n_gpus)
            if index // self.rows_per_shape != last_shape:  # a new rank opens a new shape too
                sh, last_shape = shape_terms(rec, r), index // self.rows_per_shape
            if step_slot != last_step:
                s, last_step = step_terms(rec, r, sh), step_slot
                step[:, step_slot] = s.columns
            if g not in gpus:
                gpus[g] = gpu_terms(rec, r)
                gpu[:, rank_slot * self.rows_per_step + g] = gpus[g].columns
            d = device_terms(s, gpus[g])
            device[:, i] = d.columns
            times[:, i] = d.times
