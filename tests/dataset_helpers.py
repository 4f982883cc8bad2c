"""Shared helpers of the tests that sweep a dataset (integrity, checksums, shards, object storage, Ray, SQL safety,
reports, recipes, hardening): specs swept quietly, the spec of 120 configurations most of them break, the one line
that every refusal is, and a part writer interrupted mid-shard."""

from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest

from engine.dataset.store import PartWriter
from engine.dataset.sweep import run_sweep

QUIET = {"progress": False, "say": lambda *_: None}

SMALL_AXES = """\
[axes]
model = ["llama-3.2-1b", "llama-3.1-8b"]
gpu = ["a100-sxm-80gb", "h100-sxm-80gb"]
n_gpus = [1, 2, 4, 8, 16]
zero_stage = [0, 3]
micro_batch = [1, 2, 4]
"""
SMALL_TOTAL = 2 * 2 * 5 * 2 * 3  # the configurations of small_spec: 120


def small_spec(title: str) -> str:
    """The spec of 120 configurations (2 models x 2 GPUs x ...) that the dataset tests sweep, under `title`."""
    return f'title = "{title}"\n\n{SMALL_AXES}'


def one_line_error(code: int, err: str) -> bool:
    return code == 2 and err.startswith("memsim: error: ") and err.count("\n") == 1 and "Traceback" not in err


def write_spec(folder: Path, text: str) -> Path:
    """The spec `text` written to folder/spec.toml."""
    path = folder / "spec.toml"
    path.write_text(text)
    return path


def sweep_in_shards(spec: Path, out: Path, n: int = 4, **options) -> Path:
    """The dataset `out` of `spec`, swept shard by shard (as a Slurm array would) in one process."""
    for k in range(n):
        run_sweep(spec, out, shard=(k, n), **QUIET, **options)
    return out


def swept(folder: Path, text: str, shards: int = 1) -> Path:
    """A dataset folder/ds of the spec `text` (written to folder/spec.toml), in `shards` shards."""
    return sweep_in_shards(write_spec(folder, text), folder / "ds", shards)


def sweep_rows(path) -> pl.DataFrame:
    """Every row of a dataset, categorical columns as strings, in index order."""
    frame = pl.read_parquet(Path(path) / "part-*.parquet")
    return frame.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String)).sort("index")


@contextmanager
def interrupted_after(chunks: int):
    """PartWriter.write writes `chunks` chunks of a part, then raises KeyboardInterrupt (Ctrl-C mid-shard), which
    the block must raise; yields the list of the rows of each chunk it was given."""
    write, calls = PartWriter.write, []

    def write_then_interrupt(self, table):
        calls.append(table.num_rows)
        if len(calls) > chunks:
            raise KeyboardInterrupt
        write(self, table)

    PartWriter.write = write_then_interrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            yield calls
    finally:
        PartWriter.write = write
