"""Sweep throughput: configs/s of the kernel alone and of the whole sweep to Parquet on disk (full rows, compact
rows, feasible rows only), peak RSS, against a pure-Python loop over the scalar reference and a numpy-vectorized
baseline, in one run; on the 10^7 grid, where the kernel's time goes (one step level, one device row).

    python benchmarks/bench_sweep.py            # 1e6 and 1e7 configurations
    python benchmarks/bench_sweep.py --full     # also 1e8 (a few minutes, ~1 GiB of Parquet in a temp dir)

Not a test: speed is measured here and quoted, never asserted. Each end-to-end run is a fresh process, and its peak
RSS its own address space's (benchmarks/peak_rss.py: not getrusage's, which keeps this process's size across exec).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402, F401 (before numpy, as memsim's own commands: its process settings, engine/__init__.py)

# isort: split
import numba  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.peak_rss import peak_rss_gib  # noqa: E402
from engine.configure.grid import build_grid, decode  # noqa: E402
from engine.configure.spec import parse_spec  # noqa: E402
from engine.dataset.chunks import BUFFER_SETS, SweepKernel  # noqa: E402
from engine.model.kernel import PlainRecord  # noqa: E402
from engine.model.levels import evaluate_one  # noqa: E402

MODELS = ["llama-3.2-1b", "llama-3.1-8b", "qwen2.5-14b", "qwen2.5-32b", "llama-3.1-70b", "mixtral-8x7b",
          "qwen2.5-72b", "llama-3.1-405b", "gemma-2-27b", "mistral-7b-v0.1"]
GPUS = ["a100-sxm-80gb", "h100-sxm-80gb", "h200-sxm-141gb", "b200-sxm-192gb", "mi300x", "l40s", "rtx-4090",
        "a100-sxm-40gb", "mi325x", "l4"]
PROTOTYPE = ROOT.parent / "shared" / "bench" / "proto_rate.py"  # not part of memsim: a yardstick, when present
MODES = {"full rows": {}, "compact rows": {"compact": True}, "feasible rows only": {"feasible_only": True}}


def spec(size: float) -> dict:
    """A realistic capacity-planning grid of about `size` configurations (10 models x 10 GPUs x layouts)."""
    micro_batch, seq = {1e6: (4, [2048, 4096, 8192]), 1e7: (8, [512 * i for i in range(1, 19)]),
                        1e8: (16, [256 * i for i in range(1, 88)])}[size]
    return {"axes": {"model": MODELS, "n_gpus": [8, 16, 32, 64, 128], "tp": [1, 2, 4, 8], "pp": [1, 2, 4],
                     "zero_stage": [0, 1, 2, 3], "checkpointing": ["none", "selective", "full"],
                     "gpu": GPUS, "micro_batch": list(range(1, micro_batch + 1)), "seq_len": seq}}


def kernel_rate(axes: dict, limit: int) -> tuple[int, float]:
    """Configurations per second of the compiled kernel alone, in chunks of 2^20, outputs discarded. Its code loaded
    and its BUFFER_SETS output buffer sets allocated and first touched before the timing: a sweep allocates each
    once, and the first touch of fresh pages (~35 ms a 72 MiB set here) is not the kernel's work (until stop 47 only
    the first set was, and the 10^7 grid's figure paid for the other two: 34-35 against 43-48 M/s in one process)."""
    grid = build_grid(parse_spec(axes))
    kernel = SweepKernel(grid, compiled=True)
    chunk = 1 << 20
    for _ in range(BUFFER_SETS):
        kernel.evaluate(0, min(chunk, grid.total))
    n = min(grid.total, limit)
    t0 = time.perf_counter()
    for start in range(0, n, chunk):
        kernel.evaluate(start, min(chunk, n - start))
    return n, n / (time.perf_counter() - t0)


def level_costs(axes: dict, repeats: int = 3) -> tuple[float, float]:
    """Where the kernel's time goes, on one thread: (ns per step level, ns per device row). The grid run twice, with
    one GPU type and with all of them: the steps are the same, only the device rows per step differ, so no variant
    kernel is compiled to tell the two levels apart (the step's figure includes its one device row)."""
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        runs = []
        for gpus in (axes["axes"]["gpu"][:1], axes["axes"]["gpu"]):
            grid = {"axes": {**axes["axes"], "gpu": gpus}}
            rates = [kernel_rate(grid, 10**12) for _ in range(repeats)]  # (rows, rows/s): the whole grid each time
            runs.append((rates[0][0], rates[0][0] / max(rate for _, rate in rates)))
    finally:
        numba.set_num_threads(threads)
    (steps, one), (rows, every) = runs
    return one / steps * 1e9, (every - one) / (rows - steps) * 1e9


def python_rate(axes: dict, n: int = 2000) -> float:
    """The scalar reference in a plain Python loop, as explain and small sweeps run it: records decoded first, as
    Python scalars (kernel.PlainRecord: on numpy scalars the same loop is ~50x slower), then evaluate_one(c) per
    record."""
    grid = build_grid(parse_spec(axes))
    records = [PlainRecord(decode(grid, i)) for i in range(n)]
    t0 = time.perf_counter()
    for rec in records:
        evaluate_one(rec)
    return n / (time.perf_counter() - t0)


