"""Where a sweep's time goes: the kernel, the Arrow table built from each chunk, the Parquet write, per row.

    python benchmarks/bench_sweep_split.py                  # bench_sweep's 10^7 grid, full rows
    python benchmarks/bench_sweep_split.py --compact        # compact rows
    python benchmarks/bench_sweep_split.py --shards 2       # two shards written at once by one process
    python benchmarks/bench_sweep_split.py --column-costs   # one chunk's columns, each written alone
    python benchmarks/bench_sweep_split.py --floors         # what the build and the write bound each mode at

Runs `run_sweep` as `memsim sweep` does, with each stage timed where it runs (wall time, and the CPU time of the
thread that runs it: the kernel's own threads are not in its CPU figure). The three stages overlap (ChunkWriter:
chunk i+1 is computed while chunk i's table is built and chunk i-1's written), so the sweep takes about as long as
its slowest stage where cores are free, and the sum of their CPU where they are not. `--shards N` writes N parts
at once, each with its own builder and writer thread, the kernel computing their chunks in turn: a measure of what
more writers would give on this machine. The stages' times include the 65,536-row sample each shard writes to
memory first to size its part (sweep.expected_bytes), under 1% of the grid; the sweep's own seconds do not.

`--column-costs` writes each column of one full chunk (2^20 rows) alone with the part writer's settings, best of
five: what each column costs the writer, and for those that may hold NULL the same values with their NULLs filled
in and declared non-null (what the definition levels cost).

`--floors` builds the tables of eight chunks spread over the grid and writes them through the sweep's own writer
(store.PartWriter: its encodings, page checksums and hashing sink) for each output mode, best of three each, and
prints the CPU of each per configuration on one quiet core. A sweep runs the kernel, the build and the write, so on
`--cores` cores none passes cores / (their CPU per configuration) configurations a second, however well they
overlap: printed with the kernel at issue #24's 60 M/s (`--kernel-rate`; its threads' CPU a configuration is cores /
rate), with the build and as if it cost nothing, and the kernel rate each mode's target would need.
"""

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import engine.dataset.store as store  # noqa: E402
import engine.dataset.sweep as sweep  # noqa: E402
from benchmarks.bench_sweep import spec, toml  # noqa: E402 (the checkout first on the path)
from engine.dataset.chunks import SweepKernel  # noqa: E402

SPENT = collections.defaultdict(float)


