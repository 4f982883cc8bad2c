"""`memsim query` and `memsim sql`: the named questions of queries/ and ad-hoc SQL over a sweep."""

import argparse
import sys
from typing import TYPE_CHECKING

from engine.errors import UserError

if TYPE_CHECKING:
    import polars as pl

QUERY_HELP = "run a named question from queries/ over a sweep (--list shows them)"
QUERY_EXAMPLE = """Example:
  memsim query min_gpus --sweep out/default --param seq_len=4096
  memsim query fits --sweep out/default --param model=llama-3.1-70b --param gpu=h100 --format csv
  memsim query --list"""
SQL_HELP = "run your own SQL over the views sweep, models and gpus (read-only unless --allow-writes)"
SQL_EXAMPLE = """Example:
  memsim sql "SELECT gpu, count(*) AS fit FROM sweep WHERE fits GROUP BY ALL ORDER BY fit DESC" --sweep out/default
  memsim sql "SELECT gpu, hbm_bytes / 2^30 AS hbm_gib FROM gpus ORDER BY hbm_gib"
  memsim sql "SELECT count(*) FROM sweep" --sweep s3://bucket/sweeps/big
  memsim sql "COPY (SELECT * FROM sweep WHERE fits) TO 'fits.parquet'" --sweep out/default --allow-writes

By default the SQL reads the sweep and the catalogs and nothing else: no other file read (read_csv('/etc/passwd')
is refused), no COPY ... TO or EXPORT, no ATTACH, no INSTALL or LOAD, no SET. --allow-writes lifts all of that:
use it only with SQL you trust."""
SWEEP_HELP = ("sweep dataset: a directory or a URI (s3://bucket/path, gs://..., file://...) written by memsim sweep; "
              "credentials and endpoint from the AWS_* variables and ~/.aws as the AWS SDKs read them")


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=["table", "csv", "json", "parquet"],
                        help="output format (default: from -o's suffix, else an aligned table)")
    parser.add_argument("-o", "--output", help="write the rows to FILE (atomically) instead of printing them")
    parser.add_argument("--partial", action="store_true",
                        help="answer from the complete shards of an incomplete dataset (refused otherwise); "
                             "every output then says so")


