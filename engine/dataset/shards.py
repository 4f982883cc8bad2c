"""Shards of one sweep: plan them, write them to any filesystem, and verify the dataset they make.

A sweep is embarrassingly parallel over index ranges (DESIGN.md, "Beyond one machine"): shard k of N is the
slice `shard_range(total, k, N)` and writes its own part file and completion marker (engine/store.py), so any
scheduler can run the shards in any order. This module
  - plans N shards: index ranges, sizes, and a Slurm array / shell loop to paste (`memsim sweep SPEC --plan N`);
  - writes one shard to a local path or an object-store URI through pyarrow's filesystems (`sweep_shard`);
and engine/dataset/verify.py checks the dataset they make (`memsim verify DIR`).
"""

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from engine.configure.grid import build_grid
from engine.configure.spec import load_spec
from engine.dataset.chunks import SweepKernel
from engine.dataset.store import (
    MANIFEST,
    check_manifest,
    check_shard_count,
    marker_path,
    part_name,
    prepare_dataset,
    spec_digest,
)
from engine.dataset.sweep import expected_bytes, run_sweep, shard_range
from engine.errors import UserError

PART = re.compile(r"part-(\d{5})-of-(\d{5})\.parquet$")
MARKER = re.compile(r"(\d{5})-of-(\d{5})\.json$")
PLAN_SAMPLES = 32  # shards whose output is sampled by --plan; the others take the nearest sample's bytes/row
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
    try:
        old = read_json(fs, f"{base}/{MANIFEST}")
        old = None if old is None else check_manifest(old)
    except (OSError, ValueError, TypeError) as err:
        if not force:
            raise UserError(f"{base}/{MANIFEST} is damaged ({str(err).splitlines()[0][:120]}): re-sweep into a new "
                            "location, or with --force to replace it") from None
        old = {}
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
    if fs.get_file_info(f"{base}/{marker}").type == pafs.FileType.File:  # a re-run: the old part stays until the
        fs.delete_file(f"{base}/{marker}")  # new one is uploaded over it; only its marker is withdrawn now
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
    check_shard_count(n_shards)
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
    lines = [(f"{grid.spec.title}: {grid.total:,} configurations in {n} shard{'s' * (n != 1)} "
              f"({rows_note}, spec digest {spec_digest(grid)})"),
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
