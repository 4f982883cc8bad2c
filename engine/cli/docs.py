"""The vocabulary page, docs/config.md, printed from the code: `python -m engine.cli.docs > docs/config.md`.

Sections in CONFIG.md's order: catalog keys (data/models.toml, data/gpus.toml), inputs (engine/inputs/vocabulary.py
and model_fields.py: name, flag, kind, accepted values, default, bounds, help), outputs (the registry
engine/inputs/outputs.py: type, unit, level, meaning, source), the columns a sweep adds, and the sweep spec
(engine/configure/spec.py). tests/test_docs.py checks that the committed page is what
this prints, so a change to the vocabulary that does not regenerate the page fails the tests.
"""

import inspect
import re
import sys

from engine.catalogs import catalog
from engine.catalogs.recipes import presets
from engine.cli.flags import CATALOG_DEFAULTS, DERIVED_DEFAULTS, flag
from engine.configure.spec import OUTPUT_OPTIONS, SPEC_TABLES
from engine.inputs import vocabulary as v
from engine.inputs.codes import CHOICES, INVALID_REASONS, names
from engine.inputs.outputs import LEVELS, OUTPUT_COLUMNS

REGENERATE = "python -m engine.cli.docs > docs/config.md"

# CONFIG.md's input sections, in its order, and the vocabulary's field groups each holds.
INPUT_SECTIONS = [
    ("Model", ("The model's architecture comes from its catalog entry or its config.json; a value given here "
     "overrides it (0: the model's own, or what the help says 0 means)."), [v.NAME_FIELDS[0]] + v.MODEL_FIELDS),
    ("Workload", "", v.WORKLOAD_FIELDS),
    ("Numerics and training method", "", v.METHOD_FIELDS),
    ("Training recipe (how the framework runs the step)", ("Defaults are plain PyTorch's; a `recipe` preset sets "
     "several (below)."), v.PRESET_FIELDS + v.RECIPE_FIELDS),
    ("Parallel layout and hardware", ("The GPU's attributes come from data/gpus.toml, data/overheads.toml and "
     "data/architectures.toml; a value given here overrides the catalog's for that case."),
     [v.NAME_FIELDS[1]] + v.LAYOUT_FIELDS + v.GPU_FIELDS),
]

# Columns a sweep writes beside the inputs it sweeps and the outputs (engine/dataset/columns.py, chunk_table).
SWEEP_COLUMNS = {
    "index": "int64: the row's position in the sweep's mixed-radix grid (the last axis varies fastest)",
    "dp": "int64: the data-parallel degree, derived per row (n_gpus / (tp * pp * cp) unless given)",
    "n_gpus": "int64: the GPU count, derived per row (dp * tp * pp * cp unless given)",
}

# The tables of a sweep spec and the options of its [output] table (engine/configure/spec.py accepts exactly these).
SPEC_TABLE_HELP = {
    "title": "a string: the title of the dataset and of its report (default `memsim sweep`)",
    "axes": "input column -> a list of values (or one value); `model` and `gpu` also take `\"all\"` or a catalog "
            "tag. Every input left out takes its default. Model dimensions are not axes: sweep models through `model`",
    "link": "group name -> two or more axes of `[axes]` that move together: value i of each goes with value i of "
            "the others (a zip, not a product), so the sweep holds only the combinations listed. Each axis keeps its "
            "own column in the dataset",
    "output": "options of the dataset written (below)",
}
OUTPUT_OPTION_HELP = {
    "compact": "bool (default false): store the index and the feasibility columns only (the view derives the axes)",
    "compression": "Parquet codec (default `lz4`)",
    "feasible_only": "bool (default false): write only rows that are valid and fit (`--feasible-only`)",
    "rows_per_chunk": "int (default 1048576 = 2^20): configurations the kernel evaluates per chunk",
    "valid_only": "bool (default false): write only valid rows (`--valid-only`)",
}


def cell(text) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text) -> str:
    return f"`{text}`"


def number(x) -> str:
    """A bound as a reader takes it in: powers of two as 2^k, floats without trailing zeros."""
    if isinstance(x, int) and x >= 1024 and x & (x - 1) == 0:
        return f"2^{x.bit_length() - 1}"
    return f"{x:g}".replace("e+0", "e").replace("e+", "e")


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


