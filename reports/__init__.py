"""One chart per module, found automatically (as altair's gallery tests find theirs).

Each module opens with a title docstring and one sentence, then names its query (`QUERY`, a file in queries/),
how the report fills the query's parameters (`PARAMS`: query parameter -> report pick), where it goes on the
page (`POSITION`), and `chart(rows)`: a polars frame in, an altair chart out, with no SQL and no I/O. A module may
also define `missing(rows) -> str`: why these rows make no chart worth drawing ("" when they do).
engine/report.py runs the queries, checks row counts against MAX_ROWS and assembles the page.
"""

import importlib
import pkgutil
from types import ModuleType

import altair as alt

# altair refuses (or, with the limit lifted, slowly draws) data over 5,000 rows; queries aggregate far below it
MAX_ROWS = 5_000

# What a report can bind a query parameter to: the picks engine/report.py makes (or the user gives).
PICKS = ("method", "model", "gpu", "min_gpus", "layout_gpus")

# The columns that several charts show in their tooltips, titled (and formatted) here once so that a column reads
# the same in every chart: column -> (Vega-Lite type, title[, number format]).
TOOLTIP_COLUMNS = {
    "model": ("N", "model"),
    "gpu": ("N", "GPU type"),
    "n_gpus": ("Q", "GPUs"),
    "n_params": ("Q", "parameters", ","),
    "tp": ("Q", "tensor parallel"),
    "pp": ("Q", "pipeline parallel"),
    "zero_stage": ("Q", "ZeRO stage"),
    "checkpointing": ("N", "recompute"),
    "micro_batch": ("Q", "micro-batch (samples)"),
    "seq_len": ("Q", "sequence (tokens)", ","),
    "device_peak_gib": ("Q", "device peak (GiB)", ",.3f"),
    "usable_gib": ("Q", "usable (GiB)", ",.3f"),
    "spare_gib": ("Q", "to spare (GiB)", ",.3f"),
    "fitting": ("Q", "layouts that fit", ","),
    "price_source": ("N", "price source"),
    "price_date": ("N", "price date"),
}
LAYOUT = ("tp", "pp", "zero_stage", "checkpointing")  # the parallel layout, as the tooltips list it


def chart_modules() -> list[ModuleType]:
    """Every chart module in this package, in page order."""
    modules = [importlib.import_module(f"{__name__}.{info.name}")
               for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]
    return sorted(modules, key=lambda m: (m.POSITION, m.__name__))


def short_name(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


def heading(module: ModuleType) -> tuple[str, str]:
    """(title, sentence) from a module docstring written as the altair gallery writes them."""
    lines = [line.strip() for line in (module.__doc__ or "").strip().splitlines()]
    title = lines[0] if lines else short_name(module)
    body = " ".join(line for line in lines[1:] if line and set(line) != {"-"})
    return title, body


def tooltips(*columns: str | alt.Tooltip, **titles: str) -> list[alt.Tooltip]:
    """The tooltip of each column, in order: a column of TOOLTIP_COLUMNS by its name, or a chart's own
    alt.Tooltip as it is. A keyword gives a shared column this chart's own title (pp="pipeline stages")."""
    shown = []
    for column in columns:
        if isinstance(column, str):
            kind, title, *number = TOOLTIP_COLUMNS[column]
            number_format = number[0] if number else alt.Undefined
            column = alt.Tooltip(f"{column}:{kind}", title=titles.get(column, title), format=number_format)
        shown.append(column)
    return shown


def price_basis(rows) -> str:
    """Where the prices of these rows come from, in words: 'CoreWeave on-demand, read 2026-09-20' (each provider
    with its dates; a catalog price_source reads '<provider>, <instance>, ..., read <date> (...)')."""
    if "price_source" not in rows.columns:
        return ""
    found: dict[str, set] = {}
    for source, date in rows.select("price_source", "price_date").unique().iter_rows():
        if source:
            found.setdefault(source.split(",")[0].strip(), set()).add(str(date))
    return "; ".join(f"{provider}, read {', '.join(sorted(dates))}" for provider, dates in sorted(found.items()))
