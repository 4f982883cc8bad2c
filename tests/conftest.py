"""Shared fixtures: one tiny sweep dataset per test session, built from a small spec in a tmp dir.

3 models x 3 GPUs (one without a catalog price) x GPU counts x TP x PP x ZeRO x micro-batch x sequence x
recompute x LoRA rank x attention = 9,216 configurations, a quarter of them invalid layouts (n_gpus is not
dp * tp * pp). Attention is an axis that no query groups by, so "the best value of the other axes" is exercised. Tests work out their expected answers from `sweep_frame` (the Parquet read by polars), never
by running the SQL under test.
"""

import polars as pl
import pytest

# The modules of the torch tier (all slow) import torch and transformers as they are collected, seconds each:
# the fast tier (pytest -m "not slow") does not collect them at all.
TORCH_TIER = {"test_measure.py", "test_measure_parallel.py", "test_measure_recipes.py", "test_hf_models.py"}


def pytest_sessionstart(session):
    """A cold numba cache (a first run, or any edit of engine/model) makes the first tests that evaluate wait
    minutes for the compiler, with nothing on the screen: say so before they start."""
    from engine.model.kernel import KERNEL_COMPILE_SECONDS, cold
    from engine.model.sweep_kernel import sweep_chunk

    if not cold(sweep_chunk):
        return
    where = getattr(getattr(sweep_chunk, "_cache", None), "_cache_path", "the numba cache")
    line = (f"memsim: compiling the kernel (first run, ~{KERNEL_COMPILE_SECONDS:.0f} s on two idle cores, twice that "
            f"on a busy machine; cached in {where} for the next run)...")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line, flush=True)
    options = session.config.option
    if not hasattr(session.config, "workerinput") and options.markexpr != "not slow" and not options.collectonly:
        compile_before_the_workers()


def compile_before_the_workers() -> None:
    """The whole suite (not the fast tier, which never compiles): the cold kernel compiled once, in one process
    (tests/compile_kernels.py), before xdist's workers start."""
    import subprocess
    import sys
    from pathlib import Path

    subprocess.run([sys.executable, str(Path(__file__).with_name("compile_kernels.py"))], check=False)


def pytest_ignore_collect(collection_path, config):
    if collection_path.name in TORCH_TIER and config.getoption("markexpr") == "not slow":
        return True
    return None


TINY_SPEC = """\
title = "memsim test sweep: 3 models x 3 GPUs"

[axes]
model = ["llama-3.2-1b", "llama-3.1-8b", "qwen2.5-14b"]
gpu = ["a10", "a100-sxm-80gb", "h100-sxm-80gb"]
n_gpus = [1, 2, 4, 8]
tp = [1, 2]
pp = [1, 2]
zero_stage = [0, 3]
micro_batch = [1, 4]
seq_len = [1024, 4096]
checkpointing = ["none", "full"]
lora_rank = [0, 16]
attention = ["flash", "eager"]
"""


@pytest.fixture(scope="session")
def sweep_spec(tmp_path_factory):
    """Path to the tiny sweep spec (TOML)."""
    path = tmp_path_factory.mktemp("spec") / "tiny.toml"
    path.write_text(TINY_SPEC)
    return path


@pytest.fixture(scope="session")
def sweep_dir(sweep_spec, tmp_path_factory):
    """A complete sweep dataset directory of the tiny spec (one shard)."""
    from engine.dataset.sweep import run_sweep

    out = tmp_path_factory.mktemp("sweep") / "tiny"
    run_sweep(sweep_spec, out, progress=False, say=lambda *_: None)
    return out


@pytest.fixture(scope="session")
def sweep_frame(sweep_dir) -> pl.DataFrame:
    """Every row of the tiny sweep as polars reads the Parquet: categorical columns as plain strings."""
    frame = pl.read_parquet(sweep_dir / "part-*.parquet")
    return frame.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String))


@pytest.fixture
def sweep_con(sweep_dir):
    """A fresh DuckDB connection with the views sweep, models and gpus over the tiny sweep."""
    from engine.dataset.views import connect

    con = connect(sweep_dir)
    yield con
    con.close()


@pytest.fixture
def memsim(capsys):
    """Run the CLI in-process: memsim("query", "--list") -> (exit code, stdout, stderr)."""
    from engine.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run
