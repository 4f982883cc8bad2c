"""Who wrote each shard, where and when: recorded in its completion marker, summed up by `memsim verify`.

A marker records the host, the Ray node (when the shard ran as a Ray task), the memsim version, and the wall
time from the shard's start to its part being published; so a run spread over a cluster can be told from one
that ran on the head alone, and a slow node stands out.
"""

import socket
import sys
import time
from collections import defaultdict

import engine


def ray_node_id() -> str | None:
    """The Ray node this process runs a task on; None outside a Ray task (a driver, a plain process)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    try:
        context = ray.get_runtime_context()
        return context.get_node_id() if context.get_task_id() is not None else None
    except Exception:  # noqa: BLE001 (provenance is informative: never fail a shard over it)
        return None


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def provenance(started: float) -> dict:
    """The marker's fields about the writer of a shard that started at `started` (time.time()) and ends now."""
    now = time.time()
    return {"host": socket.gethostname(), "ray_node": ray_node_id(), "memsim_version": engine.__version__,
            "started": utc(started), "finished": utc(now), "wall_s": round(now - started, 3)}


def writer_of(marker: dict) -> str:
    """One name for the machine that wrote a shard: its Ray node (first 8 hex digits) and host, or the host."""
    node, host = marker.get("ray_node"), marker.get("host")
    if node:
        return f"node {str(node)[:8]} ({host or 'host unrecorded'})"
    return f"host {host}" if host else "unrecorded (written before markers named their writer)"


def node_summary(markers: list[tuple[dict, int]]) -> list[str]:
    """One line per writer: shards, rows and wall time, from (marker, rows) of the complete shards."""
    by = defaultdict(lambda: [0, 0, 0.0, set()])
    for marker, rows in markers:
        entry = by[writer_of(marker)]
        entry[0] += 1
        entry[1] += rows
        wall = marker.get("wall_s")
        entry[2] += wall if isinstance(wall, int | float) else 0.0
        entry[3].add(str(marker.get("memsim_version", "?")))
    lines = []
    for name, (shards, rows, wall, versions) in sorted(by.items(), key=lambda kv: (-kv[1][0], kv[0])):
        lines.append(f"  {name}: {shards} shard{'s' * (shards != 1)}, {rows:,} rows, {wall:,.1f} s of wall time"
                     f" (memsim {', '.join(sorted(versions))})")
    return lines
