"""`memsim sweep SPEC --engine ray`: the shards of a sweep as Ray tasks, on a local or remote Ray cluster.

Each task runs engine.dataset.shards.sweep_shard for its shard, the code path `memsim sweep --shard K/N` runs, so a
Ray-made dataset is the same files a Slurm array makes and `memsim verify` checks both. The driver prepares
the dataset once, submits N tasks (two CPUs each: the numba kernel and the Parquet writer thread), retries a
task whose worker dies or whose write fails with an OSError (`max_retries`), and prints a line per finished
shard. The output is a local path (a shared filesystem when the cluster has several machines) or an
object-store URI (pyarrow.fs).

Workers import engine from this repository: on a local cluster through PYTHONPATH, on a remote one by
shipping the repository (code, data/, queries/) as the job's runtime_env working_dir.
"""

import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import engine
from engine.configure.grid import build_grid
from engine.configure.spec import load_spec
from engine.dataset.location import locate
from engine.dataset.shards import KEEP_FLAGS, keep_mode, prepare_remote, sweep_shard
from engine.dataset.store import MANIFEST, check_shard_count, prepare_dataset
from engine.errors import UserError

INSTALL = "the Ray engine needs ray: pip install 'memsim[ray]' (or pip install 'ray>=2.9')"
CONNECT_TIMEOUT_S = 5  # per TCP probe and per GCS connection attempt
CPUS_PER_SHARD = 2  # a shard keeps two cores busy: the numba kernel and the Parquet writer thread (engine/sweep.py)
SHIP_EXCLUDES = [".git", "**/__pycache__", ".venv", "out", "build", "*.parquet", ".pytest_cache", ".hypothesis"]


def import_ray(address: str | None = None):
    if address is not None and "ray" not in sys.modules:
        # Ray reads these when it is imported. A reachable port that is not a Ray GCS: one attempt of ~15 s
        # instead of twenty of ~40 s.
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "1")
        os.environ.setdefault("RAY_py_gcs_connect_timeout_s", str(CONNECT_TIMEOUT_S))
    try:
        import ray
    except ImportError:
        raise UserError(INSTALL) from None
    return ray


@dataclass
class RaySweepResult:
    out: str
    total: int
    n_shards: int
    evaluated: int
    written: int
    valid: int
    fits: int
    seconds: float


