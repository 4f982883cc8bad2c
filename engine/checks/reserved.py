"""memsim's reserved peak against the committed traced steps replayed through the caching-allocator model.

`memsim measure` replays every traced step's allocations and frees, in order, through a model of PyTorch's CUDA
caching allocator (measure/allocator_replay.py, under the row's `allocator`: PyTorch's default or expandable
segments), each allocation of a multi-GPU rank on the stream whose context it was made in
(measure/buffer_tags.stream_scopes), and records what
`torch.cuda.max_memory_reserved()` would report as `measured_reserved_peak_bytes`. This check sets memsim's
`reserved_peak_bytes` beside it for every row of data/measured/*.csv: reported per set and family, not held to a
tolerance (the replays are a model of the allocator, not a GPU; data/measured/PARALLEL.md, "Reserved memory").

    python -m engine.checks.reserved                 # one line per group
    python -m engine.checks.reserved --by-case       # and one line per row
    python -m engine.checks.reserved --expandable 30  # 30 one-GPU rows traced again, replayed with expandable segments
    python -m engine.checks.reserved --measured OUT.csv  # the rows `memsim measure CASES -o OUT.csv` wrote
    python -m engine.checks.reserved --runs-in        # what each low row needs to run, against memsim

`--runs-in` (needs the measure extras) traces again every committed case whose replayed reserved peak memsim's is
below and replays it on smaller devices, where a failed cudaMalloc first releases the wholly free cached segments:
about the least memory it runs in (measure/allocator_replay.bisected_capacity), against memsim's, and whether it runs
on every device memsim says it fits on, with the default 10% headroom (allocator_replay.first_failure). What an
out-of-memory error depends on is that, not the reserved peak (about 5 s a case, 15 minutes in all).

`--expandable N` (needs the measure extras: torch, transformers) draws N rows of the one-GPU sets (seed 1), traces
each again and replays it with `expandable_segments:True`, and sets memsim's reserved peak with `allocator =
expandable` beside it (about 10 s a row).
"""

import argparse
import csv
import random
import statistics
import sys

from engine.ask.evaluate import evaluate_cases
from engine.checks.validate import GIB, aligned, config_of, measured_group, measured_rows, measured_stage
from engine.errors import UserError
from engine.inputs.codes import Allocator
from engine.inputs.vocabulary import INPUTS
from engine.model.levels import rank_terms, stage_slack_bytes
from engine.model.loss import micro_batch_loss_bytes


def rank_reserved(result: dict, row: dict) -> int:
    """memsim's reserved peak for the rank a row measured (validate.measured_stage: that stage's allocated peak and
    slack, the loss-sized block on the last, or its steady reserve with the homeless segments where larger), else the
    most loaded rank's (reserved_peak_bytes)."""
    stage = measured_stage(result, row)
    if stage is None:
        return result["reserved_peak_bytes"]
    peak, is_last = stage
    record = result["record"]
    caching = record.allocator == Allocator.CACHING
    block = micro_batch_loss_bytes(record).block if is_last and caching else 0
    reserved = peak.allocated_bytes + stage_slack_bytes(record, rank_terms(record), peak, block)
    return int(max(reserved, peak.steady_bytes))  # the homeless segments, as levels.step_terms adds them


def reserved_results(rows: list[dict] | None = None) -> list[dict]:
    """memsim's reserved peak (for the rank a row measured, rank_reserved) against each row's replayed reserved
    peak."""
    rows = measured_rows() if rows is None else rows
    rows = [row for row in rows if row.get("measured_reserved_peak_bytes")]
    results = evaluate_cases([config_of(row, by_dims=True) for row in rows])
    out = []
    for row, result in zip(rows, results):
        reference = float(row["measured_reserved_peak_bytes"])
        value = rank_reserved(result, row)
        out.append({"case_id": row["case_id"], "group": measured_group(row), "reference_gib": reference / GIB,
                    "allocated_gib": float(row["measured_allocated_peak_bytes"]) / GIB, "memsim_gib": value / GIB,
                    "error_pct": 100.0 * (value - reference) / reference})
    return out


def expandable_results(n: int, seed: int = 1) -> list[dict]:
    """memsim's reserved peak with `allocator = expandable` against n one-GPU rows traced again and replayed
    with expandable segments (and, beside it, the same trace's replay under the default allocator)."""
    from engine.ask.estimate import INPUT_COLUMNS, estimate_table
    from engine.cli.measure import load_harness

    load_harness()
    from engine.checks.measure.allocator_replay import EXPANDABLE, replay_log
    from engine.checks.measure.case import resolve
    from engine.checks.measure.single_gpu import run_logged

    rows = [r for r in measured_rows()
            if r["set"] in ("single-gpu", "recipes") and r.get("measured_reserved_peak_bytes")]
    out = []
    for row in random.Random(seed).sample(rows, n):
        case = config_of(row, by_dims=True) | {"allocator": "expandable"}
        result = evaluate_cases([case])[0]
        lb, _, _ = run_logged(resolve(estimate_table([case]).select(INPUT_COLUMNS).to_pylist()[0]))
        expandable, caching = replay_log(lb, EXPANDABLE), replay_log(lb)
        reference = expandable.reserved_peak_bytes
        out.append({"case_id": row["case_id"], "allocated_gib": expandable.allocated_peak_bytes / GIB,
                    "caching_gib": caching.reserved_peak_bytes / GIB, "reference_gib": reference / GIB,
                    "memsim_gib": result["reserved_peak_bytes"] / GIB,
                    "error_pct": 100.0 * (result["reserved_peak_bytes"] - reference) / reference})
    return out


