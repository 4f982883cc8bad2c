"""Query latency and peak RSS over a sweep dataset, one fresh process per query (as a user runs them).

    memsim sweep SPEC -o DIR          # e.g. a 1e8-configuration spec (benchmarks/bench_sweep.py's spec(1e8))
    python benchmarks/bench_queries.py DIR [--queries min_gpus frontier ...]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["summary", "min_gpus", "frontier", "cheapest_fleet", "feasibility_map", "bottlenecks", "max_micro_batch"]
PARAMS = {"max_micro_batch": {"model": "llama-3.1-70b"}}

CODE = """
import json, sys, time
sys.path.insert(0, %r)
from benchmarks.peak_rss import peak_rss_gib
from engine.ask.queries import run_query
from engine.dataset.views import connect
con = connect(%r)
t = time.perf_counter()
rows = run_query(con, %r, %r)
print(json.dumps({"seconds": time.perf_counter() - t, "rows": rows.height,
                  "rss_gib": peak_rss_gib()}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep")
    ap.add_argument("--queries", nargs="*", default=DEFAULT)
    args = ap.parse_args()
    import duckdb

    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{args.sweep}/part-*.parquet')").fetchall()[0][0]
    print(f"{n:,} rows in {args.sweep}")
    for name in args.queries:
        code = CODE % (str(ROOT), args.sweep, name, PARAMS.get(name, {}))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{name:<18} {r['seconds']:6.2f} s  {r['rows']:>7,} rows out  peak RSS {r['rss_gib']:.2f} GiB  "
              f"({n / r['seconds'] / 1e6:,.0f} M rows/s)")


if __name__ == "__main__":
    main()
