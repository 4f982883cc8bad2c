"""A sweep spec (TOML): its axes, linked axes, title and output options, read and checked (CONFIG.md, "Sweep specs").

Every table and option is checked here, by type: an unknown table, an unknown option or a value of the wrong
type is one line naming it (a quoted "false" is not false; a table memsim does not read is not silently
ignored).

Linked axes: the sweep is the cartesian product of its axes, except that the axes a `[link]` group names move
together, value i of each with value i of the others (a zip, not a product). Full fine-tuning, LoRA and QLoRA
are three values of a link between `lora_rank` and `base_quant`, not the 2 x 2 product with its invalid
nf4-without-adapters rows:

    [axes]
    lora_rank = [0, 16, 16]
    base_quant = ["none", "none", "nf4"]

    [link]
    method = ["lora_rank", "base_quant"]
"""

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from engine.errors import UserError, read_user_text
from engine.inputs.vocabulary import check_columns

SPEC_TABLES = {"axes", "link", "output"}
MAX_ROWS_PER_CHUNK = 1 << 24  # a chunk's buffers are about 300 bytes a row: 5 GiB at this size
COMPRESSIONS = ("lz4", "zstd", "snappy", "gzip", "brotli", "none")  # what pyarrow's Parquet writer takes


def _bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"[output] {name} must be true or false (a TOML boolean, unquoted), got {value!r}")
    return value


def _rows_per_chunk(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ROWS_PER_CHUNK:
        raise UserError(f"[output] {name} must be an integer from 1 to {MAX_ROWS_PER_CHUNK:,}, got {value!r}")
    return value


def _compression(name: str, value) -> str:
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in COMPRESSIONS or (text != "none" and not pa.Codec.is_available(text)):
        raise UserError(f"[output] {name} must be one of {', '.join(COMPRESSIONS)}, got {value!r}")
    return text


OPTION_CHECKS = {
    "feasible_only": _bool,
    "valid_only": _bool,
    "compact": _bool,
    "rows_per_chunk": _rows_per_chunk,
    "compression": _compression,
}
OUTPUT_OPTIONS = set(OPTION_CHECKS)


@dataclass(frozen=True)
class Spec:
    """A parsed sweep spec: the axes (CONFIG.md input -> values), a title and output options."""

    axes: dict
    title: str = "memsim sweep"
    output: dict = field(default_factory=dict)
    text: str = ""
    links: dict = field(default_factory=dict)  # group name -> the axes that move together (in [axes] order)


def load_spec(path: str | Path) -> Spec:
    """Read and check a sweep spec; a spec with only [axes] always works (CONFIG.md)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no sweep spec at {path}")
    text = read_user_text(path, "sweep spec")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"sweep spec {path} is not valid TOML: {err}") from None
    except ValueError:  # tomllib's int() of more digits than Python converts (4,300)
        raise UserError(f"sweep spec {path} holds a number too large for any input") from None
    return parse_spec(doc, text)


def is_value(v) -> bool:
    """A TOML scalar an axis may hold: text, an integer, a float or a boolean (not a table, array or date)."""
    return isinstance(v, (str, int, float, bool))


def parse_spec(doc: dict, text: str = "") -> Spec:
    unknown = set(doc) - SPEC_TABLES - {"title"}
    if "filters" in unknown:
        raise UserError("[filters] is not supported: memsim filters no rows of a sweep; keep valid or fitting rows "
                        "with [output] valid_only / feasible_only, and filter the rest in SQL (memsim sql)")
    if unknown:
        raise UserError(f"unknown table(s) or key(s) {sorted(unknown)} in sweep spec "
                        f"(accepted: title, {', '.join(f'[{t}]' for t in sorted(SPEC_TABLES))})")
    axes = doc.get("axes")
    if not isinstance(axes, dict) or not axes:
        raise UserError("a sweep spec needs an [axes] table with at least one axis")
    check_columns(axes)
    for name, values in axes.items():
        if isinstance(values, list) and not values:
            raise UserError(f"axis '{name}' is empty")
        if not (is_value(values) or (isinstance(values, list) and all(is_value(v) for v in values))):
            raise UserError(f"axis '{name}' takes a value or a list of values (text, numbers, true/false), got {values!r}")
    title = doc.get("title", "memsim sweep")
    if not isinstance(title, str):
        raise UserError(f"the spec's title must be text, got {title!r}")
    output = doc.get("output", {})
    if not isinstance(output, dict):
        raise UserError(f"[output] must be a table of options ({', '.join(sorted(OUTPUT_OPTIONS))}), got {output!r}")
    bad = set(output) - set(OUTPUT_OPTIONS)
    if bad:
        raise UserError(f"unknown [output] option(s) {sorted(bad)} (accepted: {', '.join(sorted(OUTPUT_OPTIONS))})")
    output = {name: OPTION_CHECKS[name](name, value) for name, value in output.items()}
    return Spec(axes=axes, title=title, output=output, text=text, links=parse_links(doc.get("link", {}), axes))


def parse_links(links, axes: dict) -> dict[str, list[str]]:
    """[link]: group name -> two or more axes of [axes], each in one group, with as many values each (a catalog
    'all' or tag is counted when the grid resolves it)."""
    if not isinstance(links, dict):
        raise UserError(f"[link] must be a table: name = [\"axis\", \"axis\", ...], got {links!r}")
    seen: dict[str, str] = {}
    out = {}
    for name, members in links.items():
        if not (isinstance(members, list) and len(members) >= 2 and all(isinstance(m, str) for m in members)
                and len(set(members)) == len(members)):
            raise UserError(f"[link] {name} must list two or more different axes, e.g. [\"lora_rank\", \"base_quant\"], "
                            f"got {members!r}")
        for m in members:
            if m not in axes:
                raise UserError(f"[link] {name} names '{m}', which is not an axis of [axes]")
            if m in seen:
                raise UserError(f"axis '{m}' is in two [link] groups: {seen[m]} and {name}")
            seen[m] = name
        counts = {m: len(axes[m]) if isinstance(axes[m], list) else 1 for m in members}
        listed = {m: n for m, n in counts.items() if not (isinstance(axes[m], str) and m in ("model", "gpu"))}
        if len(set(listed.values())) > 1:
            raise UserError(f"[link] {name}: linked axes need as many values each, got "
                            f"{', '.join(f'{m} {n}' for m, n in listed.items())}")
        out[name] = sorted(members, key=list(axes).index)
    return out
