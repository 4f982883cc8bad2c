"""Compile one of memsim's two numba kernels into the cache, by running it once on a tiny input.

    python tests/compile_kernels.py fill     # kernel.fill_outputs (estimate, validate of many rows)
    python tests/compile_kernels.py sweep    # sweep_kernel.sweep_chunk (sweep, plan)

conftest.py runs both at once, one process each, before the suite's workers start: a cold cache then costs one
compile's wall time, not the first test's of each worker (whose subprocesses would compile again and print so).
"""

import sys

import numpy as np


def compile_fill() -> None:
    from engine.configure.resolve import resolve_case
    from engine.inputs.vocabulary import RECORD
    from engine.model.kernel import evaluate_compiled

    evaluate_compiled(np.array([resolve_case({"model": "gpt2"})[0]], dtype=RECORD))


def compile_sweep() -> None:
    from engine.configure.grid import build_grid
    from engine.configure.spec import parse_spec
    from engine.dataset.chunks import SweepKernel

    grid = build_grid(parse_spec({"axes": {"model": ["gpt2"], "micro_batch": [1, 2]}}))
    SweepKernel(grid, compiled=True).evaluate(0, grid.total)


if __name__ == "__main__":
    {"fill": compile_fill, "sweep": compile_sweep}[sys.argv[1]]()
