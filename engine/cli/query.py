"""`memsim query` and `memsim sql`: the named questions of queries/ and ad-hoc SQL over a sweep."""

import argparse

from engine.errors import UserError

QUERY_HELP = "run a named question from queries/ over a sweep (--list shows them)"
QUERY_EXAMPLE = """Example:
  memsim query min_gpus --sweep out/default --param seq_len=4096
  memsim query fits --sweep out/default --param model=llama-3.1-70b --param gpu=h100 --format csv
  memsim query --list"""
SQL_HELP = "run your own SQL over the views sweep, models and gpus"
SQL_EXAMPLE = """Example:
  memsim sql "SELECT gpu, count(*) AS fit FROM sweep WHERE fits GROUP BY ALL ORDER BY fit DESC" --sweep out/default
  memsim sql "SELECT gpu, hbm_bytes / 2^30 AS hbm_gib FROM gpus ORDER BY hbm_gib\""""


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=["table", "csv", "json", "parquet"],
                        help="output format (default: from -o's suffix, else an aligned table)")
    parser.add_argument("-o", "--output", help="write the rows to FILE (atomically) instead of printing them")


def add_parser(sub) -> None:
    p = sub.add_parser("query", help=QUERY_HELP, epilog=QUERY_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="query name (a file queries/NAME.sql)")
    p.add_argument("--sweep", metavar="DIR", help="sweep dataset directory (written by memsim sweep)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="a query parameter; repeat for more")
    p.add_argument("--list", action="store_true", help="list the queries and their purposes (with NAME: its parameters)")
    add_output_flags(p)
    p.set_defaults(run=run_query)

    p = sub.add_parser("sql", help=SQL_HELP, epilog=SQL_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sql", help="one SQL statement (DuckDB dialect)")
    p.add_argument("--sweep", metavar="DIR", help="sweep dataset directory; without it only models and gpus exist")
    add_output_flags(p)
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


def run_query(args) -> None:
    from engine.ask.queries import emit, parse_params, run_query
    from engine.dataset.views import connect

    if args.list:
        return list_queries(args.name)
    if not args.name:
        raise UserError("name a query (memsim query NAME --sweep DIR), or list them with memsim query --list")
    if not args.sweep:
        raise UserError(f"query {args.name} reads a sweep: add --sweep DIR (a directory written by memsim sweep)")
    params = parse_params(args.param)
    emit(run_query(connect(args.sweep), args.name, params), args.format, args.output)


def run_sql(args) -> None:
    from engine.ask.queries import emit, run_sql
    from engine.dataset.views import connect

    emit(run_sql(connect(args.sweep), args.sql), args.format, args.output)
