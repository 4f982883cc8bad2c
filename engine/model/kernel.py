"""The vectorized form of the memory model over a list of configurations (estimate, explain, measure).

One prange loop calls levels.evaluate_one, the scalar reference, for every record and stores each level's
columns in its rows of `out` (OUTPUTS order). No arithmetic here. Each iteration writes only its own column
of `out` (numba's parallel docs: shared writes inside prange race silently); outputs start at UNSET so a
column the loop forgets fails tests/test_kernel.py.

A few rows are cheaper in plain Python than through the compiled loop: the scalar reference runs the same
functions (they are plain Python until numba compiles them into a kernel) at about 1,200 configurations/s, while
the compiled kernel costs a load from numba's on-disk cache (0.65 s) or, on a cold cache, a compile of a minute
or more. `evaluate` picks whichever answers first for its row count, so a one-configuration question never waits
for a compiler (benchmarks/bench_first_answer.py measures the three constants below).
"""

import logging

import numba
import numpy as np

from engine.inputs.vocabulary import RECORD
from engine.model.levels import evaluate_one
from engine.model.outputs import DEVICE_COLUMNS, GPU_COLUMNS, INT_OUTPUTS, RANK_COLUMNS, STEP_COLUMNS, TIME_COLUMNS

UNSET = np.iinfo(np.int64).min
PYTHON_SECONDS_PER_ROW = 0.45e-3  # the scalar reference in Python, a row unpacked and evaluated whole: 0.41 ms (bench_first_answer.py)
KERNEL_LOAD_SECONDS = 0.65  # the compiled kernel loaded from a warm on-disk cache, first call
KERNEL_COMPILE_SECONDS = 75.0  # the compiled kernel built on a cold cache: 75 s on two idle cores, 150 s of CPU busy
log = logging.getLogger("memsim")
RANK_ROWS = np.array([INT_OUTPUTS.index(n) for n in RANK_COLUMNS], dtype=np.int64)
STEP_ROWS = np.array([INT_OUTPUTS.index(n) for n in STEP_COLUMNS], dtype=np.int64)
GPU_ROWS = np.array([INT_OUTPUTS.index(n) for n in GPU_COLUMNS], dtype=np.int64)
DEVICE_ROWS = np.array([INT_OUTPUTS.index(n) for n in DEVICE_COLUMNS], dtype=np.int64)
TIME_ROWS = np.arange(len(TIME_COLUMNS), dtype=np.int64)


@numba.njit(cache=True)
def store(columns, rows, out, i):
    for k in range(len(columns)):
        out[rows[k], i] = columns[k]


@numba.njit(parallel=True, cache=True)
def fill_outputs(cfg, out, times, rank_rows, step_rows, gpu_rows, device_rows, time_rows):
    for i in numba.prange(len(cfg)):
        r, s, g, d = evaluate_one(cfg[i])
        store(r.columns, rank_rows, out, i)
        store(s.columns, step_rows, out, i)
        store(g.columns, gpu_rows, out, i)
        store(d.columns, device_rows, out, i)
        store(d.times, time_rows, times, i)


def cold(kernel) -> bool:
    """Whether numba's on-disk cache holds no machine code for `kernel` (a cache=True njit function) that matches
    its source: the next call compiles. False when this cannot be known (NUMBA_DISABLE_JIT: nothing compiles)."""
    index = getattr(getattr(kernel, "_cache", None), "_cache_file", None)
    if index is None:
        return False
    try:
        return not index._load_index()  # {} when missing, of another numba version, or stale
    except Exception:  # noqa: BLE001 (an unreadable index is rebuilt: numba compiles)
        return True


def loaded(kernel) -> bool:
    """Whether this process holds `kernel`'s machine code already (compiled here, or loaded from the cache)."""
    return bool(kernel.signatures)


def compile_notice(kernel, seconds: float) -> None:
    """Say once, through the `memsim` logger (the CLI prints it on stderr), that `kernel` is about to compile."""
    where = getattr(getattr(kernel, "_cache", None), "_cache_path", "the numba cache")
    log.warning("compiling the kernels (first run only, about %d s on two idle cores; cached in %s)...",
                seconds, where)


def uses_kernel(n_rows: int, kernel=None) -> bool:
    """Whether `n_rows` configurations are answered sooner by the compiled `kernel` (fill_outputs, or the sweep's
    sweep_chunk) than by the scalar reference in Python."""
    kernel = kernel or fill_outputs
    if loaded(kernel):  # it costs nothing more
        return n_rows > 0
    fixed = KERNEL_COMPILE_SECONDS if cold(kernel) else KERNEL_LOAD_SECONDS
    return n_rows * PYTHON_SECONDS_PER_ROW > fixed


class PlainRecord:
    """One configuration as Python ints and floats: the scalar reference reads its fields as attributes, as the
    kernel reads a record's, but Python arithmetic on them is ~50x faster than on numpy scalars."""

    __slots__ = RECORD.names

    def __init__(self, rec: np.record):
        for name, value in zip(RECORD.names, rec.item()):  # the record's fields as one tuple of Python scalars
            setattr(self, name, value)


def columns_by_name(out: np.ndarray, times: np.ndarray) -> dict[str, np.ndarray]:
    return {name: out[k] for k, name in enumerate(INT_OUTPUTS)} | {name: times[k] for k, name in enumerate(TIME_COLUMNS)}


def empty_outputs(n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The output buffers, every cell UNSET (so a column nobody writes fails tests/test_kernel.py)."""
    return np.full((len(INT_OUTPUTS), n_rows), UNSET, dtype=np.int64), np.full((len(TIME_COLUMNS), n_rows), np.inf)


def evaluate_reference(cfg: np.ndarray) -> dict[str, np.ndarray]:
    """The scalar reference (levels.evaluate_one) over every record in plain Python, stored as the kernel stores it."""
    out, times = empty_outputs(len(cfg))
    for i, rec in enumerate(np.asarray(cfg)):
        r, s, g, d = evaluate_one(PlainRecord(rec))
        for columns, rows in ((r.columns, RANK_ROWS), (s.columns, STEP_ROWS), (g.columns, GPU_ROWS),
                              (d.columns, DEVICE_ROWS)):
            out[rows, i] = columns
        times[TIME_ROWS, i] = d.times
    return columns_by_name(out, times)


def evaluate_compiled(cfg: np.ndarray) -> dict[str, np.ndarray]:
    """The compiled kernel over every record (saying first when it has to compile)."""
    out, times = empty_outputs(len(cfg))
    if len(cfg):
        if not loaded(fill_outputs) and cold(fill_outputs):
            compile_notice(fill_outputs, KERNEL_COMPILE_SECONDS)
        fill_outputs(np.asarray(cfg).view(np.recarray), out, times, RANK_ROWS, STEP_ROWS, GPU_ROWS, DEVICE_ROWS,
                     TIME_ROWS)
    return columns_by_name(out, times)


def evaluate(cfg: np.ndarray) -> dict[str, np.ndarray]:
    """Every output column for every record of `cfg` (engine.inputs.vocabulary.RECORD), by name: int64 columns
    (NULL = -1) and the float64 time columns (NULL = NaN). The compiled kernel or the scalar reference, whichever
    answers sooner (`uses_kernel`); both give the same numbers (tests/test_kernel.py)."""
    return evaluate_compiled(cfg) if uses_kernel(len(cfg)) else evaluate_reference(cfg)
