"""A 10^7-configuration sweep into an S3 bucket against the same sweep into a local directory (issue #25: within
1.5x), and the per-core rate that docs/scale-out.md sizes 10^10-10^11 sweeps with.

    python benchmarks/bench_object_storage.py            # 3 pairs of runs, 10,368,000 configurations each
    python benchmarks/bench_object_storage.py --pairs 5
    python benchmarks/bench_object_storage.py --sdk-checksums when_required

The bucket is a local S3-compatible server (moto's server mode, tests/s3_server.py; pip install -e '.[s3]'),
reached only through the AWS_* variables, as memsim reaches MinIO or S3. Each sweep runs in a fresh process (the
memsim CLI's code path, engine.dataset.shards.sweep_shard) and is timed from the call to the last object's upload;
the pairs alternate which goes first. CPU seconds are the sweep process's own (user + system), so the per-core
rate (configurations per CPU second) holds however busy the machine is; the S3 server's CPU is counted apart.
The server shares this machine's cores with the sweep, as S3 or MinIO would not: moto decodes the AWS SDK's
default checksummed (aws-chunked) uploads in Python at about twice the CPU of plain ones, which
`--sdk-checksums when_required` (AWS_REQUEST_CHECKSUM_CALCULATION, read by the SDK in pyarrow) turns off.
Not a test: figures are printed and quoted, never asserted.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_sweep import spec, toml  # noqa: E402 (the checkout first on the path)
from tests.s3_server import start_s3_server  # noqa: E402

CHILD = """
import json, resource, sys, time
sys.path.insert(0, %r)
from benchmarks.peak_rss import peak_rss_gib
from engine.dataset.shards import sweep_shard
t0 = time.perf_counter()
r = sweep_shard(%r, %r, force=True, progress=False, say=lambda *a: None)
wall = time.perf_counter() - t0
u = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"configs": r.evaluated, "rows": r.written, "wall_s": wall, "cpu_s": u.ru_utime + u.ru_stime,
                  "rss_gib": peak_rss_gib()}))
"""


def sweep_once(spec_path: Path, out: str, env: dict) -> dict:
    code = CHILD % (str(ROOT), str(spec_path), out)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bucket_bytes(prefix: str) -> int:
    import pyarrow.fs as pafs

    fs = pafs.FileSystem.from_uri(f"s3://{prefix}")[0]
    return sum(i.size for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True)) if i.type == pafs.FileType.File)


def remove_prefix(prefix: str) -> None:
    import pyarrow.fs as pafs

    pafs.FileSystem.from_uri(f"s3://{prefix}")[0].delete_dir_contents(prefix, missing_dir_ok=True)


def line(label: str, r: dict) -> str:
    return (f"{label:<7} {r['wall_s']:6.2f} s  {r['configs'] / r['wall_s'] / 1e6:5.2f} M/s  CPU {r['cpu_s']:6.2f} s "
            f"({r['configs'] / r['cpu_s'] / 1e6:5.2f} M configs per CPU second)  peak RSS {r['rss_gib']:.2f} GiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="pairs of runs (local, bucket), alternating which goes first")
    ap.add_argument("--sdk-checksums", choices=["when_supported", "when_required"], default="when_supported",
                    help="AWS_REQUEST_CHECKSUM_CALCULATION for the sweeps (the SDK's default: when_supported)")
    args = ap.parse_args()
    server, proc, s3_env = start_s3_server("memsim-bench")
    s3_env["AWS_REQUEST_CHECKSUM_CALCULATION"] = args.sdk_checksums
    env = {**os.environ, **s3_env}
    os.environ.update(s3_env)
    try:
        with tempfile.TemporaryDirectory(prefix="memsim-bench-") as tmp:
            spec_path = Path(tmp) / "spec.toml"
            spec_path.write_text(toml(spec(1e7)))
            warm = Path(tmp) / "warm.toml"
            warm.write_text(toml({"axes": {"model": ["llama-3.2-1b"], "gpu": ["h100-sxm-80gb"]}}))
            sweep_once(warm, str(Path(tmp) / "warm"), env)  # the kernel compiles here, if it ever does
            ratios, runs = [], {"local": [], "bucket": []}
            for k in range(args.pairs):
                order = ["local", "bucket"] if k % 2 == 0 else ["bucket", "local"]
                pair = {}
                for where in order:
                    out = str(Path(tmp) / f"local-{k}") if where == "local" else server.uri(f"bench-{k}")
                    server_cpu = cpu_seconds(proc.pid)
                    pair[where] = sweep_once(spec_path, out, env)
                    pair[where]["server_cpu_s"] = cpu_seconds(proc.pid) - server_cpu
                    if where == "bucket":
                        pair[where]["bytes"] = bucket_bytes(f"{server.bucket}/bench-{k}")
                        remove_prefix(f"{server.bucket}/bench-{k}")
                    else:
                        pair[where]["bytes"] = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())
                    print(line(where, pair[where]) + f"  {pair[where]['bytes'] / 2**20:7.1f} MiB written"
                          + (f"  S3 server CPU {pair[where]['server_cpu_s']:.2f} s" if where == "bucket" else ""))
                ratios.append(pair["bucket"]["wall_s"] / pair["local"]["wall_s"])
                for where, result in pair.items():
                    runs[where].append(result)
                print(f"pair {k}: bucket / local = {ratios[-1]:.2f}x")
            configs = runs["local"][0]["configs"]
            print(f"\n{configs:,} configurations, {args.pairs} pairs, SDK checksums {args.sdk_checksums}")
            for where, rs in runs.items():
                wall = statistics.median(r["wall_s"] for r in rs)
                per_cpu = statistics.median(r["configs"] / r["cpu_s"] for r in rs)
                print(f"{where:<7} median {wall:6.2f} s ({configs / wall / 1e6:.2f} M/s), "
                      f"{per_cpu / 1e6:.2f} M configs per CPU second, {rs[0]['bytes'] / configs:.2f} B per configuration")
            print(f"bucket / local: median {statistics.median(ratios):.2f}x (target: within 1.5x)")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
