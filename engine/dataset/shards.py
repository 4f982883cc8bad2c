"""Shards of one sweep: plan them, write them to any filesystem, and verify the dataset they make.

A sweep is embarrassingly parallel over index ranges (DESIGN.md, "Beyond one machine"): shard k of N is the
slice `shard_range(total, k, N)` and writes its own part file and completion marker (engine/store.py), so any
scheduler can run the shards in any order. This module
  - plans N shards: index ranges, sizes, and a Slurm array / shell loop to paste (`memsim sweep SPEC --plan N`);
  - writes one shard to a local path, or streams it to an object-store URI through pyarrow's filesystems
    (`sweep_shard`);
and engine/dataset/verify.py checks the dataset they make (`memsim verify DIR`).
"""

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from engine.configure.grid import build_grid
from engine.configure.spec import load_spec
from engine.dataset.chunks import SweepKernel
from engine.dataset.location import Location, filesystem, is_local, locate, read_json  # noqa: F401 (re-exported)
from engine.dataset.store import (
    MANIFEST,
    check_manifest,
    check_shard_count,
    part_name,
    prepare_dataset,
    same_dataset,
    spec_digest,
)
from engine.dataset.sweep import expected_bytes, run_sweep, shard_job, shard_range, stream
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


# --- a shard to any filesystem ---------------------------------------------------------------------------------

def prepare_remote(place: Location, grid, n_shards: int, force: bool) -> dict:
    """prepare_dataset for a Location (an object store has no directories and no locks): refuse another spec's
    dataset, then publish the manifest and the spec."""
    try:
        old = place.read_json(MANIFEST)
        old = None if old is None else check_manifest(old)
    except (OSError, ValueError, TypeError) as err:
        if not force:
            raise UserError(f"{place.shown(MANIFEST)} is damaged ({str(err).splitlines()[0][:120]}): re-sweep into a "
                            "new location, or with --force to replace it") from None
        old = {}
    same = old is None or same_dataset(old, grid, n_shards)
    if not same and not force:
        raise UserError(f"{place.uri} holds a sweep of another spec, shard count or part layout (digest "
                        f"{old.get('spec_digest')}, {old.get('n_shards')} shards); use a new location, or --force to "
                        "replace it")
    if not same:
        for info in place.fs.get_file_info(pafs.FileSelector(place.base, recursive=True)):
            if PART.search(info.path) or MARKER.search(info.path):
                place.fs.delete_file(info.path)
    with tempfile.TemporaryDirectory(prefix="memsim-") as tmp:
        local = Path(tmp) / "dataset"
        manifest = prepare_dataset(local, grid, n_shards, force=False)  # the same manifest a local sweep writes
        if old is not None and same:
            manifest["created"] = old.get("created", manifest["created"])
            (local / MANIFEST).write_text(json.dumps(manifest, indent=2))
        place.fs.create_dir(place.path("_shards"), recursive=True)
        for name in ("_spec.toml", MANIFEST):
            place.write_bytes(name, (local / name).read_bytes())
    return manifest


def remove_remote_temporaries(place: Location, shard: int, n_shards: int) -> None:
    """Temporaries of this shard a writer left when it died between finishing one and renaming it. A live
    writer's upload is not an object yet (an object store shows an object once its upload completes)."""
    selector = pafs.FileSelector(place.base, allow_not_found=True)
    for info in place.fs.get_file_info(selector):
        if info.base_name.startswith(part_name(shard, n_shards) + ".tmp"):
            place.fs.delete_file(info.path)


def sweep_shard(spec_path, out: str | Path, shard=(0, 1), force=False, through_fs=False, feasible_only=None,
                valid_only=None, chunk_rows=1 << 20, progress=None, say=print):
    """run_sweep for one shard into a local path or a URI (`file://`, `s3://`, ...): the code path of every
    engine. A local destination is written in place (tmp + rename, under a lock); any other is streamed through
    its pyarrow filesystem: the part to a temporary object while the kernel runs, moved to its name when
    complete, then its marker. `through_fs=True` takes the second path on a local directory too (tests use it)."""
    place = locate(out)
    if place.local and not through_fs:
        return run_sweep(spec_path, place.base, shard=shard, force=force, feasible_only=feasible_only,
                         valid_only=valid_only, chunk_rows=chunk_rows, progress=progress, say=say)
    if place.kind() == pafs.FileType.File:
        raise UserError(f"{out} exists and is not a directory: memsim sweep -o takes a directory")
    job = shard_job(spec_path, shard, feasible_only, valid_only, chunk_rows)
    say(job.describe())
    manifest = prepare_remote(place, job.kernel.grid, job.shard[1], force)
    remove_remote_temporaries(place, *job.shard)
    result = stream(job, place, manifest, progress)
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
