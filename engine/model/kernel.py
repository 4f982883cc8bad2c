"""The vectorized form of the memory model over a list of configurations (estimate, explain, measure).

One prange loop calls levels.evaluate_one, the scalar reference, for every record and stores each level's
columns in its rows of `out` (OUTPUTS order). No arithmetic here. Each iteration writes only its own column
of `out` (numba's parallel docs: shared writes inside prange race silently); outputs start at UNSET so a
column the loop forgets fails tests/test_kernel.py.
"""

import numba
import numpy as np

from engine.model.levels import evaluate_one
from engine.model.outputs import DEVICE_COLUMNS, GPU_COLUMNS, INT_OUTPUTS, RANK_COLUMNS, STEP_COLUMNS, TIME_COLUMNS

UNSET = np.iinfo(np.int64).min
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


def evaluate(cfg: np.ndarray) -> dict[str, np.ndarray]:
    """Every output column for every record of `cfg` (engine.inputs.vocabulary.RECORD), by name: int64 columns
    (NULL = -1) and the float64 time columns (NULL = NaN)."""
    out = np.full((len(INT_OUTPUTS), len(cfg)), UNSET, dtype=np.int64)
    times = np.full((len(TIME_COLUMNS), len(cfg)), np.inf)
    if len(cfg):
        fill_outputs(np.asarray(cfg).view(np.recarray), out, times, RANK_ROWS, STEP_ROWS, GPU_ROWS, DEVICE_ROWS, TIME_ROWS)
    return {name: out[k] for k, name in enumerate(INT_OUTPUTS)} | {name: times[k] for k, name in enumerate(TIME_COLUMNS)}