def numpy_rate(axes: dict, n: int = 1_000_000) -> float:
    """A numpy-vectorized baseline over the same grid: decode every axis column by mixed radix, then the
    model states (ZeRO-sharded, 16 B/param) and Korthikanti's activations, as whole-array expressions.
    A subset of memsim's terms (no phases, temporaries, LoRA, MoE): an upper bound on what numpy would do."""
    grid = build_grid(parse_spec(axes))
    axes_by_name = {a.name: a for a in grid.axes}
    model, gpu = axes_by_name["model"], axes_by_name["gpu"]
    idx = np.arange(min(n, grid.total), dtype=np.int64)
    t0 = time.perf_counter()
    digits, rest = {}, idx.copy()
    for axis, radix in zip(reversed(grid.axes), reversed(grid.radices)):
        digits[axis.name] = rest % radix
        rest //= radix
    cols = {name: a.words[digits[name], 0] for name, a in axes_by_name.items() if len(a.fields) == 1}
    f = {name: model.words[digits["model"], model.fields.index(name)]
         for name in ("n_params", "n_layers", "d_model", "n_heads")}
    tp, pp, n_gpus, zero = cols["tp"], cols["pp"], cols["n_gpus"], cols["zero_stage"]
    dp = np.maximum(1, n_gpus // (tp * pp))
    p = -(-f["n_params"] // (tp * pp))
    states = np.where(zero >= 3, 16 * p // dp,
                      np.where(zero >= 2, 2 * p + 14 * p // dp, np.where(zero >= 1, 4 * p + 12 * p // dp, 16 * p)))
    s, b, h, a = cols["seq_len"], cols["micro_batch"], f["d_model"], f["n_heads"]
    act = s * b * h * (10 + 24 // tp) + 5 * a * s * s * b // tp
    total = states + act * f["n_layers"] // pp
    capacity = gpu.words[digits["gpu"], gpu.fields.index("capacity_bytes")]
    fits = total <= capacity * 0.9
    fits.sum()
    return len(idx) / (time.perf_counter() - t0)


def prototype_rate() -> float | None:
    """Configurations per second of the shared factored numba prototype on this machine (../shared/bench), run
    beside the kernel so the two are compared under the same load; None where it is not on disk."""
    if not PROTOTYPE.exists():
        return None
    out = subprocess.run([sys.executable, str(PROTOTYPE)], capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1]) * 1e6  # it prints M configs/s


def end_to_end(size: float, output: dict) -> dict:
    """The whole sweep to Parquet on disk, in a fresh process so its peak RSS is its own."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.toml"
        spec_path.write_text(toml({**spec(size), "output": output}))
        code = (
            "import json, sys, time; sys.path.insert(0, %r);"
            "from benchmarks.peak_rss import peak_rss_gib;"
            "from engine.dataset.sweep import run_sweep;"
            "r = run_sweep(%r, %r, force=True, progress=False, say=lambda *a: None);"
            "print(json.dumps({'configs': r.evaluated, 'seconds': r.seconds, 'rows': r.written,"
            " 'rss_gib': peak_rss_gib()}))"
        ) % (str(ROOT), str(spec_path), str(Path(tmp) / "out"))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        result["parquet_mib"] = sum(f.stat().st_size for f in (Path(tmp) / "out").glob("*.parquet")) / 2**20
        return result


def toml(doc: dict) -> str:
    lines = ["[axes]"] + [f"{k} = {json.dumps(v)}" for k, v in doc["axes"].items()]
    if doc.get("output"):
        lines += ["[output]"] + [f"{k} = {json.dumps(v)}" for k, v in doc["output"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="include 1e8 configurations")
    args = ap.parse_args()
    sizes = [1e6, 1e7] + ([1e8] if args.full else [])
    py = python_rate(spec(1e6))
    npy = numpy_rate(spec(1e7))
    proto = prototype_rate()
    print(f"pure-Python reference loop:   {py:12,.0f} configs/s")
    print(f"numpy-vectorized (subset):    {npy:12,.0f} configs/s")
    if proto:
        print(f"factored prototype ({PROTOTYPE.name}): {proto / 1e6:.1f} M configs/s (issue #24's yardstick)")
    share = (lambda rate: f", {rate / proto:.1%} of the prototype") if proto else (lambda rate: "")
    for size in sizes:
        n, rate = kernel_rate(spec(size), int(size * 1.01))
        print(f"{n:>13,} configs  kernel {rate / 1e6:7.2f} M/s ({rate / py:8.0f}x Python, {rate / npy:5.2f}x numpy"
              f"{share(rate)})")
        if size == 1e7:
            step_ns, row_ns = level_costs(spec(size))
            print(f"{'':>22}one thread: {step_ns:.0f} ns a step level (with its first device row), {row_ns:.1f} ns "
                  f"each further device row ({len(GPUS)} GPU types a step)")
        for mode, output in MODES.items():
            e2e = end_to_end(size, output)
            e2e_rate = e2e["configs"] / e2e["seconds"]
            print(f"{'':>22}{mode:<20} {e2e_rate / 1e6:6.2f} M/s  {e2e['rows']:>13,} rows  "
                  f"Parquet {e2e['parquet_mib']:8.1f} MiB  peak RSS {e2e['rss_gib']:.2f} GiB{share(e2e_rate)}")
    print(f"(this process, peak RSS {peak_rss_gib():.2f} GiB)")


if __name__ == "__main__":
    main()
