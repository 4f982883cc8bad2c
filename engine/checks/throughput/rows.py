"""The published rows of data/golden/throughput.csv as memsim cases: each row's source, its figure as tokens/s per
GPU, and what it leaves unsaid, filled in by `derivations` and said (engine/checks/throughput/__init__.py)."""

import csv

from engine import DATA_DIR
from engine.configure.resolve import resolve_case
from engine.errors import UserError
from engine.inputs.codes import Invalid
from engine.inputs.vocabulary import INPUTS
from engine.model.flops import model_flops_per_token as flops_per_token
from engine.model.levels import device_terms, gpu_terms, rank_terms, shape_terms, step_terms

THROUGHPUT = DATA_DIR / "golden" / "throughput.csv"
# Sources, by the case_id prefix THROUGHPUT.md gives each (one paper or repository each).
SOURCES = {
    "megatron-t": "Narayanan et al. 2021",
    "korthikanti": "Korthikanti et al. 2022",
    "llama3": "Llama 3",
    "torchtitan-a100": "torchtitan A100",
    "torchtitan-h100": "torchtitan H100",
    "torchtitan-h200": "torchtitan H200",
    "mpt": "MosaicML llm-foundry",
    "mbridge": "Megatron-Bridge",
}


def source_of(case_id: str) -> str:
    return next(name for prefix, name in SOURCES.items() if case_id.startswith(prefix))


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


def data_parallel(row: dict) -> int:
    if row["dp"]:
        return int(row["dp"])
    return int(row["n_gpus"]) // (int(row["tp"] or 1) * int(row["pp"] or 1) * int(row["cp"] or 1))


def derivations(row: dict) -> dict[str, tuple[object, str]]:
    """What a row leaves unsaid that its comparison needs, filled in explicitly: column -> (value, why).

    - micro_batch not printed (Narayanan et al. Table 1; Llama 3 Table 4; torchtitan's 405B tables): 1, the
      CONFIG.md default and what Megatron-LM's example scripts for these sizes set (--micro-batch-size 1);
    - grad_accum not printed, or printed but not global_batch / (micro_batch x dp) (one Megatron-Bridge row):
      global_batch / (micro_batch x dp), the definition every one of these sources uses and the batch its
      tokens/s counts (with pp, the micro-batches per pipeline flush);
    - torchtitan's H100 rows ran on H100s 'equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth'
      (their notes quote it): that bandwidth, not the catalog part's 3.35 TB/s;
    - torchtitan's interleaved row does not state its virtual stages: torchtitan's default, two per rank
      (torchtitan/parallelisms/pipeline_llama.py generate_split_points, 2024);
    - Megatron-Bridge's DGX-GB200 is an NVL72 rack, its NVLink domain 72 GPUs (the catalog's gb200 entry says so
      in its link_source but has no field for it: nvlink_domain_gpus).
    """
    out: dict[str, tuple[object, str]] = {}
    micro = int(row["micro_batch"]) if row["micro_batch"] else 1
    if not row["micro_batch"]:
        out["micro_batch"] = (1, "not stated; 1 assumed (CONFIG.md default)")
    if row["global_batch"]:
        accum, rest = divmod(int(row["global_batch"]), micro * data_parallel(row))
        printed = int(row["grad_accum"]) if row["grad_accum"] else None
        if rest == 0 and printed != accum:
            why = f"global_batch {row['global_batch']} / (micro_batch {micro} x dp {data_parallel(row)})"
            out["grad_accum"] = (accum, why if printed is None else f"printed {printed}, but {why}")
    if "2.4 TB/sec peak memory bandwidth" in row["notes"]:
        out["bandwidth_bytes_per_s"] = (2.4e12, "H100 96GB HBM2e at 2.4 TB/s (the source's hardware)")
    if row["pp_schedule"] == "interleaved" and not row["vpp"] and row["case_id"].startswith("torchtitan"):
        out["vpp"] = (2, "torchtitan's generate_split_points: two stages per rank for multi-stage schedules")
    if row["gpu"] == "gb200":
        out["nvlink_domain_gpus"] = (72, ("DGX-GB200 is an NVL72 rack: NVLink across its 72 GPUs (gpus.toml "
                                          "link_source; the catalog has no field for it yet)"))
    return out


def case_of(row: dict) -> dict:
    """The row's configuration: its CONFIG.md columns that are given (empty: the source does not say), and the
    derivations above."""
    case = {k: v for k, v in row.items() if k in INPUTS and v not in ("", None)}
    case.update({k: v for k, (v, _) in derivations(row).items()})
    return case


def throughput_rows() -> list[dict]:
    with open(THROUGHPUT, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def prepared(rows: list[dict]) -> list[dict]:
    """Each row resolved once: its record, rank and step terms, and the published tokens/s per GPU; `why_not`
    says why a row cannot be compared (else empty)."""
    out = []
    for row in rows:
        item = {"row": row, "source": source_of(row["case_id"]), "why_not": "", "record": None}
        try:
            record, _, _ = resolve_case(case_of(row))
        except UserError as err:
            out.append(item | {"why_not": f"input rejected: {err}", "reference": None})
            continue
        r = rank_terms(record)
        s = step_terms(record, r, shape_terms(record, r))
        item |= {"record": record, "rank": r, "step": s,
                 "reference": published_tokens_per_gpu_s(row, float(flops_per_token(record)))}
        reason = Invalid(device_terms(s, gpu_terms(record, r)).columns.invalid_reason)
        if reason != Invalid.OK:
            why = reason.name.lower().replace("_", " ")
            item["why_not"] = f"not yet comparable: cannot run in memsim today ({why})"
        elif row["confidence"] == "low":
            item["why_not"] = "low confidence: reported only"
        out.append(item)
    return out
