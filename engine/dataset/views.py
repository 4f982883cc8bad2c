"""DuckDB over a sweep dataset: the views `sweep`, `models` and `gpus` that every query reads, and `outputs`, what
each output column of `sweep` means (engine/inputs/outputs.py).

`sweep` reads exactly the part files the completion markers list (the markers are the truth of a dataset,
engine/dataset/store.py): never a glob, so a stray part, a half-written temporary or a path with `*`, `?` or
`[` in it is never read. A dataset with a shard missing or damaged is refused, as `memsim verify` would refuse
it, unless the caller asks for the complete shards only (`partial`), and then every output says so. The view
adds, as constants, every CONFIG.md input the spec did not sweep (so SQL can always say `seq_len` or
`precision`), with the value the sweep used: its default.

The dataset is a local directory or a URI (s3://, gs://, file://; engine/dataset/location.py). DuckDB reads its
parts through an Arrow dataset on the same pyarrow filesystem (no DuckDB extension, nothing downloaded), which
checks each page's CRC as it reads it; each part's size and footer are checked against its marker first
(engine/dataset/checksum.py), so a flipped bit is refused rather than answered from.

A read-only connection (named queries, the report, and `memsim sql` unless --allow-writes) reads the parts and
nothing else: no file read or written by DuckDB itself, no database attached, no extension installed or loaded,
its settings locked.
"""

import contextlib
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from engine import QUERIES_DIR
from engine.configure import tables
from engine.configure.resolve import MODEL_FIELD_NAMES
from engine.dataset.checksum import PARQUET_FORMAT, Damaged, check_whole, footer_metadata, read_checked_footer
from engine.dataset.location import Location, locate
from engine.dataset.store import MANIFEST, check_manifest, marker_path, part_name
from engine.errors import UserError
from engine.inputs.vocabulary import GPU_ATTRIBUTES, INPUT_FIELDS, sql_literal

FOOTER_THREADS = 8  # parts whose marker and footer are checked at once (object stores have latency)
PARTS_VIEW = "sweep_parts"  # the Arrow dataset of the complete parts, as DuckDB sees it
LOCATE_BYTES = 8 << 30  # parts hashed to name the damaged one after a failed read; verify does it for more
READ_FAILED = re.compile(rf"reading the stream registered as '{PARTS_VIEW}' failed|CRC checksum verification failed")


@dataclass
class SweepParts:
    """The part files a dataset's markers list, and what keeps the dataset from being whole."""

    place: Location
    manifest: dict
    files: list = field(default_factory=list)  # complete parts (paths in place.fs), in shard order
    markers: dict = field(default_factory=dict)  # shard -> its marker, for the complete parts
    problems: dict = field(default_factory=dict)  # shard -> why it does not count
    rows: int = 0  # rows in the complete parts

    @property
    def root(self) -> str:
        return self.place.uri

    @property
    def n_shards(self) -> int:
        return int(self.manifest["n_shards"])

    @property
    def complete(self) -> bool:
        return not self.problems

    def shard_list(self) -> str:
        shown = [f"{k}/{self.n_shards} ({why})" for k, why in sorted(self.problems.items())[:3]]
        more = len(self.problems) - len(shown)
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")

    def note(self) -> str:
        """What a partial answer covers, in one line ('' for a whole dataset)."""
        if self.complete:
            return ""
        have = self.n_shards - len(self.problems)
        return (f"PARTIAL dataset {self.root}: these answers cover {have} of {self.n_shards} shards "
                f"({self.rows:,} rows); missing {self.shard_list()}. Run `memsim verify {self.root}` for what to re-run")

    def dataset(self) -> ds.Dataset:
        """The complete parts as one Arrow dataset whose every page read is checked against its CRC."""
        return ds.dataset(self.files, filesystem=self.place.fs, format=PARQUET_FORMAT)


