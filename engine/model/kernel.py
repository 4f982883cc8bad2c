"""The vectorized form of the memory model over a list of configurations (estimate, explain, measure).

One prange loop calls levels.evaluate_one, the scalar reference, for every record and stores each level's
columns in its rows of `out` (OUTPUTS order). No arithmetic here. Each iteration writes only its own column
of `out` (numba's parallel docs: shared writes inside prange race silently); outputs start at UNSET so a
column the loop forgets fails tests/test_kernel.py.
"""

import numba
import numpy as np

from engine.model.levels import evaluate_one
from engine.model.outputs import DEVICE_COLUMNS, GPU_COLUMNS, OUTPUTS, RANK_COLUMNS, STEP_COLUMNS

UNSET = np.iinfo(np.int64).min
RANK_ROWS = np.array([OUTPUTS.index(n) for n in RANK_COLUMNS], dtype=np.int64)
STEP_ROWS = np.array([OUTPUTS.index(n) for n in STEP_COLUMNS], dtype=np.int64)
GPU_ROWS = np.array([OUTPUTS.index(n) for n in GPU_COLUMNS], dtype=np.int64)
DEVICE_ROWS = np.array([OUTPUTS.index(n) for n in DEVICE_COLUMNS], dtype=np.int64)


@numba.njit(cache=True)
def store(columns, rows, out, i):
    for k in range(len(columns)):
        out[rows[k], i] = columns[k]


@numba.njit(parallel=True, cache=True)
def _fill(cfg, out, rank_rows, step_rows, gpu_rows, device_rows):
    for i in numba.prange(len(cfg)):
        r, s, g, d = evaluate_one(cfg[i])
        store(r.columns, rank_rows, out, i)
        store(s.columns, step_rows, out, i)
        store(g.columns, gpu_rows, out, i)
        store(d.columns, device_rows, out, i)


def evaluate(cfg: np.ndarray) -> np.ndarray:
    """Every output for every record of `cfg` (engine.inputs.vocabulary.RECORD): int64, (len(OUTPUTS), len(cfg))."""
    out = np.full((len(OUTPUTS), len(cfg)), UNSET, dtype=np.int64)
    if len(cfg):
        _fill(np.asarray(cfg).view(np.recarray), out, RANK_ROWS, STEP_ROWS, GPU_ROWS, DEVICE_ROWS)
    return out


def evaluate_named(cfg: np.ndarray) -> dict[str, np.ndarray]:
    """evaluate(), as {column: values}."""
    out = evaluate(cfg)
    return {name: out[k] for k, name in enumerate(OUTPUTS)}
