"""The time model against published training throughput (data/golden/throughput.csv, its sources in THROUGHPUT.md).

Each row is a real run with its configuration in CONFIG.md names and the figure its source printed. The
comparison is tokens per second per GPU, the definition-free figure: where a source printed only TFLOP/s, they are
turned into tokens/s with the source's own FLOP count (Narayanan et al.'s Eq. 3 for `hardware_eq3`, the PaLM
definition memsim's MFU uses for `model`). Rows whose `confidence` is low are reported, not held to a tolerance.
"""

import csv

from engine import DATA_DIR
from engine.ask.explain import evaluate_cases
from engine.inputs.vocabulary import INPUTS
from engine.model.flops import model_flops_per_token as flops_per_token

THROUGHPUT = DATA_DIR / "golden" / "throughput.csv"
MEDIAN_TOL_PCT, MAX_TOL_PCT = 15.0, 30.0  # issue #16


def eq3_flops_per_token(row: dict) -> float:
    """Narayanan et al. 2021 (arXiv:2104.04473) Eq. 3, F = 96·B·s·l·h^2·(1 + s/6h + V/16lh), per token (B·s)."""
    layers, h, s, v = (float(row[k]) for k in ("n_layers", "d_model", "seq_len", "vocab"))
    return 96.0 * layers * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * layers * h))


def published_tokens_per_gpu_s(row: dict, model_flops_per_token: float | None) -> float | None:
    """The row's figure as tokens/s per GPU."""
    if row["tokens_per_gpu_s"]:
        return float(row["tokens_per_gpu_s"])
    if row["tflops_per_gpu"] and row["tflops_kind"] == "hardware_eq3":
        return float(row["tflops_per_gpu"]) * 1e12 / eq3_flops_per_token(row)
    if row["tflops_per_gpu"] and row["tflops_kind"] == "model" and model_flops_per_token:
        return float(row["tflops_per_gpu"]) * 1e12 / model_flops_per_token
    return None


def case_of(row: dict) -> dict:
    """The row's configuration: its CONFIG.md columns that are given (empty: the source does not say)."""
    return {k: v for k, v in row.items() if k in INPUTS and v not in ("", None)}


def throughput_results() -> list[dict]:
    rows = list(csv.DictReader(open(THROUGHPUT)))
    results = evaluate_cases([case_of(r) for r in rows])
    out = []
    for row, r in zip(rows, results):
        mine = r["tokens_per_gpu_s"] if r else None
        theirs = published_tokens_per_gpu_s(row, model_flops_per_token(r) if r else None)
        ok = None
        if mine is not None and theirs:
            error = 100.0 * (mine - theirs) / theirs
            ok = abs(error) <= MAX_TOL_PCT if row["confidence"] != "low" else None
        else:
            error = None
        out.append({"case_id": row["case_id"], "group": f"throughput:{row['gpu']}", "metric": "tokens_per_gpu_s",
                    "reference": theirs, "memsim": mine, "error_pct": error, "ok": ok})
    return out


def model_flops_per_token(result: dict) -> float:
    """memsim's model FLOPs per token of an evaluated case (the PaLM definition)."""
    return float(flops_per_token(result["record"]))
