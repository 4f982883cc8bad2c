"""Shards of one sweep: plan them, write them to any filesystem, and verify the dataset they make.

A sweep is embarrassingly parallel over index ranges (DESIGN.md, "Beyond one machine"): shard k of N is the
slice `shard_range(total, k, N)` and writes its own part file and completion marker (engine/store.py), so any
scheduler can run the shards in any order. This module
  - plans N shards: index ranges, sizes, and a Slurm array / shell loop to paste (`memsim sweep SPEC --plan N`);
  - writes one shard to a local path or an object-store URI through pyarrow's filesystems (`sweep_shard`);
  - checks a dataset against its manifest (`memsim verify DIR`): every shard present, complete, readable,
    carrying the same spec digest, its `index` column exactly its range (a strictly increasing subset of it
    when only valid or feasible rows were kept), and says which shards to re-run.
Verification reads Parquet footers and streams the `index` column batch by batch: memory stays flat.
"""

import json
import re
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from engine.dataset.store import (
    MANIFEST,
    marker_path,
    part_name,
    prepare_dataset,
    spec_digest,
)
from engine.dataset.chunks import SweepKernel
from engine.dataset.sweep import expected_bytes, run_sweep, shard_range
from engine.errors import UserError
from engine.inputs.grid import build_grid
from engine.inputs.spec import load_spec, parse_spec

PART = re.compile(r"part-(\d{5})-of-(\d{5})\.parquet$")
MARKER = re.compile(r"(\d{5})-of-(\d{5})\.json$")
PLAN_SAMPLES = 32  # shards whose output is sampled by --plan; the others take the nearest sample's bytes/row
VERIFY_THREADS = 8  # part files checked at once
KEEP_FLAGS = {"all": "", "valid": " --valid-only", "feasible": " --feasible-only"}


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024


def keep_mode(spec, feasible_only, valid_only) -> str:
    """Which rows a sweep writes, as run_sweep resolves it: CLI flags override the spec's [output]."""
    feasible_only = spec.output.get("feasible_only", False) if feasible_only is None else feasible_only
    valid_only = spec.output.get("valid_only", False) if valid_only is None else valid_only
    return "feasible" if feasible_only else "valid" if valid_only else "all"


# --- filesystems ---------------------------------------------------------------------------------------------

def filesystem(uri: str | Path) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the dataset's path in it: a local path, file://..., s3://..., gs://..."""
    uri = str(uri)
    if "://" not in uri:
        return pafs.LocalFileSystem(), str(Path(uri).resolve())
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, ValueError, OSError) as err:
        raise UserError(f"cannot open {uri}: {err}") from None
    return fs, path.rstrip("/")


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return json.loads(f.read())


def prepare_remote(fs: pafs.FileSystem, base: str, grid, n_shards: int, force: bool) -> dict:
    """prepare_dataset for an object store: refuse another spec's dataset, then publish manifest and spec."""
    old = read_json(fs, f"{base}/{MANIFEST}")
    same = old is None or (old.get("spec_digest") == spec_digest(grid) and old.get("n_shards") == n_shards)
    if not same and not force:
        raise UserError(f"{base} holds a sweep of another spec or shard count (digest {old.get('spec_digest')}, "
                        f"{old.get('n_shards')} shards); use a new location, or --force to replace it")
    if not same:
        for info in fs.get_file_info(pafs.FileSelector(base, recursive=True)):
            if PART.search(info.path) or MARKER.search(info.path):
                fs.delete_file(info.path)
    with tempfile.TemporaryDirectory(prefix="memsim-") as tmp:
        local = Path(tmp) / "dataset"
        manifest = prepare_dataset(local, grid, n_shards, force=False)  # the same manifest a local sweep writes
        if old is not None and same:
            manifest["created"] = old.get("created", manifest["created"])
            (local / MANIFEST).write_text(json.dumps(manifest, indent=2))
        fs.create_dir(f"{base}/_shards", recursive=True)
        for name in ("_spec.toml", MANIFEST):
            pafs.copy_files(str(local / name), f"{base}/{name}", source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=fs)
    return manifest


def publish_shard(stage: Path, fs: pafs.FileSystem, base: str, shard: int, n_shards: int) -> None:
    """Copy a shard finished in a local staging dataset to its destination: the part first, then its marker.

    An object store makes an object visible only when its upload completes, so the part never appears half
    written; the marker, copied last, is what says the shard is complete (as the rename does locally).
    """
    local = pafs.LocalFileSystem()
    name = part_name(shard, n_shards)
    marker = marker_path(Path(""), shard, n_shards).as_posix()
    fs.create_dir(f"{base}/_shards", recursive=True)
    for path in (f"{base}/{marker}", f"{base}/{name}"):  # a re-run replaces the shard: withdraw the old marker first
        if fs.get_file_info(path).type == pafs.FileType.File:
            fs.delete_file(path)
    pafs.copy_files(str(stage / name), f"{base}/{name}", source_filesystem=local, destination_filesystem=fs)
    pafs.copy_files(str(stage / marker), f"{base}/{marker}", source_filesystem=local, destination_filesystem=fs)


