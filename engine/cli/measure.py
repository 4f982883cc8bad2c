"""`memsim measure`: real training steps of each configuration (no GPU needed), beside memsim's estimate."""

import argparse
import warnings

import pyarrow as pa

from engine.cli.estimate import write_table
from engine.errors import UserError

HELP = "run two real training steps per configuration and record peak memory"
EXAMPLE = "Example:\n  memsim measure cases.csv -o measured.parquet --device fake"


def add_parser(sub) -> None:
    p = sub.add_parser("measure", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", help="CSV or Parquet case list (CONFIG.md columns; catalog model or dims)")
    p.add_argument("-o", "--output", required=True, help="output .parquet or .csv: estimate columns + measured_*")
    p.add_argument("--device", default="fake", choices=["fake", "cpu-fake", "cpu", "cuda"],
                   help="fake: no GPU, CUDA behaviour emulated (default); cuda: a real GPU")
    p.set_defaults(run=run)


def measure_table(rows: list[dict], device: str) -> pa.Table:
    """`memsim estimate`'s columns for every case, plus the measured_* columns and library versions."""
    from engine.ask.estimate import INPUT_COLUMNS, estimate_table

    warnings.filterwarnings("ignore")  # torch/transformers chatter about overridden kernels and deprecations
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        from engine.checks.measure import measure_case
    except ImportError as err:
        raise UserError(f"memsim measure needs the optional extra: pip install 'memsim[measure]' ({err})") from None
    table = estimate_table(rows)
    inputs = table.select(INPUT_COLUMNS).to_pylist()  # resolved: the model's dims, every default spelled out
    measured = []
    for i, case in enumerate(inputs):
        try:
            m = measure_case(case, device)
        except UserError as err:
            raise UserError(f"row {i + 1}: {err}") from None
        measured.append({k: v for k, v in m.items() if k.startswith("measure") or k.endswith("_version")})
    for name in measured[0]:
        table = table.append_column(name, pa.array([m[name] for m in measured]))
    return table


def run_measure(cases: str, output: str, device: str) -> pa.Table:
    from engine.ask.estimate import read_cases
    from engine.atomic import output_path

    output_path(output)  # a path that cannot be written is refused before any work
    table = measure_table(read_cases(cases), device)
    write_table(table, output)
    return table


def run(args) -> None:
    from engine.cli.first_run import show_notices

    show_notices()  # a kernel about to compile says so (a few rows run in Python and never do)
    table = run_measure(args.cases, args.output, args.device)
    peaks = table.column("measured_allocated_peak_bytes").to_pylist()
    est = table.column("allocated_peak_bytes").to_pylist()
    for case, m, e in zip(table.column("model").to_pylist(), peaks, est):
        print(f"{case:<28} measured {m / 2**30:8.3f} GiB   memsim {e / 2**30:8.3f} GiB   {100 * (e - m) / m:+6.1f}%")
    print(f"{table.num_rows} configurations measured -> {args.output}")
