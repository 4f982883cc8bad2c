"""memsim: predict the per-GPU memory of a training job before it touches a GPU."""

import hashlib
import importlib.resources
import os
from pathlib import Path

__version__ = "0.1.0"

# numpy advises Linux to back every array of 4 MiB or more with transparent huge pages. Where THP's defrag setting
# is "madvise" (this two-core VM's, and Debian's default), the first touch of such an array waits on the kernel's
# compaction and gets no huge page anyway: the sweep's output buffers (72 MiB a set, three sets) took 71-163 ms to
# fill the first time against 33-42 ms without the advice, and the kernel's first pass over bench_sweep's 10^7 grid
# ran 16.0-19.0 M configurations/s against 27.8-31.4 (stop 46). NUMPY_MADVISE_HUGEPAGE is numpy's own switch, read
# when numpy is imported: a value the user set is kept, and a process that imported numpy before memsim keeps its
# advice.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

REPO_ROOT = Path(__file__).resolve().parent.parent


def _package_files(package: str, folder: str) -> Path:
    """The one lookup of memsim's files: the folder that the package-data package `package` is (setup.py installs
    the repository's `folder` as it). importlib.resources finds it beside the code in a regular install
    (site-packages/engine/_data) and, through setuptools' finder, in the checkout of an editable one. Only a
    folder of this installation counts: a checkout imported without being installed (PYTHONPATH, a Ray
    working_dir) reads its own folder, never one that another checkout's editable install maps the name to."""
    try:
        found = importlib.resources.files(package)
    except ModuleNotFoundError:
        return REPO_ROOT / folder
    if isinstance(found, Path) and found.resolve().is_relative_to(REPO_ROOT):  # on disk, in this installation
        return found.resolve()
    return REPO_ROOT / folder


DATA_DIR = _package_files("engine._data", "data")  # catalogs, golden and measured sets, sweep presets
QUERIES_DIR = _package_files("engine._queries", "queries")  # the named questions, one .sql each


def _compiled_sources_digest() -> str:
    """A digest of every file the compiled kernels are built from (numba's cache only watches the file of
    the jitted function itself, not the formulas it calls, so a stale kernel could outlive a formula edit)."""
    here = Path(__file__).resolve().parent
    inputs = ("vocabulary.py", "model_fields.py", "codes.py", "outputs.py")
    files = sorted(here.glob("model/*.py")) + [here / "inputs" / n for n in inputs]
    files += [here / "catalogs" / "conventions.py"]
    files += [DATA_DIR / "optimizers.toml", DATA_DIR / "frameworks.toml"]  # compile-time constants of the kernels
    digest = hashlib.sha256(f"inline-threshold={LLVM_INLINE_THRESHOLD}".encode())  # the code LLVM makes depends on it
    for f in files:
        if f.exists():
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


# LLVM's inlining threshold while numba compiles the kernels (its default at -O3 is 250). The step's phased peak
# is a hundred small formulas; inlined, they share their common terms and no call moves arguments. Eight paired runs
# of bench_sweep's 10^7 grid against the default, the Rank already passed as a record (sweep_kernel.RANK_RECORD):
# 1.78x at the median (ratios 1.26-2.27); the two together 1.76x against the kernel before either (six pairs; the
# machine's speed moves 2x between runs, so the separate medians do not multiply). A cold compile takes ~1.3x as
# long (107-119 s against 85-103 s, loaded). 500 gave 1.15x less than 1,000; 5,000 was slower than 1,000.
# numba has no per-function setting: the option holds for whatever this process compiles after memsim is imported.
LLVM_INLINE_THRESHOLD = 1000


def _configure_numba() -> None:
    """The kernels' cache directory, LLVM's inlining threshold (above), and the threading layer: numba's own
    workqueue rather than OpenMP, whose idle threads spin while the sweep's Parquet writer thread needs the same
    cores (measured: 1.8x the end-to-end rate of a sweep on 2 cores)."""
    import llvmlite.binding
    import numba

    llvmlite.binding.set_option("memsim", f"-inline-threshold={LLVM_INLINE_THRESHOLD}")
    if not os.environ.get("NUMBA_THREADING_LAYER"):
        numba.config.THREADING_LAYER = "workqueue"
    # A directory per digest of the kernels' sources, under NUMBA_CACHE_DIR where the user sets one: numba's own
    # index would load a kernel compiled before a formula in another file (or the inlining threshold) changed.
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    user_cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    base = Path(chosen) / "memsim" if chosen else user_cache / "memsim" / "numba"
    numba.config.CACHE_DIR = str(base / _compiled_sources_digest())

# engine.model calls _configure_numba() before it defines its first compiled function: `import engine` stays light,
# so the CLI's first heavy import (numpy, numba) happens where it can catch Ctrl-C (engine/cli/__init__.py).