def timed(owner, name: str, stage: str) -> None:
    """Wrap owner.name so that each call adds its wall and thread CPU time to SPENT[stage]."""
    inner = getattr(owner, name)

    def call(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            SPENT[stage, "wall"] += time.perf_counter() - wall
            SPENT[stage, "cpu"] += time.thread_time() - cpu

    setattr(owner, name, call)


def shards_at_once(spec_path: Path, out_dir: Path, n: int) -> tuple[int, float]:
    """Shards 0..n-1 of the spec written at once: one kernel call at a time, chunk by chunk in turn, each shard's
    table built and written on its own threads. (configurations, seconds)."""
    jobs = [sweep.shard_job(spec_path, (k, n)) for k in range(n)]
    manifest = store.prepare_dataset(out_dir, jobs[0].kernel.grid, n, True)
    t0 = time.perf_counter()
    writers = [sweep.ChunkWriter(j.kernel, out_dir, j.shard, {**manifest, "shard": j.shard[0], "range": [j.lo, j.hi],
                                                              "keep": j.keep, "spec": j.kernel.grid.spec.text},
                                 j.compression, j.keep) for j in jobs]
    starts = [j.lo for j in jobs]
    while any(s < j.hi for s, j in zip(starts, jobs)):
        for k, j in enumerate(jobs):
            if starts[k] < j.hi:
                count = min(j.chunk_rows, j.hi - starts[k])
                writers[k].submit(j.kernel.evaluate(starts[k], count))
                starts[k] += count
    for w, j in zip(writers, jobs):
        w.close((j.lo, j.hi), manifest["spec_digest"])
    return sum(j.hi - j.lo for j in jobs), time.perf_counter() - t0


def column_costs() -> None:
    """Each column of one full chunk written alone as the part writer writes it (store.parquet_options: dictionary
    pages for the named axes and the categorical outputs, PLAIN otherwise, the index delta encoded, LZ4, page checksums,
    version-2 pages), best of five; the int64 and float columns that may hold NULL again with their NULLs filled in
    and declared non-null."""
    from engine.configure.grid import build_grid
    from engine.configure.spec import parse_spec
    from engine.dataset.columns import chunk_table

    grid = build_grid(parse_spec(spec(1e7)))
    table = chunk_table(SweepKernel(grid, compiled=True).evaluate(3_000_000, 1 << 20))
    def cost(column: pa.Table) -> float:
        options = store.parquet_options(column.schema, grid.column_names, "lz4")
        if "index" not in column.schema.names:
            options.pop("column_encoding")  # the index's delta encoding names a column this table lacks
        best = float("inf")
        for _ in range(5):
            with tempfile.TemporaryFile() as f:
                t0 = time.perf_counter()
                with pq.ParquetWriter(f, column.schema, **options) as w:
                    w.write_table(column)
                best = min(best, time.perf_counter() - t0)
        return best / column.num_rows * 1e9

    for field in table.schema:
        column = table.select([field.name])
        line = f"  {field.name:24s} {str(field.type)[:24]:24s} {'nullable' if field.nullable else '':9s}"
        line += f"{cost(column):6.1f} ns a row"
        if field.nullable and (pa.types.is_integer(field.type) or pa.types.is_floating(field.type)):
            filled = pc.fill_null(column.column(0), -1 if pa.types.is_integer(field.type) else float("nan"))
            plain = pa.table([filled], schema=pa.schema([field.with_nullable(False)]))
            line += f"   its NULLs as values, declared non-null: {cost(plain):6.1f}"
        print(line)


TARGETS = {"full rows": 6e6, "compact rows": 20e6, "feasible rows only": 40e6}  # issue #24's, configurations/s


def write_floors(cores: int, kernel_rate: float, size: float, samples: int = 8) -> None:
    """Each output mode's tables of `samples` chunks spread evenly over bench_sweep's grid of about `size`
    configurations, built (columns.chunk_table) and written whole by store.PartWriter, best of three each on one quiet
    core: their CPU per configuration, the rate `cores` cores cannot pass with the kernel at `kernel_rate` (with the
    build, and without it), and the kernel rate issue #24's target for the mode would need."""
    from engine.configure.grid import build_grid
    from engine.configure.spec import parse_spec
    from engine.dataset.columns import chunk_table

    grid = build_grid(parse_spec(spec(size)))
    kernel = SweepKernel(grid, compiled=True)
    modes = (("full rows", "all", False), ("compact rows", "all", True), ("feasible rows only", "feasible", False))
    spent = {mode: [0.0, 0.0, 0, 0] for mode, _, _ in modes}  # build s, write s, rows kept, configurations
    for k in range(samples):
        start = (grid.total - (1 << 20)) * k // max(samples - 1, 1)
        chunk = kernel.evaluate(start, min(1 << 20, grid.total - start))
        for mode, keep, compact in modes:
            build = write = float("inf")
            for _ in range(3):
                chunk.kept.clear()
                cpu = time.thread_time()
                table = chunk_table(chunk, keep, compact)
                build = min(build, time.thread_time() - cpu)
                with tempfile.TemporaryDirectory() as tmp:
                    writer = store.PartWriter(Path(tmp), 0, 1, table.schema, {}, "lz4", grid.column_names)
                    cpu = time.thread_time()
                    writer.write(table)
                    write = min(write, time.thread_time() - cpu)
                    writer.abort()
            totals = spent[mode]
            totals[0] += build
            totals[1] += write
            totals[2] += table.num_rows
            totals[3] += chunk.count
    kernel_ns = cores / kernel_rate * 1e9
    print(f"{samples} chunks of 2^20 spread over bench_sweep's {grid.total:,} configurations; the kernel at "
          f"{kernel_rate / 1e6:.0f} M/s is {kernel_ns:.1f} ns of CPU a configuration on {cores} cores")
    for mode, _, _ in modes:
        build, write, kept, configs = spent[mode]
        build_ns, write_ns = build / configs * 1e9, write / configs * 1e9
        room = cores / TARGETS[mode] * 1e9 - build_ns - write_ns  # CPU a configuration left to the kernel
        needs = f"{cores / room * 1e3:,.0f} M/s" if room > 0 else "none would do"
        print(f"  {mode:20s} {kept / configs:6.1%} of rows kept; ns of CPU a configuration: write {write_ns:6.1f}, "
              f"build {build_ns:5.1f}\n"
              f"  {'':20s} with the kernel, at most {cores / (kernel_ns + write_ns + build_ns) * 1e3:5.1f} M/s, "
              f"{cores / (kernel_ns + write_ns) * 1e3:5.1f} M/s if the build cost nothing; "
              f"{TARGETS[mode] / 1e6:.0f} M/s (issue #24) needs a kernel of {needs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compact", action="store_true", help="[output] compact = true")
    ap.add_argument("--feasible-only", action="store_true", help="write only the rows that fit")
    ap.add_argument("--shards", type=int, default=1, help="parts written at once by this process")
    ap.add_argument("--column-costs", action="store_true", help="one chunk's columns, each written alone")
    ap.add_argument("--floors", action="store_true", help="each mode's rate bound by its build and write")
    ap.add_argument("--cores", type=int, default=2, help="cores the bound assumes (--floors)")
    ap.add_argument("--kernel-rate", type=float, default=60e6, help="the kernel's configurations/s (--floors)")
    ap.add_argument("--grid", type=float, default=1e7, choices=[1e6, 1e7, 1e8], help="bench_sweep's grid (--floors)")
    args = ap.parse_args()
    if args.column_costs:
        return column_costs()
    if args.floors:
        return write_floors(args.cores, args.kernel_rate, args.grid)
    output = {"compact": True} if args.compact else {}
    if args.feasible_only:
        output["feasible_only"] = True
    with tempfile.TemporaryDirectory() as tmp:  # the kernel loaded from numba's cache before anything is timed
        warm = Path(tmp) / "spec.toml"
        warm.write_text(toml({**spec(1e6), "output": output}))
        sweep.shard_job(warm).kernel.evaluate(0, 1)
    timed(SweepKernel, "evaluate", "kernel")
    timed(sweep, "chunk_table", "build table")
    timed(store.PartWriter, "write", "write Parquet")
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.toml"
        spec_path.write_text(toml({**spec(1e7), "output": output}))
        if args.shards == 1:
            r = sweep.run_sweep(spec_path, Path(tmp) / "out", force=True, progress=False, say=lambda *a: None)
            configs, seconds = r.evaluated, r.seconds
        else:
            configs, seconds = shards_at_once(spec_path, Path(tmp) / "out", args.shards)
    print(json.dumps({"configs": configs, "seconds": round(seconds, 2), "M_per_s": round(configs / seconds / 1e6, 2),
                      "shards": args.shards, "output": output}))
    for stage in ("kernel", "build table", "write Parquet"):
        wall, cpu = SPENT[stage, "wall"], SPENT[stage, "cpu"]
        print(f"  {stage:14s} wall {wall:6.2f} s ({wall / configs * 1e9:5.0f} ns a row)   "
              f"CPU of its thread {cpu:6.2f} s ({cpu / configs * 1e9:5.0f} ns a row)")


if __name__ == "__main__":
    main()
