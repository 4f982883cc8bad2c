"""The `memsim` command line: parse, call, print. Every user mistake is one line on stderr and exit 2.

Each command lives in its own module here, its options beside its handler (`add_parser`, `run`).
"""

import _thread
import argparse
import contextlib
import os
import signal
import sys
import threading

try:  # Ctrl-C while numpy, numba and pyarrow load (seconds on a cold disk) stops memsim as it stops a command
    from engine.cli import estimate, explain, measure, plan, query, report, sweep, validate, verify
    from engine.errors import UserError
except KeyboardInterrupt:
    print("memsim: interrupted", file=sys.stderr)
    sys.exit(130)

COMMANDS = [explain, plan, estimate, measure, validate, sweep, query, report, verify]


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line like every other user mistake (not the usage block)."""

    def error(self, message: str):
        self.exit(2, f"memsim: error: {self.prog}: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        """argparse's parse_args, naming the flag meant where an unknown one is a CONFIG.md name written with
        underscores (`--micro_batch`: the flags spell the names with dashes, `--micro-batch`)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = self._subparsers._group_actions[0].choices if self._subparsers else {}
            command = commands.get(getattr(parsed, "command", None))
            known = command._option_string_actions if command is not None else {}
            flags = extras[:extras.index("--")] if "--" in extras else extras  # after "--", values, not flags
            meant = [f"{x.split('=')[0]} -> {x.split('=')[0].replace('_', '-')}" for x in flags
                     if x.startswith("--") and x.split("=")[0].replace("_", "-") in known]
            hint = f" (flags spell the names with dashes: {', '.join(meant)})" if meant else ""
            (command or self).error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="memsim", description="Predict per-GPU training memory before the job touches a GPU.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm's scancel, Kubernetes, kill): stopped as Ctrl-C stops, so nothing is left half-written."""


def on_sigterm(signum, frame):
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM raises Terminated for the block (in the main thread, where Python runs signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def interrupts_never_swallowed():
    """Ctrl-C or SIGTERM that lands in a finalizer cannot propagate from there: Python prints "Exception ignored"
    and carries on (llvmlite's ObjectRef.__del__, as numba loads the cached kernels, then a sweep that exits 0).
    Such an interrupt is delivered again, from a helper thread a moment later, to the main flow, where it stops the
    command (delivered at once, it would land in this hook itself)."""
    previous = sys.unraisablehook

    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            redeliver(signal.SIGTERM if isinstance(unraisable.exc_value, Terminated) else signal.SIGINT)
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def redeliver(signum: int) -> None:
    """Deliver `signum` to the main flow from a helper thread, a moment from now. On a loaded machine the thread can
    start and deliver before Thread.start() has returned here: that delivery lands in this loop, which catches it and
    sends it again, so none is spent inside the unraisable hook (where Python would print and drop it)."""
    while True:
        try:
            threading.Timer(0.01, _thread.interrupt_main, (signum,)).start()
            return
        except KeyboardInterrupt:
            continue


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with sigterm_as_interrupt(), interrupts_never_swallowed():
            args.run(args)
    except UserError as err:
        print(f"memsim: error: {one_line(err)}", file=sys.stderr)
        return 2
    except Terminated:
        print("memsim: terminated (SIGTERM); nothing half-written was left behind", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("memsim: interrupted; nothing half-written was left behind", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `memsim query ... | head`: the reader left; say nothing more
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (Python's own advice: the interpreter flushes it at exit)
        return 141
    except OSError as err:  # the machine refused (no space, no permission, read-only filesystem): one line too
        where = f" ({err.filename})" if err.filename else ""
        print(f"memsim: error: {one_line(err.strerror or err)}{where}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
