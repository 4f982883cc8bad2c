"""The vectorized form of the memory model over a list of configurations (estimate, explain, validate, measure).

One kernel serves every command: a list of configurations goes through the sweep's kernel
(engine/model/sweep_kernel.py sweep_chunk) as a grid of one axis whose values are the records themselves, each row
its own layout, so numba compiles and caches one kernel for a sweep, a plan and an explain alike. The kernel calls
levels.rank_terms, step_terms, gpu_terms and device_terms, the scalar reference's functions; no arithmetic here.
Outputs start at UNSET so a column the kernel forgets fails tests/test_kernel.py.

A few rows are cheaper in plain Python than through the compiled loop: the scalar reference runs the same
functions (they are plain Python until numba compiles them into a kernel) at about 2,400 configurations/s, while
the compiled kernel costs a load from numba's on-disk cache (0.65 s) or, on a cold cache, a compile of a minute
or more. `evaluate` picks whichever answers first for its row count, so a one-configuration question never waits
for a compiler (benchmarks/bench_first_answer.py measures the three constants below).
"""

import contextlib
import logging
import threading
import time

import numba
import numpy as np

from engine.inputs.vocabulary import RECORD
from engine.model.levels import evaluate_one
from engine.model.outputs import DEVICE_COLUMNS, GPU_COLUMNS, INT_OUTPUTS, RANK_COLUMNS, STEP_COLUMNS, TIME_COLUMNS
from engine.model.sweep_kernel import block_scratch, sweep_chunk

UNSET = np.iinfo(np.int64).min
# The scalar reference in Python, a row unpacked and evaluated whole: 0.41 ms (bench_first_answer.py).
PYTHON_SECONDS_PER_ROW = 0.45e-3
KERNEL_LOAD_SECONDS = 0.65  # the compiled kernel loaded from a warm on-disk cache, first call
# The kernel built on a cold cache: 56-69 s wall on two idle cores before LLVM inlined the formulas, which takes ~1.3x
# as long (engine.LLVM_INLINE_THRESHOLD; 107-119 s against 85-103 s on this two-core machine when loaded).
KERNEL_COMPILE_SECONDS = 80.0
PROGRESS_SECONDS = 15.0  # how often a compile in progress says how long it has taken
DP_GIVEN = 2  # split.degrees: a resolved record's dp and n_gpus are kept as they are
log = logging.getLogger("memsim")
RANK_ROWS = np.array([INT_OUTPUTS.index(n) for n in RANK_COLUMNS], dtype=np.int64)
STEP_ROWS = np.array([INT_OUTPUTS.index(n) for n in STEP_COLUMNS], dtype=np.int64)
GPU_ROWS = np.array([INT_OUTPUTS.index(n) for n in GPU_COLUMNS], dtype=np.int64)
DEVICE_ROWS = np.array([INT_OUTPUTS.index(n) for n in DEVICE_COLUMNS], dtype=np.int64)
TIME_ROWS = np.arange(len(TIME_COLUMNS), dtype=np.int64)


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


@contextlib.contextmanager
def announced_compile(kernel, seconds: float = KERNEL_COMPILE_SECONDS, every: float = PROGRESS_SECONDS):
    """Around a call that compiles `kernel` (on one row, so that it ends when the compile does): say once, through
    the `memsim` logger (the CLI prints it on stderr), that it compiles and for about how long, then every `every`
    seconds how long it has taken, until it returns."""
    where = getattr(getattr(kernel, "_cache", None), "_cache_path", "the numba cache")
    log.warning("compiling the kernel (first run only, about %d s on two idle cores; cached in %s)...",
                seconds, where)
    started, done = time.monotonic(), threading.Event()

    def progress() -> None:
        while not done.wait(every):
            log.warning("still compiling: %d s so far (about %d s in all)", time.monotonic() - started, seconds)

    ticker = threading.Thread(target=progress, name="memsim-compile-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


def uses_kernel(n_rows: int, kernel=None) -> bool:
    """Whether `n_rows` configurations are answered sooner by the compiled `kernel` (sweep_chunk) than by the
    scalar reference in Python."""
    kernel = kernel or sweep_chunk
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
    ints = {name: out[k] for k, name in enumerate(INT_OUTPUTS)}
    return ints | {name: times[k] for k, name in enumerate(TIME_COLUMNS)}


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
    """The compiled kernel over every record (saying first when it has to compile): sweep_chunk over one axis whose
    value i sets every field of record i, so row i is its own rank, step and device slot."""
    out, times = empty_outputs(len(cfg))
    n = len(cfg)
    if not n:
        return columns_by_name(out, times)
    records = np.ascontiguousarray(cfg, dtype=RECORD).view(np.int64).reshape(n, len(RECORD.names))
    n_fields = records.shape[1]
    blocks = 8 * numba.get_num_threads()
    rank_out = np.full((len(RANK_COLUMNS) + 2, n + 2), UNSET, dtype=np.int64)  # + dp and n_gpus, as a sweep's
    gpu_out = np.full((len(GPU_COLUMNS), n + 2), UNSET, dtype=np.int64)
    step_out = np.full((len(STEP_COLUMNS), n + 2), UNSET, dtype=np.int64)
    device_out = np.full((len(DEVICE_COLUMNS), n), UNSET, dtype=np.int64)
    arrays = (records[0].copy(), records[None], np.arange(n_fields, dtype=np.int64)[None],
              np.array([n_fields], dtype=np.int64), np.array([n], dtype=np.int64), 1, 0, 0, DP_GIVEN,
              *block_scratch(blocks), rank_out, gpu_out, step_out, device_out, times)
    if not loaded(sweep_chunk) and cold(sweep_chunk):
        with announced_compile(sweep_chunk):
            sweep_chunk(0, 1, *arrays)  # compiles (row 0 is evaluated again below)
    sweep_chunk(0, n, *arrays)
    for rows, level in ((RANK_ROWS, rank_out), (GPU_ROWS, gpu_out), (STEP_ROWS, step_out), (DEVICE_ROWS, device_out)):
        out[rows] = level[: len(rows), :n]
    return columns_by_name(out, times)


def evaluate(cfg: np.ndarray) -> dict[str, np.ndarray]:
    """Every output column for every record of `cfg` (engine.inputs.vocabulary.RECORD), by name: int64 columns
    (NULL = -1) and the float64 time columns (NULL = NaN). The compiled kernel or the scalar reference, whichever
    answers sooner (`uses_kernel`); both give the same numbers (tests/test_kernel.py)."""
    return evaluate_compiled(cfg) if uses_kernel(len(cfg)) else evaluate_reference(cfg)
