"""Compile memsim's numba kernel (sweep_kernel.sweep_chunk, which sweeps, plans and every list of configurations
run) into the cache, by running it once on a tiny grid.

    python tests/compile_kernels.py

conftest.py runs it before the suite's workers start: a cold cache then costs one compile's wall time, not the
first test's of each worker (whose subprocesses would compile again and print so).
"""

from engine.configure.grid import build_grid
from engine.configure.spec import parse_spec
from engine.dataset.chunks import SweepKernel

if __name__ == "__main__":
    grid = build_grid(parse_spec({"axes": {"model": ["gpt2"], "micro_batch": [1, 2]}}))
    SweepKernel(grid, compiled=True).evaluate(0, grid.total)
