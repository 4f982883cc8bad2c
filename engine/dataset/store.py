"""The sweep's Parquet dataset: chunks stream into one part file per shard as row groups.

Layout of a dataset directory:
    _memsim.json                      spec digest, axes, total, shard count, memsim and catalog versions
    _memsim.lock                      held while a sweep checks and writes the manifest
    _spec.toml                        the spec as the user wrote it
    part-00000-of-00004.parquet       shard 0's rows (written as .tmp-HOST-PID, renamed when complete)
    _shards/00000-of-00004.json       shard 0's completion record: index range, row count, spec digest, the
                                      part's size and checksums, and who wrote it (host, Ray node, version, time)
    _shards/00000-of-00004.lock       held by the process writing shard 0
The markers are the truth of a dataset: a part file counts only when its marker says so (engine/dataset/views.py
reads exactly the parts the markers list). A part exists under its final name only once it is complete; a
re-run writes its own temporary file and keeps the old part (and its marker) until the new one is renamed over
it, so an interrupted re-run loses nothing. One process at a time writes a shard (an flock on its .lock);
temporary names carry the host and process id, so two writers never share one.
"""

import contextlib
import hashlib
import json
import math
import os
import socket
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import engine
from engine.atomic import write_text_atomic
from engine.catalogs import catalog
from engine.configure.grid import index_axes
from engine.dataset.checksum import Damaged, HashingSink, footer_of
from engine.dataset.checksum import record as checksum_record
from engine.dataset.location import Location
from engine.dataset.locks import locked
from engine.dataset.provenance import provenance
from engine.errors import UserError
from engine.inputs.vocabulary import INPUTS

MANIFEST = "_memsim.json"
DATASET_LOCK = "_memsim.lock"
MAX_SHARDS = 99_999  # part and marker names hold the shard numbers in 5 digits
# Data pages of up to 4 MiB, filled 64k values at a time (Arrow's defaults: 1 MiB, 1,024): fewer pages, each with
# its header, CRC and compression call, write a full row group in ~10% less time (benchmarks/bench_sweep.py).
PAGE_BYTES = 4 << 20
PAGE_BATCH_ROWS = 1 << 16
# Data pages of format version 2: their repetition and definition levels are stored beside the compressed values,
# not compressed with them, and the writer spends ~12% less CPU on a full row group (170-174 against 195-200 ns a
# row, one chunk of bench_sweep's 10^7 grid written alone), compact rows the same; DuckDB, polars and pyarrow (with
# its page checksums checked) read them (stop 47: full-row sweeps 1.03-1.15x, feasible-only 1.11-1.14x, in turn).
DATA_PAGE_VERSION = "2.0"
# The parts' column types, in the spec digest, so that a shard is never added to a dataset whose other parts type a
# column otherwise: 2 since stop 48, whose parts hold a numeric axis as its numbers, not a dictionary of them
# (columns.label_column), and declare `fits` non-null (it is false, never NULL, where a configuration cannot run).
# A dataset begun before is read as it is, and refused a new shard without --force.
PART_FORMAT = 2


def check_shard_count(n: int, what: str = "shards") -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SHARDS:
        raise UserError(f"the number of {what} must be from 1 to {MAX_SHARDS:,}, got {n}")


def spec_digest(grid) -> str:
    """What makes two shards parts of one dataset: the spec text, what its axes resolve to (a config.json's
    content, not only its path), the catalogs, the memsim version and the parts' column types (PART_FORMAT)."""
    text = grid.spec.text or json.dumps(grid.spec.axes, sort_keys=True)
    h = hashlib.sha256(f"{text}\n{catalog.catalog_version()}\n{engine.__version__}\n{PART_FORMAT}".encode())
    for axis in grid.axes:  # every value each axis sets, as the kernel reads it
        h.update(json.dumps([axis.name, axis.fields, axis.labels], default=str).encode())
        h.update(axis.words.tobytes())
    h.update(grid.base.tobytes())
    return h.hexdigest()[:16]


def part_name(shard: int, n_shards: int) -> str:
    return f"part-{shard:05d}-of-{n_shards:05d}.parquet"


