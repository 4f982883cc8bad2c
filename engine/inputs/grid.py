"""A sweep spec (TOML) as axes the kernel can decode: the grid itself is never materialized.

The sweep is the cartesian product of the axes; configuration i is the mixed-radix number whose digits index
each axis (the last axis varies fastest). Axes that change the per-rank parameter split or the model states
("outer" axes) come first, the workload axes last, so the kernel re-derives the record only when an outer
digit changes (engine/formulas/derived.py).
"""

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import UserError
from engine.inputs.codes import name_of
from engine.inputs.resolve import (
    MODEL_FIELD_NAMES,
    check_columns,
    gpu_attributes,
    model_fields,
    normalize_model,
    parse_value,
)
from engine.inputs.vocabulary import INPUTS, RECORD, empty_records
from engine.model import catalog

# Inputs that derive() does not read (engine/formulas/derived.py): they vary fastest, and changing them
# needs no re-derivation.
INNER_AXES = {"gpu", "seq_len", "micro_batch", "grad_accum", "headroom"}
FIELD_INDEX = {name: i for i, name in enumerate(RECORD.names)}
SPEC_TABLES = {"axes", "output", "filters"}
OUTPUT_OPTIONS = {"feasible_only", "valid_only", "rows_per_chunk", "compression", "compact"}


@dataclass(frozen=True)
class Spec:
    """A parsed sweep spec: the axes (CONFIG.md input -> values), a title and output options."""

    axes: dict
    title: str = "memsim sweep"
    output: dict = field(default_factory=dict)
    text: str = ""


@dataclass
class Axis:
    name: str
    labels: list  # what the Parquet column holds for each digit (strings, ints, floats or bools)
    values: np.ndarray  # the record value for each digit, as int64 bits (floats viewed as int64)


@dataclass
class Grid:
    spec: Spec
    axes: list  # outer axes first, then inner ones
    n_outer: int
    base: np.ndarray  # one RECORD row of defaults, as int64 words
    models: list  # model labels, indexed by model id
    model_rows: np.ndarray  # (n_models, n_fields) int64 words: model fields filled
    gpus: list
    gpu_rows: np.ndarray
    dp_mode: int  # 0: dp = n_gpus / (tp*pp*cp); 1: n_gpus = dp*tp*pp*cp; 2: both given

    @property
    def radices(self) -> np.ndarray:
        return np.array([len(a.labels) for a in self.axes], dtype=np.int64)

    @property
    def total(self) -> int:
        return math.prod(len(a.labels) for a in self.axes)


