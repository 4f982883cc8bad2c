"""`memsim report`: a self-contained HTML page of charts and findings over a sweep."""

import argparse
import sys
import time

HELP = "a self-contained HTML page of charts and findings over a sweep"
EXAMPLE = """Example:
  memsim report --sweep out/default -o report.html
  memsim report --sweep out/default -o docs/report.html --format png --model llama-3.1-70b --gpu h100
  memsim report --sweep s3://bucket/sweeps/big -o report.html"""


def add_parser(sub) -> None:
    p = sub.add_parser("report", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", metavar="DIR", required=True,
                   help="sweep dataset: a directory or a URI (s3://bucket/path, gs://..., file://...) written by memsim sweep")
    p.add_argument("-o", "--output", required=True, help="the HTML page to write (atomically)")
    p.add_argument("--format", choices=["html", "png", "svg"], default="html",
                   help="png or svg: also write each chart beside the page as <name>-<chart>.png|svg (default: html only)")
    p.add_argument("--method", help="training method the charts show, as queries name it (default: the one with most fits)")
    p.add_argument("--model", help="model for the single-model charts (default: the median-size model that fits)")
    p.add_argument("--gpu", help="GPU type for the single-GPU charts (default: picked from what fits)")
    p.add_argument("--partial", action="store_true",
                   help="report on the complete shards of an incomplete dataset (refused otherwise); the page says so")
    p.set_defaults(run=run)


def run(args) -> None:
    from engine.ask.report import write_report
    t0 = time.perf_counter()
    report, paths = write_report(args.sweep, args.output, args.format, args.method, args.model, args.gpu,
                                 partial=args.partial)
    if report.partial:
        print(f"memsim: note: {report.partial}", file=sys.stderr)
    charts = sum(1 for s in report.sections if s.chart is not None)
    print(f"report ({charts} chart{'s' if charts != 1 else ''}, {time.perf_counter() - t0:.1f} s) -> {paths[0].resolve()}")
    for path in paths[1:]:
        print(f"  chart -> {path.resolve()}")