def marker_path(out_dir: Path, shard: int, n_shards: int) -> Path:
    return out_dir / "_shards" / f"{shard:05d}-of-{n_shards:05d}.json"


def writer_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def read_manifest(out_dir: Path) -> dict | None:
    """The dataset's manifest, None when there is none; a damaged one is one line."""
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        return None
    try:
        return check_manifest(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as err:
        raise UserError(f"{path} is damaged ({str(err).splitlines()[0][:120]}): re-sweep into a new directory, "
                        "or with --force to replace it") from None


def check_manifest(manifest) -> dict:
    """The manifest, if its fields have the types a sweep writes; else TypeError or ValueError saying which not."""
    if not isinstance(manifest, dict):
        raise TypeError("not a JSON object")
    for key, low, high in (("total", 0, 2**62), ("n_shards", 1, MAX_SHARDS)):
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{key} must be an integer from {low:,} to {high:,}, got {value!r:.40}")
    if not isinstance(manifest.get("spec_digest"), str):
        raise TypeError(f"spec_digest must be text, got {manifest.get('spec_digest')!r:.40}")
    if "index_axes" in manifest:
        check_index_axes(manifest["index_axes"], manifest["total"])
    return manifest


def check_index_axes(index_axes, total: int) -> None:
    """A compact sweep's index_axes (configure/grid.py) as the view builds SQL from them: integer strides and
    radices, each column an input's name, a finite scalar label per digit; else ValueError saying what is not."""
    if not isinstance(index_axes, list):
        raise ValueError("index_axes must be a list")
    for axis in index_axes:
        if not isinstance(axis, dict) or not isinstance(axis.get("columns"), list):
            raise ValueError(f"an index axis must hold its columns, got {axis!r:.60}")
        for key in ("stride", "radix"):
            value = axis.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max(total, 1):
                raise ValueError(f"an index axis' {key} must be an integer from 1 to {total:,}, got {value!r:.40}")
        for column in axis["columns"]:
            if not (isinstance(column, list) and len(column) == 2 and column[0] in INPUTS):
                raise ValueError(f"an index axis column must be an input's name and its labels, got {column!r:.60}")
            labels = column[1]
            if not isinstance(labels, list) or len(labels) != axis["radix"] or not all(map(finite_scalar, labels)):
                raise ValueError(f"{column[0]}'s labels must be {axis['radix']} numbers, texts or booleans")


def finite_scalar(value) -> bool:
    return isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))


def same_dataset(old: dict, grid, n_shards: int) -> bool:
    """Whether shards of this grid join the dataset `old` describes: one spec, one shard count, and one layout of
    the parts (compact parts written before index_axes store their axes; the new ones do not)."""
    compact = bool(grid.spec.output.get("compact", False))
    return (old.get("spec_digest") == spec_digest(grid) and old.get("n_shards") == n_shards
            and ("index_axes" in old) == compact)


# --- the dataset directory ------------------------------------------------------------------------------------


def prepare_dataset(out_dir: Path, grid, n_shards: int, force: bool) -> dict:
    """Create or join the dataset directory; refuse to mix shards of different specs."""
    out_dir = Path(out_dir)
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
    if grid.spec.output.get("compact", False):  # its parts hold no axis columns: the view derives them
        manifest["index_axes"] = index_axes(grid)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} exists and is not a directory: memsim sweep -o takes a directory")
    if out_dir.is_dir() and not (out_dir / MANIFEST).exists() and not force:
        try:
            foreign = [p.name for p in out_dir.iterdir() if not own_entry(p.name)]
        except OSError as err:
            raise UserError(f"cannot read {out_dir}: {err.strerror or err}") from None
        if foreign:
            raise UserError(f"{out_dir} exists and is not a memsim dataset; use a new directory or --force")
    try:
        (out_dir / "_shards").mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create {out_dir}: {err.strerror or err} ({err.filename})") from None
    with locked(out_dir / DATASET_LOCK, f"the manifest of {out_dir}", wait=True):  # check and write as one step
        try:
            old = read_manifest(out_dir)
        except UserError:
            if not force:
                raise
            old = {}
        if old is not None:
            same = same_dataset(old, grid, n_shards)
            if not same and not force:
                raise UserError(
                    f"{out_dir} holds a sweep of another spec, shard count or part layout (digest "
                    f"{old.get('spec_digest')}, {old.get('n_shards')} shards); use a new directory, or --force to "
                    "replace it"
                )
            if not same:
                clear_dataset(out_dir)
            else:
                manifest["created"] = old.get("created", manifest["created"])
        write_text_atomic(out_dir / "_spec.toml", grid.spec.text or "")
        write_text_atomic(out_dir / MANIFEST, json.dumps(manifest, indent=2))
    return manifest


