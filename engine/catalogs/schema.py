"""What a catalog entry may say: the schema of data/models.toml and data/gpus.toml, and the checks that fail
with one line naming the file, the entry and the field (engine/catalogs/catalog.py loads them)."""

import difflib
import re

from engine.errors import UserError
from engine.inputs.model_fields import MODEL_FIELDS
from engine.inputs.vocabulary import is_choice, names

_STR, _INT, _BOOL, _FLOAT, _LIST = "str", "int", "bool", "float", "list[str]"
# The model's categorical fields (ffn_type, norm_type, linear_bias, ...) take the vocabulary's spellings.
_ENUM_NAMES = {f.name: set(names(f.kind)) for f in MODEL_FIELDS if is_choice(f)}

# field -> kind; a set of strings is an enumerated str field.
MODEL_SCHEMA = {f.name: _ENUM_NAMES.get(f.name, f.kind) for f in MODEL_FIELDS} | {
    "source": _STR,
    "family": _STR,
    "arch": {"decoder", "encoder", "encoder-decoder"},
    "dropout": _FLOAT,
    "exact_count": _BOOL,
    "count_note": _STR,
    "note": _STR,
    "aliases": _LIST,
    "tags": _LIST,
}
GPU_SCHEMA = {
    "name": _STR,
    "vendor": {"nvidia", "amd", "intel"},
    "arch": {"volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "cdna4", "gaudi3"},
    "hbm_bytes": _INT,
    "memory_note": _STR,
    "bandwidth_bytes_per_s": _INT,
    "bf16_tflops": _FLOAT,
    "fp16_tflops": _FLOAT,
    "fp8_tflops": _FLOAT,
    "matmul_tflops_achievable": _FLOAT,
    "fp8_matmul_tflops_achievable": _FLOAT,
    "matmul_source": _STR,
    "intra_node_bytes_per_s": _INT,
    "inter_node_bytes_per_s": _INT,
    "link_source": _STR,
    "usd_per_hour": _FLOAT,
    "price_source": _STR,
    "price_date": _STR,
    "gpus_per_node": _INT,
    "host_ram_bytes_per_node": _INT,
    "node": _STR,
    "source": _STR,
    "note": _STR,
    "aliases": _LIST,
    "tags": _LIST,
}
MODEL_REQUIRED = ("source",)
GPU_REQUIRED = ("name", "vendor", "arch", "hbm_bytes", "source")


def _kind_ok(value, kind) -> bool:
    if isinstance(kind, set):
        return isinstance(value, str) and value in kind
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind == _FLOAT:
        return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    if kind == _LIST:
        return isinstance(value, list) and all(isinstance(v, str) and v for v in value)
    return isinstance(value, {_STR: str, _BOOL: bool}[kind])


def _kind_text(kind) -> str:
    if isinstance(kind, set):
        return "one of " + ", ".join(sorted(kind))
    return {_INT: "a non-negative integer", _FLOAT: "a non-negative number"}.get(kind, kind)


def _check_entry(where: str, entry: dict, schema: dict, required: tuple):
    """Raise UserError for the first unknown field, missing required field or wrong type."""
    for field, value in entry.items():
        if field not in schema:
            near = difflib.get_close_matches(field, schema, n=3)
            hint = f" — did you mean: {', '.join(near)}?" if near else f" (known: {', '.join(schema)})"
            raise UserError(f"{where}: unknown field '{field}'{hint}")
        if not _kind_ok(value, schema[field]):
            raise UserError(f"{where}: '{field}' must be {_kind_text(schema[field])}, got {value!r}")
    for field in required:
        if field not in entry:
            raise UserError(f"{where}: missing required field '{field}'")


def check_model(where: str, entry: dict):
    _check_entry(where, entry, MODEL_SCHEMA, MODEL_REQUIRED)
    dims = all(entry.get(f, 0) > 0 for f in ("n_layers", "d_model", "n_heads", "vocab"))
    if not dims and entry.get("n_params", 0) == 0:
        raise UserError(f"{where}: give the dims (n_layers, d_model, n_heads, vocab) or n_params")
    if entry.get("exact_count") is False and not (entry.get("n_params") and entry.get("count_note")):
        raise UserError(f"{where}: exact_count = false needs n_params and a count_note saying why")
    if dims and (problem := kv_heads_problem(entry["n_heads"], entry.get("n_kv_heads", 0))):
        raise UserError(f"{where}: {problem}")
    if entry.get("first_dense_layers", 0) > entry.get("n_layers", 0):
        raise UserError(f"{where}: first_dense_layers {entry['first_dense_layers']} exceeds n_layers")


def kv_heads_problem(n_heads: int, n_kv_heads: int) -> str | None:
    """Why n_kv_heads key/value heads cannot serve n_heads query heads, or None (0 stands for n_heads). Grouped-query
    attention shares each key/value head among a whole group of n_heads / n_kv_heads query heads (transformers'
    repeat_kv): the one rule of a catalog entry, a config.json and dims given by hand (engine/configure/resolve.py)."""
    if n_heads > 0 and n_kv_heads > 0 and (n_kv_heads > n_heads or n_heads % n_kv_heads):
        return f"n_kv_heads {n_kv_heads} must divide n_heads {n_heads} (each key/value head serves a group of query heads)"
    return None


def check_gpu(where: str, entry: dict):
    _check_entry(where, entry, GPU_SCHEMA, GPU_REQUIRED)
    if entry["hbm_bytes"] == 0:
        raise UserError(f"{where}: hbm_bytes must be positive")
    _needs(where, entry, "usd_per_hour", ("price_source", "price_date", "gpus_per_node"), "a dated source and the node it prices")
    _needs(where, entry, "fp8_tflops", ("bf16_tflops",), "the dense bf16 peak beside it")
    for field in ("matmul_tflops_achievable", "fp8_matmul_tflops_achievable"):
        _needs(where, entry, field, ("matmul_source",), "the measurement it comes from")
    for field in ("intra_node_bytes_per_s", "inter_node_bytes_per_s"):
        _needs(where, entry, field, ("link_source",), "the spec it comes from")
    if "price_date" in entry and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["price_date"]):
        raise UserError(f"{where}: price_date must be YYYY-MM-DD, got {entry['price_date']!r}")
    for measured, peak in (("matmul_tflops_achievable", "bf16_tflops"), ("fp8_matmul_tflops_achievable", "fp8_tflops"),
                           ("bf16_tflops", "fp8_tflops")):
        if measured in entry and peak in entry and entry[measured] > entry[peak]:
            raise UserError(f"{where}: {measured} {entry[measured]} exceeds {peak} {entry[peak]}")
    for field in ("usd_per_hour", "gpus_per_node", "intra_node_bytes_per_s", "inter_node_bytes_per_s"):
        if entry.get(field) == 0:
            raise UserError(f"{where}: {field} must be positive (leave it out where unknown)")


def _needs(where: str, entry: dict, field: str, companions: tuple, what: str):
    """A field that is only meaningful beside others (a price beside its dated source) names the missing one."""
    for other in companions if field in entry else ():
        if other not in entry:
            raise UserError(f"{where}: {field} needs {other} ({what})")