def sweep_shard(spec_path, out: str | Path, shard=(0, 1), force=False, stage=None, **options):
    """run_sweep for one shard into a local path or a URI (`file://`, `s3://`, ...): the code path of every
    engine. A local destination is written in place (tmp + rename); any other is swept into a local
    staging dataset and published with publish_shard. `stage=True` forces staging (tests use it)."""
    fs, base = filesystem(out)
    if stage is None:
        stage = not is_local(fs)
    if not stage:
        return run_sweep(spec_path, base, shard=shard, force=force, **options)
    grid = build_grid(load_spec(spec_path))
    prepare_remote(fs, base, grid, shard[1], force)
    with tempfile.TemporaryDirectory(prefix="memsim-stage-") as tmp:
        result = run_sweep(spec_path, Path(tmp) / "dataset", shard=shard, force=force, **options)
        publish_shard(Path(tmp) / "dataset", fs, base, *shard)
    result.out_dir = out
    return result


# --- plan ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShardPlan:
    shard: int
    lo: int
    hi: int
    bytes: int  # expected size of the part file


def plan_shards(spec_path, n_shards: int, feasible_only=None, valid_only=None):
    """The grid and each shard's range and expected output size (sampled on up to PLAN_SAMPLES shards)."""
    if n_shards < 1:
        raise UserError(f"--plan takes a number of shards >= 1, got {n_shards}")
    spec = load_spec(spec_path)
    keep = keep_mode(spec, feasible_only, valid_only)
    compression = spec.output.get("compression", "lz4")
    grid = build_grid(spec)
    kernel = SweepKernel(grid)
    n_samples = min(n_shards, PLAN_SAMPLES)
    sampled = sorted({round(i * (n_shards - 1) / max(n_samples - 1, 1)) for i in range(n_samples)})
    rate = {}  # bytes per configuration, by sampled shard
    for k in sampled:
        lo, hi = shard_range(grid.total, k, n_shards)
        if hi > lo:
            rate[k] = expected_bytes(kernel, lo, hi, keep == "feasible", keep == "valid", compression) / (hi - lo)
    plans = []
    for k in range(n_shards):
        lo, hi = shard_range(grid.total, k, n_shards)
        nearest = min(rate, key=lambda s: abs(s - k)) if rate else None
        plans.append(ShardPlan(k, lo, hi, int((hi - lo) * rate[nearest]) if nearest is not None else 0))
    return grid, keep, plans


def render_plan(spec_path, grid, keep: str, plans: list[ShardPlan], out: str | None) -> str:
    """The plan as text: one line per shard (the middle elided past 64 shards), the total, and commands."""
    n = len(plans)
    spec = str(Path(spec_path).resolve())
    out = out or "DIR"
    flags = KEEP_FLAGS[keep]
    rows_note = {"all": "all rows", "valid": "valid rows only", "feasible": "feasible rows only"}[keep]
    lines = [f"{grid.spec.title}: {grid.total:,} configurations in {n} shard{'s' * (n != 1)} "
             f"({rows_note}, spec digest {spec_digest(grid)})",
             f"{'shard':>13}  {'index range':>31}  {'configs':>15}  {'expected':>11}"]
    shown = plans if n <= 64 else plans[:32] + [None] + plans[-32:]
    for p in shown:
        if p is None:
            lines.append(f"{'...':>13}  ({n - 64:,} more shards)")
            continue
        rng = f"[{p.lo:,}, {p.hi:,})"
        lines.append(f"{f'{p.shard}/{n}':>13}  {rng:>31}  {p.hi - p.lo:>15,}  {human_bytes(p.bytes):>11}")
    total_bytes = sum(p.bytes for p in plans)
    lines.append(f"{'total':>13}  {f'[0, {grid.total:,})':>31}  {grid.total:>15,}  {human_bytes(total_bytes):>11}")
    lines += [
        "",
        "Shards write their own files into one dataset and may run in any order, at the same time, on any",
        "machine that sees the output (a shared filesystem, or an object-store URI). As a Slurm array:",
        "",
        "#!/bin/bash",
        "#SBATCH --job-name=memsim-sweep",
        f"#SBATCH --array=0-{n - 1}%64",
        "#SBATCH --cpus-per-task=16",
        f"memsim sweep {spec} --shard ${{SLURM_ARRAY_TASK_ID}}/{n} -o {out}{flags} --quiet",
        "",
        "or a plain loop (4 at a time):",
        "",
        f"seq 0 {n - 1} | xargs -P 4 -I K memsim sweep {spec} --shard K/{n} -o {out}{flags} --quiet",
        "",
        f"or on a Ray cluster: memsim sweep {spec} --engine ray --address HOST:6379 --shards {n} -o {out}{flags}",
        f"then: memsim verify {out}   (exit 0 when complete; otherwise it prints the shards to re-run)",
    ]
    return "\n".join(lines)