def own_entry(name: str) -> bool:
    """A file a concurrent shard of this sweep may already have made (shards of a fresh dataset start together)."""
    return name.startswith(("_", ".", "part-"))


def clear_dataset(out_dir: Path) -> None:
    """Remove another sweep's parts, markers and temporaries (--force); refused while any of its shards runs."""
    with contextlib.ExitStack() as held:
        for lock in sorted(out_dir.glob("_shards/*.lock")):
            held.enter_context(locked(lock, f"{out_dir} (shard {lock.stem})"))
        for p in list(out_dir.glob("part-*.parquet*")) + list(out_dir.glob("_shards/*.json")):
            p.unlink(missing_ok=True)


def remove_stale_temporaries(out_dir: Path, shard: int, n_shards: int) -> None:
    """Temporaries of this shard that a killed writer left (the caller holds the shard's lock: none is live)."""
    for p in out_dir.glob(part_name(shard, n_shards) + ".tmp*"):
        p.unlink(missing_ok=True)


def parquet_options(schema: pa.Schema, axes: list[str], compression: str) -> dict:
    """The Parquet writer's options for a part of this schema (PartWriter's docstring says why each)."""
    dictionaries = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    return dict(compression=compression, use_dictionary=dictionaries, write_page_checksum=True,
                column_encoding={"index": "DELTA_BINARY_PACKED"}, write_statistics=["index", *axes],
                data_page_size=PAGE_BYTES, write_batch_size=PAGE_BATCH_ROWS, data_page_version=DATA_PAGE_VERSION)


