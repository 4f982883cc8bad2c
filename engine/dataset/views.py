"""DuckDB over a sweep dataset: the views `sweep`, `models` and `gpus` that every query reads.

`sweep` reads exactly the part files the completion markers list (the markers are the truth of a dataset,
engine/dataset/store.py): never a glob, so a stray part, a half-written temporary or a path with `*`, `?` or
`[` in it is never read. A dataset with a shard missing or damaged is refused, as `memsim verify` would refuse
it, unless the caller asks for the complete shards only (`partial`), and then every output says so. The view
adds, as constants, every CONFIG.md input the spec did not sweep (so SQL can always say `seq_len` or
`precision`), with the value the sweep used: its default.

A read-only connection (named queries and the report always; `memsim sql --read-only`) reads the part files
and nothing else: no file written, no database attached, no extension installed or loaded, its settings locked.
"""

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from engine import QUERIES_DIR
from engine.configure import tables
from engine.configure.resolve import MODEL_FIELD_NAMES
from engine.dataset.store import MANIFEST, marker_path, part_name, read_manifest
from engine.errors import UserError
from engine.inputs.vocabulary import GPU_ATTRIBUTES, INPUT_FIELDS, sql_literal

FOOTER_THREADS = 8


@dataclass
class SweepParts:
    """The part files a dataset's markers list, and what keeps the dataset from being whole."""

    root: Path
    manifest: dict
    files: list = field(default_factory=list)  # complete parts, in shard order
    problems: dict = field(default_factory=dict)  # shard -> why it does not count
    rows: int = 0  # rows in the complete parts

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


def shard_state(root: Path, manifest: dict, shard: int) -> tuple[Path | None, int, str]:
    """(part file, rows, '') for a complete shard, else (None, 0, why not): marker, part and footer agree."""
    from engine.dataset.sweep import shard_range

    n, digest = int(manifest["n_shards"]), manifest["spec_digest"]
    marker, part = marker_path(root, shard, n), root / part_name(shard, n)
    try:
        record = json.loads(marker.read_text())
    except FileNotFoundError:
        return None, 0, "missing" if not part.exists() else "no completion marker"
    except (OSError, ValueError) as err:
        return None, 0, f"unreadable marker: {str(err).splitlines()[0][:80]}"
    if not isinstance(record, dict) or record.get("spec_digest") != digest:
        return None, 0, "a marker of another spec"
    if record.get("range") != list(shard_range(int(manifest["total"]), shard, n)):
        return None, 0, "a marker of another range"
    try:
        meta = pq.read_metadata(part)
        footer = json.loads((meta.metadata or {}).get(b"memsim", b"{}"))
    except FileNotFoundError:
        return None, 0, "its part file is missing"
    except (OSError, ValueError, pa.ArrowException) as err:
        return None, 0, f"damaged part file: {str(err).splitlines()[0][:80]}"
    if not isinstance(footer, dict) or footer.get("spec_digest") != digest:
        return None, 0, "a part file of another spec"
    if meta.num_rows != record.get("rows"):
        return None, 0, f"part has {meta.num_rows:,} rows, its marker {record.get('rows')}"
    return part, meta.num_rows, ""


def sweep_parts(sweep_dir: str | Path, partial: bool = False) -> SweepParts:
    """The dataset's complete parts; an incomplete dataset is refused (one line) unless `partial`."""
    root = Path(sweep_dir)
    if not root.is_dir():
        raise UserError(f"no sweep dataset at {root} (not a directory); run `memsim sweep SPEC -o {root}` first")
    manifest = read_manifest(root)
    if manifest is None:
        raise UserError(f"{root} is not a memsim sweep directory (no {MANIFEST}); run `memsim sweep SPEC -o {root}` first")
    parts = SweepParts(root, manifest)
    with ThreadPoolExecutor(max_workers=FOOTER_THREADS) as pool:
        states = list(pool.map(lambda k: shard_state(root, manifest, k), range(parts.n_shards)))
    for k, (path, rows, why) in enumerate(states):
        if why:
            parts.problems[k] = why
        else:
            parts.files.append(path)
            parts.rows += rows
    if not parts.files:
        raise UserError(f"{root} has no complete shard yet ({parts.shard_list()}); run `memsim verify {root}`")
    if parts.problems and not partial:
        raise UserError(f"{root} is incomplete: {len(parts.problems)} of {parts.n_shards} shards missing or damaged "
                        f"({parts.shard_list()}); `memsim verify {root}` says what to re-run, or pass --partial to "
                        "answer from the complete shards")
    return parts


def glob_literal(path: Path) -> str:
    """A path DuckDB reads as itself, never as a pattern: its glob characters in brackets."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in str(path.resolve()))


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def lock_down(con: duckdb.DuckDBPyConnection, readable: list[Path]) -> None:
    """Read `readable` and nothing else: no file written, nothing attached, no extension, settings locked."""
    paths = {str(p.resolve()) for p in readable} | {glob_literal(p) for p in readable}  # a pattern is checked too
    allowed = ", ".join(sql_string(p) for p in sorted(paths))
    con.execute(f"SET allowed_paths = [{allowed}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")


def connect(sweep_dir: "str | Path | SweepParts | None" = None, con: duckdb.DuckDBPyConnection | None = None,
            partial: bool = False, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the catalog views, the macros of queries/_macros.sql, and when a dataset is given
    the `sweep` view over its complete parts and the table macros of queries/_views.sql."""
    con = con or duckdb.connect()
    con.execute((QUERIES_DIR / "_macros.sql").read_text())
    con.register("models_arrow", tables.models_table().to_arrow())
    con.register("gpus_arrow", tables.gpus_table().to_arrow())
    con.execute("CREATE OR REPLACE VIEW models AS SELECT * FROM models_arrow")
    con.execute("CREATE OR REPLACE VIEW gpus AS SELECT * FROM gpus_arrow")
    files = []
    if sweep_dir is not None:
        parts = sweep_dir if isinstance(sweep_dir, SweepParts) else sweep_parts(sweep_dir, partial)
        files = parts.files
        source = "read_parquet([" + ", ".join(sql_string(glob_literal(p)) for p in files) + "])"
        try:
            present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        except duckdb.Error as err:
            raise UserError(f"cannot read {parts.root}: {str(err).strip().splitlines()[0][:200]}") from None
        skip = present | set(MODEL_FIELD_NAMES) | set(GPU_ATTRIBUTES) | {"n_params", "dropout"}  # model, GPU: catalogs
        extra = [f"{sql_literal(f.name)} AS {f.name}" for f in INPUT_FIELDS if f.name not in skip]
        select = ", ".join(["*"] + extra)
        con.execute(f"CREATE OR REPLACE VIEW sweep AS SELECT {select} FROM {source}")
        con.execute((QUERIES_DIR / "_views.sql").read_text())
    if read_only:
        lock_down(con, files)
    return con


def manifest(sweep_dir: str | Path) -> dict:
    found = read_manifest(Path(sweep_dir))
    if found is None:
        raise UserError(f"{sweep_dir} is not a memsim sweep directory (no {MANIFEST})")
    return found
