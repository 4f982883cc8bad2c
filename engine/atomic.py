"""Atomic file writes: write a temporary sibling, then rename over the target (POSIX rename is atomic).

A crash, a full disk or Ctrl-C leaves either the old file or the new one, never half of one.
"""

import os
import socket
from collections.abc import Callable
from pathlib import Path

from engine.errors import UserError


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call write(tmp) for a temporary path beside `path`, then move it into place."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")  # unique on a shared filesystem
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text))