# --- verify --------------------------------------------------------------------------------------------------

@dataclass
class ShardCheck:
    shard: int
    lo: int
    hi: int
    rows: int = 0
    keep: str | None = None
    problems: list = field(default_factory=list)


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


def list_dataset(fs, base):
    """Part files, markers and temporaries of a dataset, by kind, as {name: FileInfo}."""
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    top = {i.base_name: i for i in infos if i.type == pafs.FileType.File and i.path.rstrip("/").rsplit("/", 1)[0] == base}
    markers = {i.base_name: i for i in infos if i.type == pafs.FileType.File and i.path.startswith(f"{base}/_shards/")}
    return top, markers


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
    try:
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            meta = json.loads((pf.schema_arrow.metadata or {}).get(b"memsim", b"{}"))
            if meta.get("spec_digest") != digest:
                say(f"the part file has spec digest {meta.get('spec_digest')}, the dataset {digest} (a shard of another spec)")
            if meta.get("shard") != check.shard or meta.get("range") != [lo, hi]:
                say(f"the part file says shard {meta.get('shard')} range {meta.get('range')}, expected [{lo}, {hi})")
            check.keep = meta.get("keep") or ("all" if pf.metadata.num_rows == hi - lo else "valid")
            if pf.metadata.num_rows != marker.get("rows"):
                say(f"the part file has {pf.metadata.num_rows:,} rows, its marker says {marker.get('rows')}")
            check.rows, problems = check_index(pf, lo, hi, check.keep)
            check.problems.extend(problems)
    except (pa.ArrowException, OSError, ValueError) as err:
        say(f"the part file is unreadable (truncated or corrupt): {str(err).splitlines()[0][:160]}")


def verify_dataset(uri: str | Path) -> Verification:
    """Check a dataset against its manifest; see the module docstring for what is checked."""
    fs, base = filesystem(uri)
    try:
        manifest = read_json(fs, f"{base}/{MANIFEST}")
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read {uri}/{MANIFEST}: {err}") from None
    if manifest is None:
        raise UserError(f"{uri} is not a memsim sweep dataset (no {MANIFEST}); run `memsim sweep SPEC -o {uri}` first")
    total, n, digest = int(manifest["total"]), int(manifest["n_shards"]), manifest["spec_digest"]
    shards = [ShardCheck(k, *shard_range(total, k, n)) for k in range(n)]
    top, markers = list_dataset(fs, base)
    stray, notes, halves = [], [], {}
    for name in top:
        m = PART.match(name.removesuffix(".tmp"))
        if m and int(m[2]) == n and int(m[1]) < n:
            if name.endswith(".tmp"):
                halves[int(m[1])] = name
        elif m or name.endswith(".tmp") or re.search(r"\.tmp-\d+$", name):
            stray.append(f"{name}: not a file of this {n}-shard dataset (a leftover of another layout or a killed "
                         "write); delete it")
    for name in markers:
        m = MARKER.match(name)
        if not (m and int(m[2]) == n and int(m[1]) < n):
            stray.append(f"_shards/{name}: not a marker of this {n}-shard dataset; delete it")
    complete = []
    for check in shards:
        name, mname = part_name(check.shard, n), marker_path(Path(""), check.shard, n).name
        if check.shard in halves:
            check.problems.append(f"{halves[check.shard]} is half-written (the shard was killed mid-write, or is still running)")
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
        return [f"this memsim and catalogs give spec digest {here}, the dataset was written with {digest}: "
                "re-run shards with the memsim version and catalogs that wrote it"]
    return []


def render_verification(v: Verification) -> str:
    """OK with the totals, or each problem and the exact commands that complete the dataset."""
    m, n = v.manifest, len(v.shards)
    lines = []
    if v.ok:
        lines.append(f"OK: {v.root}: {n} of {n} shards complete, {v.rows:,} rows "
                     f"({v.keep or 'all'} rows of {m['total']:,} configurations), spec digest {m['spec_digest']}")
    else:
        bad = v.rerun
        lines.append(f"INCOMPLETE: {v.root}: {n - len(bad)} of {n} shards complete, spec digest {m['spec_digest']}")
        for check in v.shards:
            for problem in check.problems:
                lines.append(f"  shard {check.shard}/{n} [{check.lo:,}, {check.hi:,}): {problem}")
        lines += [f"  {s}" for s in v.stray]
        if bad:
            local = "://" not in v.root
            spec = str(Path(v.root) / "_spec.toml") if local else "SPEC"
            flags = KEEP_FLAGS[v.keep or "all"]
            lines.append("re-run:")
            lines += [f"memsim sweep {spec} --shard {k}/{n} -o {v.root}{flags}" for k in bad]
            if not local:
                lines.append(f"(SPEC: the spec this dataset was swept from; a copy is at {v.root}/_spec.toml)")
    lines += [f"note: {note}" for note in v.notes]
    return "\n".join(lines)
