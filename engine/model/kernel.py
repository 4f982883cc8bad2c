"""The vectorized form of the memory model: one prange loop that calls outputs.row and stores.

No arithmetic here: the formulas live in engine/formulas and engine/outputs.row, compiled once and called
by both this loop and the tests. Each iteration writes only its own column of `out` (numba's parallel docs:
shared writes inside prange race silently). Outputs start at UNSET so a column the loop forgets fails
tests/test_kernel.py.
"""

import numba
import numpy as np

from engine.model.outputs import OUTPUTS, row

UNSET = np.iinfo(np.int64).min


@numba.njit(parallel=True, cache=True)
def _fill(cfg, out):
    for i in numba.prange(len(cfg)):
        values = row(cfg[i])
        for k in range(len(values)):
            out[k, i] = values[k]


def evaluate(cfg: np.ndarray) -> np.ndarray:
    """Every output for every record of `cfg` (engine.inputs.vocabulary.RECORD): int64, shape (len(OUTPUTS), len(cfg))."""
    out = np.full((len(OUTPUTS), len(cfg)), UNSET, dtype=np.int64)
    if len(cfg):
        _fill(np.asarray(cfg).view(np.recarray), out)  # recarray: attribute access without numba too
    return out
