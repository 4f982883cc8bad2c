"""The `memsim` command line: parse, call, print. Every user mistake is one line on stderr and exit 2.

Each command lives in its own module here, its options beside its handler (`add_parser`, `run`).
"""

import argparse
import sys

from engine.cli import estimate, explain, measure, query, report, sweep, validate, verify
from engine.errors import UserError

COMMANDS = [explain, estimate, measure, validate, sweep, query, report, verify]


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line like every other user mistake (not the usage block)."""

    def error(self, message: str):
        self.exit(2, f"memsim: error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="memsim", description="Predict per-GPU training memory before the job touches a GPU.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
