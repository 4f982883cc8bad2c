"""Peaks measured on real GPUs and published (data/golden/hardware.csv; sources and conventions in HARDWARE.md),
against memsim: torchtune, torchtitan, Trainy, PEFT, the Transformers docs, LitGPT, Answer.AI, torchao.

Reported, not held to a tolerance in the tests: the figures say how far memsim is from what users see on a GPU,
including what a CPU trace cannot (the caching allocator's reserve, memory outside PyTorch, the phases around the
step). Only `stated` rows, whose every setting that moves the peak is stated by the source, count in the summary;
the others are listed. Each row is compared with the quantity its metric names (`compared_bytes`).
"""

import csv
import statistics

from engine import DATA_DIR
from engine.ask.evaluate import evaluate_cases
from engine.checks.validate import GIB, config_of

HARDWARE = DATA_DIR / "golden" / "hardware.csv"
SOURCES = {"tt": "torchtune", "ttn": "torchtitan", "trainy": "trainy", "peft": "peft", "hf": "transformers",
           "litgpt23": "litgpt-2023", "litgpt24": "litgpt-2024", "aai": "answerai", "ao": "torchao"}
RECIPE_SOURCES = {"torchtune", "torchtitan", "trainy", "peft"}  # `memsim validate --set recipes`
UNDER_PCT = -10.0  # a row under-predicted by more than this is the planner's worst error: says FITS, job OOMs


def source_of(case_id: str) -> str:
    return SOURCES[case_id.split("-")[0]]


def hardware_rows(sources: set[str] | None = None) -> list[dict]:
    with open(HARDWARE, newline="") as f:
        rows = list(csv.DictReader(f))
    return [r for r in rows if sources is None or source_of(r["case_id"]) in sources]


def compared_bytes(metric: str, result: dict, measured: float) -> float:
    """memsim's number for a measured metric: the allocated or reserved peak, the device peak for a reading of the
    whole GPU; a peak the source does not name is met anywhere between allocated and reserved.

    The reserve a run reports cannot pass what its GPU leaves PyTorch: where memsim's reserve (what the cache grows
    to on a device with room to spare) is more than the GPU's capacity less memsim's memory outside PyTorch, a
    failed cudaMalloc frees the cached blocks no tensor holds and retries (CUDACachingAllocator.cpp `malloc`:
    release_available_cached_blocks, release_cached_blocks), so the run reports at most that bound, and at least
    its allocated peak. memsim's own outputs keep the unbounded reserve (`fits` weighs it, on the safe side)."""
    allocated = result["allocated_peak_bytes"]
    room = result["capacity_bytes"] - result["overhead_bytes"]
    reserved = min(result["reserved_peak_bytes"], max(allocated, room))
    if metric == "peak_allocated":
        return allocated
    if metric == "peak_reserved":
        return reserved
    if metric == "total_per_gpu":
        return reserved + result["overhead_bytes"]
    return min(max(measured, allocated), reserved)  # unknown_peak: the nearer end of [allocated, reserved]


def hardware_results(sources: set[str] | None = None) -> list[dict]:
    """One row per measured figure, in the shape engine.checks.validate reports (ok None: reported only)."""
    rows = hardware_rows(sources)
    results = evaluate_cases([config_of(row) for row in rows])
    out = []
    for row, result in zip(rows, results):
        measured = float(row["value_gib"]) * GIB
        value = compared_bytes(row["metric"], result, measured)
        stated = row["stated"] == "true"
        out.append({"case_id": row["case_id"], "group": f"hardware:{source_of(row['case_id'])}",
                    "metric": row["metric"], "expect": "report" if stated else "listed", "tolerance_pct": None,
                    "reference_gib": measured / GIB, "memsim_gib": value / GIB,
                    "error_pct": 100.0 * (value - measured) / measured, "ok": None, "summarized": stated,
                    "phase": result["peak_phase"]})
    return out


def summary(results: list[dict]) -> dict:
    """Over the stated rows, per source and over all: n, median and max |error|, signed median, rows under -10%."""
    groups: dict[str, list[float]] = {"hardware": []}
    for r in results:
        if r["summarized"]:
            groups["hardware"].append(r["error_pct"])
            groups.setdefault(r["group"], []).append(r["error_pct"])
    return {g: {"n": len(e), "median_abs_pct": statistics.median(map(abs, e)), "max_abs_pct": max(map(abs, e)),
                "signed_median_pct": statistics.median(e), "under": sum(x < UNDER_PCT for x in e)}
            for g, e in groups.items() if e}


def markdown_summary(results: list[dict]) -> str:
    """The README's table: per source, then all stated rows."""
    lines = ["| source | figures | median abs error | max abs error | signed median | under -10% |",
             "|---|---:|---:|---:|---:|---:|"]
    for group, s in sorted(summary(results).items(), key=lambda kv: (kv[0] == "hardware", kv[0])):
        name = "all stated" if group == "hardware" else group.split(":")[1]
        lines.append(f"| {name} | {s['n']} | {s['median_abs_pct']:.1f}% | {s['max_abs_pct']:.1f}% | "
                     f"{s['signed_median_pct']:+.1f}% | {s['under']} |")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m engine.checks.hardware: every row, then the summary
    from engine.checks.validate import render

    rows = hardware_results()
    print(render(rows))
    print(markdown_summary(rows))
