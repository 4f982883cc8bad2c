"""`memsim validate`: memsim against every reference it ships, as signed error per case."""

import argparse

from engine.errors import UserError

HELP = "memsim against every reference it ships: signed error per case"
EXAMPLE = "Example:\n  memsim validate --set measured --markdown"


def add_parser(sub) -> None:
    p = sub.add_parser("validate", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=["all", "published", "measured", "hardware", "recipes", "throughput"],
                   default="all", help="hardware: peaks measured on real GPUs and published (reported, not held); "
                                       "recipes: the hardware rows of torchtune, torchtitan, Trainy and PEFT")
    p.add_argument("--markdown", action="store_true", help="the README's table")
    p.set_defaults(run=run)


def run(args) -> None:
    from engine.checks import validate
    from engine.cli.first_run import show_notices

    show_notices()  # a kernel about to compile says so (a few rows run in Python and never do)
    results, speed = [], []
    if args.set in ("all", "published"):
        results += validate.golden_results()
    if args.set in ("all", "measured"):
        results += validate.measured_results()
    if args.set in ("all", "hardware", "recipes"):
        from engine.checks.hardware import RECIPE_SOURCES, hardware_results

        results += hardware_results(RECIPE_SOURCES if args.set == "recipes" else None)
    if args.set in ("all", "throughput"):
        from engine.checks.throughput.comparison import regressions, throughput_results

        speed = throughput_results()
    print(validate.markdown(results + speed) if args.markdown else validate.render(results + speed))
    # throughput: a miss outside the tolerance fails unless it is a known, explained one (THROUGHPUT.md)
    failed = [r["case_id"] for r in results if r["ok"] is False] + (regressions(speed) if speed else [])
    measured = validate.summary([r for r in results if r["group"].startswith("measured")])
    worse = [g for g, s in measured.items() if s["median_abs_pct"] > validate.MEASURED_MEDIAN_TOL_PCT]
    if failed or worse:
        raise UserError(f"accuracy regressed: {', '.join(failed + worse)} outside the stated tolerance")
