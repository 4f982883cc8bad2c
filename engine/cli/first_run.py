"""The first run of a command that evaluates configurations compiles memsim's numba kernels (about 30 s on two idle
cores, a minute on busy ones) and caches the machine code on disk; later runs load it in about a second. A command
says so on stderr, once, when the cache holds nothing for the kernel it is about to call: the wait is not silence."""

import sys

COMPILE_TIME = "30 s to a minute"  # explain's kernel, cold: 28 s on an idle two-core machine, 63 s of CPU on a busy one


def cold(kernel) -> bool:
    """Whether numba's on-disk cache holds no machine code for `kernel` (a cache=True njit function) that matches
    its source: the next call compiles. False when this cannot be known (NUMBA_DISABLE_JIT: nothing compiles)."""
    index = getattr(getattr(kernel, "_cache", None), "_cache_file", None)
    if index is None:
        return False
    try:
        return not index._load_index()  # {} when missing, of another numba version, or stale
    except Exception:  # noqa: BLE001 (an unreadable index is rebuilt: numba compiles)
        return True


def say_if_compiling(*kernels) -> bool:
    """One line on stderr when any of `kernels` will compile on its first call; True when it said so."""
    if not any(cold(k) for k in kernels):
        return False
    where = getattr(kernels[0]._cache, "_cache_path", "the numba cache")
    print(f"memsim: compiling the kernels (first run only, {COMPILE_TIME}; cached in {where})...",
          file=sys.stderr, flush=True)
    return True
