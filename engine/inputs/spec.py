"""A sweep spec (TOML): its axes, title and output options, read and checked (CONFIG.md, "Sweep specs")."""

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import UserError
from engine.inputs.vocabulary import check_columns

SPEC_TABLES = {"axes", "output", "filters"}
OUTPUT_OPTIONS = {"feasible_only", "valid_only", "rows_per_chunk", "compression", "compact"}


@dataclass(frozen=True)
class Spec:
    """A parsed sweep spec: the axes (CONFIG.md input -> values), a title and output options."""

    axes: dict
    title: str = "memsim sweep"
    output: dict = field(default_factory=dict)
    text: str = ""


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
