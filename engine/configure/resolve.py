"""From what a user writes (CONFIG.md names, strings) to the record the formulas read.

One path for every entry point: `memsim explain` flags, rows of a case list, and the sweep's catalog tables.
Every value goes through the vocabulary's encoder; every mistake is a UserError naming the column, the value
and what is accepted.
"""

import tomllib
from functools import cache

import numpy as np

from engine import DATA_DIR
from engine.catalogs import catalog
from engine.catalogs.recipes import preset_inputs
from engine.catalogs.schema import kv_heads_problem
from engine.errors import UserError
from engine.inputs.model_fields import MODEL_FIELDS
from engine.inputs.vocabulary import (
    INPUTS,
    RECORD,
    check_columns,
    empty_records,
    is_empty,
    parse,
)
from engine.model.params import param_count
from engine.model.split import degrees
from engine.model.validity import model_magnitude_ok

MODEL_FIELD_NAMES = [f.name for f in MODEL_FIELDS]


@cache
def overheads() -> dict:
    with open(DATA_DIR / "overheads.toml", "rb") as f:
        return tomllib.load(f)


@cache
def architectures() -> dict:
    with open(DATA_DIR / "architectures.toml", "rb") as f:
        return tomllib.load(f)


def model_fields(entry: dict) -> dict:
    """A catalog or config.json entry as record values (codes for the categorical fields)."""
    fields = {n: parse(n, entry[n]) for n in MODEL_FIELD_NAMES if n in entry and not is_empty(entry[n])}
    if "dropout" in entry:
        fields["dropout"] = parse("dropout", entry["dropout"])
    return fields


def nccl_link(entry: dict) -> str:
    """How NCCL reaches the other GPUs of a node (data/overheads.toml [links]): over NVLink, over PCIe with P2P, or
    through host memory (GeForce cards, whose driver disables P2P), read from the catalog entry's tags."""
    tags = entry.get("tags", [])
    return "nvlink" if "nvlink" in tags else "shm" if "consumer" in tags else "pcie"


def nccl_attributes(entry: dict) -> dict:
    """The NCCL constants of a catalog GPU (data/overheads.toml): channels by architecture and link, the bytes of
    one channel's connection, NVLS buffers on NVLink-switch systems; nccl_buffer_bytes 0: derived per communicator."""
    arch, link = overheads()[entry["arch"]], nccl_link(entry)
    channels = arch.get(link) or arch["pcie"]
    return {
        "nccl_buffer_bytes": 0,
        "nccl_channels": channels["nccl_channels"],
        "nccl_p2p_channels": channels["nccl_p2p_channels"],
        "nccl_connection_bytes": overheads()["links"][link],
        "nccl_nvls_bytes": arch.get("nccl_nvls_bytes", 0) if link == "nvlink" else 0,
    }


def gpu_attributes(entry: dict) -> dict:
    """A GPU catalog entry as the record's GPU attributes: capacity, the overheads of its architecture and what
    its tensor cores run."""
    arch = overheads()[entry["arch"]]
    per_node = entry.get("gpus_per_node", 0) or 0
    host = entry.get("host_ram_bytes_per_node", 0) or 0
    return {
        "capacity_bytes": int(entry["hbm_bytes"]),
        "cuda_context_bytes": arch["cuda_context_bytes"],
        "cublas_workspace_bytes": arch["cublas_workspace_bytes"],
        **nccl_attributes(entry),
        "host_ram_bytes": host // per_node if per_node else 0,
        "bf16_tflops": float(entry.get("bf16_tflops") or entry.get("fp16_tflops") or 0.0),
        "fp8_tflops": float(entry.get("fp8_tflops") or 0.0),
        "matmul_tflops_achievable": float(entry.get("matmul_tflops_achievable") or 0.0),
        "intra_node_bytes_per_s": float(entry.get("intra_node_bytes_per_s") or 0.0),
        "inter_node_bytes_per_s": float(entry.get("inter_node_bytes_per_s") or 0.0),
        "gpus_per_node": int(per_node),
        "usd_per_hour": float(entry.get("usd_per_hour") or 0.0),
        "bandwidth_bytes_per_s": float(entry.get("bandwidth_bytes_per_s") or 0.0),
        "fp8_matmul_tflops_achievable": float(entry.get("fp8_matmul_tflops_achievable") or 0.0),
        "nvlink_domain_gpus": int(entry.get("nvlink_domain_gpus") or 0),
        "fp8_tensor_cores": architectures()[entry["arch"]]["fp8_tensor_cores"],
        "bf16_tensor_cores": architectures()[entry["arch"]]["bf16_tensor_cores"],
    }


