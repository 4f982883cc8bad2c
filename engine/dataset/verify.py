"""`memsim verify`: check a (sharded) sweep dataset against its manifest and say which shards to re-run.

Every shard present, complete, readable, carrying the same spec digest, its `index` column exactly its range (a
strictly increasing subset of it when only valid or feasible rows were kept), and every byte of its part what its
marker's checksums record (engine/dataset/checksum.py). Verification hashes each part as a stream and reads the
`index` column batch by batch: memory stays flat. It ends with who wrote the shards, per machine (Ray node or
host), from the markers.
"""

import json
import re
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from engine.configure.grid import build_grid
from engine.configure.spec import parse_spec
from engine.dataset.checksum import Damaged, check_whole, has_checksums, read_checked_footer
from engine.dataset.location import filesystem, is_local, read_json
from engine.dataset.locks import Busy, lock_path, locked
from engine.dataset.provenance import node_summary
from engine.dataset.shards import KEEP_FLAGS, MARKER, PART
from engine.dataset.store import MANIFEST, check_manifest, marker_path, part_name, spec_digest
from engine.dataset.sweep import shard_range
from engine.errors import UserError

VERIFY_THREADS = 8  # part files checked at once
TMP_SUFFIX = re.compile(r"\.tmp(-[^/]*)?$")  # a temporary: .tmp, or .tmp-HOST-PID (engine/atomic.py, store.py)


@dataclass
class ShardCheck:
    shard: int
    lo: int
    hi: int
    rows: int = 0
    keep: str | None = None
    problems: list = field(default_factory=list)
    marker: dict | None = None  # its completion marker, once read


@dataclass
class Verification:
    root: str
    manifest: dict
    shards: list  # ShardCheck per shard 0..N-1
    stray: list  # problems not tied to one shard of this layout
    notes: list
    keep: str | None

    @property
    def rerun(self) -> list[int]:
        return [s.shard for s in self.shards if s.problems]

    @property
    def ok(self) -> bool:
        return not self.rerun and not self.stray

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def writers(self) -> list[str]:
        """Per machine that wrote complete shards: how many, their rows and wall time (from the markers)."""
        return node_summary([(s.marker, s.rows) for s in self.shards if s.marker is not None and not s.problems])

    def unchecked(self) -> int:
        """Complete shards whose markers carry no checksums (written before memsim recorded them)."""
        return sum(1 for s in self.shards if s.marker is not None and not s.problems and not has_checksums(s.marker))


def list_dataset(fs, base):
    """Part files, markers and temporaries of a dataset, by kind, as {name: FileInfo}."""
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    top = {i.base_name: i for i in infos if i.type == pafs.FileType.File and i.path.rstrip("/").rsplit("/", 1)[0] == base}
    markers = {i.base_name: i for i in infos if i.type == pafs.FileType.File and i.path.startswith(f"{base}/_shards/")}
    return top, markers


def writing(fs, base: str, shard: int, n: int) -> bool:
    """Whether a process holds the shard's lock now (a local dataset; elsewhere nothing tells)."""
    path = lock_path(Path(base), shard, n)
    if not is_local(fs) or not path.exists():
        return False
    try:
        with locked(path, "shard"):
            return False
    except Busy:
        return True
    except UserError:
        return False


def check_index(pf: pq.ParquetFile, lo: int, hi: int, keep: str) -> tuple[int, list[str]]:
    """Stream the index column: strictly increasing inside [lo, hi), and all of it when every row is kept."""
    count, first, last = 0, None, lo - 1
    for batch in pf.iter_batches(batch_size=1 << 20, columns=["index"]):
        idx = batch.column(0).to_numpy(zero_copy_only=False)
        if idx.size == 0:
            continue
        if idx[0] <= last or (idx.size > 1 and not np.all(idx[1:] > idx[:-1])):
            return count, ["index column is not strictly increasing (a row appears twice or out of order)"]
        first = int(idx[0]) if first is None else first
        last, count = int(idx[-1]), count + idx.size
    problems = []
    if count and (first < lo or last >= hi):
        problems.append(f"index values {first:,}..{last:,} fall outside the shard's range [{lo:,}, {hi:,})")
    if keep == "all" and count != hi - lo:
        problems.append(f"{count:,} rows where its range [{lo:,}, {hi:,}) has {hi - lo:,} configurations")
    return count, problems


