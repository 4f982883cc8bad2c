"""How long `memsim plan` takes to answer over a million candidate configurations, warm (issue #22: <= 5 s).

    python benchmarks/bench_plan.py [--repeats 3]

The question: Llama 3.1 70B on 64 H100s, sequence 8192, global batch 128 (1,040,256 candidates: every layout,
ZeRO stage and offload, recompute, micro-batch and accumulation, precision, framework, loss and activation offload
at that batch). One call first loads the compiled sweep kernel and the catalogs (what a warm numba cache costs a
fresh process); then each repeat is timed whole (the search through the sweep kernel, the reduction, putting back
unneeded changes, the user's own configuration), and the search alone, in wall-clock seconds and in the CPU
seconds of all the process's threads. The machine's load average is printed beside the figures: on a shared
machine it moves the wall-clock ones more than anything memsim does. Not a test: speed is measured here and
quoted in the README, never asserted.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUESTION = {"model": "llama-3.1-70b", "gpu": "h100-sxm-80gb", "seq_len": 8192}
N_GPUS, GLOBAL_BATCH = (64,), 128
QUIET_KERNEL_RATE = 56.1e6  # README "Speed" (stop 48): bench_sweep.py's kernel alone, 864,000 configurations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from engine.ask.plan import PlanRequest, plan

    request = PlanRequest(QUESTION, N_GPUS, GLOBAL_BATCH, top=5)
    t0 = time.perf_counter()
    first = plan(request)
    print(f"first call (kernel and catalogs loaded): {time.perf_counter() - t0:.1f} s")
    whole, search, cpu = [], [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        found = plan(request)
        whole.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        search.append(found["seconds"])
    best = first["plans"][0]["outputs"]
    print(f"candidates {found['searched']:,} ({found['grids']} grids), {found['fitting']:,} fit; "
          f"best {best['tokens_per_gpu_s']:,.0f} tokens/s per GPU")
    print(f"warm answer: median {statistics.median(whole):.2f} s (min {min(whole):.2f}) over {args.repeats} runs; "
          f"search alone {statistics.median(search):.2f} s = {found['searched'] / statistics.median(search) / 1e6:.2f} "
          f"M configurations/s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    yardstick()
    print(f"CPU time: median {statistics.median(cpu):.2f} s of all threads (on {os.cpu_count()} idle cores the "
          f"answer takes about {statistics.median(cpu) / os.cpu_count():.2f}-{statistics.median(cpu):.2f} s: the "
          "kernel runs on every core, the rest on one)")


def yardstick() -> None:
    """The machine's speed now: the README's kernel benchmark (bench_sweep.py, 864,000 configurations: 56.1 M/s on
    two quiet cores), so a figure taken on a busy machine can be read against the quiet one."""
    from benchmarks.bench_sweep import kernel_rate, spec

    n, rate = kernel_rate(spec(1e6), 1_000_000)
    print(f"yardstick: bench_sweep.py's kernel alone over {n:,} configurations runs at {rate / 1e6:.2f} M/s now "
          f"(README: {QUIET_KERNEL_RATE / 1e6:.1f} M/s on two quiet cores): this machine runs at "
          f"{rate / QUIET_KERNEL_RATE:.0%} of that")


if __name__ == "__main__":
    main()