def probe(address: str) -> None:
    """Fail in seconds, not minutes: Ray retries an unreachable GCS for a long time before it gives up."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address takes HOST:PORT (e.g. 10.0.0.1:6379 or ray://head:10001), got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise UserError(f"cannot reach a Ray cluster at {address}: {err.strerror or err}") from None


def connect(ray, address: str | None) -> bool:
    """Join the cluster at `address`, or start a local one; True when this call started Ray (and stops it).
    A Ray already initialized in this process (a library caller's, the tests') is used as it is."""
    if address is not None:
        probe(address)
    if ray.is_initialized():
        return False
    options = dict(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    if address is None:
        ray.init(**options)
        return True
    runtime_env = {"working_dir": str(engine.REPO_ROOT), "excludes": SHIP_EXCLUDES}
    try:
        ray.init(address=address, runtime_env=runtime_env, **options)
    except (ConnectionError, TimeoutError, RuntimeError) as err:
        raise UserError(f"cannot connect to a Ray cluster at {address}: {str(err).splitlines()[0][:200]}") from None
    return True


def sweep_task(spec_text: str, out: str, shard: tuple[int, int], options: dict, before=None) -> dict:
    """One shard, in a Ray worker: the spec travels as text, the rows go straight to `out`."""
    import numba
    import ray

    cpus = int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))
    numba.set_num_threads(max(1, min(cpus - 1, numba.config.NUMBA_NUM_THREADS)))  # one CPU is the writer's
    if before is not None:
        before(shard)
    with tempfile.TemporaryDirectory(prefix="memsim-spec-") as tmp:
        spec_path = Path(tmp) / "spec.toml"
        spec_path.write_text(spec_text)
        r = sweep_shard(spec_path, out, shard=shard, progress=False, say=lambda *_: None, **options)
    return dict(shard=shard[0], evaluated=r.evaluated, written=r.written, valid=r.valid, fits=r.fits,
                seconds=r.seconds, node=ray.get_runtime_context().get_node_id()[:8])


def cpus_per_shard(ray) -> int:
    """CPUS_PER_SHARD, or fewer when no node has that many (a task asking for more would never run)."""
    largest = max((n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")), default=1)
    return int(max(1, min(CPUS_PER_SHARD, largest)))


def default_shards(ray, place) -> int:
    """An existing dataset's shard count (so a second run completes it), else one shard per CPUS_PER_SHARD."""
    try:
        old = place.read_json(MANIFEST)
    except ValueError:
        old = None  # a damaged manifest: prepare says so
    if old and old.get("n_shards"):
        return int(old["n_shards"])
    return max(1, int(ray.cluster_resources().get("CPU", 1)) // CPUS_PER_SHARD)


def run_ray(spec_path, out, n_shards=None, address=None, force=False, feasible_only=None, valid_only=None,
            max_retries=3, chunk_rows=1 << 20, before=None, say=print) -> RaySweepResult:
    """Sweep every shard of a spec as Ray tasks into `out` (a path or URI); see the module docstring.

    `before(shard)` runs in the worker before each attempt (tests crash an attempt with it)."""
    ray = import_ray(address)
    spec = load_spec(spec_path)
    grid = build_grid(spec)
    place = locate(out)
    keep = keep_mode(spec, feasible_only, valid_only)
    options = dict(force=force, feasible_only=keep == "feasible", valid_only=keep == "valid", chunk_rows=chunk_rows)
    started = connect(ray, address)
    try:
        n = n_shards or default_shards(ray, place)
        if n < 1:
            raise UserError(f"--shards takes a number >= 1, got {n}")
        check_shard_count(n)
        if place.local:
            prepare_dataset(Path(place.base), grid, n, force)
        else:
            prepare_remote(place, grid, n, force)
        say(f"{grid.total:,} configurations in {n} shards on Ray ({int(ray.cluster_resources().get('CPU', 0))} CPUs) -> {out}")
        return gather(ray, spec, grid, str(out), n, options, max_retries, before, say)
    finally:
        if started:
            ray.shutdown()


def gather(ray, spec, grid, out: str, n: int, options: dict, max_retries: int, before, say) -> RaySweepResult:
    runtime_env = None if ray.get_runtime_context().runtime_env.get("working_dir") else \
        {"env_vars": {"PYTHONPATH": os.pathsep.join(filter(None, [str(engine.REPO_ROOT), os.environ.get("PYTHONPATH")]))}}
    task = ray.remote(num_cpus=cpus_per_shard(ray), max_retries=max_retries, retry_exceptions=[OSError])(sweep_task)
    if runtime_env:
        task = task.options(runtime_env=runtime_env)
    t0 = time.perf_counter()
    pending = {task.remote(spec.text, out, (k, n), options, before): k for k in range(n)}
    done, failed, totals = 0, {}, dict(evaluated=0, written=0, valid=0, fits=0)
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        k = pending.pop(ref)
        try:
            r = ray.get(ref)
        except ray.exceptions.RayError as err:
            cause = getattr(err, "cause", None) or err
            failed[k] = next((line for line in str(cause).splitlines() if line.strip()), type(cause).__name__)[:200]
            say(f"shard {k}/{n} failed: {failed[k]}")
            continue
        done += 1
        for key in totals:
            totals[key] += r[key]
        rate = r["evaluated"] / max(r["seconds"], 1e-9)
        say(f"shard {k}/{n} done on node {r['node']}: {r['evaluated']:,} configurations, {r['written']:,} rows "
            f"in {r['seconds']:.1f} s ({rate / 1e6:.2f} M/s)  [{done}/{n} shards, {totals['evaluated']:,}/{grid.total:,}]")
    if failed:
        keep = "feasible" if options["feasible_only"] else "valid" if options["valid_only"] else "all"
        rerun = "; ".join(f"memsim sweep SPEC --shard {k}/{n} -o {out}{KEEP_FLAGS[keep]}" for k in sorted(failed))
        raise UserError(f"{len(failed)} of {n} shards failed ({next(iter(failed.values()))}); re-run them: {rerun}")
    return RaySweepResult(out, grid.total, n, totals["evaluated"], totals["written"], totals["valid"],
                          totals["fits"], time.perf_counter() - t0)