def shard_state(place: Location, manifest: dict, shard: int) -> tuple[str | None, dict, int, str]:
    """(part path, marker, rows, '') for a complete shard, else (None, {}, 0, why not): marker, part, its size and
    footer checksum agree."""
    from engine.dataset.sweep import shard_range

    n, digest = int(manifest["n_shards"]), manifest["spec_digest"]
    name = part_name(shard, n)
    try:
        record = place.read_json(marker_path(Path(""), shard, n).as_posix())
    except (OSError, ValueError) as err:
        return None, {}, 0, f"unreadable marker: {str(err).splitlines()[0][:80]}"
    if record is None:
        return None, {}, 0, "missing" if place.kind(name) == pafs.FileType.NotFound else "no completion marker"
    if not isinstance(record, dict) or record.get("spec_digest") != digest:
        return None, {}, 0, "a marker of another spec"
    if record.get("range") != list(shard_range(int(manifest["total"]), shard, n)):
        return None, {}, 0, "a marker of another range"
    path = place.path(name)
    try:
        with place.fs.open_input_file(path) as f:
            footer = read_checked_footer(f, record)
        meta = footer_metadata(footer)
        memsim = json.loads((meta.metadata or {}).get(b"memsim", b"{}"))
    except FileNotFoundError:
        return None, {}, 0, "its part file is missing"
    except Damaged as err:
        return None, {}, 0, f"damaged part file: {err}"
    except (OSError, ValueError, pa.ArrowException) as err:
        return None, {}, 0, f"damaged part file: {str(err).splitlines()[0][:80]}"
    if not isinstance(memsim, dict) or memsim.get("spec_digest") != digest:
        return None, {}, 0, "a part file of another spec"
    if meta.num_rows != record.get("rows"):
        return None, {}, 0, f"part has {meta.num_rows:,} rows, its marker {record.get('rows')}"
    return path, record, meta.num_rows, ""


def open_dataset(sweep_dir: str | Path) -> tuple[Location, dict]:
    """The dataset's location and manifest; a place with no dataset, or a damaged manifest, is one line."""
    place = locate(sweep_dir)
    shown = place.uri
    if place.kind() != pafs.FileType.Directory:
        what = "not a directory" if place.local else "nothing there"
        raise UserError(f"no sweep dataset at {shown} ({what}); run `memsim sweep SPEC -o {shown}` first")
    try:
        found = place.read_json(MANIFEST)
        if found is not None:
            check_manifest(found)
    except (OSError, ValueError, TypeError) as err:
        raise UserError(f"{place.shown(MANIFEST)} is damaged ({str(err).splitlines()[0][:120]}): re-sweep into a new "
                        "directory, or with --force to replace it") from None
    if found is None:
        raise UserError(f"{shown} is not a memsim sweep directory (no {MANIFEST}); run `memsim sweep SPEC -o {shown}` first")
    return place, found


def sweep_parts(sweep_dir: str | Path, partial: bool = False) -> SweepParts:
    """The dataset's complete parts; an incomplete dataset is refused (one line) unless `partial`."""
    place, manifest = open_dataset(sweep_dir)
    parts = SweepParts(place, manifest)
    root = parts.root
    with ThreadPoolExecutor(max_workers=FOOTER_THREADS) as pool:
        states = list(pool.map(lambda k: shard_state(place, manifest, k), range(parts.n_shards)))
    for k, (path, record, rows, why) in enumerate(states):
        if why:
            parts.problems[k] = why
        else:
            parts.files.append(path)
            parts.markers[k] = record
            parts.rows += rows
    if not parts.files:
        raise UserError(f"{root} has no complete shard yet ({parts.shard_list()}); run `memsim verify {root}`")
    if parts.problems and not partial:
        raise UserError(f"{root} is incomplete: {len(parts.problems)} of {parts.n_shards} shards missing or damaged "
                        f"({parts.shard_list()}); `memsim verify {root}` says what to re-run, or pass --partial to "
                        "answer from the complete shards")
    return parts


@contextlib.contextmanager
def refusing_damage(parts: "SweepParts | None"):
    """Run a query over `parts`; a read that fails inside a part (a page whose CRC does not match, a page that
    does not decode) becomes one line naming the part whose bytes differ from its marker's SHA-256, and its shard."""
    try:
        yield
    except UserError as err:
        if parts is None or not READ_FAILED.search(str(err)):
            raise
        raise damaged(parts, str(err)) from None