def check_part(fs, path: str, marker_file: str, check: ShardCheck, digest: str) -> None:
    """One complete-looking shard: marker, footer metadata and index column agree with the manifest."""
    lo, hi, say = check.lo, check.hi, check.problems.append
    try:
        marker = read_json(fs, marker_file)
    except (OSError, ValueError) as err:
        marker = err
    if not isinstance(marker, dict):
        return say(f"its completion marker is unreadable ({marker})")
    if marker.get("range") != [lo, hi]:
        say(f"its marker records range {marker.get('range')}, the manifest gives [{lo}, {hi})")
    if marker.get("spec_digest") != digest:
        say(f"its marker has spec digest {marker.get('spec_digest')}, the dataset {digest} (a shard of another spec)")
    check.marker = marker
    try:
        check_bytes(fs, path, marker)
    except Damaged as err:
        say(f"the part file is damaged: {err}")
    except (pa.ArrowException, OSError) as err:
        say(f"the part file is unreadable: {str(err).splitlines()[0][:160]}")
    try:
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            meta = json.loads((pf.schema_arrow.metadata or {}).get(b"memsim", b"{}"))
            if not isinstance(meta, dict):
                raise TypeError("its memsim metadata is not a JSON object")
            if meta.get("spec_digest") != digest:
                say(f"the part file has spec digest {meta.get('spec_digest')}, the dataset {digest} (a shard of another spec)")
            if meta.get("shard") != check.shard or meta.get("range") != [lo, hi]:
                say(f"the part file says shard {meta.get('shard')} range {meta.get('range')}, expected [{lo}, {hi})")
            index = pf.schema_arrow.field("index") if "index" in pf.schema_arrow.names else None
            if index is None or not pa.types.is_integer(index.type):
                return say("the part file has no integer index column (not a part memsim wrote)")
            keep = meta.get("keep")  # all, valid or feasible (engine/dataset/sweep.py); an older part has none
            check.keep = keep if keep in KEEP_FLAGS else "all" if pf.metadata.num_rows == hi - lo else "valid"
            if pf.metadata.num_rows != marker.get("rows"):
                say(f"the part file has {pf.metadata.num_rows:,} rows, its marker says {marker.get('rows')}")
            check.rows, problems = check_index(pf, lo, hi, check.keep)
            check.problems.extend(problems)
    except (pa.ArrowException, OSError, ValueError, TypeError) as err:
        say(f"the part file is unreadable (truncated or corrupt): {str(err).splitlines()[0][:160]}")


def check_bytes(fs, path: str, marker: dict) -> None:
    """Size, footer and every byte against the checksums the marker records (engine/dataset/checksum.py)."""
    with fs.open_input_file(path) as f:
        read_checked_footer(f, marker)
    check_whole(fs, path, marker)


