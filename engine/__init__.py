"""memsim: predict the per-GPU memory of a training job before it touches a GPU."""

from pathlib import Path

__version__ = "0.1.0"

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
QUERIES_DIR = REPO_ROOT / "queries"
