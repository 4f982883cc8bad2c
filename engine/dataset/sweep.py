"""`memsim sweep`: evaluate every configuration of a spec and stream the rows into a Parquet dataset."""

import io
import shutil
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from engine.configure.grid import build_grid
from engine.configure.spec import load_spec
from engine.dataset.chunks import SweepKernel
from engine.dataset.columns import chunk_table
from engine.dataset.locks import shard_lock
from engine.dataset.store import (
    PartWriter,
    check_shard_count,
    parquet_options,
    prepare_dataset,
    remove_stale_temporaries,
)
from engine.errors import UserError
from engine.inputs.codes import INVALID_REASONS, Invalid

SAMPLE_ROWS = 65_536
# ... in slices spread over the shard: a sweep's first rows (its first model, its smallest layouts) compress unlike the
# rest (the default sweep's first 65,536 rows put its 19.4 MiB at 8.2; eight slices at 19.5)
SAMPLE_SLICES = 8


def keep_mode(feasible_only: bool, valid_only: bool) -> str:
    """Which rows a sweep writes: all, valid ones, or valid ones that fit (memsim verify checks it)."""
    return "feasible" if feasible_only else "valid" if valid_only else "all"


def shard_range(total: int, shard: int, n_shards: int) -> tuple[int, int]:
    """Shard k of N: a contiguous, deterministic slice of the index range."""
    return total * shard // n_shards, total * (shard + 1) // n_shards


