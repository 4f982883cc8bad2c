"""The sweep's Parquet dataset: chunks stream into one part file per shard as row groups.

Layout of a dataset directory:
    _memsim.json                      spec digest, axes, total, shard count, memsim and catalog versions
    _spec.toml                        the spec as the user wrote it
    part-00000-of-00004.parquet       shard 0's rows (written as .tmp, renamed when complete)
    _shards/00000-of-00004.json       shard 0's completion record: index range and row count
A part file exists under its final name only once it is complete, and its completion record is written after
it (both atomically), so an interrupted sweep never leaves a file that looks finished.
"""

import hashlib
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import engine
from engine.atomic import write_text_atomic
from engine.errors import UserError
from engine.model import catalog

MANIFEST = "_memsim.json"


def spec_digest(grid) -> str:
    """What makes two shards parts of one dataset: the spec text, the catalogs and the memsim version."""
    text = grid.spec.text or json.dumps(grid.spec.axes, sort_keys=True)
    payload = f"{text}\n{catalog.catalog_version()}\n{engine.__version__}"
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def part_name(shard: int, n_shards: int) -> str:
    return f"part-{shard:05d}-of-{n_shards:05d}.parquet"


def marker_path(out_dir: Path, shard: int, n_shards: int) -> Path:
    return out_dir / "_shards" / f"{shard:05d}-of-{n_shards:05d}.json"


def prepare_dataset(out_dir: Path, grid, n_shards: int, force: bool) -> dict:
    """Create or join the dataset directory; refuse to mix shards of different specs."""
    manifest = {
        "memsim_version": engine.__version__,
        "catalog_version": catalog.catalog_version(),
        "spec_digest": spec_digest(grid),
        "title": grid.spec.title,
        "axes": [a.name for a in grid.axes],
        "total": grid.total,
        "n_shards": n_shards,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    existing = out_dir / MANIFEST
    if existing.exists():
        old = json.loads(existing.read_text())
        same = old.get("spec_digest") == manifest["spec_digest"] and old.get("n_shards") == n_shards
        if not same and not force:
            raise UserError(
                f"{out_dir} holds a sweep of another spec or shard count (digest {old.get('spec_digest')}, "
                f"{old.get('n_shards')} shards); use a new directory, or --force to replace it"
            )
        if not same:
            clear_dataset(out_dir)
        else:
            manifest["created"] = old.get("created", manifest["created"])
    elif out_dir.exists() and any(not own_entry(p.name) for p in out_dir.iterdir()) and not force:
        raise UserError(f"{out_dir} exists and is not a memsim dataset; use a new directory or --force")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "_shards").mkdir(exist_ok=True)
    write_text_atomic(out_dir / "_spec.toml", grid.spec.text or "")
    write_text_atomic(existing, json.dumps(manifest, indent=2))
    return manifest


def own_entry(name: str) -> bool:
    """A file a concurrent shard of this sweep may already have made (shards of a fresh dataset start together)."""
    return name.startswith(("_", ".", "part-"))


def clear_dataset(out_dir: Path) -> None:
    for p in list(out_dir.glob("part-*.parquet*")) + list(out_dir.glob("_shards/*.json")):
        p.unlink()


class PartWriter:
    """Streams one shard's row groups into a temporary file and publishes it atomically on close.

    Encodings, chosen by measurement (benchmarks/bench_sweep.py): the axes are small dictionaries of labels
    (dictionary pages, direct from their Arrow dictionaries); every other column is PLAIN, since the writer's
    dictionary hashing costs more per value than the compression of its long runs does; the index is delta
    encoded; statistics (min/max per row group, what DuckDB prunes row groups by) only for the index and the axes.
    """

    def __init__(self, out_dir: Path, shard: int, n_shards: int, schema: pa.Schema, metadata: dict, compression: str,
                 axes: list[str]):
        self.final = out_dir / part_name(shard, n_shards)
        self.tmp = self.final.with_name(self.final.name + ".tmp")
        self.marker = marker_path(out_dir, shard, n_shards)
        if self.marker.exists():
            self.marker.unlink()  # a re-run replaces the shard
        if self.final.exists():
            self.final.unlink()
        schema = schema.with_metadata({b"memsim": json.dumps(metadata).encode()})
        self.rows = 0
        try:
            self.writer = pq.ParquetWriter(
                self.tmp, schema, compression=compression, use_dictionary=axes,
                column_encoding={"index": "DELTA_BINARY_PACKED"}, write_statistics=["index", *axes],
            )
        except OSError as err:
            raise UserError(f"cannot write {self.tmp}: {err}") from None

    def write(self, table: pa.Table) -> None:
        try:
            self.writer.write_table(table)
        except OSError as err:
            self.abort()
            raise UserError(f"writing {self.tmp} failed ({err}); the shard was removed, nothing half-written is left") from None
        self.rows += table.num_rows

    def close(self, index_range: tuple[int, int], digest: str) -> None:
        self.writer.close()
        os.replace(self.tmp, self.final)
        record = {"range": list(index_range), "rows": self.rows, "spec_digest": digest, "file": self.final.name}
        write_text_atomic(self.marker, json.dumps(record))

    def abort(self) -> None:
        try:
            self.writer.close()
        except Exception:  # the writer may be mid-failure; the file goes either way
            pass
        if self.tmp.exists():
            self.tmp.unlink()
