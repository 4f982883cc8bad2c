"""Peaks that training-recipe projects measured on real GPUs and published (data/golden/recipes_published.csv:
torchtune, torchtitan, PEFT + Accelerate; sources and conventions in RECIPES_PUBLISHED.md), against memsim.

Reported, not held to a tolerance: each figure comes with settings its source leaves open (the GPU's HBM size, a
config read from a linked file, an unstated metric), so the figures say how far memsim is from what users see,
and the measured sets (data/measured/) are what the model is held to.
"""

import csv
import statistics

from engine import DATA_DIR
from engine.ask.explain import evaluate_cases
from engine.checks.validate import GIB, config_of

RECIPES_PUBLISHED = DATA_DIR / "golden" / "recipes_published.csv"
PROJECTS = {"tt": "torchtune", "ttn": "torchtitan", "trainy": "torchtitan", "peft": "peft"}


def compared_bytes(metric: str, result: dict, published: float) -> float:
    """memsim's number for a published metric: the allocated or reserved peak, the device peak for a reading of the
    whole GPU; a peak the source does not name is met anywhere between allocated and reserved."""
    if metric == "peak_allocated":
        return result["allocated_peak_bytes"]
    if metric == "peak_reserved":
        return result["reserved_peak_bytes"]
    if metric == "total_per_gpu":
        return result["device_peak_bytes"]
    low, high = result["allocated_peak_bytes"], result["reserved_peak_bytes"]
    return min(max(published, low), high)  # unknown_peak: the nearer end of [allocated, reserved]


def recipes_published_results() -> list[dict]:
    """One row per published figure, in the shape engine.checks.validate reports (ok None: reported only)."""
    with open(RECIPES_PUBLISHED) as f:
        rows = list(csv.DictReader(f))
    results = evaluate_cases([config_of(row) for row in rows])
    out = []
    for row, result in zip(rows, results):
        published = float(row["value_gib"]) * GIB
        value = compared_bytes(row["metric"], result, published)
        out.append({"case_id": row["case_id"], "group": f"recipes-published:{PROJECTS[row['case_id'].split('-')[0]]}",
                    "metric": row["metric"], "expect": "report", "tolerance_pct": None,
                    "reference_gib": published / GIB, "memsim_gib": value / GIB,
                    "error_pct": 100.0 * (value - published) / published, "ok": None, "summarized": True})
    return out


def published_summary(results: list[dict]) -> dict:
    """Median and max |error| per project and over all rows."""
    groups = {"recipes-published": [abs(r["error_pct"]) for r in results]}
    for r in results:
        groups.setdefault(r["group"], []).append(abs(r["error_pct"]))
    return {g: {"n": len(v), "median_abs_pct": statistics.median(v), "max_abs_pct": max(v)} for g, v in groups.items()}


if __name__ == "__main__":  # python -m engine.checks.recipes_published: the rows, then per project and over all
    from engine.checks.validate import render

    rows = recipes_published_results()
    print(render(rows))
    overall = published_summary(rows)["recipes-published"]
    print(f"all {overall['n']} figures: median |error| {overall['median_abs_pct']:.1f}%, max {overall['max_abs_pct']:.1f}%")
