"""The four committed measured sets (data/measured/*.csv), and the one loop that regenerates any of them.

Example:
    memsim measure --set parallel -o data/measured/parallel.csv
    memsim measure --set recipes -o /tmp/sac.csv --only selective_op

Each set names its cases, how one row is measured and its CSV header. ``chosen_cases`` picks the cases whose id
or group (the family, or the recipe knob) contains ``only``; ``measure_set`` measures them, prints one line per
case on stderr and writes the rows with reference_writer's atomic writer. ``find_case`` looks a case id up in
every set (``memsim measure --anatomy``). Importing this module imports no torch: the case lists load without it
(so a bad --only is refused at once); measuring, and the parallel and qlora headers, import it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from engine.atomic import output_path
from engine.checks.measure import (
    reference_parallel,
    reference_parallel_cases,
    reference_qlora,
    reference_recipes,
    reference_set,
)
from engine.checks.measure.reference_writer import write_rows
from engine.errors import UserError


@dataclass(frozen=True)
class ReferenceSet:
    """One committed measured set: its file, its cases, how one of them becomes a row, its header."""

    committed: str  # the file it is committed as, from the repository root
    cases: Callable[[], list[tuple[str, str, dict]]]  # (case_id, group, case); group: family, knob or ""
    measure_row: Callable[[str, str, dict, str], dict]  # (case_id, group, case, device) -> the CSV row
    columns: Callable[[], list[str]]  # the CSV header
    devices: tuple[str, ...] = ("fake",)  # what it can be measured on


SETS = {
    "single": ReferenceSet("data/measured/cpu_fake.csv", reference_set.reference_cases, reference_set.measure_row,
                           reference_set.columns, ("fake", "cpu-fake", "cuda")),
    "parallel": ReferenceSet("data/measured/parallel.csv", reference_parallel_cases.reference_cases,
                             reference_parallel.measure_row, reference_parallel.columns),
    "recipes": ReferenceSet("data/measured/recipes.csv", reference_recipes.recipe_cases,
                            reference_recipes.measure_row, reference_recipes.columns),
    "qlora": ReferenceSet("data/measured/qlora.csv", reference_qlora.reference_cases,
                          reference_qlora.measure_row, reference_qlora.columns),
}


def chosen_cases(name: str, only: str = "", device: str = "fake") -> list[tuple[str, str, dict]]:
    """The cases of set ``name`` whose id or group contains ``only``; none, or a device the set is not measured
    on, is one line (checked before anything is imported for measuring)."""
    reference = SETS[name]
    if device not in reference.devices:
        raise UserError(f"the {name} set is measured on {' or '.join(reference.devices)}, not {device!r}")
    chosen = [(cid, group, case) for cid, group, case in reference.cases() if only in cid or only in group]
    if not chosen:
        raise UserError(f"no case of the {name} set has {only!r} in its id or family/knob (--only)")
    return chosen


def measure_set(name: str, cases: list[tuple[str, str, dict]], output: str, device: str = "fake",
                log: TextIO = sys.stderr) -> int:
    """Measure ``cases`` (``chosen_cases``) of set ``name`` on ``device``, one line each on ``log``, and write
    their rows to ``output`` (atomically, after the last case); returns the number of rows."""
    reference = SETS[name]
    output_path(output)  # a path that cannot be written is refused before minutes of measuring
    width = max(len(cid) for cid, _, _ in cases)
    rows, start = [], time.time()
    for cid, group, case in cases:
        began = time.time()
        rows.append(reference.measure_row(cid, group, case, device))
        print(f"{cid:<{width}} {rows[-1]['measured_allocated_peak_bytes']:>16,} B  {time.time() - began:5.1f} s",
              file=log)
    write_rows(rows, reference.columns(), output)
    print(f"{len(rows)} rows in {time.time() - start:.0f} s -> {output}", file=log)
    return len(rows)


def find_case(case_id: str) -> dict:
    """The case of that id, from the first set that lists it (a recipe baseline can repeat a single-GPU case)."""
    for reference in SETS.values():
        for cid, _, case in reference.cases():
            if cid == case_id:
                return case
    raise UserError(f"no committed set has a case {case_id!r} (the case_id column of data/measured/*.csv)")
