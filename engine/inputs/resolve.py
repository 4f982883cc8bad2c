"""From what a user writes (CONFIG.md names, strings) to the record the formulas read.

One path for every entry point: `memsim explain` flags, rows of a case list, and the sweep's catalog tables.
Every mistake is a UserError naming the column, the value and what is accepted.
"""

import difflib
import math
import tomllib
from functools import cache

import numpy as np

from engine import DATA_DIR
from engine.errors import UserError
from engine.inputs.codes import IntEnum, name_of, names
from engine.inputs.vocabulary import (
    GPU_ATTRIBUTES,
    INPUTS,
    MODEL_FIELDS,
    RECORD,
    empty_records,
)
from engine.model import catalog
from engine.model.derived import derive_layout
from engine.model.params import param_count

MODEL_FIELD_NAMES = [f.name for f in MODEL_FIELDS]
POSITIVE = {"seq_len", "micro_batch", "grad_accum", "tp", "pp", "cp", "ep", "vpp", "loss_chunks", "checkpoint_every"}
NON_NEGATIVE = {f.name for f in MODEL_FIELDS} | {"n_gpus", "dp", "lora_rank", "pp_first_layers", "pp_last_layers"} | set(GPU_ATTRIBUTES)
# GPU attributes a case may override (a measured CUDA context, a smaller MIG slice, ...).
EXTRA_INPUTS = {name: "int" for name in GPU_ATTRIBUTES}


def accepted_columns() -> list[str]:
    return list(INPUTS) + list(EXTRA_INPUTS)


def check_columns(columns) -> None:
    """Unknown column names are an error that names them and lists the nearest accepted ones."""
    known = set(accepted_columns())
    for col in columns:
        if col not in known:
            near = difflib.get_close_matches(col, known, n=3, cutoff=0.5)
            hint = f" — did you mean: {', '.join(near)}?" if near else ""
            raise UserError(f"unknown column '{col}'{hint} (accepted: {', '.join(accepted_columns())})")


def is_empty(raw) -> bool:
    return raw is None or (isinstance(raw, str) and raw.strip() == "") or (
        isinstance(raw, float) and math.isnan(raw)
    )


def parse_value(name: str, raw):
    """One input value from text or a typed cell to its record value (enum code, int, 0/1 or float)."""
    kind = INPUTS[name].kind if name in INPUTS else EXTRA_INPUTS[name]
    if isinstance(kind, type) and issubclass(kind, IntEnum):
        return parse_choice(name, kind, raw)
    if kind == "bool":
        return parse_bool(name, raw)
    if kind == "float":
        return parse_number(name, raw, float)
    if kind == "int":
        value = parse_number(name, raw, int)
        if name in POSITIVE and value <= 0:
            raise UserError(f"{name} must be a positive integer, got {raw!r}")
        if name in NON_NEGATIVE and value < 0:
            raise UserError(f"{name} must not be negative, got {raw!r}")
        return value
    return str(raw).strip()


def parse_choice(name: str, enum: type[IntEnum], raw) -> int:
    text = str(raw).strip().lower()
    spelled = {name_of(m): m for m in enum}
    if text in spelled:
        return int(spelled[text])
    raise UserError(f"unknown {name} '{raw}' (accepted: {', '.join(names(enum))})")


def parse_bool(name: str, raw) -> int:
    if isinstance(raw, (bool, np.bool_)):
        return int(raw)
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "1.0"):
        return 1
    if text in ("false", "0", "no", "0.0"):
        return 0
    raise UserError(f"{name} must be true or false, got {raw!r}")


def parse_number(name: str, raw, kind):
    try:
        value = float(raw) if not isinstance(raw, (int, np.integer)) else raw
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number, got {raw!r}") from None
    if kind is int:
        if value != int(value):
            raise UserError(f"{name} must be an integer, got {raw!r}")
        return int(value)
    return float(value)


@cache
def overheads() -> dict:
    with open(DATA_DIR / "overheads.toml", "rb") as f:
        return tomllib.load(f)


def model_fields(entry: dict) -> dict:
    """A catalog or config.json entry as record values (codes for the categorical fields)."""
    fields = {n: parse_value(n, entry[n]) for n in MODEL_FIELD_NAMES if n in entry and not is_empty(entry[n])}
    if "dropout" in entry:
        fields["dropout"] = float(entry["dropout"])
    return fields


def gpu_attributes(entry: dict) -> dict:
    """A GPU catalog entry as the record's GPU attributes: capacity and the overheads of its architecture."""
    arch = overheads()[entry["arch"]]
    per_node = entry.get("gpus_per_node", 0) or 0
    host = entry.get("host_ram_bytes_per_node", 0) or 0
    return {
        "capacity_bytes": int(entry["hbm_bytes"]),
        "cuda_context_bytes": arch["cuda_context_bytes"],
        "cublas_workspace_bytes": arch["cublas_workspace_bytes"],
        "nccl_buffer_bytes": arch["nccl_buffer_bytes"],
        "host_ram_bytes": host // per_node if per_node else 0,
    }


def layout_mode(given: dict) -> int:
    """How dp and n_gpus relate (engine.model.derived.derive_layout): 0 dp derived, 1 n_gpus derived, 2 both given."""
    if "dp" in given and int(float(given["dp"])) > 0:
        return 2 if "n_gpus" in given and int(float(given["n_gpus"])) > 0 else 1
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
    gpu_entry = catalog.resolve_gpu(str(given.get("gpu", INPUTS["gpu"].default)).strip())
    for k, v in gpu_attributes(gpu_entry).items():
        rec[k] = v
    for name, raw in given.items():
        if name not in ("model", "gpu"):
            rec[name] = parse_value(name, raw)
    check_ranges(rec)
    derive_layout(rec, layout_mode(given))  # a layout that does not divide becomes an invalid row
    normalize_model(rec)
    return rec, model_label, gpu_entry["gpu"]


def normalize_model(rec) -> None:
    """Spell out what 0 stands for (n_kv_heads = n_heads, head_dim = d_model / n_heads) and the count."""
    if rec.n_heads > 0:
        rec.n_kv_heads = rec.n_kv_heads or rec.n_heads
        rec.head_dim = rec.head_dim or rec.d_model // rec.n_heads
    rec.n_params = param_count(rec)  # the published count, or the dims' own


def check_ranges(rec) -> None:
    """Values that no layout could mean: a user mistake, not an invalid row."""
    if not 0 <= rec.zero_stage <= 3:
        raise UserError(f"zero_stage must be 0, 1, 2 or 3, got {rec.zero_stage}")
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