class PartWriter:
    """Streams one shard's row groups into a temporary file and publishes it atomically on close.

    Encodings, chosen by measurement (benchmarks/bench_sweep.py): the axes of names and the categorical outputs are
    small dictionaries of labels (dictionary pages, direct from their Arrow dictionaries, where PLAIN would spell out
    every label: 12% off a full row group's write); every other column is PLAIN, numeric axes included
    (columns.label_column), since the writer's dictionary hashing, or its indices' encoding, costs more per value
    than the compression of long runs does; the index is delta encoded;
    statistics (min/max per row group, what DuckDB prunes row groups by) only for the index and the axes; data
    pages of version 2 (DATA_PAGE_VERSION). Every page carries a CRC-32 and the bytes are hashed as they are written
    (engine/dataset/checksum.py). `parquet_options` holds these settings.

    `out_dir` is a local directory (written with open() and os.replace) or a Location, written through its
    pyarrow filesystem: streamed to a temporary, then moved to its name. On an object store (S3, GCS), where an
    object appears only once its upload completes, a shard with no part yet is streamed straight to its name
    instead (no server-side copy of the whole part). A write that fails or is interrupted deletes what it
    uploaded; a killed one leaves only an incomplete upload, which no listing shows. Until close() the shard's
    previous part and marker (a re-run's) stay as they are.
    """

    def __init__(self, out_dir, shard: int, n_shards: int, schema: pa.Schema, metadata: dict, compression: str,
                 axes: list[str], started: float | None = None):
        self.place = out_dir if isinstance(out_dir, Location) else None
        name, marker = part_name(shard, n_shards), marker_path(Path(""), shard, n_shards).as_posix()
        if self.place is None:
            self.out_dir = Path(out_dir)
            self.final = self.out_dir / name
            self.tmp = self.final.with_name(f"{name}.tmp-{writer_id()}")  # this process's own
            self.marker = marker_path(self.out_dir, shard, n_shards)
        else:
            self.out_dir = self.place.uri
            self.final, self.marker = self.place.path(name), marker
            self.direct = self.place.object_store and self.place.kind(name) == pafs.FileType.NotFound
            self.tmp = self.final if self.direct else f"{self.final}.tmp-{writer_id()}"
            if self.direct and self.place.kind(marker) == pafs.FileType.File:
                self.place.fs.delete_file(self.place.path(marker))  # a marker whose part is gone vouches for nothing
        self.started = time.time() if started is None else started
        schema = schema.with_metadata({b"memsim": json.dumps(metadata).encode()})
        self.rows, self.sink = 0, None
        try:
            stream = open(self.tmp, "wb") if self.place is None else self.place.fs.open_output_stream(self.tmp)  # noqa: SIM115
            self.sink = HashingSink(stream)  # closed in close() or abort()
            self.writer = pq.ParquetWriter(self.sink, schema, **parquet_options(schema, axes, compression))
        except (OSError, pa.ArrowException) as err:
            self.remove_tmp()
            raise UserError(f"cannot write {self.tmp}: {first_line(err)}") from None

    def failed(self, err: Exception) -> UserError:
        self.abort()
        return UserError(f"writing {self.final} failed ({first_line(err)}); this shard's temporary file was removed "
                         "and any earlier complete part kept: nothing half-written is left")

    def write(self, table: pa.Table) -> None:
        try:
            self.writer.write_table(table)
        except OSError as err:
            raise self.failed(err) from None
        self.rows += table.num_rows

    def close(self, index_range: tuple[int, int], digest: str) -> None:
        """Finish the file (its footer) and publish it: the old marker is withdrawn only as the new part is
        renamed over the old one, and the new marker written right after, with the part's checksums."""
        try:
            self.sink.recording = []  # the footer: what the writer writes as it closes
            self.writer.close()  # a disk that fills up now fails here
            footer = footer_of(b"".join(self.sink.recording))
            self.sink.close()  # on an object store, the temporary object's upload completes here
            manifest = self.read_manifest()
            if manifest is not None and manifest.get("spec_digest") != digest:
                raise UserError(f"{self.out_dir} was replaced by a sweep of another spec (--force) while this shard "
                                "ran; nothing of it was published")
            self.publish()
        except (OSError, Damaged) as err:
            raise self.failed(err) from None
        except BaseException:
            self.abort()
            raise
        record = {"range": list(index_range), "rows": self.rows, "spec_digest": digest, "file": Path(self.final).name,
                  **checksum_record(self.sink, footer), **provenance(self.started)}
        try:
            self.write_marker(json.dumps(record))
        except (UserError, OSError) as err:
            raise UserError(f"{self.final} is written but its completion marker is not ({first_line(err)}): "
                            "re-run the shard") from None

    def read_manifest(self) -> dict | None:
        if self.place is None:
            return read_manifest(self.out_dir)
        try:
            return self.place.read_json(MANIFEST)
        except ValueError:
            return None

    def publish(self) -> None:
        """The old marker goes, then the new part takes the final name (a rename; a server-side move remotely)."""
        if self.place is None:
            self.marker.unlink(missing_ok=True)
            os.replace(self.tmp, self.final)
            return
        fs = self.place.fs
        if fs.get_file_info(self.place.path(self.marker)).type == pafs.FileType.File:
            fs.delete_file(self.place.path(self.marker))
        if not self.direct:
            fs.move(self.tmp, self.final)

    def write_marker(self, text: str) -> None:
        if self.place is None:
            write_text_atomic(self.marker, text)
        else:
            self.place.write_bytes(self.marker, text.encode())

    def abort(self) -> None:
        for close in (getattr(self, "writer", None), self.sink):
            try:
                if close is not None:
                    close.close()
            except Exception:  # noqa: BLE001, S110 (the writer may be mid-failure; the file goes either way)
                pass
        self.remove_tmp()

    def remove_tmp(self) -> None:
        try:
            if self.place is None:
                Path(self.tmp).unlink(missing_ok=True)
            else:
                self.place.fs.delete_file(self.tmp)
        except (FileNotFoundError, OSError):
            pass


def first_line(err: Exception) -> str:
    text = getattr(err, "strerror", None) or str(err)
    return text.strip().splitlines()[0][:200] if text.strip() else type(err).__name__