def trailing_comments(cls) -> dict[str, str]:
    """`name: type  # comment` and `NAME = value  # comment` lines of a class body: attribute -> comment."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # an enum made from a data file has no class body
        return {}
    found = re.findall(r"^\s+(\w+)\s*[:=][^#\n]*#\s*(.+)$", source, flags=re.MULTILINE)
    return {name: comment.strip() for name, comment in found}


def kind_of(field) -> str:
    return "choice" if v.is_choice(field) else field.kind


def default_of(field) -> str:
    if field.name in DERIVED_DEFAULTS and field.default == 0:
        return "derived"
    if field.name in CATALOG_DEFAULTS:
        return CATALOG_DEFAULTS[field.name]
    value = field.default if field.kind == "str" else v.spell(field.name, field.default)
    return code(str(value).lower() if isinstance(value, bool) else value)


def accepted(field) -> str:
    """The accepted values of a categorical input (with what each means, where codes.py says), or the bounds."""
    if v.is_choice(field):
        notes = trailing_comments(field.kind)
        return ", ".join(code(n) + (f" ({notes[m.name]})" if m.name in notes else "")
                         for n, m in zip(names(field.kind), field.kind))
    if field.kind == "bool":
        return "`true`, `false`"
    if field.low is not None and field.high is not None:
        return f"{number(field.low)} ... {number(field.high)}"
    return "a catalog key or alias" + (" or a path to a config.json" if field.name == "model" else "")


def input_lines() -> list[str]:
    placed = [f.name for _, _, fields in INPUT_SECTIONS for f in fields]
    assert sorted(placed) == sorted(v.INPUTS), (
        f"inputs on no section of the page (or on two): {sorted(set(v.INPUTS) ^ set(placed))}; "
        "place their group in INPUT_SECTIONS of engine/cli/docs.py")
    lines = ["## Inputs", "",
             ("Every input has a default, so a case list may give any subset of the columns; an empty cell also "
             "means the default. On the command line each is a flag (`--seq-len` for `seq_len`)."), ""]
    for title, intro, fields in INPUT_SECTIONS:
        lines += [f"### {title}", ""] + ([intro, ""] if intro else [])
        rows = [[code(f.name), code(flag(f.name)), kind_of(f), accepted(f), default_of(f), f.help] for f in fields]
        lines += table(["column", "flag", "kind", "accepted values", "default", "meaning"], rows) + [""]
        if v.PRESET_FIELDS[0] in fields:
            lines += preset_lines()
    return lines


def preset_lines() -> list[str]:
    """The recipe presets of data/recipes.toml: what each sets and where its values come from."""
    lines = ["#### Recipe presets (data/recipes.toml)", "",
             "`recipe = \"none\"` (or empty) sets nothing; an input given explicitly wins over the preset's.", ""]
    rows = [[code(name), ", ".join(f"{k} = {v.spell(k, val)}" for k, val in p["inputs"].items()), p["source"]]
            for name, p in presets().items()]
    return lines + table(["recipe", "sets", "source"], rows) + [""]


def output_type(o) -> str:
    """A column's type as a reader of the Parquet sees it (categories spelled out)."""
    if o.name == "invalid_reason":
        return "str or NULL"
    if o.dtype == "category":
        return "str: " + ", ".join(code(n) for n in names(CHOICES[o.name]))
    return o.dtype


