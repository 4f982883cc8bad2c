"""A sweep spec as axes the kernel can decode: the grid itself is never materialized.

The sweep is the cartesian product of the axes; configuration i is the mixed-radix number whose digits index
each axis (the last axis varies fastest). Axes a spec links ([link]) are one axis of the product: digit j sets
value j of each of them, and each keeps its own column (`Axis.columns`). Every axis is a small table: for each of its values, the record
fields it sets (a model axis sets every architecture field from the catalog, a GPU axis the GPU's
attributes, any other axis its own field). Axes are ordered by the shallowest level of the model that reads
them (engine/model/dependencies.py): the layout axes first, then the workload (the inputs its shape reads, then
micro_batch, seq_len and the others only the step reads), the GPU innermost, so the kernel re-evaluates a level
only when one of its own axes moves.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from engine.catalogs import catalog
from engine.catalogs.recipes import preset_inputs
from engine.configure.resolve import (
    MODEL_FIELD_NAMES,
    gpu_attributes,
    model_fields,
    normalize_model,
)
from engine.configure.spec import Spec
from engine.errors import UserError
from engine.inputs.vocabulary import (
    GPU_ATTRIBUTES,
    INPUTS,
    RECORD,
    empty_records,
    parse,
    spell,
)
from engine.model.dependencies import level_of_fields
from engine.model.split import degrees

LEVELS = ("rank", "shape", "step", "device")
FIELD_INDEX = {name: i for i, name in enumerate(RECORD.names)}


@dataclass
class Axis:
    name: str
    labels: list  # what the Parquet column holds for each digit (strings, ints, floats or bools)
    fields: list  # the record fields a digit sets
    words: np.ndarray  # (len(labels), len(fields)) int64: the values it sets, floats as their bits
    level: str = "device"  # the shallowest level of the model that reads one of its fields
    linked: list = field(default_factory=list)  # a [link] group: (input, labels) of each linked axis, this one first

    @property
    def columns(self) -> list[tuple[str, list]]:
        """The Parquet columns this axis writes, (name, label per digit): its own, or each linked axis'."""
        return self.linked or [(self.name, self.labels)]


@dataclass
class Grid:
    spec: Spec
    axes: list  # rank axes, then shape axes, then step axes (micro_batch, seq_len, ...), then device axes
    base: np.ndarray  # one RECORD of defaults, as int64 words
    dp_mode: int  # engine.model.split.degrees: 0 dp derived, 1 n_gpus derived, 2 both given

    @property
    def radices(self) -> np.ndarray:
        return np.array([len(a.labels) for a in self.axes], dtype=np.int64)

    @property
    def total(self) -> int:
        return math.prod(len(a.labels) for a in self.axes)

    @property
    def column_names(self) -> list[str]:
        """The input columns the axes write, in order (a linked axis writes one per input it links)."""
        return [name for axis in self.axes for name, _ in axis.columns]

    def count(self, level: str) -> int:
        """Axes of a level (they are contiguous, in LEVELS order)."""
        return sum(1 for a in self.axes if a.level == level)


def words(rec) -> np.ndarray:
    """A record's fields as raw int64 words (floats keep their bits), the kernel's view of it."""
    return np.array([rec], dtype=RECORD).view(np.int64).copy()


def catalog_entries(kind: str, values) -> list[dict]:
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


def table_axis(name: str, labels: list, records: list, fields: list) -> Axis:
    """An axis whose digits copy `fields` from one record each (a model's or a GPU's)."""
    ids = [FIELD_INDEX[f] for f in fields]
    table = np.array([words(r)[ids] for r in records], dtype=np.int64).reshape(len(records), len(fields))
    return Axis(name, labels, fields, table)


def entry_records(entries: list[dict], fields_of) -> list:
    """One default record per catalog entry, with the fields `fields_of(entry)` gives it."""
    records = []
    for entry in entries:
        rec = empty_records(1)[0]
        for k, v in fields_of(entry).items():
            rec[k] = v
        records.append(rec)
    return records


def model_axis(values, dropout_is_axis: bool) -> Axis:
    entries = catalog_entries("model", values)
    records = entry_records(entries, model_fields)
    for rec in records:
        normalize_model(rec)
    fields = MODEL_FIELD_NAMES + ([] if dropout_is_axis else ["dropout"])  # GPT-2's catalog dropout
    return table_axis("model", [e["model"] for e in entries], records, fields)


def gpu_axis(values) -> Axis:
    entries = catalog_entries("gpu", values)
    return table_axis("gpu", [e["gpu"] for e in entries], entry_records(entries, gpu_attributes), GPU_ATTRIBUTES)


def recipe_axis(values, explicit: set) -> Axis:
    """Training-recipe presets: each digit sets what its preset sets (data/recipes.toml), but the inputs the spec
    sweeps itself, which win; 'none' sets nothing. The axis writes each input it sets as its own column beside
    `recipe` (as a [link] does), so a row of `recipe = "torchtitan"` says framework = fsdp, not the default the
    dataset's views would otherwise give an input the spec does not name."""
    values = values if isinstance(values, list) else [values]
    names = [str(v).strip() or "none" for v in values]
    if len(set(names)) != len(names):
        raise UserError(f"axis 'recipe' repeats a value: {values}")
    sets = [preset_inputs(n) for n in names]
    fields = sorted({f for inputs in sets for f in inputs} - explicit, key=FIELD_INDEX.get)
    records = []
    for inputs in sets:
        rec = empty_records(1)[0]
        for k, v in inputs.items():
            rec[k] = v
        records.append(rec)
    axis = table_axis("recipe", names, records, fields)
    if fields:
        axis.linked = [("recipe", names)] + [(f, [spell(f, rec[f]) for rec in records]) for f in fields]
    return axis


