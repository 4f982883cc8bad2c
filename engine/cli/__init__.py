"""The `memsim` command line: parse, call, print. Every user mistake is one line on stderr and exit 2."""

import argparse
import sys

from engine.errors import UserError
from engine.inputs.vocabulary import INPUT_FIELDS

EPILOG_EXPLAIN = """Example:
  memsim explain --model llama-2-13b --gpu a100-sxm-80gb --n-gpus 8 --zero-stage 3 \\
      --checkpointing full --precision amp_bf16 --micro-batch 4 --seq-len 4096"""


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per CONFIG.md input (`--seq-len` for seq_len); the help names the default."""
    from engine.inputs.codes import IntEnum, name_of, names

    for f in INPUT_FIELDS:
        kind = f.kind
        if isinstance(kind, type) and issubclass(kind, IntEnum):
            default, choices = name_of(kind(f.default)), f" ({'|'.join(names(kind))})"
        else:
            default, choices = f.default, ""
        if f.name in ("n_gpus", "dp", "n_kv_heads", "head_dim", "n_params") and f.default == 0:
            default = "derived"
        extra = {"nargs": "?", "const": "true"} if kind == "bool" else {}
        parser.add_argument(flag(f.name), dest=f.name, metavar="V", help=f"{f.help}{choices}; default: {default}", **extra)
    parser.add_argument("--cuda-context-bytes", dest="cuda_context_bytes", metavar="B", help="override the CUDA context size (default: by GPU architecture, data/overheads.toml)")


def given_config(args: argparse.Namespace) -> dict:
    names = [f.name for f in INPUT_FIELDS] + ["cuda_context_bytes"]
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def cmd_explain(args) -> None:
    from engine.ask.explain import explain, render, to_json

    result = explain(given_config(args))
    if not result["valid"]:
        raise UserError(f"this layout cannot run: {result['invalid_reason']} ({result['summary']})")
    print(to_json(result) if args.json else render(result))


def cmd_estimate(args) -> None:
    import pyarrow.parquet as pq

    from engine.ask.estimate import estimate_table, read_cases
    from engine.atomic import write_atomic

    table = estimate_table(read_cases(args.cases))
    if args.output.endswith(".csv"):
        import pyarrow.csv as pacsv

        write_atomic(args.output, lambda tmp: pacsv.write_csv(table, tmp))
    else:
        write_atomic(args.output, lambda tmp: pq.write_table(table, tmp))
    fits = sum(1 for v in table.column("fits").to_pylist() if v)
    print(f"{table.num_rows} configurations -> {args.output} ({fits} fit)")


def parse_shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UserError(f"--shard takes K/N (e.g. 3/16), got {text!r}") from None
    if n < 1 or not 0 <= k < n:
        raise UserError(f"shard {text} is out of range: use K/N with 0 <= K < N")
    return k, n


def cmd_sweep(args) -> None:
    from engine.dataset.sweep import explain_no_valid, run_sweep

    if args.plan is not None:
        return cmd_plan(args)
    if not args.output:
        raise UserError("memsim sweep needs -o DIR (where the dataset goes), or --plan N to plan shards")
    if args.engine == "ray":
        return cmd_sweep_ray(args)
    if args.address or args.shards:
        raise UserError("--address and --shards go with --engine ray; to run one shard here use --shard K/N")
    shard = parse_shard(args.shard) if args.shard else (0, 1)
    if "://" in args.output:  # an object-store (or file://) URI: staged locally, published through pyarrow.fs
        from engine.dataset.shards import sweep_shard as run_sweep
    result = run_sweep(args.spec, args.output, shard=shard, force=args.force,
                       feasible_only=args.feasible_only or None, valid_only=args.valid_only or None,
                       progress=False if args.quiet else None)
    rate = result.evaluated / max(result.seconds, 1e-9)
    print(f"{result.evaluated:,} configurations in {result.seconds:.2f} s ({rate / 1e6:.2f} M/s): "
          f"{result.valid:,} valid, {result.fits:,} fit; {result.written:,} rows -> {result.out_dir}")
    if result.valid == 0:
        raise UserError(f"no valid configuration in this sweep: {explain_no_valid(result)}")


def cmd_plan(args) -> None:
    from engine.dataset.shards import plan_shards, render_plan

    grid, keep, plans = plan_shards(args.spec, args.plan, args.feasible_only or None, args.valid_only or None)
    print(render_plan(args.spec, grid, keep, plans, args.output))


def cmd_sweep_ray(args) -> None:
    from engine.dataset.ray_backend import run_ray

    if args.shard:
        raise UserError("--shard runs one shard here; with --engine ray give the number of shards: --shards N")
    r = run_ray(args.spec, args.output, n_shards=args.shards, address=args.address, force=args.force,
                feasible_only=args.feasible_only or None, valid_only=args.valid_only or None)
    rate = r.evaluated / max(r.seconds, 1e-9)
    print(f"{r.evaluated:,} configurations in {r.n_shards} shards, {r.seconds:.2f} s ({rate / 1e6:.2f} M/s): "
          f"{r.valid:,} valid, {r.fits:,} fit; {r.written:,} rows -> {r.out}")


def cmd_verify(args) -> None:
    from engine.dataset.shards import render_verification, verify_dataset

    v = verify_dataset(args.dir)
    print(render_verification(v))
    if not v.ok:
        raise UserError(f"{args.dir} is incomplete: {len(v.rerun)} shard(s) to re-run"
                        f"{f', {len(v.stray)} stray file(s)' if v.stray else ''} (listed above)")


def cmd_query(args) -> None:
    from engine.ask.queries import (
        emit,
        list_queries,
        parse_params,
        read_query,
        run_query,
    )

    if args.list:
        if args.name:
            q = read_query(args.name)
            params = "".join(f"\n  ${p.name} {p.type}: {p.meaning}" for p in q.params) or "\n  none"
            print(f"{q.name}: {q.purpose}\nparams:{params}\nreturns: {q.returns}")
            return
        queries = list_queries()
        width = max(len(name) for name, _ in queries)
        print("\n".join(f"{name:<{width}}  {purpose}" for name, purpose in queries))
        return
    if not args.name:
        raise UserError("name a query (memsim query NAME --sweep DIR), or list them with memsim query --list")
    if not args.sweep:
        raise UserError(f"query {args.name} reads a sweep: add --sweep DIR (a directory written by memsim sweep)")
    params = parse_params(args.param)
    from engine.dataset.views import connect

    emit(run_query(connect(args.sweep), args.name, params), args.format, args.output)


def cmd_sql(args) -> None:
    from engine.ask.queries import emit, run_sql
    from engine.dataset.views import connect

    emit(run_sql(connect(args.sweep), args.sql), args.format, args.output)


def cmd_report(args) -> None:
    import time

    from engine.ask.report import write_report

    t0 = time.perf_counter()
    report, paths = write_report(args.sweep, args.output, args.format, args.method, args.model, args.gpu)
    charts = sum(1 for s in report.sections if s.chart is not None)
    print(f"report ({charts} chart{'s' if charts != 1 else ''}, {time.perf_counter() - t0:.1f} s) -> {paths[0].resolve()}")
    for path in paths[1:]:
        print(f"  chart -> {path.resolve()}")


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=["table", "csv", "json", "parquet"],
                        help="output format (default: from -o's suffix, else an aligned table)")
    parser.add_argument("-o", "--output", help="write the rows to FILE (atomically) instead of printing them")


def cmd_measure(args) -> None:
    from engine.cli.measure import run_measure

    table = run_measure(args.cases, args.output, args.device)
    peaks = table.column("measured_allocated_peak_bytes").to_pylist()
    est = table.column("allocated_peak_bytes").to_pylist()
    for case, m, e in zip(table.column("model").to_pylist(), peaks, est):
        print(f"{case:<28} measured {m / 2**30:8.3f} GiB   memsim {e / 2**30:8.3f} GiB   {100 * (e - m) / m:+6.1f}%")
    print(f"{table.num_rows} configurations measured -> {args.output}")


def cmd_validate(args) -> None:
    from engine.checks import validate

    results = []
    if args.set in ("all", "published"):
        results += validate.golden_results()
    if args.set in ("all", "measured"):
        results += validate.measured_results()
    print(validate.markdown(results) if args.markdown else validate.render(results))
    failed = [r["case_id"] for r in results if r["ok"] is False]
    measured = validate.summary([r for r in results if r["group"].startswith("measured")])
    worse = [g for g, s in measured.items() if s["median_abs_pct"] > validate.MEASURED_MEDIAN_TOL_PCT]
    if failed or worse:
        raise UserError(f"accuracy regressed: {', '.join(failed + worse)} outside the stated tolerance")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memsim", description="Predict per-GPU training memory before the job touches a GPU.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("explain", help="one configuration as a per-device breakdown", epilog=EPILOG_EXPLAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flags(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_explain)

    p = sub.add_parser("estimate", help="evaluate a case list (CSV or Parquet with CONFIG.md columns)",
                       epilog="Example:\n  memsim estimate my_runs.csv -o estimates.parquet", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", help="CSV or Parquet file, one configuration per row")
    p.add_argument("-o", "--output", required=True, help="output .parquet (or .csv)")
    p.set_defaults(run=cmd_estimate)

    p = sub.add_parser("measure", help="run two real training steps per configuration and record peak memory",
                       epilog="Example:\n  memsim measure cases.csv -o measured.parquet --device fake", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", help="CSV or Parquet case list (CONFIG.md columns; catalog model or dims)")
    p.add_argument("-o", "--output", required=True, help="output .parquet or .csv: estimate columns + measured_*")
    p.add_argument("--device", default="fake", choices=["fake", "cpu-fake", "cpu", "cuda"],
                   help="fake: no GPU, CUDA behaviour emulated (default); cuda: a real GPU")
    p.set_defaults(run=cmd_measure)

    p = sub.add_parser("validate", help="memsim against every reference it ships: signed error per case",
                       epilog="Example:\n  memsim validate --set measured --markdown", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=["all", "published", "measured"], default="all")
    p.add_argument("--markdown", action="store_true", help="the README's table")
    p.set_defaults(run=cmd_validate)

    p = sub.add_parser("sweep", help="evaluate every configuration of a sweep spec into a Parquet dataset",
                       epilog="Example:\n  memsim sweep data/sweeps/default.toml -o out/default\n"
                              "  memsim sweep data/sweeps/default.toml --plan 16 -o out/default\n"
                              "  memsim sweep data/sweeps/default.toml --engine ray --shards 16 -o out/default", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", help="sweep spec (TOML with an [axes] table), e.g. data/sweeps/default.toml")
    p.add_argument("-o", "--output", help="dataset directory, or a URI (file://..., s3://...)")
    p.add_argument("--shard", help="K/N: evaluate only shard K of N (0-based) into the same dataset")
    p.add_argument("--plan", type=int, metavar="N", help="print N shards' ranges and sizes and how to run them; sweeps nothing")
    p.add_argument("--engine", choices=["local", "ray"], default="local", help="ray: run the shards as Ray tasks (pip install 'memsim[ray]')")
    p.add_argument("--address", help="with --engine ray: the cluster (HOST:6379 or ray://HOST:10001); default: start Ray here")
    p.add_argument("--shards", type=int, metavar="N", help="with --engine ray: number of shards (default: an existing dataset's, else the cluster's CPUs / 2)")
    p.add_argument("--feasible-only", action="store_true", help="write only valid rows that fit")
    p.add_argument("--valid-only", action="store_true", help="write only valid layouts")
    p.add_argument("--force", action="store_true", help="write even if the disk looks too small, or replace another sweep in DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=cmd_sweep)

    p = sub.add_parser("query", help="run a named question from queries/ over a sweep (--list shows them)",
                       epilog="Example:\n  memsim query min_gpus --sweep out/default --param seq_len=4096\n"
                              "  memsim query fits --sweep out/default --param model=llama-3.1-70b --param gpu=h100 --format csv\n"
                              "  memsim query --list", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="query name (a file queries/NAME.sql)")
    p.add_argument("--sweep", metavar="DIR", help="sweep dataset directory (written by memsim sweep)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="a query parameter; repeat for more")
    p.add_argument("--list", action="store_true", help="list the queries and their purposes (with NAME: its parameters)")
    add_output_flags(p)
    p.set_defaults(run=cmd_query)

    p = sub.add_parser("sql", help="run your own SQL over the views sweep, models and gpus",
                       epilog="Example:\n  memsim sql \"SELECT gpu, count(*) AS fit FROM sweep WHERE fits GROUP BY ALL ORDER BY fit DESC\" --sweep out/default\n"
                              "  memsim sql \"SELECT gpu, hbm_bytes / 2^30 AS hbm_gib FROM gpus ORDER BY hbm_gib\"",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sql", help="one SQL statement (DuckDB dialect)")
    p.add_argument("--sweep", metavar="DIR", help="sweep dataset directory; without it only models and gpus exist")
    add_output_flags(p)
    p.set_defaults(run=cmd_sql)

    p = sub.add_parser("report", help="a self-contained HTML page of charts and findings over a sweep",
                       epilog="Example:\n  memsim report --sweep out/default -o report.html\n"
                              "  memsim report --sweep out/default -o docs/report.html --format png --model llama-3.1-70b --gpu h100",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", metavar="DIR", required=True, help="sweep dataset directory (written by memsim sweep)")
    p.add_argument("-o", "--output", required=True, help="the HTML page to write (atomically)")
    p.add_argument("--format", choices=["html", "png", "svg"], default="html",
                   help="png or svg: also write each chart beside the page as <name>-<chart>.png|svg (default: html only)")
    p.add_argument("--method", help="training method the charts show, as queries name it (default: the one with most fits)")
    p.add_argument("--model", help="model for the single-model charts (default: the median-size model that fits)")
    p.add_argument("--gpu", help="GPU type for the single-GPU charts (default: picked from what fits)")
    p.set_defaults(run=cmd_report)

    p = sub.add_parser("verify", help="check that a (sharded) sweep dataset is complete; print what to re-run",
                       epilog="Example:\n  memsim verify out/default", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="sweep dataset directory or URI (written by memsim sweep)")
    p.set_defaults(run=cmd_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except UserError as err:
        print(f"memsim: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("memsim: interrupted; nothing half-written was left behind", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
