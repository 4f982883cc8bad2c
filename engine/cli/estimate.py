"""`memsim estimate`: every output column for each configuration of a case list."""

import argparse
import os
from pathlib import Path

from engine.atomic import output_path, write_atomic
from engine.errors import UserError

HELP = "evaluate a case list (CSV or Parquet with CONFIG.md columns)"
EXAMPLE = """Example:
  memsim estimate my_runs.csv -o estimates.parquet
  memsim estimate my_runs.csv -o estimates.csv

The output's format follows its extension: .parquet, .csv (text cells that a spreadsheet would run as a formula
get a leading ', as spreadsheets expect) or .json (one object per row); any other extension is refused."""
FORMATS = (".parquet", ".csv", ".json")


def add_parser(sub) -> None:
    p = sub.add_parser("estimate", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", help="CSV or Parquet file, one configuration per row")
    p.add_argument("-o", "--output", required=True, help="output file: .parquet, .csv or .json (the extension decides)")
    p.set_defaults(run=run)


def output_format(output: str) -> str:
    """The output's format from its extension; an unknown one is one line."""
    suffix = Path(output).suffix.lower()
    if suffix not in FORMATS:
        raise UserError(f"-o {output}: the output format follows the extension, one of {', '.join(FORMATS)} "
                        f"(got {suffix or 'none'})")
    return suffix[1:]


def refuse_overwriting_input(cases: str, output: str) -> None:
    """-o naming the case list (itself, or through a link) is refused before anything is read or written."""
    target = Path(output)
    same = target.exists() and Path(cases).exists() and os.path.samefile(cases, target)
    if same or os.path.realpath(cases) == os.path.realpath(output):
        raise UserError(f"-o {output} is the case list being read: name another file for the estimates")


def write_table(table, output: str) -> None:
    """A table in the format of output's extension, atomically."""
    fmt = output_format(output)
    if fmt == "csv":
        import pyarrow.csv as pacsv

        from engine.csv_cells import spreadsheet_safe_table

        safe = spreadsheet_safe_table(table)
        write_atomic(output, lambda tmp: pacsv.write_csv(safe, tmp))
    elif fmt == "json":
        import polars as pl

        text = pl.from_arrow(table).write_json() + "\n"
        write_atomic(output, lambda tmp: tmp.write_text(text))
    else:
        import pyarrow.parquet as pq

        write_atomic(output, lambda tmp: pq.write_table(table, tmp))


def run(args) -> None:
    from engine.ask.estimate import estimate_table, read_cases
    from engine.cli.first_run import show_notices

    output_path(args.output)  # a path that cannot be written is refused before any work
    output_format(args.output)
    refuse_overwriting_input(args.cases, args.output)
    show_notices()  # a kernel about to compile says so (a few hundred rows run in Python and never do)
    table = estimate_table(read_cases(args.cases))
    write_table(table, args.output)
    fits = sum(1 for v in table.column("fits").to_pylist() if v)
    print(f"{table.num_rows} configurations -> {args.output} ({fits} fit)")