def output_lines() -> list[str]:
    lines = ["## Outputs (per GPU, for the most loaded rank)", "",
             ("Bytes are int64. On a row that cannot run (`valid` false) the outputs that need a runnable layout "
             "are NULL and `fits` is false; `invalid_reason` is NULL on valid rows. A layout that runs, on a GPU "
             "that cannot run it (fp8 without FP8 tensor cores), keeps the step's columns (what it holds where it "
             "runs) and has that GPU's NULL. Each column is computed at one "
             "level of engine/model/levels.py (the registry engine/inputs/outputs.py lists them); "
             "`compact = true` sweeps store the index and the columns marked compact, and the `sweep` view derives "
             "their axis columns from the index:"), ""]
    lines += [f"- {code(level)}: {text}" for level, text in LEVELS.items()]
    rows = [[code(o.name), output_type(o), o.unit, o.level, "yes" if o.compact else "", o.meaning, o.source]
            for o in OUTPUT_COLUMNS]
    lines += [""] + table(["column", "type", "unit", "level", "compact", "meaning", "source"], rows) + [""]
    reasons = [code(r) for code_, r in INVALID_REASONS.items() if code_ != 0]
    lines += ["`invalid_reason` is one of: " + "; ".join(reasons) + ".", ""]
    lines += ["### Sweep columns", "", "A sweep's rows hold these beside the axes it sweeps and the outputs:", ""]
    lines += table(["column", "meaning"], [[code(k), text] for k, text in SWEEP_COLUMNS.items()]) + [""]
    return lines


def catalog_lines() -> list[str]:
    models, gpus = catalog.load_models(), catalog.load_gpus()
    lines = ["## Catalog keys", "",
             ("Lowercase words joined by `-`. Names resolve case-insensitively through keys and aliases; an unknown "
             "name is an error that lists the nearest keys. A sweep's `model` or `gpu` axis also takes `\"all\"` "
             "or a tag."), "", f"### Models (data/models.toml, {len(models)})", ""]
    rows = [[code(k), f"{e['n_params']:,}" if e.get("n_params") else "", ", ".join(e.get("aliases", [])),
             ", ".join(e.get("tags", []))] for k, e in models.items()]
    lines += table(["key", "n_params", "aliases", "tags"], rows)
    lines += ["", f"### GPUs (data/gpus.toml, {len(gpus)})", ""]
    rows = [[code(k), f"{e['hbm_bytes']:,}", ", ".join(e.get("aliases", [])), ", ".join(e.get("tags", []))]
            for k, e in gpus.items()]
    return lines + table(["key", "hbm_bytes", "aliases", "tags"], rows) + [""]


def spec_lines() -> list[str]:
    assert set(SPEC_TABLE_HELP) == SPEC_TABLES | {"title"}, "document every table of a sweep spec"
    assert set(OUTPUT_OPTION_HELP) == OUTPUT_OPTIONS, "document every [output] option of a sweep spec"
    lines = ["## Sweep specs", "",
             ("A TOML file; the sweep is the cartesian product of its axes, less the combinations a `[link]` leaves "
              "out. A spec with only `[axes]` always works."), ""]
    lines += table(["key", "meaning"], [[code(k), text] for k, text in sorted(SPEC_TABLE_HELP.items())])
    lines += ["", "### `[output]` options", ""]
    lines += table(["option", "meaning"], [[code(k), text] for k, text in sorted(OUTPUT_OPTION_HELP.items())])
    example = ["[axes]", 'model = ["llama-3.1-8b", "llama-3.1-70b"]', 'gpu = ["h100-sxm-80gb", "a100-sxm-80gb"]',
               "n_gpus = [8, 16, 32, 64]", "tp = [1, 2, 4, 8]", "zero_stage = [0, 1, 2, 3]",
               'checkpointing = ["none", "selective", "full"]', "", "[output]", "feasible_only = true"]
    linked = ["[axes]", 'model = ["llama-3.1-8b"]', "micro_batch = [1, 2, 4]",
              "lora_rank = [0, 16, 16]            # full fine-tuning, LoRA, QLoRA:",
              'base_quant = ["none", "none", "nf4"]  # three rows per micro-batch, not 2 x 2', "",
              "[link]", 'method = ["lora_rank", "base_quant"]']
    return lines + ["", "```toml"] + example + ["```", "", "Linked axes:", "", "```toml"] + linked + ["```", ""]


def page() -> str:
    lines = ["# The configuration vocabulary", "",
             f"<!-- Generated from the code by `{REGENERATE}`; do not edit by hand. -->", "",
             ("One vocabulary everywhere: the flags of `memsim explain`, the columns of a case list given to "
             "`memsim estimate`, the axes of a sweep spec, and the columns of every Parquet file memsim writes."), ""]
    lines += catalog_lines() + input_lines() + output_lines() + spec_lines()
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    sys.stdout.write(page())


if __name__ == "__main__":
    main()
