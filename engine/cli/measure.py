"""`memsim measure`: real training steps of each configuration (no GPU needed), beside memsim's estimate; and the
measurement harness's own jobs: regenerate a committed measured set, show what one case keeps and holds at its
peak, or what torch.compile would save for backward.

torch and transformers are imported only once a mode runs, so `memsim --help` and the other commands never load them.
"""

import argparse
import json
import warnings

import pyarrow as pa

from engine.checks.measure.parallel import HARNESS
from engine.checks.measure.reference_sets import SETS, chosen_cases, find_case, measure_set
from engine.cli.estimate import write_table
from engine.errors import UserError

HELP = "run two real training steps per configuration and record peak memory (or regenerate a measured set)"
USAGE = f"""%(prog)s CASES -o OUT [--device DEVICE]
       %(prog)s --set {{{','.join(SETS)}}} -o OUT [--only TEXT] [--device DEVICE]
       %(prog)s --anatomy CASE [--top N] [--device DEVICE]
       %(prog)s --compiled CASE [--seq-len N]"""
EXAMPLE = """Example:
  memsim measure cases.csv -o measured.parquet --device fake
  memsim measure --set single -o data/measured/cpu_fake.csv
  memsim measure --set parallel -o /tmp/fsdp2.csv --only fsdp2_
  memsim measure --anatomy gpt2-124m_amp_bf16_adamw_eager_s1024_b4 --top 10
  memsim measure --compiled llama-400m-like_bf16_adamw_flash_s2048_b4

CASE is a case_id of a committed set (data/measured/*.csv) or a JSON object of CONFIG.md fields with the model dims,
e.g. '{"n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab": 128}'. --set single is cpu_fake.csv."""
# The modes, one per invocation: the positional CASES or one of the flags.
MODES = {"cases": "CASES", "set": "--set", "anatomy": "--anatomy", "compiled": "--compiled"}
# The options that belong to some modes only: option -> (how it is spelled, the modes it goes with).
MODE_OPTIONS = {
    "output": ("-o", ("cases", "set")),
    "device": ("--device", ("cases", "set", "anatomy")),
    "only": ("--only", ("set",)),
    "top": ("--top", ("anatomy",)),
    "seq_len": ("--seq-len", ("compiled",)),
}


def add_parser(sub) -> None:
    p = sub.add_parser("measure", help=HELP, usage=USAGE, epilog=EXAMPLE,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="?",
                   help="CSV or Parquet case list (CONFIG.md columns; catalog model or dims; and the harness's: rank, "
                        "tp_plan, ddp_bucket_cap_mb, ddp_grad_as_bucket_view, fsdp_param_dtype, fsdp_reduce_dtype, "
                        "fsdp_wrap = blocks | hf | fsdp1)")
    p.add_argument("--set", choices=list(SETS), help="regenerate a committed measured set (data/measured/)")
    p.add_argument("--anatomy", metavar="CASE", help="what CASE keeps for backward and holds at its peak")
    p.add_argument("--compiled", metavar="CASE", help="what torch.compile saves for backward in CASE's block and head")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="CASES: .parquet or .csv, the estimate's columns + measured_*; --set: the .csv to write")
    p.add_argument("--device", choices=["fake", "cpu-fake", "cpu", "cuda"],
                   help="fake: no GPU, CUDA behaviour emulated (default); cuda: a real GPU")
    p.add_argument("--only", metavar="TEXT", help="--set: only the cases whose id or family/knob contains TEXT")
    p.add_argument("--top", type=int, metavar="N", help="--anatomy: the N largest groups of each table")
    p.add_argument("--seq-len", type=int, metavar="N", help="--compiled: tokens traced, then twice as many (256)")
    p.set_defaults(run=run)


