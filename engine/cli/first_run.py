"""The first run of a command that evaluates many configurations compiles memsim's numba kernels and caches the
machine code on disk; later runs load it in under a second. A few configurations never wait for a compiler: they
run the scalar reference in Python (engine/model/kernel.py). A command says on stderr, once, when a kernel is about
to compile, with the time it takes: the wait is not silence."""

import logging
import sys


class Stderr(logging.Handler):
    """Each notice as one line on whichever stream is sys.stderr when it is said."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"memsim: {record.getMessage()}", file=sys.stderr, flush=True)


def show_notices() -> None:
    """Print what the engine's `memsim` logger says (a compile about to start) on stderr, as `memsim: ...`."""
    log = logging.getLogger("memsim")
    if not any(isinstance(h, Stderr) for h in log.handlers):
        log.addHandler(Stderr())
        log.setLevel(logging.WARNING)
