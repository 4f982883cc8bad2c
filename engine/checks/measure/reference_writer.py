"""The CSV of a committed measured set (data/measured/*.csv): how a cell is spelled, and the one atomic writer.

Every set is written here, so the four files spell their cells alike: a boolean in lowercase (``true``), None as
an empty cell, anything else as ``str()`` gives it; a comma-separated header, ``\\n`` line ends. The file is
written through engine/atomic.py (a temporary sibling renamed over the target), so an interrupted regeneration
leaves the committed file as it was.
"""

from __future__ import annotations

import csv
from pathlib import Path

from engine.atomic import write_atomic


def cell(value: object) -> str:
    """The CSV text of one value: booleans lowercase, None empty, anything else ``str(value)``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def write_rows(rows: list[dict], columns: list[str], path: str | Path) -> Path:
    """Write ``rows`` under the header ``columns`` to ``path`` atomically; a column a row lacks is an empty cell."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f, lineterminator="\n")
            out.writerow(columns)
            out.writerows([cell(row.get(k)) for k in columns] for row in rows)

    return write_atomic(path, write)
