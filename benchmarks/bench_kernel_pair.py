"""The sweep kernel's rate at another revision and at the working tree, in turn: each run a fresh process on its
revision's own code (numba caches each revision's kernel apart: engine/__init__.py keys the cache by the compiled
sources), alternated A B A B ..., on bench_sweep's 10^7 grid, best of three whole passes each; the ratio pair by
pair, so a comparison holds while the machine's speed drifts (it moves 1.5-2x within an hour here).

    python benchmarks/bench_kernel_pair.py dd7c5b5                # 5 pairs on 2 threads (the first of each compiles)
    python benchmarks/bench_kernel_pair.py dd7c5b5 --threads 1 --pairs 4

Not a test: speed is measured here and quoted, never asserted.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_sweep import spec  # noqa: E402

# One process: the revision's engine first (its process settings), then the grid's whole passes.
CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
import engine  # noqa: F401
import numba
from engine.configure.grid import build_grid
from engine.configure.spec import parse_spec
from engine.dataset.chunks import SweepKernel
numba.set_num_threads({threads})
grid = build_grid(parse_spec(json.loads({spec!r})))
kernel = SweepKernel(grid, compiled=True)
chunk = 1 << 20
kernel.evaluate(0, min(chunk, grid.total))
best = float("inf")
for _ in range(3):
    started = time.perf_counter()
    for start in range(0, grid.total, chunk):
        kernel.evaluate(start, min(chunk, grid.total - start))
    best = min(best, time.perf_counter() - started)
print(grid.total / best)
"""


def rate(root: Path, threads: int) -> float:
    """Configurations per second of the kernel at the code under `root`, in a fresh process."""
    code = CHILD.format(root=str(root), threads=threads, spec=json.dumps(spec(1e7)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the git revision to compare the working tree against")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{args.revision}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        print(f"bench_kernel_pair: no such revision: {args.revision}", file=sys.stderr)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(old), args.revision],
                       check=True)
        try:
            rate(old, args.threads), rate(ROOT, args.threads)  # each revision's kernel compiled or loaded once
            ratios = []
            for k in range(args.pairs):
                a, b = rate(old, args.threads), rate(ROOT, args.threads)
                ratios.append(b / a)
                print(f"pair {k + 1}: {args.revision} {a / 1e6:.2f} M/s, working tree {b / 1e6:.2f} M/s, "
                      f"ratio {b / a:.2f}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    print(f"working tree / {args.revision}: {statistics.median(ratios):.2f}x at the median of {args.pairs} pairs "
          f"({min(ratios):.2f}-{max(ratios):.2f}; {args.threads} thread{'s' if args.threads > 1 else ''}, the 10^7 "
          f"grid)")


if __name__ == "__main__":
    main()
