"""How soon the first answer comes: one `memsim explain` on a cold numba cache, and the constants behind
engine/model/kernel.py's choice between the scalar reference in Python and the compiled kernel.

    python benchmarks/bench_first_answer.py            # explain cold and warm, Python rate, kernel load
    python benchmarks/bench_first_answer.py --compile  # also time a cold compile of the kernel (minutes)

Every figure is a fresh process (the way a user meets it), the median of --runs; the cold ones get an empty
NUMBA_CACHE_DIR each. Quote them beside the machine's load (`uptime`): on a busy machine wall time doubles.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

EXPLAIN = ["explain", "--model", "llama-2-13b", "--n-gpus", "1", "--micro-batch", "4"]  # does not fit: suggestions
CONSTANTS = """
import time, numpy as np
from engine.configure.resolve import resolve_case
from engine.inputs.vocabulary import RECORD
from engine.model import kernel
rec = resolve_case({"model": "llama-2-13b", "n_gpus": 8, "zero_stage": 3, "micro_batch": 4})[0]
rows = np.repeat(np.array([rec], dtype=RECORD), 200)
t0 = time.perf_counter(); kernel.evaluate_reference(rows); t1 = time.perf_counter()
kernel.evaluate_compiled(rows[:1]); t2 = time.perf_counter()
print((t1 - t0) / len(rows), t2 - t1)
"""


def wall(argv: list[str], env: dict) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def median_wall(argv: list[str], runs: int, cold: bool) -> float:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            env = os.environ | ({"NUMBA_CACHE_DIR": cache} if cold else {})
            times.append(wall(argv, env))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="also time a cold compile of the estimate kernel")
    args = parser.parse_args()
    memsim = [os.path.join(os.path.dirname(sys.executable), "memsim")]  # the installed entry point, as users run it
    print(f"load: {os.getloadavg()[0]:.2f}")
    print(f"explain, cold cache: {median_wall(memsim + EXPLAIN, args.runs, cold=True):.2f} s (median of {args.runs})")
    print(f"explain, warm cache: {median_wall(memsim + EXPLAIN, args.runs, cold=False):.2f} s")
    out = subprocess.run([sys.executable, "-c", CONSTANTS], check=True, capture_output=True, text=True).stdout
    per_row, load = map(float, out.split())
    print(f"scalar reference in Python: {per_row * 1e3:.2f} ms per configuration; kernel load (warm): {load:.2f} s")
    if args.compile:
        with tempfile.TemporaryDirectory() as cache:
            out = subprocess.run([sys.executable, "-c", CONSTANTS], check=True, capture_output=True, text=True,
                                 env=os.environ | {"NUMBA_CACHE_DIR": cache}).stdout
        print(f"kernel compile (cold): {float(out.split()[1]):.1f} s")


if __name__ == "__main__":
    main()
