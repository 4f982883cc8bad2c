"""Locks of a dataset directory: one writer per shard, one process at a time checking and writing the manifest.

An flock on a `.lock` file beside what it guards; the file holds the holder's pid and host, so a refusal names it.
A filesystem without flock (some network mounts; an object store has no locks at all) runs the block unlocked.
"""

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from engine.errors import UserError


def lock_path(out_dir: Path, shard: int, n_shards: int) -> Path:
    return out_dir / "_shards" / f"{shard:05d}-of-{n_shards:05d}.lock"


# --- locks ---------------------------------------------------------------------------------------------------


class Busy(UserError):
    """Another process holds the lock."""


@contextlib.contextmanager
def locked(path: Path, what: str, wait: bool = False):
    """An exclusive flock on `path` for the block; Busy (one line, naming the holder) when another process holds
    it and `wait` is false."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise UserError(f"cannot create the lock {path}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise Busy(f"{what} is being written by {holder}; wait for it to finish (or stop it), then run again") from None
        except OSError:
            yield  # no flock here: nothing to hold
            return
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"memsim pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the flock


def shard_lock(out_dir: Path, shard: int, n_shards: int):
    return locked(lock_path(out_dir, shard, n_shards), f"shard {shard}/{n_shards} of {out_dir}")