def value_axis(name: str, values, linked: bool = False) -> Axis:
    """A plain axis: each value parsed as CONFIG.md says, labels as users will read them (a linked axis may repeat
    a value: its group's combinations are what must differ)."""
    values = values if isinstance(values, list) else [values]
    if name in MODEL_FIELD_NAMES:
        raise UserError(f"axis '{name}' is a model dimension: sweep models through the 'model' axis")
    parsed = [parse(name, v) for v in values]
    if not linked and len(set(parsed)) != len(parsed):
        raise UserError(f"axis '{name}' repeats a value: {values}")
    dtype = np.float64 if INPUTS[name].kind == "float" else np.int64
    table = np.array(parsed, dtype=dtype).view(np.int64).reshape(len(parsed), 1)
    return Axis(name, [spell(name, p) for p in parsed], [name], table)


def link_axes(group: str, members: list[Axis]) -> Axis:
    """The axes of a [link] group as one axis: digit j sets value j of each (a zip of them, not their product)."""
    counts = {a.name: len(a.labels) for a in members}
    if len(set(counts.values())) > 1:
        raise UserError(f"[link] {group}: linked axes need as many values each, got "
                        f"{', '.join(f'{n} {k}' for n, k in counts.items())}")
    fields = [f for a in members for f in a.fields]
    if len(set(fields)) != len(fields):
        twice = sorted({f for f in fields if fields.count(f) > 1})
        raise UserError(f"[link] {group}: {', '.join(a.name for a in members)} set {', '.join(twice)} twice")
    combos = list(zip(*(a.labels for a in members)))
    if len(set(combos)) != len(combos):
        again = next(c for c in combos if combos.count(c) > 1)
        raise UserError(f"[link] {group} repeats a combination: {dict(zip(counts, again))}")
    first = members[0]
    words = np.concatenate([a.words for a in members], axis=1)
    return Axis(first.name, first.labels, fields, words, linked=[col for a in members for col in a.columns])


def build_grid(spec: Spec) -> Grid:
    """Resolve every axis against the catalogs, link the axes of each [link] group into one, and order them by the
    level of the model that reads them."""
    axes_in = dict(spec.axes)
    linked = {name for members in spec.links.values() for name in members}
    model = model_axis(axes_in.pop("model", [INPUTS["model"].default]), "dropout" in axes_in)
    gpu = gpu_axis(axes_in.pop("gpu", [INPUTS["gpu"].default]))
    recipe = [recipe_axis(axes_in.pop("recipe"), set(axes_in))] if "recipe" in axes_in else []
    axes = [model] + recipe + [value_axis(name, values, name in linked) for name, values in axes_in.items()] + [gpu]
    for group, members in spec.links.items():
        by_name = {a.name: a for a in axes}
        merged = link_axes(group, [by_name[m] for m in members])
        axes = [merged if a.name == members[0] else a for a in axes if a.name not in members[1:]]
    read_by = level_of_fields()
    for axis in axes:
        axis.level = min((read_by.get(f, "device") for f in axis.fields), key=LEVELS.index, default="device")
    ordered = [a for level in LEVELS for a in axes if a.level == level]  # stable: spec order within a level
    dp_mode = (1 if "dp" in spec.axes else 0) + (1 if "dp" in spec.axes and "n_gpus" in spec.axes else 0)
    grid = Grid(spec, ordered, words(empty_records(1)[0]), dp_mode)
    if grid.total >= 2**62:
        raise UserError(f"the sweep has {grid.total:.3e} configurations, more than 2^62")
    return grid


def decode(grid: Grid, index: int) -> np.recarray:
    """Configuration `index` of a grid, decoded the slow, obvious way (mixed radix, last axis fastest): the
    plain-Python reference of the kernel's odometer (tests/test_kernel.py, benchmarks/bench_sweep.py)."""
    w = grid.base.copy()
    for axis, radix in zip(reversed(grid.axes), reversed(grid.radices)):
        digit = index % radix
        index //= radix
        w[[FIELD_INDEX[f] for f in axis.fields]] = axis.words[digit]
    rec = w.view(RECORD).view(np.recarray)[0]
    rec.dp, rec.n_gpus = degrees(rec, grid.dp_mode)
    return rec


def index_axes(grid: Grid) -> list[dict]:
    """What a compact sweep's view needs to derive its axis columns from the index (engine/dataset/views.py), as
    its manifest records it: per axis, its digit (index // stride) % radix (decode above, last axis fastest) and
    each column it writes with the label of every digit, as the full rows' axis columns hold them."""
    radices = [int(r) for r in grid.radices]
    strides = [int(np.prod(radices[k + 1:], dtype=np.int64)) for k in range(len(radices))]
    return [{"stride": stride, "radix": radix,
             "columns": [[name, [plain(v) for v in labels]] for name, labels in axis.columns]}
            for axis, stride, radix in zip(grid.axes, strides, radices)]


def plain(value):
    """A label as JSON holds it (numpy scalars become Python ones)."""
    return value.item() if isinstance(value, np.generic) else value
