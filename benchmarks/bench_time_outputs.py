"""What the time and cost outputs (step_time_s, tokens_per_gpu_s, mfu, cost_per_mtok) cost a sweep (issue #16:
within 20% of the sweep without them).

    python benchmarks/bench_time_outputs.py [--pairs 4]

Each run is a fresh process sweeping bench_sweep.py's 10^7-configuration spec to Parquet (full rows). "without"
replaces the time model (levels.step_work, gpu_rates, device_times) by constants before the kernel compiles, in a
numba cache of its own, and writes no time columns. Runs alternate with / without; the ratio is taken pair by pair.
Not a test: speed is measured here and quoted, never asserted.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RUN = """
import os, sys, tempfile
mode = sys.argv[1]
sys.path.insert(0, {root!r})
from engine.model import levels
from engine.model.common import formula
if mode == "without":
    from engine.dataset import columns
    from engine.model.gpu_rates import Rates
    from engine.model.outputs import TIME_COLUMNS
    NO_WORK, NO_TIMES = levels.NO_WORK, levels.NO_TIMES

    @formula
    def no_work(c, r):
        return NO_WORK

    @formula
    def no_rates(c, r):
        return Rates(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    @formula
    def no_times(w, g):
        return NO_TIMES

    levels.step_work, levels.gpu_rates, levels.device_times = no_work, no_rates, no_times
    columns.OUTPUTS = [n for n in columns.OUTPUTS if n not in TIME_COLUMNS]
from benchmarks import bench_sweep
from engine.dataset.sweep import run_sweep
with tempfile.TemporaryDirectory() as tmp:
    spec = os.path.join(tmp, "spec.toml")
    open(spec, "w").write(bench_sweep.toml(bench_sweep.spec(1e7)))
    result = run_sweep(spec, os.path.join(tmp, "out"), force=True, progress=False, say=lambda *a: None)
    print(result.seconds)
"""


def sweep_seconds(mode: str, cache: Path) -> float:
    env = os.environ | {"NUMBA_CACHE_DIR": str(cache / mode)}  # the two variants never share compiled code
    code = RUN.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        sweep_seconds("with", cache), sweep_seconds("without", cache)  # compile both first, outside the timing
        pairs = [(sweep_seconds("with", cache), sweep_seconds("without", cache)) for _ in range(args.pairs)]
    ratios = [a / b for a, b in pairs]
    print(f"with the time outputs:    median {statistics.median(a for a, _ in pairs):.2f} s")
    print(f"without them:             median {statistics.median(b for _, b in pairs):.2f} s")
    print(f"ratio, pair by pair:      median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
          f"max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
