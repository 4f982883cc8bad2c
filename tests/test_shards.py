"""Sharded sweeps, `memsim verify` and the Ray backend: the same rows however a sweep is split or run, and a
dataset that says exactly what is missing.

One spec of 3,888 configurations (3 models x 3 GPUs x ...), swept once in one process and once in 4 shards
by hand (module fixtures); each test copies a dataset before it breaks it. Ray starts once for the module,
local, 2 CPUs, and only for the tests that need it; they skip when ray cannot be imported.
"""

import os
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from engine.dataset.shards import plan_shards, sweep_shard
from engine.dataset.sweep import run_sweep, shard_range
from engine.dataset.verify import verify_dataset
from tests.dataset_helpers import QUIET, interrupted_after, sweep_in_shards, sweep_rows, write_spec

SPEC = """\
title = "memsim shard test: 3,888 configurations"

[axes]
model = ["llama-3.2-1b", "llama-3.1-8b", "qwen2.5-14b"]
gpu = ["rtx-4090", "a100-sxm-80gb", "h100-sxm-80gb"]
n_gpus = [1, 4, 16]
tp = [1, 2, 4]
pp = [1, 2]
zero_stage = [0, 1, 3]
micro_batch = [1, 4]
seq_len = [1024, 4096]
lora_rank = [0, 16]
"""
TOTAL = 3 * 3 * 3 * 3 * 2 * 3 * 2 * 2 * 2


def count_rows(path) -> tuple[int, int]:
    pattern = str(Path(path) / "part-*.parquet")
    with duckdb.connect() as con:
        return con.execute(f"SELECT count(*), count(DISTINCT index) FROM read_parquet('{pattern}')").fetchone()


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    return write_spec(tmp_path_factory.mktemp("shards"), SPEC)


@pytest.fixture(scope="module")
def other_spec(spec) -> Path:
    path = spec.with_name("other.toml")
    path.write_text(SPEC.replace("lora_rank = [0, 16]", "lora_rank = [0, 8]"))
    return path


