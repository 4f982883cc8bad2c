"""`memsim explain`: one configuration as a per-device breakdown, with what to change to make it fit."""

import argparse

from engine.cli.flags import add_config_flags, given_config
from engine.errors import UserError

HELP = "one configuration as a per-device breakdown"
EXAMPLE = """Example:
  memsim explain --model llama-2-13b --gpu a100-sxm-80gb --n-gpus 8 --zero-stage 3 \\
      --checkpointing full --precision amp_bf16 --micro-batch 4 --seq-len 4096"""


def add_parser(sub) -> None:
    p = sub.add_parser("explain", help=HELP, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flags(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def run(args) -> None:
    from engine.ask.explain import explain, render, to_json
    from engine.cli.first_run import show_notices

    config = given_config(args)
    show_notices()  # a kernel about to compile says so (a few rows run in Python and never do)
    result = explain(config)
    if not result["valid"]:
        raise UserError(f"this configuration cannot run: {result['invalid_reason']} ({result['summary']})")
    print(to_json(result) if args.json else render(result))