def layout_mode(given: dict) -> int:
    """How dp and n_gpus relate (engine.model.split.degrees): 0 dp derived, 1 n_gpus derived, 2 both given."""
    if "dp" in given and parse("dp", given["dp"]) > 0:
        return 2 if "n_gpus" in given and parse("n_gpus", given["n_gpus"]) > 0 else 1
    return 0


def resolve_case(case: dict) -> tuple[np.record, str, str]:
    """One configuration (CONFIG.md names -> raw values) as (record, model label, gpu label)."""
    check_columns(case)
    given = {k: v for k, v in case.items() if not is_empty(v)}
    rec = empty_records(1)[0]
    model_label = str(given.get("model", "")).strip() or ("custom" if "n_layers" in given else INPUTS["model"].default)
    if model_label != "custom":
        entry = catalog.resolve_model(model_label)
        for k, v in model_fields(entry).items():
            rec[k] = v
        model_label = entry["model"]
    named = {n: rec[n].item() for n in MODEL_FIELD_NAMES}  # the architecture the model's name stands for
    gpu_entry = catalog.resolve_gpu(str(given.get("gpu", INPUTS["gpu"].default)).strip())
    for k, v in gpu_attributes(gpu_entry).items():
        rec[k] = v
    for name, value in preset_inputs(str(given.get("recipe", ""))).items():
        rec[name] = value  # a recipe preset first: the inputs given below win
    for name, raw in given.items():
        if name not in ("model", "gpu", "recipe"):
            rec[name] = parse(name, raw)
    if "n_params" not in given and any(rec[n] != v for n, v in named.items() if n != "n_params"):
        rec.n_params = 0  # dims given over a named model: its published count is another model's; count these dims
    check_ranges(rec)
    rec.dp, rec.n_gpus = degrees(rec, layout_mode(given))  # a layout that does not divide becomes an invalid row
    normalize_model(rec)
    if problem := kv_heads_problem(int(rec.n_heads), int(rec.n_kv_heads)):
        raise UserError(problem)  # the rule a catalog entry and a config.json follow too
    return rec, model_label, gpu_entry["gpu"]


def normalize_model(rec) -> None:
    """Spell out what 0 stands for (n_kv_heads = n_heads, head_dim = d_model / n_heads) and the count."""
    if rec.n_heads > 0:
        rec.n_kv_heads = rec.n_kv_heads or rec.n_heads
        rec.head_dim = rec.head_dim or rec.d_model // rec.n_heads
    if model_magnitude_ok(rec):  # else the row is invalid (too large) and the count is never made
        rec.n_params = param_count(rec)  # the published count, or the dims' own


def check_ranges(rec) -> None:
    """Values that no layout could mean: a user mistake, not an invalid row."""
    if not 0.0 <= rec.headroom < 1.0:
        raise UserError(f"headroom must be in [0, 1), got {rec.headroom}")
    if not 0.0 <= rec.dropout < 1.0:
        raise UserError(f"dropout must be in [0, 1), got {rec.dropout}")
    if rec.n_layers == 0 and rec.n_params == 0:
        raise UserError("the model has neither dims (n_layers, d_model, n_heads, ...) nor n_params")
    if rec.n_layers > 0 and (rec.d_model <= 0 or rec.n_heads <= 0 or rec.vocab <= 0):
        raise UserError("a model with n_layers needs positive d_model, n_heads and vocab")


def resolve_cases(rows: list[dict]) -> tuple[np.recarray, list[str], list[str]]:
    """Many configurations: one record each, plus their model and GPU labels."""
    records = np.zeros(len(rows), dtype=RECORD).view(np.recarray)
    models, gpus = [], []
    for i, case in enumerate(rows):
        try:
            records[i], model, gpu = resolve_case(case)
        except UserError as err:
            raise UserError(f"row {i + 1}: {err}") from None
        models.append(model)
        gpus.append(gpu)
    return records, models, gpus

