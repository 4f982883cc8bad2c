"""memsim's reserved peak against the committed traced steps replayed through the caching-allocator model.

`memsim measure` replays every traced step's allocations and frees, in order, through a model of PyTorch's CUDA
caching allocator (measure/allocator_replay.py, default PYTORCH_CUDA_ALLOC_CONF), each allocation of a multi-GPU
rank on the stream whose context it was made in (measure/buffer_tags.stream_scopes), and records what
`torch.cuda.max_memory_reserved()` would report as `measured_reserved_peak_bytes`. This check sets memsim's
`reserved_peak_bytes` beside it for every row of data/measured/*.csv: reported per set and family, not held to a
tolerance (the replays are a model of the allocator, not a GPU; data/measured/PARALLEL.md, "Reserved memory").

    python -m engine.checks.reserved            # one line per group
    python -m engine.checks.reserved --by-case  # and one line per row
"""

import argparse
import statistics

from engine.ask.evaluate import evaluate_cases
from engine.checks.validate import GIB, aligned, config_of, measured_group, measured_rows, rank_peak


def reserved_results(rows: list[dict] | None = None) -> list[dict]:
    """memsim's reserved peak (for the rank a row measured: its allocated peak plus the most loaded rank's slack)
    against each row's replayed reserved peak."""
    rows = measured_rows() if rows is None else rows
    rows = [row for row in rows if row.get("measured_reserved_peak_bytes")]
    results = evaluate_cases([config_of(row, by_dims=True) for row in rows])
    out = []
    for row, result in zip(rows, results):
        reference = float(row["measured_reserved_peak_bytes"])
        slack = result["reserved_peak_bytes"] - result["allocated_peak_bytes"]
        value = rank_peak(result, row) + slack
        out.append({"case_id": row["case_id"], "group": measured_group(row), "reference_gib": reference / GIB,
                    "allocated_gib": float(row["measured_allocated_peak_bytes"]) / GIB, "memsim_gib": value / GIB,
                    "error_pct": 100.0 * (value - reference) / reference})
    return out


def group_summary(results: list[dict]) -> list[list[str]]:
    """Per group: rows, median |error|, signed median, lowest and highest error, rows under -10%."""
    groups: dict[str, list[float]] = {}
    for r in results:
        groups.setdefault(r["group"].split(":")[1], []).append(r["error_pct"])
    groups["all"] = [r["error_pct"] for r in results]
    return [[g, str(len(e)), f"{statistics.median(map(abs, e)):.1f}%", f"{statistics.median(e):+.1f}%",
             f"{min(e):+.1f}%", f"{max(e):+.1f}%", str(sum(x < -10 for x in e))] for g, e in groups.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.checks.reserved", description=__doc__.splitlines()[0])
    parser.add_argument("--by-case", action="store_true", help="one line per measured row as well")
    args = parser.parse_args(argv)
    results = reserved_results()
    if args.by_case:
        rows = [[r["case_id"], r["group"], f"{r['allocated_gib']:.2f}", f"{r['reference_gib']:.2f}",
                 f"{r['memsim_gib']:.2f}", f"{r['error_pct']:+.1f}%"] for r in results]
        print("\n".join(aligned(["case", "group", "allocated GiB", "replayed reserved GiB", "memsim GiB", "error"],
                                rows, {2, 3, 4, 5})))
        print()
    header = ["set", "rows", "median |error|", "signed median", "lowest", "highest", "under -10%"]
    print("\n".join(aligned(header, group_summary(results), {1, 2, 3, 4, 5, 6})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