def damaged(parts: SweepParts, error: str) -> UserError:
    """Which part is damaged, found by hashing the parts whose markers carry a SHA-256 (only after a read failed,
    and only up to LOCATE_BYTES of them: beyond that, memsim verify finds it)."""
    n = parts.n_shards
    total = sum(m.get("bytes", 0) for m in parts.markers.values() if isinstance(m.get("bytes"), int))
    for k, marker in sorted(parts.markers.items()) if total <= LOCATE_BYTES else ():
        path = parts.place.path(part_name(k, n))
        try:
            check_whole(parts.place.fs, path, marker)
        except (Damaged, OSError) as why:
            return UserError(f"{parts.place.shown(part_name(k, n))} is damaged ({why}): nothing was answered; re-run "
                             f"shard {k}/{n} (`memsim verify {parts.root}` prints the command)")
    detail = error.split("failed: ", 1)[-1][:200]
    return UserError(f"a part of {parts.root} could not be read ({detail}): nothing was answered; "
                     f"`memsim verify {parts.root}` names the damaged part and the shard to re-run")


def lock_down(con: duckdb.DuckDBPyConnection) -> None:
    """Read the registered views and nothing else: no file read or written (the parts reach DuckDB through
    Arrow), nothing attached, no extension, settings locked."""
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")


def connect(sweep_dir: "str | Path | SweepParts | None" = None, con: duckdb.DuckDBPyConnection | None = None,
            partial: bool = False, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the catalog views (and `outputs`), the macros of queries/_macros.sql, and when a dataset is given
    the `sweep` view over its complete parts and the table macros of queries/_views.sql."""
    con = con or duckdb.connect()
    con.execute((QUERIES_DIR / "_macros.sql").read_text())
    con.register("models_arrow", tables.models_table().to_arrow())
    con.register("gpus_arrow", tables.gpus_table().to_arrow())
    con.execute("CREATE OR REPLACE VIEW models AS SELECT * FROM models_arrow")
    con.execute("CREATE OR REPLACE VIEW gpus AS SELECT * FROM gpus_arrow")
    con.register("outputs_arrow", tables.outputs_table().to_arrow())
    con.execute("CREATE OR REPLACE VIEW outputs AS SELECT * FROM outputs_arrow")
    if sweep_dir is not None:
        parts = sweep_dir if isinstance(sweep_dir, SweepParts) else sweep_parts(sweep_dir, partial)
        try:
            dataset = parts.dataset()
        except (OSError, pa.ArrowException) as err:
            raise UserError(f"cannot read {parts.root}: {str(err).strip().splitlines()[0][:200]}") from None
        con.register(PARTS_VIEW, dataset)
        derived = index_axis_columns(parts.manifest.get("index_axes", []))
        present = set(dataset.schema.names) | set(derived)
        skip = present | set(MODEL_FIELD_NAMES) | set(GPU_ATTRIBUTES) | {"n_params", "dropout"}  # model, GPU: catalogs
        extra = [f"{sql_literal(f.name)} AS {f.name}" for f in INPUT_FIELDS if f.name not in skip]
        select = ", ".join(["*"] + [f"{expression} AS {name}" for name, expression in derived.items()] + extra)
        con.execute(f"CREATE OR REPLACE VIEW sweep AS SELECT {select} FROM {PARTS_VIEW}")
        con.execute((QUERIES_DIR / "_views.sql").read_text())
    if read_only:
        lock_down(con)
    return con


def index_axis_columns(index_axes: list[dict]) -> dict[str, str]:
    """A compact sweep's axis columns as DuckDB expressions of the index (its manifest's index_axes,
    engine/configure/grid.py): each the list of its labels, indexed by the row's digit of that axis."""
    return {name: f"[{', '.join(label_literal(v) for v in labels)}][(index // {axis['stride']}) % {axis['radix']} + 1]"
            for axis in index_axes for name, labels in axis["columns"]}


def label_literal(value) -> str:
    """An axis label as the full rows' column holds it (engine/dataset/columns.py label_column: Arrow's types)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"{value}::BIGINT"
    if isinstance(value, float):
        return f"{value!r}::DOUBLE"
    return "'" + str(value).replace("'", "''") + "'"


def manifest(sweep_dir: str | Path) -> dict:
    return open_dataset(sweep_dir)[1]