def runs_in_results(rows: list[dict] | None = None) -> list[dict]:
    """For each committed case whose replayed reserved peak memsim's is below (reserved_results; a case in two sets
    once), traced again: its replayed reserved peak, about the least device memory it runs in
    (allocator_replay.bisected_capacity), against memsim's reserved peak for the rank it measured; and whether it
    runs on every device on which memsim says it fits, from memsim's reserved peak over 1 - headroom (the default
    10%) up (allocator_replay.first_failure: the smallest of them it fails on, None where none)."""
    from engine.cli.measure import load_harness

    load_harness()
    from engine.checks.measure import parallel
    from engine.checks.measure.allocator_replay import bisected_capacity, first_failure, logged_events, replay_events
    from engine.checks.measure.breakdown import ALLOCATOR_CONFIGS
    from engine.checks.measure.buffer_tags import stream_of
    from engine.checks.measure.case import resolve
    from engine.checks.measure.parallel_run import run_rank
    from engine.checks.measure.reference_sets import find_case
    from engine.checks.measure.single_gpu import run_logged

    low = {r["case_id"]: r for r in reserved_results(rows) if r["error_pct"] < 0}
    out = []
    for case_id, r in low.items():
        c = resolve(find_case(case_id))
        if parallel.needs_world(c):
            lb = run_rank(c).lb
            streams = stream_of(lb)
        else:
            lb, streams = run_logged(c)[0], lambda record: 0
        events, _ = logged_events(lb)
        config = ALLOCATOR_CONFIGS[c["allocator"]]
        needs = bisected_capacity(events, config, streams)
        memsim = r["memsim_gib"] * GIB
        fits_from = int(memsim / (1 - INPUTS["headroom"].default))  # the least device memory memsim says FITS on
        replayed = replay_events(events, config, None, streams)[0].reserved.peak
        out.append(r | {"replayed_gib": replayed / GIB, "runs_in_gib": needs / GIB,
                        "margin_pct": 100.0 * (memsim - needs) / needs, "fits_from_gib": fits_from / GIB,
                        "fails_at": first_failure(events, fits_from, config, streams)})
    return out


def measured_file(path: str) -> list[dict]:
    """The rows of a `memsim measure` output, each named by its row number and labelled as a set of its own."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    for i, row in enumerate(rows, 1):
        row.setdefault("case_id", f"row {i}")
        row["set"] = "measured"
    if not any(row.get("measured_reserved_peak_bytes") for row in rows):
        raise UserError(f"{path} has no measured_reserved_peak_bytes: give the CSV `memsim measure CASES -o CSV` wrote")
    return rows


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
    parser.add_argument("--measured", metavar="CSV", help="the rows of a `memsim measure CASES -o CSV` output instead "
                        "of the committed sets, one line per row")
    parser.add_argument("--runs-in", action="store_true", help="the committed cases memsim puts below their replayed "
                        "reserved peak, traced again: about what each needs to run, against memsim, and whether each "
                        "runs on every device memsim says it fits on")
    parser.add_argument("--expandable", type=int, metavar="N", help="N one-GPU rows traced again and replayed with "
                        "expandable segments, against memsim's allocator = expandable")
    args = parser.parse_args(argv)
    if args.runs_in and (args.measured or args.expandable):
        print("memsim: error: --runs-in traces the committed rows again; it takes neither --measured nor --expandable",
              file=sys.stderr)
        return 2
    if args.runs_in:
        results = runs_in_results()
        rows = [[r["case_id"], r["group"], f"{r['allocated_gib']:.2f}", f"{r['replayed_gib']:.2f}",
                 f"{r['runs_in_gib']:.2f}", f"{r['memsim_gib']:.2f}", f"{r['error_pct']:+.1f}%",
                 f"{r['margin_pct']:+.1f}%",
                 "yes" if r["fails_at"] is None else f"no: OOM on {r['fails_at'] / GIB:.2f}"] for r in results]
        print("\n".join(aligned(["case", "group", "allocated GiB", "replayed reserved GiB", "runs in GiB", "memsim GiB",
                                 "vs reserved", "vs runs in", "runs wherever memsim says FITS"], rows,
                                {2, 3, 4, 5, 6, 7})))
        short = [r["margin_pct"] for r in results if r["margin_pct"] < 0]
        spread = f" (median {statistics.median(short):+.1f}%, lowest {min(short):+.1f}%)" if short else ""
        print(f"\n{len(results)} cases below their replayed reserved peak; memsim short of what they run in on "
              f"{len(short)}{spread}; an out-of-memory error on a device memsim says FITS on: "
              f"{sum(r['fails_at'] is not None for r in results)}")
        return 0
    if args.expandable:
        results = expandable_results(args.expandable)
        rows = [[r["case_id"], f"{r['allocated_gib']:.2f}", f"{r['caching_gib']:.2f}", f"{r['reference_gib']:.2f}",
                 f"{r['memsim_gib']:.2f}", f"{r['error_pct']:+.1f}%"] for r in results]
        print("\n".join(aligned(["case", "allocated GiB", "replayed, caching", "replayed, expandable", "memsim GiB",
                                 "error"], rows, {1, 2, 3, 4, 5})))
        errors = [r["error_pct"] for r in results]
        print(f"\n{len(errors)} rows: median |error| {statistics.median(map(abs, errors)):.1f}%, signed median "
              f"{statistics.median(errors):+.1f}%, {min(errors):+.1f}% .. {max(errors):+.1f}%")
        return 0
    try:
        results = reserved_results(measured_file(args.measured) if args.measured else None)
    except UserError as err:
        print(f"memsim: error: {err}", file=sys.stderr)
        return 2
    if args.by_case or args.measured:
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
