"""What a report is made of: sections (one chart each), the page's data, and a query runner that runs each
(query, parameters) once so charts and findings share results."""

from dataclasses import dataclass

import polars as pl

from engine.ask.queries import run_query


@dataclass
class Section:
    name: str
    title: str
    caption: str
    shows: str  # the picks the chart was drawn for, in words
    rows: int
    chart: object = None  # the altair chart; None when there is nothing to draw
    note: str = ""  # why there is no chart


@dataclass
class Part:
    """The charts of one training method, with what the report found for it."""

    method: str
    findings: list[str]
    sections: list[Section]
    note: str = ""  # why there are no charts (the chosen model or GPU does not fit with this method)


@dataclass
class Report:
    title: str
    spec_text: str
    created: str
    generated: str
    findings: list[str]  # about the whole sweep; each part holds its method's
    parts: list[Part]

    @property
    def sections(self) -> list[Section]:
        return [s for part in self.parts for s in part.sections]


class Runner:
    """Runs each (query, params) once: charts and findings share results."""

    def __init__(self, con):
        self.con, self.cache = con, {}

    def __call__(self, name: str, **params) -> pl.DataFrame:
        key = (name, tuple(sorted(params.items())))
        if key not in self.cache:
            self.cache[key] = run_query(self.con, name, params)
        return self.cache[key]


def of_method(rows: pl.DataFrame, method: str) -> pl.DataFrame:
    return rows.filter(pl.col("method") == method) if "method" in rows.columns else rows
