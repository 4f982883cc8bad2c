"""What the probes' command lines share: their report lines printed as they are made, a user's mistake as one line."""

import sys

from engine.errors import UserError


def print_reports(lines) -> int:
    """Print each line of `lines()` (a callable, so that what it raises while starting is caught too) as it comes;
    a UserError is one line on stderr and exit status 2."""
    try:
        for line in lines():
            print(line, flush=True)
    except UserError as err:
        print(f"memsim: error: {err}", file=sys.stderr)
        return 2
    return 0