def add_parser(sub) -> None:
    p = sub.add_parser("query", help=QUERY_HELP, epilog=QUERY_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="query name (a file queries/NAME.sql)")
    p.add_argument("--sweep", metavar="DIR", help=SWEEP_HELP)
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="a query parameter; repeat for more")
    p.add_argument("--list", action="store_true", help="list the queries and their purposes (with NAME: its parameters)")
    add_output_flags(p)
    p.set_defaults(run=run_query)

    p = sub.add_parser("sql", help=SQL_HELP, epilog=SQL_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sql", help="one SQL statement (DuckDB dialect)")
    p.add_argument("--sweep", metavar="DIR", help=SWEEP_HELP + "; without it only models and gpus exist")
    add_output_flags(p)
    p.add_argument("--allow-writes", action="store_true",
                   help="lift the read-only default: the SQL may read and write any file (COPY, EXPORT), ATTACH "
                        "databases, INSTALL and LOAD extensions and change settings")
    p.add_argument("--read-only", action="store_true",
                   help="read the sweep and catalogs only (the default; kept so that scripts passing it still run)")
    p.set_defaults(run=run_sql)


def list_queries(name: str | None) -> None:
    from engine.ask.queries import list_queries, read_query

    if name:
        q = read_query(name)
        params = "".join(f"\n  ${p.name} {p.type}: {p.meaning}" for p in q.params) or "\n  none"
        print(f"{q.name}: {q.purpose}\nparams:{params}\nreturns: {q.returns}")
        return
    queries = list_queries()
    width = max(len(n) for n, _ in queries)
    print("\n".join(f"{n:<{width}}  {purpose}" for n, purpose in queries))


def open_sweep(args, read_only: bool):
    """The connection over --sweep (complete shards only; all shards unless --partial), saying so when partial,
    and the parts it reads (None without --sweep). A bad -o is refused first, before any work."""
    from engine.atomic import output_path
    from engine.dataset.views import connect, sweep_parts

    if args.output is not None:
        output_path(args.output)
    if args.sweep is None:
        if args.partial:
            raise UserError("--partial goes with --sweep DIR")
        return connect(None, read_only=read_only), None
    parts = sweep_parts(args.sweep, partial=args.partial)
    note(parts.note())
    return connect(parts, read_only=read_only), parts


def note(text: str) -> None:
    if text:
        print(f"memsim: note: {text}", file=sys.stderr)


def run_query(args) -> None:
    from engine.ask.queries import read_query, run_query
    from engine.dataset.views import refusing_damage

    if args.list:
        return list_queries(args.name)
    if not args.name:
        raise UserError("name a query (memsim query NAME --sweep DIR), or list them with memsim query --list")
    read_query(args.name)  # an unknown name is refused before the dataset is read
    if not args.sweep:
        raise UserError(f"query {args.name} reads a sweep: add --sweep DIR (a directory written by memsim sweep)")
    params = parse_params(args.param)
    con, parts = open_sweep(args, read_only=True)
    try:
        with refusing_damage(parts):
            rows = run_query(con, args.name, params)
        emit(rows, args.format, args.output)
    finally:
        con.close()


def run_sql(args) -> None:
    from engine.ask.queries import run_sql
    from engine.dataset.views import refusing_damage

    if args.allow_writes and args.read_only:
        raise UserError("--read-only and --allow-writes contradict each other: give one (read-only is the default)")
    con, parts = open_sweep(args, read_only=not args.allow_writes)
    try:
        with refusing_damage(parts):
            rows = run_sql(con, args.sql)
        emit(rows, args.format, args.output)
    finally:
        con.close()


# --- what `memsim query` and `memsim sql` print or write ---------------------------------------------------

FORMATS = ("table", "csv", "json", "parquet")
TABLE_ROWS = 200  # a longer result prints its first and last rows; -o FILE keeps them all


def parse_params(pairs: list[str] | None) -> dict[str, str]:
    """`--param name=value` pairs as a dict of text values (run_query types them)."""
    params = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        name = name.strip().lstrip("$")
        if not sep or not name:
            raise UserError(f"--param takes name=value (e.g. --param n_gpus=8), got {pair!r}")
        if name in params:
            raise UserError(f"--param {name} is given twice")
        params[name] = value
    return params


def output_format(fmt: str | None, path: str | None) -> str:
    """The --format given, else the output file's suffix, else a table."""
    if fmt is None and path:
        suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
        fmt = suffix if suffix in FORMATS[1:] else "table"
    fmt = fmt or "table"
    if fmt == "parquet" and not path:
        raise UserError("--format parquet writes a file: add -o FILE.parquet")
    return fmt


def render_table(rows: "pl.DataFrame") -> str:
    """Aligned text: every column, numbers right-aligned, GiB to 2 decimals, long results elided in the middle."""
    import polars as pl

    shown = rows.height if rows.height <= TABLE_ROWS else 40
    with pl.Config(tbl_rows=shown, tbl_cols=-1, tbl_width_chars=65_000, fmt_str_lengths=200,
                   tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True, float_precision=2,
                   tbl_cell_numeric_alignment="RIGHT", tbl_formatting="UTF8_FULL_CONDENSED"):
        text = str(rows)
    return f"{text}\n{rows.height:,} row{'s' if rows.height != 1 else ''}"


def render(rows: "pl.DataFrame", fmt: str) -> str:
    if fmt == "csv":
        from engine.csv_cells import spreadsheet_safe

        return spreadsheet_safe(rows).write_csv()
    if fmt == "json":
        return rows.write_json() + "\n"
    return render_table(rows) + "\n"


def write_parquet(rows: "pl.DataFrame", path) -> None:
    import polars as pl

    try:
        rows.write_parquet(path)
    except pl.exceptions.ComputeError as err:  # polars reports a failed write (a full disk) as this
        raise OSError(str(err).strip().splitlines()[0] if str(err).strip() else 'write failed') from None


def emit(rows: "pl.DataFrame", fmt: str | None, path: str | None) -> None:
    """Print the rows in the format asked, or write them atomically to `path` and say so."""
    from engine.atomic import write_atomic

    fmt = output_format(fmt, path)
    if path is None:
        print(render(rows, fmt), end="")
        return
    if fmt == "parquet":
        write_atomic(path, lambda tmp: write_parquet(rows, tmp))
    else:
        text = render(rows, fmt)
        write_atomic(path, lambda tmp: tmp.write_text(text))
    print(f"{rows.height:,} rows ({fmt}) -> {path}")
