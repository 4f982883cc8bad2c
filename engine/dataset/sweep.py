"""`memsim sweep`: evaluate every configuration of a spec and stream the rows into a Parquet dataset."""

import io
import shutil
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import pyarrow.parquet as pq

from engine.dataset.store import PartWriter, chunk_table, prepare_dataset
from engine.errors import UserError
from engine.inputs.codes import INVALID_REASONS, Invalid
from engine.inputs.grid import (
    FIELD_INDEX,
    GPU_FIELD_IDS,
    MODEL_FIELD_IDS,
    Grid,
    build_grid,
    load_spec,
)
from engine.inputs.vocabulary import RECORD
from engine.model.kernel import UNSET
from engine.model.outputs import OUTPUTS
from engine.model.sweep_kernel import sweep_chunk

FITS, VALID, REASON = OUTPUTS.index("fits"), OUTPUTS.index("valid"), OUTPUTS.index("invalid_reason")
SAMPLE_ROWS = 65_536


class KernelArgs:
    """The grid as the arrays sweep_chunk reads, built once per sweep."""

    def __init__(self, grid: Grid):
        n = len(grid.axes)
        width = max(len(a.labels) for a in grid.axes)
        self.values = np.zeros((n, width), dtype=np.int64)
        self.kind = np.zeros(n, dtype=np.int64)
        for k, axis in enumerate(grid.axes):
            self.values[k, : len(axis.labels)] = axis.values
            self.kind[k] = 1 if axis.name == "model" else 2 if axis.name == "gpu" else FIELD_INDEX[axis.name] + 3
        self.grid = grid
        self.radices = grid.radices
        self.blocks = 8 * numba.get_num_threads()
        self.scratch = np.zeros(self.blocks, dtype=RECORD)
        self.words = self.scratch.view(np.int64).reshape(self.blocks, len(RECORD.names))
        self.buffers = [None, None]
        self.turn = 0

    def evaluate(self, start: int, count: int):
        """Outputs, axis digits and (dp, n_gpus) of configurations start .. start+count-1.

        Two buffer sets alternate (fresh pages for every chunk cost more than the kernel): what a call returns
        stays valid while the next call runs — the writer thread uses it then — and is overwritten by the one
        after. Buffers start at UNSET, so a column the kernel never writes shows."""
        self.turn ^= 1
        buffers = self.buffers[self.turn]
        if buffers is None or buffers[0].shape[1] < count:
            g = self.grid
            buffers = (np.full((len(OUTPUTS), count), UNSET, dtype=np.int64),
                       np.empty((len(g.axes), count), dtype=np.int32), np.empty((2, count), dtype=np.int64))
            self.buffers[self.turn] = buffers
        out, digits, layout = (b[:, :count] for b in buffers)
        g = self.grid
        sweep_chunk(start, count, g.base, self.values, self.kind, self.radices, g.n_outer, g.model_rows,
                    MODEL_FIELD_IDS, g.gpu_rows, GPU_FIELD_IDS, g.dp_mode, self.scratch, self.words,
                    out, digits, layout)
        return out, digits, layout


def keep_mask(out, feasible_only: bool, valid_only: bool):
    if feasible_only:
        return (out[FITS] == 1) & (out[VALID] == 1)
    if valid_only:
        return out[VALID] == 1
    return None


def shard_range(total: int, shard: int, n_shards: int) -> tuple[int, int]:
    """Shard k of N: a contiguous, deterministic slice of the index range."""
    return total * shard // n_shards, total * (shard + 1) // n_shards


def expected_bytes(args: KernelArgs, lo: int, hi: int, feasible_only, valid_only, compression) -> int:
    """Output size, extrapolated from a sample chunk written to memory with the real settings."""
    count = min(SAMPLE_ROWS, hi - lo)
    if count == 0:
        return 0
    out, digits, layout = args.evaluate(lo, count)
    table = chunk_table(args.grid, lo, out, digits, layout, keep_mask(out, feasible_only, valid_only))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression)
    return int(buf.tell() / count * (hi - lo))


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


