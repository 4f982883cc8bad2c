"""Training-recipe presets (data/recipes.toml): the inputs a project's recipe sets, under one name.

`recipe = "torchtitan"` fills the inputs the preset names; an input given explicitly (a flag, a case-list column,
a sweep axis) wins. Each preset is checked against the vocabulary when it is loaded.
"""

import tomllib
from functools import cache

from engine import DATA_DIR
from engine.errors import UserError
from engine.inputs.vocabulary import INPUTS, RECORD, parse


@cache
def presets() -> dict[str, dict]:
    """Every preset by name: its inputs, parsed (record values), and its source."""
    with open(DATA_DIR / "recipes.toml", "rb") as f:
        tables = tomllib.load(f)
    out = {}
    for name, table in tables.items():
        if "source" not in table:
            raise UserError(f"data/recipes.toml [{name}]: needs a source")
        inputs = {k: v for k, v in table.items() if k != "source"}
        unknown = [k for k in inputs if k not in INPUTS or k not in RECORD.names]
        if unknown:
            raise UserError(f"data/recipes.toml [{name}]: {', '.join(unknown)} cannot be set by a preset")
        out[name] = {"inputs": {k: parse(k, v) for k, v in inputs.items()}, "source": table["source"]}
    return out


def preset_inputs(name: str) -> dict:
    """The record values preset `name` sets ({} for no preset); an unknown name is a one-line UserError."""
    name = name.strip()
    if not name or name == "none":
        return {}
    known = presets()
    if name not in known:
        raise UserError(f"recipe {name!r} is unknown; accepted: {', '.join(['none', *known])}")
    return known[name]["inputs"]