@pytest.fixture(scope="module")
def whole(spec, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "ds"
    run_sweep(spec, out, **QUIET)
    return out


@pytest.fixture(scope="module")
def four(spec, tmp_path_factory) -> Path:
    return sweep_in_shards(spec, tmp_path_factory.mktemp("four") / "ds")


@pytest.fixture
def copy_of_four(four, tmp_path) -> Path:
    return Path(shutil.copytree(four, tmp_path / "ds"))


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


# --- the same rows however the sweep runs ---------------------------------------------------------------------

def test_four_shards_by_hand_give_the_rows_of_one_process(whole, four):
    assert_frame_equal(sweep_rows(four), sweep_rows(whole))
    assert count_rows(four) == (TOTAL, TOTAL)


@pytest.mark.slow
def test_ray_gives_the_rows_of_one_process(ray_cluster, spec, whole, tmp_path):
    from engine.dataset.ray_backend import run_ray

    result = run_ray(spec, tmp_path / "ray", n_shards=4, say=lambda *_: None)
    assert (result.n_shards, result.evaluated, result.written) == (4, TOTAL, TOTAL)
    assert verify_dataset(tmp_path / "ray").ok
    assert_frame_equal(sweep_rows(tmp_path / "ray"), sweep_rows(whole))


@pytest.mark.slow
def test_ray_writes_to_a_file_uri_through_the_cli(ray_cluster, memsim, spec, whole, tmp_path):
    code, out, err = memsim("sweep", spec, "--engine", "ray", "--shards", "3", "-o", f"file://{tmp_path}/uri")
    assert code == 0, err
    assert out.count("done on node") == 3  # a line per finished shard
    assert memsim("verify", f"file://{tmp_path}/uri")[0] == 0
    assert_frame_equal(sweep_rows(tmp_path / "uri"), sweep_rows(whole))


@pytest.mark.slow
def test_ray_retries_a_shard_whose_worker_died(ray_cluster, spec, whole, tmp_path):
    from engine.dataset.ray_backend import run_ray

    flags = tmp_path / "flags"
    flags.mkdir()

    def crash_first_attempt_of_shard_1(shard):  # runs in the worker
        flag = flags / str(shard[0])
        if shard[0] == 1 and not flag.exists():
            flag.touch()
            os._exit(1)

    lines = []
    run_ray(spec, tmp_path / "ray", n_shards=4, max_retries=2, before=crash_first_attempt_of_shard_1, say=lines.append)
    assert (flags / "1").exists()
    assert sum("done on node" in line for line in lines) == 4
    assert_frame_equal(sweep_rows(tmp_path / "ray"), sweep_rows(whole))


def test_publishing_through_pyarrow_fs_gives_the_rows_of_one_process(spec, whole, tmp_path):
    # The object-store path (the part streamed to a temporary through pyarrow.fs, moved to its name, then its
    # marker), exercised against a local filesystem.
    for k in range(4):
        sweep_shard(spec, tmp_path / "staged", shard=(k, 4), through_fs=True, **QUIET)
    assert verify_dataset(tmp_path / "staged").ok
    assert not list((tmp_path / "staged").glob("*.tmp*"))
    assert_frame_equal(sweep_rows(tmp_path / "staged"), sweep_rows(whole))


def test_the_local_engine_writes_to_a_file_uri(memsim, spec, whole, tmp_path):
    for k in range(2):
        assert memsim("sweep", spec, "--shard", f"{k}/2", "-o", f"file://{tmp_path}/uri", "--quiet")[0] == 0
    assert memsim("verify", tmp_path / "uri")[0] == 0
    assert_frame_equal(sweep_rows(tmp_path / "uri"), sweep_rows(whole))


def test_feasible_only_shards_verify_as_a_subset(spec, whole, tmp_path):
    sweep_in_shards(spec, tmp_path / "feasible", feasible_only=True)
    v = verify_dataset(tmp_path / "feasible")
    assert v.ok and v.keep == "feasible"
    want = sweep_rows(whole).filter(pl.col("fits") & pl.col("valid"))
    assert_frame_equal(sweep_rows(tmp_path / "feasible"), want)


# --- a killed shard -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_killed_shard_leaves_nothing_and_its_rerun_completes_the_dataset(spec, tmp_path, memsim):
    out = tmp_path / "ds"
    for k in (0, 2, 3):
        run_sweep(spec, out, shard=(k, 4), **QUIET)
    with interrupted_after(chunks=1) as calls:
        run_sweep(spec, out, shard=(1, 4), chunk_rows=500, **QUIET)
    assert calls == [500, 472]
    assert not list(out.glob("part-00001-*"))  # neither the part nor its .tmp
    code, report, _ = memsim("verify", out)
    assert code == 2
    assert "shard 1/4 [972, 1,944): missing" in report
    assert f"memsim sweep {out / '_spec.toml'} --shard 1/4 -o {out}" in report

    assert memsim("sweep", out / "_spec.toml", "--shard", "1/4", "-o", out, "--quiet")[0] == 0  # the printed re-run line
    code, report, _ = memsim("verify", out)
    assert code == 0 and report.startswith("OK")
    assert count_rows(out) == (TOTAL, TOTAL)


# --- verify catches what is wrong -----------------------------------------------------------------------------

def test_verify_passes_a_complete_dataset(memsim, four):
    code, out, err = memsim("verify", four)
    assert (code, err) == (0, "")
    assert out.startswith(f"OK: {four}: 4 of 4 shards complete, {TOTAL:,} rows")


def test_verify_catches_a_missing_shard(memsim, copy_of_four):
    (copy_of_four / "part-00002-of-00004.parquet").unlink()
    (copy_of_four / "_shards" / "00002-of-00004.json").unlink()
    code, out, err = memsim("verify", copy_of_four)
    assert code == 2
    assert "shard 2/4 [1,944, 2,916): missing" in out
    assert out.splitlines()[-1] == f"memsim sweep {copy_of_four / '_spec.toml'} --shard 2/4 -o {copy_of_four}"
    assert err.count("\n") == 1 and "1 shard(s) to re-run" in err


def test_verify_catches_a_leftover_tmp(memsim, copy_of_four):
    # A shard killed hard (SIGKILL, node lost) while writing: its .tmp stays, its part and marker do not.
    part = copy_of_four / "part-00003-of-00004.parquet"
    part.rename(part.with_name(part.name + ".tmp"))
    (copy_of_four / "_shards" / "00003-of-00004.json").unlink()
    code, out, _ = memsim("verify", copy_of_four)
    assert code == 2
    assert "shard 3/4 [2,916, 3,888): part-00003-of-00004.parquet.tmp is half-written" in out
    assert f"--shard 3/4 -o {copy_of_four}" in out


def test_verify_catches_a_truncated_part(memsim, copy_of_four):
    part = copy_of_four / "part-00001-of-00004.parquet"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    code, out, _ = memsim("verify", copy_of_four)
    assert code == 2
    assert "shard 1/4 [972, 1,944): the part file is unreadable (truncated or corrupt)" in out


def test_verify_catches_a_part_without_marker(memsim, copy_of_four):
    (copy_of_four / "_shards" / "00000-of-00004.json").unlink()
    code, out, _ = memsim("verify", copy_of_four)
    assert code == 2 and "has no completion marker" in out


def test_verify_catches_a_marker_whose_rows_disagree(copy_of_four):
    marker = copy_of_four / "_shards" / "00000-of-00004.json"
    marker.write_text(marker.read_text().replace('"rows": 972', '"rows": 1000'))
    v = verify_dataset(copy_of_four)
    assert v.rerun == [0]
    assert "972 rows, its marker says 1000" in v.shards[0].problems[0]


def test_verify_catches_a_shard_of_another_spec(memsim, copy_of_four, other_spec, tmp_path):
    other = sweep_in_shards(other_spec, tmp_path / "other")
    for name in ("part-00001-of-00004.parquet", "_shards/00001-of-00004.json"):
        shutil.copy(other / name, copy_of_four / name)
    code, out, _ = memsim("verify", copy_of_four)
    assert code == 2
    assert "shard 1/4" in out and "a shard of another spec" in out


def test_verify_catches_a_part_of_another_layout(memsim, copy_of_four, whole):
    # part-00000-of-00001 would be read by every query over part-*.parquet: its rows would count twice.
    shutil.copy(whole / "part-00000-of-00001.parquet", copy_of_four)
    code, out, err = memsim("verify", copy_of_four)
    assert code == 2
    assert "part-00000-of-00001.parquet: not a file of this 4-shard dataset" in out
    assert "1 stray file(s)" in err


def test_verify_of_a_directory_without_manifest_is_one_line(memsim, tmp_path):
    code, out, err = memsim("verify", tmp_path)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "not a memsim sweep dataset" in err


# --- plan -----------------------------------------------------------------------------------------------------

def test_plan_prints_ranges_sizes_and_a_slurm_array(memsim, spec, four):
    code, out, err = memsim("sweep", spec, "--plan", "4")
    assert (code, err) == (0, "")
    for k in range(4):
        lo, hi = shard_range(TOTAL, k, 4)
        assert f"{k}/4" in out and f"[{lo:,}, {hi:,})" in out
    assert "#SBATCH --array=0-3" in out
    assert "--shard ${SLURM_ARRAY_TASK_ID}/4 -o DIR" in out


def test_plan_expects_about_the_bytes_a_sweep_writes(spec, four):
    _, _, plans = plan_shards(spec, 4)
    written = sum(p.stat().st_size for p in four.glob("part-*.parquet"))
    assert 0.5 < sum(p.bytes for p in plans) / written < 2


# --- bad input: one line, exit 2 ------------------------------------------------------------------------------

@pytest.mark.parametrize("shard, says", [("4/4", "out of range"), ("x", "takes K/N"), ("1/0", "out of range"),
                                          ("-1/4", "out of range")])
def test_a_bad_shard_is_one_line(memsim, spec, tmp_path, shard, says):
    code, out, err = memsim("sweep", spec, f"--shard={shard}", "-o", tmp_path / "ds")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and says in err
    assert not (tmp_path / "ds").exists()


def test_shards_of_two_specs_in_one_dataset_are_refused(memsim, spec, other_spec, tmp_path):
    assert memsim("sweep", spec, "--shard", "0/4", "-o", tmp_path / "ds", "--quiet")[0] == 0
    code, out, err = memsim("sweep", other_spec, "--shard", "1/4", "-o", tmp_path / "ds", "--quiet")
    assert code == 2
    assert err.count("\n") == 1 and "another spec" in err
    assert not (tmp_path / "ds" / "part-00001-of-00004.parquet").exists()


def test_a_different_shard_count_in_one_dataset_is_refused(memsim, spec, four, tmp_path):
    out = shutil.copytree(four, tmp_path / "ds")
    code, _, err = memsim("sweep", spec, "--shard", "1/8", "-o", out, "--quiet")
    assert code == 2 and "shard count" in err


@pytest.mark.slow
def test_an_unreachable_ray_address_is_one_line(memsim, spec, tmp_path):
    pytest.importorskip("ray")
    code, out, err = memsim("sweep", spec, "--engine", "ray", "--address", "127.0.0.1:1", "-o", tmp_path / "ds")
    assert code == 2
    assert err.count("\n") == 1 and "cannot reach a Ray cluster at 127.0.0.1:1" in err


def test_the_ray_engine_without_ray_says_how_to_install_it(memsim, spec, tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # `import ray` raises ImportError
    code, _, err = memsim("sweep", spec, "--engine", "ray", "-o", tmp_path / "ds")
    assert code == 2
    assert err.count("\n") == 1 and "pip install 'memsim[ray]'" in err


@pytest.mark.parametrize("argv, says", [(["--shards", "4"], "go with --engine ray"),
                                        (["--engine", "ray", "--shard", "1/4"], "--shards N"),
                                        ([], "needs -o")])
def test_mismatched_sweep_options_are_one_line(memsim, spec, tmp_path, argv, says):
    out = [] if not argv else ["-o", tmp_path / "ds"]
    code, _, err = memsim("sweep", spec, *argv, *out)
    assert code == 2 and err.count("\n") == 1 and says in err
