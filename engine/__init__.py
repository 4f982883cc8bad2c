"""memsim: predict the per-GPU memory of a training job before it touches a GPU."""

import hashlib
import os
from pathlib import Path

__version__ = "0.1.0"

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
QUERIES_DIR = REPO_ROOT / "queries"


def _compiled_sources_digest() -> str:
    """A digest of every file the compiled kernels are built from (numba's cache only watches the file of
    the jitted function itself, not the formulas it calls, so a stale kernel could outlive a formula edit)."""
    here = Path(__file__).resolve().parent
    files = sorted(here.glob("model/*.py")) + [here / "inputs" / n for n in ("vocabulary.py", "model_fields.py", "codes.py")]
    files += [DATA_DIR / "optimizers.toml", DATA_DIR / "frameworks.toml"]  # compile-time constants of the kernels
    digest = hashlib.sha256()
    for f in files:
        if f.exists():
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def _configure_numba() -> None:
    """The kernels' cache directory, and the threading layer: numba's own workqueue rather than OpenMP, whose
    idle threads spin while the sweep's Parquet writer thread needs the same cores (measured: 1.8x the
    end-to-end rate of a sweep on 2 cores)."""
    import numba

    if not os.environ.get("NUMBA_THREADING_LAYER"):
        numba.config.THREADING_LAYER = "workqueue"
    if os.environ.get("NUMBA_CACHE_DIR"):
        return

    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "memsim" / "numba"
    numba.config.CACHE_DIR = str(base / _compiled_sources_digest())


_configure_numba()