def mode_of(args) -> str:
    """The one mode the arguments ask for; none, two, or an option of another mode is one line."""
    given = [mode for mode in MODES if getattr(args, mode) is not None]
    if len(given) != 1:
        which = " and ".join(MODES[m] for m in given) if given else "none"
        raise UserError(f"memsim measure takes one of CASES, --set, --anatomy or --compiled (got {which})")
    mode = given[0]
    for option, (spelled, modes) in MODE_OPTIONS.items():
        if getattr(args, option) is not None and mode not in modes:
            raise UserError(f"{spelled} does not go with {MODES[mode]} (see memsim measure --help)")
    if mode in MODE_OPTIONS["output"][1] and not args.output:
        raise UserError(f"{MODES[mode]} writes a file: name it with -o FILE")
    for option in ("top", "seq_len"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            raise UserError(f"{MODE_OPTIONS[option][0]} takes a number of at least 1, not {getattr(args, option)}")
    return mode


def load_harness() -> None:
    """Import the harness's libraries quietly; without them, one line naming the extra to install."""
    warnings.filterwarnings("ignore")  # torch/transformers chatter about overridden kernels and deprecations
    try:
        import torch  # noqa: F401 (the harness's first import, and the one most often missing)
        import transformers

        transformers.logging.set_verbosity_error()
    except ImportError as err:
        raise UserError(f"memsim measure needs the optional extra: pip install 'memsim[measure]' ({err})") from None


def case_of(text: str) -> dict:
    """The case a CASE argument names: a JSON object, or a case_id of a committed set."""
    if not text.lstrip().startswith("{"):
        return find_case(text)
    try:
        case = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"CASE is not valid JSON: {err}") from None
    if not isinstance(case, dict):
        raise UserError("CASE must be a JSON object of CONFIG.md fields")
    return case


def measure_table(rows: list[dict], device: str) -> pa.Table:
    """`memsim estimate`'s columns for every case, plus the measured_* columns and library versions. A row may carry
    the harness's own columns (engine/checks/measure/parallel.py HARNESS: `fsdp_wrap = fsdp1`, `tp_plan`, ...), which
    choose how a multi-GPU layout is run; they are passed to the harness and written beside the inputs."""
    from engine.ask.estimate import INPUT_COLUMNS, estimate_table

    load_harness()
    from engine.checks.measure import measure_case

    harness = [{k: v for k, v in row.items() if k in HARNESS} for row in rows]
    table = estimate_table([{k: v for k, v in row.items() if k not in HARNESS} for row in rows])
    inputs = table.select(INPUT_COLUMNS).to_pylist()  # resolved: the model's dims, every default spelled out
    measured = []
    for i, case in enumerate(inputs):
        try:
            m = measure_case({**case, **harness[i]}, device)
        except UserError as err:
            raise UserError(f"row {i + 1}: {err}") from None
        measured.append({k: v for k, v in m.items() if k.startswith("measure") or k.endswith("_version")})
    for name in sorted({k for h in harness for k in h}, key=list(HARNESS).index):
        table = table.append_column(name, pa.array([str(h.get(name, "") or "") for h in harness]))
    for name in dict.fromkeys(k for m in measured for k in m):  # a compiled step on a GPU measures two columns
        table = table.append_column(name, pa.array([m.get(name) for m in measured]))
    return table


def run_measure(cases: str, output: str, device: str) -> pa.Table:
    from engine.ask.estimate import read_cases
    from engine.atomic import output_path

    output_path(output)  # a path that cannot be written is refused before any work
    table = measure_table(read_cases(cases, tuple(HARNESS)), device)
    write_table(table, output)
    return table


def run_cases(args) -> None:
    from engine.cli.first_run import show_notices

    show_notices()  # a kernel about to compile says so (a few rows run in Python and never do)
    table = run_measure(args.cases, args.output, args.device)
    peaks = table.column("measured_allocated_peak_bytes").to_pylist()
    est = table.column("allocated_peak_bytes").to_pylist()
    for case, m, e in zip(table.column("model").to_pylist(), peaks, est):
        print(f"{case:<28} measured {m / 2**30:8.3f} GiB   memsim {e / 2**30:8.3f} GiB   {100 * (e - m) / m:+6.1f}%")
    print(f"{table.num_rows} configurations measured -> {args.output}")


def run_set(args) -> None:
    if not args.output.lower().endswith(".csv"):
        raise UserError(f"--set writes a CSV, as committed in data/measured/: -o {args.output} is not a .csv file")
    cases = chosen_cases(args.set, args.only, args.device)  # refused before torch loads: a device, an --only
    load_harness()
    measure_set(args.set, cases, args.output, args.device)


def run_anatomy(args) -> None:
    case = case_of(args.anatomy)
    load_harness()
    from engine.checks.measure.anatomy import report

    print(report(case, args.device, args.top))


def run_compiled(args) -> None:
    case = case_of(args.compiled)
    load_harness()
    from engine.checks.measure.recipe_compile import SEQ_LEN, refusal, report

    why = refusal(case)
    if why:
        raise UserError(why)
    print(report(case, args.seq_len or SEQ_LEN))


RUNS = {"cases": run_cases, "set": run_set, "anatomy": run_anatomy, "compiled": run_compiled}


def run(args) -> None:
    mode = mode_of(args)
    args.device = args.device or "fake"
    args.only = args.only or ""
    RUNS[mode](args)
