"""Atomic file writes: write a temporary sibling, then rename over the target (POSIX rename is atomic).

A crash, a full disk or Ctrl-C leaves either the old file or the new one, never half of one. An output is a
regular file: a path that names a device, a FIFO, a socket or a directory is refused (as root, renaming over
/dev/full would replace the device), and a symbolic link is followed, so its target is written and the link
stays a link.
"""

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

from engine.errors import UserError


def temp_name(path: Path) -> Path:
    """A temporary sibling of `path` that no other process picks: host and process id in its name."""
    return path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def output_path(path: str | Path, what: str = "output") -> Path:
    """The regular file an output named `path` is written to (a symlink's target); a path that cannot name one
    is one line: empty, a directory, a device, a FIFO or a socket."""
    if path is None or not str(path).strip():
        raise UserError(f"the {what} path is empty: name a file (-o FILE)")
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))  # write what the link points to; the link itself stays
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{path} is a directory: name a file to write (-o DIR/NAME)")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise UserError(f"{path} is {kind}, not a regular file: memsim writes its outputs to regular files only")
    return target


def make_parent(path: Path, shown: str | Path | None = None) -> None:
    """Create the folder `path` goes in; a parent that cannot be made (a file on the way, no permission) is one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create the folder of {shown or path}: {err.strerror or err} ({err.filename or path.parent})") from None


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call write(tmp) for a temporary path beside `path`, then move it into place; returns the path written."""
    target = output_path(path)
    make_parent(target, path)
    tmp = temp_name(target)  # unique on a shared filesystem
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or str(err).splitlines()[0]}; nothing was written") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text))