def load_spec(path: str | Path) -> Spec:
    """Read and check a sweep spec; a spec with only [axes] always works (CONFIG.md)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no sweep spec at {path}")
    text = path.read_text()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"sweep spec {path} is not valid TOML: {err}") from None
    return parse_spec(doc, text)


def parse_spec(doc: dict, text: str = "") -> Spec:
    unknown = set(doc) - SPEC_TABLES - {"title"}
    if unknown:
        raise UserError(f"unknown table(s) {sorted(unknown)} in sweep spec (accepted: title, {', '.join(sorted(SPEC_TABLES))})")
    axes = doc.get("axes")
    if not isinstance(axes, dict) or not axes:
        raise UserError("a sweep spec needs an [axes] table with at least one axis")
    check_columns(axes)
    for name, values in axes.items():
        if isinstance(values, list) and not values:
            raise UserError(f"axis '{name}' is empty")
    output = doc.get("output", {})
    bad = set(output) - OUTPUT_OPTIONS
    if bad:
        raise UserError(f"unknown [output] option(s) {sorted(bad)} (accepted: {', '.join(sorted(OUTPUT_OPTIONS))})")
    return Spec(axes=axes, title=str(doc.get("title", "memsim sweep")), output=output, text=text)


def catalog_axis(kind: str, values) -> list[dict]:
    """'all', a catalog tag, or a list of keys/aliases (models may also be config.json paths)."""
    entries = catalog.load_models() if kind == "model" else catalog.load_gpus()
    resolve = catalog.resolve_model if kind == "model" else catalog.resolve_gpu
    if isinstance(values, str):
        if values == "all":
            return [resolve(k) for k in entries]
        tagged = [k for k, e in entries.items() if values in e.get("tags", [])]
        if not tagged:
            raise UserError(f"{kind} axis '{values}' is neither 'all', a list, nor a catalog tag")
        return [resolve(k) for k in tagged]
    return [resolve(str(v)) for v in values]


def words(rec) -> np.ndarray:
    """A record's fields as raw int64 words (floats keep their bits), the kernel's view of it."""
    return np.array([rec], dtype=RECORD).view(np.int64).copy()


def model_rows(entries: list[dict]) -> np.ndarray:
    rows = np.zeros((len(entries), len(RECORD.names)), dtype=np.int64)
    for i, entry in enumerate(entries):
        rec = empty_records(1)[0]
        for k, v in model_fields(entry).items():
            rec[k] = v
        normalize_model(rec)
        rows[i] = words(rec)
    return rows


def gpu_rows(entries: list[dict]) -> np.ndarray:
    rows = np.zeros((len(entries), len(RECORD.names)), dtype=np.int64)
    for i, entry in enumerate(entries):
        rec = empty_records(1)[0]
        for k, v in gpu_attributes(entry).items():
            rec[k] = v
        rows[i] = words(rec)
    return rows


def value_axis(name: str, values) -> Axis:
    """A plain axis: each value parsed as CONFIG.md says, labels as users will read them."""
    values = values if isinstance(values, list) else [values]
    parsed = [parse_value(name, v) for v in values]
    if len(set(parsed)) != len(parsed):
        raise UserError(f"axis '{name}' repeats a value: {values}")
    kind = INPUTS[name].kind
    if kind == "float":
        return Axis(name, parsed, np.array(parsed, dtype=np.float64).view(np.int64))
    if kind == "bool":
        labels = [bool(p) for p in parsed]
    elif isinstance(kind, type):  # an enum: its CONFIG.md spelling
        labels = [name_of(kind(p)) for p in parsed]
    else:
        labels = parsed
    return Axis(name, labels, np.array(parsed, dtype=np.int64))


def build_grid(spec: Spec) -> Grid:
    """Resolve every axis against the catalogs and order them outer-first."""
    axes_in = dict(spec.axes)
    models = catalog_axis("model", axes_in.pop("model", [INPUTS["model"].default]))
    gpus = catalog_axis("gpu", axes_in.pop("gpu", [INPUTS["gpu"].default]))
    model_labels = [m["model"] for m in models]
    gpu_labels = [g["gpu"] for g in gpus]
    axes = [Axis("model", model_labels, np.arange(len(models), dtype=np.int64))]
    inner = [Axis("gpu", gpu_labels, np.arange(len(gpus), dtype=np.int64))]
    for name, values in axes_in.items():
        if name in MODEL_FIELD_NAMES:
            raise UserError(f"axis '{name}' is a model dimension: sweep models through the 'model' axis")
        (inner if name in INNER_AXES else axes).append(value_axis(name, values))
    dp_mode = (1 if "dp" in spec.axes else 0) + (1 if "dp" in spec.axes and "n_gpus" in spec.axes else 0)
    grid = Grid(spec, axes + inner, len(axes), words(empty_records(1)[0]), model_labels, model_rows(models),
                gpu_labels, gpu_rows(gpus), dp_mode)
    if grid.total >= 2**62:
        raise UserError(f"the sweep has {grid.total:.3e} configurations, more than 2^62")
    return grid


MODEL_FIELD_IDS = np.array([FIELD_INDEX[n] for n in MODEL_FIELD_NAMES] + [FIELD_INDEX["dropout"]], dtype=np.int64)
GPU_FIELD_IDS = np.array([FIELD_INDEX[n] for n in ("capacity_bytes", "cuda_context_bytes", "cublas_workspace_bytes",
                                                    "nccl_buffer_bytes", "host_ram_bytes")], dtype=np.int64)


def decode(grid: Grid, index: int) -> np.recarray:
    """Configuration `index` of a grid, decoded the slow, obvious way (mixed radix, last axis fastest): the
    plain-Python reference of the kernel's odometer (tests/test_kernel.py, benchmarks/bench_sweep.py)."""
    from engine.model.derived import derive_layout

    words = grid.base.copy()
    for axis, radix in zip(reversed(grid.axes), reversed(grid.radices)):
        digit = index % radix
        index //= radix
        if axis.name == "model":
            words[MODEL_FIELD_IDS] = grid.model_rows[axis.values[digit], MODEL_FIELD_IDS]
        elif axis.name == "gpu":
            words[GPU_FIELD_IDS] = grid.gpu_rows[axis.values[digit], GPU_FIELD_IDS]
        else:
            words[FIELD_INDEX[axis.name]] = axis.values[digit]
    rec = words.view(RECORD).view(np.recarray)[0]
    derive_layout(rec, grid.dp_mode)
    return rec