def verify_dataset(uri: str | Path) -> Verification:
    """Check a dataset against its manifest; see the module docstring for what is checked."""
    fs, base = filesystem(uri)
    try:
        manifest = read_json(fs, f"{base}/{MANIFEST}")
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read {uri}/{MANIFEST}: {str(err).splitlines()[0][:120]}") from None
    if manifest is None:
        raise UserError(f"{uri} is not a memsim sweep dataset (no {MANIFEST}); run `memsim sweep SPEC -o {uri}` first")
    try:
        check_manifest(manifest)
    except (TypeError, ValueError) as err:
        raise UserError(f"{uri}/{MANIFEST} is damaged ({err}): re-sweep the dataset") from None
    total, n, digest = manifest["total"], manifest["n_shards"], manifest["spec_digest"]
    shards = [ShardCheck(k, *shard_range(total, k, n)) for k in range(n)]
    top, markers = list_dataset(fs, base)
    stray, notes, halves = [], [], {}
    for name in top:
        m = PART.match(TMP_SUFFIX.sub("", name))
        if m and int(m[2]) == n and int(m[1]) < n:
            if TMP_SUFFIX.search(name):
                halves[int(m[1])] = name
        elif m or TMP_SUFFIX.search(name):
            stray.append(f"{name}: not a file of this {n}-shard dataset (a leftover of another layout or a killed "
                         "write); delete it")
    for name in markers:
        m = MARKER.match(name)
        if name.endswith(".lock"):
            continue  # a shard's lock (engine/dataset/store.py): held only while the shard is written
        if not (m and int(m[2]) == n and int(m[1]) < n):
            stray.append(f"_shards/{name}: not a marker of this {n}-shard dataset; delete it")
    complete = []
    for check in shards:
        name, mname = part_name(check.shard, n), marker_path(Path(""), check.shard, n).name
        if check.shard in halves:
            state = "is still running" if writing(fs, base, check.shard, n) else "was killed mid-write"
            check.problems.append(f"{halves[check.shard]} is half-written (the shard {state})")
        if name not in top and mname not in markers:
            check.problems.append("missing: no part file, no completion marker")
        elif name not in top:
            check.problems.append(f"its marker exists but {name} does not")
        elif mname not in markers:
            check.problems.append(f"{name} has no completion marker (the shard stopped before recording it)")
        else:
            complete.append((f"{base}/{name}", f"{base}/_shards/{mname}", check))
    with ThreadPoolExecutor(max_workers=VERIFY_THREADS) as pool:  # Arrow decodes without the GIL; S3 has latency
        list(pool.map(lambda job: check_part(fs, *job, digest), complete))
    keeps = {c.keep for c in shards if c.keep}
    if len(keeps) > 1:
        stray.append(f"shards keep different rows ({', '.join(sorted(keeps))}): re-run the odd ones with the same flags")
    notes += spec_notes(fs, base, digest)
    return Verification(str(uri), manifest, shards, stray, notes, keeps.pop() if len(keeps) == 1 else None)


def spec_notes(fs, base: str, digest: str) -> list[str]:
    """Whether the dataset's own spec still gives its digest here (catalogs or memsim may have changed since)."""
    path = f"{base}/_spec.toml"
    if fs.get_file_info(path).type != pafs.FileType.File:
        return ["no _spec.toml: re-run shards with the spec the dataset was swept from"]
    try:
        with fs.open_input_stream(path) as f:
            text = f.read().decode()
        here = spec_digest(build_grid(parse_spec(tomllib.loads(text), text)))
    except (UserError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        return [f"the dataset's _spec.toml does not build here ({err}); re-run shards with the memsim that wrote it"]
    if here != digest:
        return [(f"this memsim and catalogs give spec digest {here}, the dataset was written with {digest}: "
                 "re-run shards with the memsim version (its parts' format) and catalogs that wrote it")]
    return []


def render_verification(v: Verification) -> str:
    """OK with the totals, or each problem and the exact commands that complete the dataset; who wrote the
    complete shards comes before the commands, so that they stay the last lines (bar notes)."""
    m, n = v.manifest, len(v.shards)
    writers = v.writers()
    by_writer = [f"written by {len(writers)} machine{'s' * (len(writers) != 1)}:"] + writers if writers else []
    if v.ok:
        lines = [(f"OK: {v.root}: {n} of {n} shards complete, {v.rows:,} rows "
                  f"({v.keep or 'all'} rows of {m['total']:,} configurations), spec digest {m['spec_digest']}"), *by_writer]
    else:
        bad = v.rerun
        lines = [f"INCOMPLETE: {v.root}: {n - len(bad)} of {n} shards complete, spec digest {m['spec_digest']}"]
        for check in v.shards:
            for problem in check.problems:
                lines.append(f"  shard {check.shard}/{n} [{check.lo:,}, {check.hi:,}): {problem}")
        lines += [f"  {s}" for s in v.stray] + by_writer
        if bad:
            local = "://" not in v.root
            spec = str(Path(v.root) / "_spec.toml") if local else "SPEC"
            flags = KEEP_FLAGS[v.keep or "all"]
            lines.append("re-run:")
            lines += [f"memsim sweep {spec} --shard {k}/{n} -o {v.root}{flags}" for k in bad]
            if not local:
                lines.append(f"(SPEC: the spec this dataset was swept from; a copy is at {v.root}/_spec.toml)")
    if v.unchecked():
        lines.append(f"note: {v.unchecked()} complete shard(s) carry no checksums (written before memsim recorded "
                     "them): their bytes cannot be checked; re-run them to add checksums")
    lines += [f"note: {note}" for note in v.notes]
    return "\n".join(lines)