def run_sweep(spec_path, out_dir, shard=(0, 1), force=False, feasible_only=None, valid_only=None,
              chunk_rows=1 << 20, progress=None, say=print) -> SweepResult:
    """Sweep one shard of a spec into out_dir; see engine/store.py for the dataset layout."""
    spec = load_spec(spec_path)
    feasible_only = spec.output.get("feasible_only", False) if feasible_only is None else feasible_only
    valid_only = spec.output.get("valid_only", False) if valid_only is None else valid_only
    compression = spec.output.get("compression", "zstd")
    grid = build_grid(spec)
    k, n_shards = shard
    if not 0 <= k < n_shards:
        raise UserError(f"shard {k}/{n_shards} is out of range: use K/N with 0 <= K < N")
    lo, hi = shard_range(grid.total, k, n_shards)
    args = KernelArgs(grid)
    out_dir = Path(out_dir)
    need = expected_bytes(args, lo, hi, feasible_only, valid_only, compression)
    say(f"{hi - lo:,} configurations (shard {k}/{n_shards} of {grid.total:,}), ~{need / 2**20:,.1f} MiB expected")
    check_disk(out_dir, need, force)
    manifest = prepare_dataset(out_dir, grid, n_shards, force)
    chunk_rows = int(spec.output.get("rows_per_chunk", chunk_rows))
    return stream(args, out_dir, (lo, hi), (k, n_shards), manifest, feasible_only, valid_only,
                  compression, chunk_rows, progress)


def check_disk(out_dir: Path, need: int, force: bool) -> None:
    probe = out_dir if out_dir.exists() else next(p for p in out_dir.parents if p.exists())
    free = shutil.disk_usage(probe).free
    if need * 1.1 > free and not force:
        raise UserError(
            f"the sweep needs ~{need / 2**30:.2f} GiB but {probe} has {free / 2**30:.2f} GiB free; "
            "shrink the axes, write feasible rows only (--feasible-only), or --force"
        )


class ChunkWriter:
    """Builds each chunk's Arrow table and writes it, on one background thread, while the kernel (which
    releases the GIL) computes the next chunk; at most one chunk is in flight."""

    def __init__(self, args, out_dir, shard, meta, compression, keep):
        self.args, self.out_dir, self.shard, self.meta, self.compression, self.keep = args, out_dir, shard, meta, compression, keep
        self.part = None
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.pending = None

    def _write(self, start, out, digits, layout):
        table = chunk_table(self.args.grid, start, out, digits, layout, self.keep(out))
        if self.part is None:
            self.part = PartWriter(self.out_dir, self.shard[0], self.shard[1], table.schema, self.meta, self.compression)
        self.part.write(table)

    def submit(self, start, out, digits, layout) -> None:
        self.wait()
        self.pending = self.pool.submit(self._write, start, out, digits, layout)

    def wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()  # re-raises what the writer thread raised

    def close(self, index_range, digest) -> int:
        self.wait()
        if self.part is None:  # an empty shard still publishes its (empty) part
            empty = self.args.evaluate(index_range[0], 0)
            self._write(index_range[0], *empty)
        self.part.close(index_range, digest)
        self.pool.shutdown()
        return self.part.rows

    def abort(self) -> None:
        try:
            self.wait()
        except BaseException:  # the failure being handled is the one that matters
            pass
        self.pool.shutdown()
        if self.part is not None:
            self.part.abort()


def stream(args, out_dir, index_range, shard, manifest, feasible_only, valid_only, compression, chunk_rows, progress):
    lo, hi = index_range
    keep = "feasible" if feasible_only else "valid" if valid_only else "all"  # which rows: memsim verify checks it
    meta = {**manifest, "shard": shard[0], "range": [lo, hi], "keep": keep, "spec": args.grid.spec.text}
    writer = ChunkWriter(args, out_dir, shard, meta, compression, lambda out: keep_mask(out, feasible_only, valid_only))
    counts, reasons = Counter(), Counter()
    bar = Progress(hi - lo, sys.stderr.isatty() if progress is None else progress)
    t0 = time.perf_counter()
    try:
        for start in range(lo, hi, chunk_rows):
            count = min(chunk_rows, hi - start)
            out, digits, layout = args.evaluate(start, count)
            counts["valid"] += int(out[VALID].sum())
            counts["fits"] += int((out[FITS] == 1).sum())
            reasons.update(dict(enumerate(np.bincount(out[REASON], minlength=len(Invalid)))))
            writer.submit(start, out, digits, layout)
            bar.update(start + count - lo)
        rows = writer.close((lo, hi), manifest["spec_digest"])
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.finish()
    return SweepResult(out_dir, args.grid.total, hi - lo, rows, counts["valid"], counts["fits"],
                       time.perf_counter() - t0, Counter({Invalid(c): n for c, n in reasons.items() if n}))


def explain_no_valid(result: SweepResult) -> str:
    """Why a sweep produced no valid configuration: the invalid reasons, most frequent first."""
    top = [(INVALID_REASONS[r], n) for r, n in result.reasons.most_common() if r != Invalid.OK][:3]
    return "; ".join(f"{reason} ({n:,} rows)" for reason, n in top)


