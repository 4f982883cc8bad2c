"""`memsim estimate`: every output column for each configuration of a case list."""

import argparse

from engine.atomic import output_path, write_atomic

HELP = "evaluate a case list (CSV or Parquet with CONFIG.md columns)"
EXAMPLE = "Example:\n  memsim estimate my_runs.csv -o estimates.parquet"


def add_parser(sub) -> None:
    p = sub.add_parser("estimate", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", help="CSV or Parquet file, one configuration per row")
    p.add_argument("-o", "--output", required=True, help="output .parquet (or .csv)")
    p.set_defaults(run=run)


def write_table(table, output: str) -> None:
    """A table as Parquet, or CSV when the name ends in .csv, atomically."""
    if output.endswith(".csv"):
        import pyarrow.csv as pacsv

        write_atomic(output, lambda tmp: pacsv.write_csv(table, tmp))
    else:
        import pyarrow.parquet as pq

        write_atomic(output, lambda tmp: pq.write_table(table, tmp))


def run(args) -> None:
    from engine.ask.estimate import estimate_table, read_cases
    from engine.cli.first_run import say_if_compiling
    from engine.model.kernel import fill_outputs

    output_path(args.output)  # a path that cannot be written is refused before any work
    say_if_compiling(fill_outputs)
    table = estimate_table(read_cases(args.cases))
    write_table(table, args.output)
    fits = sum(1 for v in table.column("fits").to_pylist() if v)
    print(f"{table.num_rows} configurations -> {args.output} ({fits} fit)")