def expected_bytes(kernel: SweepKernel, lo: int, hi: int, feasible_only, valid_only, compression) -> int:
    """Output size, extrapolated from SAMPLE_ROWS rows in SAMPLE_SLICES slices spread over the shard, written to
    memory with the part writer's settings (the whole shard where it is no larger)."""
    n = hi - lo
    if n == 0:
        return 0
    slices = 1 if n <= SAMPLE_ROWS else SAMPLE_SLICES
    rows = min(n, SAMPLE_ROWS) // slices
    keep, compact = keep_mode(feasible_only, valid_only), kernel.grid.spec.output.get("compact", False)
    buf, writer = io.BytesIO(), None
    for k in range(slices):
        table = chunk_table(kernel.evaluate(lo + (n - rows) * k // max(slices - 1, 1), rows), keep, compact)
        if writer is None:
            options = parquet_options(table.schema, kernel.grid.column_names, compression)
            writer = pq.ParquetWriter(buf, table.schema, **options)
        writer.write_table(table)  # now: the kernel's next calls reuse the buffers the table reads
    writer.close()
    return int(buf.tell() / (rows * slices) * n)


@dataclass
class SweepResult:
    out_dir: Path
    total: int
    evaluated: int
    written: int
    valid: int
    fits: int
    seconds: float
    reasons: Counter
    compiled: bool = False  # the sweep kernel was compiled for this run (a cold cache)


class Progress:
    """configs/s and ETA on a terminal; silent in pipes."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.t0 = total, enabled, time.perf_counter()

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        rate = done / dt
        eta = (self.total - done) / rate if rate else 0
        sys.stderr.write(f"\r{done:,}/{self.total:,} configs  {rate / 1e6:6.2f} M/s  ETA {eta:5.1f}s ")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


@dataclass
class ShardJob:
    """One shard of a spec, ready to stream: the kernel over the grid, its index range and what to keep."""

    kernel: SweepKernel
    shard: tuple[int, int]
    lo: int
    hi: int
    keep: str
    compression: str
    chunk_rows: int
    need: int  # expected bytes of its part file

    def describe(self) -> str:
        k, n = self.shard
        return (f"{self.hi - self.lo:,} configurations (shard {k}/{n} of {self.kernel.grid.total:,}), "
                f"~{self.need / 2**20:,.1f} MiB expected")


def shard_job(spec_path, shard=(0, 1), feasible_only=None, valid_only=None, chunk_rows=1 << 20) -> ShardJob:
    """Read the spec, resolve the output options (CLI flags override the spec's [output]) and the shard's range."""
    spec = load_spec(spec_path)
    feasible_only = spec.output.get("feasible_only", False) if feasible_only is None else feasible_only
    valid_only = spec.output.get("valid_only", False) if valid_only is None else valid_only
    compression = spec.output.get("compression", "lz4")
    grid = build_grid(spec)
    k, n_shards = shard
    check_shard_count(n_shards)
    if not 0 <= k < n_shards:
        raise UserError(f"shard {k}/{n_shards} is out of range: use K/N with 0 <= K < N")
    lo, hi = shard_range(grid.total, k, n_shards)
    chunk_rows = spec.output.get("rows_per_chunk", chunk_rows)
    if not 1 <= chunk_rows:
        raise UserError(f"rows per chunk must be at least 1, got {chunk_rows}")
    kernel = SweepKernel(grid)
    keep = keep_mode(feasible_only, valid_only)
    need = expected_bytes(kernel, lo, hi, keep == "feasible", keep == "valid", compression)
    return ShardJob(kernel, (k, n_shards), lo, hi, keep, compression, chunk_rows, need)


def run_sweep(spec_path, out_dir, shard=(0, 1), force=False, feasible_only=None, valid_only=None,
              chunk_rows=1 << 20, progress=None, say=print) -> SweepResult:
    """Sweep one shard of a spec into the local directory out_dir; see engine/dataset/store.py for the layout
    (engine/dataset/shards.py sweep_shard writes to a URI)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} exists and is not a directory: memsim sweep -o takes a directory")
    job = shard_job(spec_path, shard, feasible_only, valid_only, chunk_rows)
    say(job.describe())
    check_disk(out_dir, job.need, force)
    manifest = prepare_dataset(out_dir, job.kernel.grid, job.shard[1], force)
    with shard_lock(out_dir, *job.shard):  # one writer per shard; its temporaries are its own
        remove_stale_temporaries(out_dir, *job.shard)  # a killed writer's: none is live while we hold the lock
        return stream(job, out_dir, manifest, progress)


def check_disk(out_dir: Path, need: int, force: bool) -> None:
    probe = out_dir if out_dir.exists() else next(p for p in out_dir.parents if p.exists())
    free = shutil.disk_usage(probe).free
    if need * 1.1 > free and not force:
        raise UserError(
            f"the sweep needs ~{need / 2**30:.2f} GiB but {probe} has {free / 2**30:.2f} GiB free; "
            "shrink the axes, write feasible rows only (--feasible-only), or --force"
        )


class ChunkWriter:
    """Builds each chunk's Arrow table on one background thread and writes it on another, while the kernel (which
    releases the GIL, as Parquet's encoder does) computes the next chunk: chunk i+1 is computed while chunk i's
    table is built and chunk i-1's written, in index order. The tables may hold the kernel's own buffers (no copy),
    which the kernel's three buffer sets keep intact until the write is done (chunks.SweepKernel.evaluate)."""

    def __init__(self, kernel, out_dir, shard, meta, compression, keep):
        self.kernel, self.out_dir, self.shard, self.meta = kernel, out_dir, shard, meta
        self.compression, self.keep = compression, keep
        self.started = time.time()  # the shard's wall time, as its marker records it
        self.compact = kernel.grid.spec.output.get("compact", False)
        self.part = None
        self.builder = ThreadPoolExecutor(max_workers=1)
        self.writer = ThreadPoolExecutor(max_workers=1)
        self.building = self.writing = None

    def _write(self, table):
        if self.part is None:
            self.part = PartWriter(self.out_dir, self.shard[0], self.shard[1], table.schema, self.meta, self.compression,
                                   self.kernel.grid.column_names, self.started)
        self.part.write(table)

    def submit(self, chunk) -> None:
        """Queue chunk i: once chunk i-1's table is built and chunk i-2's written, chunk i-1's write is queued and
        chunk i's build begins (the kernel may then overwrite chunk i-2's buffers)."""
        self.pass_on()
        self.building = self.builder.submit(chunk_table, chunk, self.keep, self.compact)

    def pass_on(self) -> None:
        """The table being built goes to the writer, after the write before it (re-raising what either raised)."""
        if self.building is None:
            return
        building, self.building = self.building, None
        table = building.result()
        self.wait_for_write()
        self.writing = self.writer.submit(self._write, table)

    def wait_for_write(self) -> None:
        if self.writing is not None:
            writing, self.writing = self.writing, None
            writing.result()

    def wait(self) -> None:
        self.pass_on()
        self.wait_for_write()

    def close(self, index_range, digest) -> int:
        self.wait()
        if self.part is None:  # an empty shard still publishes its (empty) part
            self._write(chunk_table(self.kernel.evaluate(index_range[0], 0), self.keep, self.compact))
        self.part.close(index_range, digest)
        self.shutdown()
        return self.part.rows

    def shutdown(self) -> None:
        self.builder.shutdown()
        self.writer.shutdown()

    def abort(self) -> None:
        for pending in (self.building, self.writing):
            try:
                if pending is not None:
                    pending.result()
            except BaseException:  # noqa: BLE001, S110 (the failure being handled is the one that matters)
                pass
        self.building = self.writing = None
        self.shutdown()
        if self.part is not None:
            self.part.abort()


def stream(job: ShardJob, out_dir, manifest: dict, progress) -> SweepResult:
    """Evaluate the shard chunk by chunk and write each chunk while the next is computed; `out_dir` is a local
    directory or a Location (engine/dataset/store.py PartWriter)."""
    kernel, (lo, hi), chunk_rows = job.kernel, (job.lo, job.hi), job.chunk_rows
    meta = {**manifest, "shard": job.shard[0], "range": [lo, hi], "keep": job.keep, "spec": kernel.grid.spec.text}
    writer = ChunkWriter(kernel, out_dir, job.shard, meta, job.compression, job.keep)
    counts, reasons = Counter(), np.zeros(len(Invalid), dtype=np.int64)
    bar = Progress(hi - lo, sys.stderr.isatty() if progress is None else progress)
    t0 = time.perf_counter()
    try:
        for start in range(lo, hi, chunk_rows):
            chunk = kernel.evaluate(start, min(chunk_rows, hi - start))
            counts["valid"] += chunk.count_rows("valid", 1)
            counts["fits"] += int((chunk.values("fits") == 1).sum())
            per_reason = chunk.reasons()
            reasons[: len(per_reason)] += per_reason
            writer.submit(chunk)
            bar.update(start + chunk.count - lo)
        rows = writer.close((lo, hi), manifest["spec_digest"])
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.finish()
    return SweepResult(out_dir, kernel.grid.total, hi - lo, rows, counts["valid"], counts["fits"],
                       time.perf_counter() - t0, Counter({Invalid(c): int(n) for c, n in enumerate(reasons) if n}),
                       kernel.compiles)


def explain_no_valid(result: SweepResult) -> str:
    """Why a sweep produced no valid configuration: the invalid reasons, most frequent first."""
    top = [(INVALID_REASONS[r], n) for r, n in result.reasons.most_common() if r != Invalid.OK][:3]
    return "; ".join(f"{reason} ({n:,} rows)" for reason, n in top)


