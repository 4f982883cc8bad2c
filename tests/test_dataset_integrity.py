"""Issue #13, datasets: no partial dataset read as whole, no data lost to a re-run, an interruption or a second
writer, no glob where a path was given, no writes from a query.

A 4-shard sweep of a small spec (120 configurations) is made fresh for each test that breaks one. The tests that
start memsim as a separate process (signals, two writers at once, a file-size limit standing in for a full
disk) are marked slow.
"""

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from engine.dataset.store import PartWriter
from engine.dataset.sweep import run_sweep
from engine.dataset.verify import verify_dataset
from tests.dataset_helpers import QUIET, interrupted_after, one_line_error, small_spec, sweep_in_shards, write_spec
from tests.dataset_helpers import SMALL_TOTAL as TOTAL

SPEC = small_spec("integrity test")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def spec(tmp_path) -> Path:
    return write_spec(tmp_path, SPEC)


@pytest.fixture
def four(spec, tmp_path) -> Path:
    return sweep_in_shards(spec, tmp_path / "ds")


def summary(memsim, out, *flags) -> tuple[int, dict | None, str]:
    code, text, err = memsim("query", "summary", "--sweep", out, "--format", "json", *flags)
    return code, (json.loads(text)[0] if code == 0 else None), err


def drop_shard(out: Path, k: int, n: int = 4) -> None:
    (out / f"part-{k:05d}-of-{n:05d}.parquet").unlink()
    (out / "_shards" / f"{k:05d}-of-{n:05d}.json").unlink()


def memsim_process(*argv, **popen) -> subprocess.Popen:
    """memsim in its own process, with SIGINT as a terminal delivers it (a background shell ignores it)."""
    def restore_sigint():
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    code = "import sys; from engine.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen([sys.executable, "-c", code, *map(str, argv)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=restore_sigint, **popen)


# --- 4. a partial dataset is never read as whole ------------------------------------------------------------

def test_a_dataset_with_a_shard_missing_is_refused_by_query_and_sql(memsim, four):
    drop_shard(four, 2)
    code, _, err = summary(memsim, four)
    assert one_line_error(code, err) and "incomplete" in err and "2/4" in err and "--partial" in err
    code, _, err = memsim("sql", "SELECT count(*) FROM sweep", "--sweep", four)
    assert one_line_error(code, err) and "incomplete" in err


def test_partial_answers_from_the_complete_shards_and_says_so(memsim, four):
    drop_shard(four, 2)
    code, row, err = summary(memsim, four, "--partial")
    assert code == 0 and row["configurations"] == TOTAL - TOTAL // 4
    assert err.startswith("memsim: note: PARTIAL") and "3 of 4 shards" in err and "2/4 (missing)" in err
    code, _, err = memsim("sql", "SELECT count(*) AS n FROM sweep", "--sweep", four, "--partial", "--format", "csv",
                            "-o", four.parent / "n.csv")
    assert code == 0 and "PARTIAL" in err and (four.parent / "n.csv").read_text() == f"n\n{TOTAL - TOTAL // 4}\n"


@pytest.mark.slow
def test_a_complete_dataset_has_no_partial_note(memsim, four):
    code, row, err = summary(memsim, four, "--partial")
    assert (code, err) == (0, "") and row["configurations"] == TOTAL


@pytest.mark.parametrize("damage", ["part only", *[pytest.param(d, marks=pytest.mark.slow) for d in
                                                   ("marker only", "truncated part", "marker of another digest")]])
def test_a_shard_the_markers_do_not_vouch_for_is_not_read(memsim, four, damage):
    part, marker = four / "part-00001-of-00004.parquet", four / "_shards" / "00001-of-00004.json"
    if damage == "marker only":
        part.unlink()
    elif damage == "part only":  # killed between publishing the part and writing its marker
        marker.unlink()
    elif damage == "truncated part":
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    else:
        marker.write_text(marker.read_text().replace('"spec_digest": "', '"spec_digest": "0'))
    code, _, err = summary(memsim, four)
    assert one_line_error(code, err) and "1/4" in err
    code, row, _ = summary(memsim, four, "--partial")
    assert code == 0 and row["configurations"] == TOTAL - 30


@pytest.fixture
def compact(spec, tmp_path) -> Path:
    compact_spec = write_spec(tmp_path, spec.read_text() + "\n[output]\ncompact = true\n")
    return sweep_in_shards(compact_spec, tmp_path / "compact", n=1)


@pytest.mark.parametrize("damage", [
    "model FROM sweep_parts; COPY (SELECT 42) TO '{target}'; SELECT 1 AS x",  # a column name that is SQL
    "stride=0", "labels=short"])
def test_a_compact_manifest_is_checked_before_its_axes_become_sql(memsim, compact, tmp_path, damage):
    """The view derives a compact sweep's axes from the manifest's index_axes: a name that is not an input, a stride
    out of range or labels that do not cover the radix are a damaged manifest, never SQL that runs."""
    manifest = json.loads((compact / "_memsim.json").read_text())
    axis = manifest["index_axes"][0]
    target = tmp_path / "written.csv"
    if damage == "stride=0":
        axis["stride"] = 0
    elif damage == "labels=short":
        axis["columns"][0][1] = axis["columns"][0][1][:-1]
    else:
        axis["columns"][0][0] = damage.format(target=target)
    (compact / "_memsim.json").write_text(json.dumps(manifest))
    for argv in (["query", "summary", "--sweep", compact], ["sql", "SELECT 1", "--sweep", compact]):
        code, _, err = memsim(*argv)
        assert one_line_error(code, err) and "damaged" in err, (argv, err)
    assert not target.exists()


def test_a_compact_sweep_never_joins_parts_that_store_their_axes(memsim, spec, compact):
    """Compact parts written before index_axes stored their axes: a dataset of those takes no new-layout shard."""
    manifest = json.loads((compact / "_memsim.json").read_text())
    del manifest["index_axes"]  # as an earlier memsim wrote it
    (compact / "_memsim.json").write_text(json.dumps(manifest))
    code, _, err = memsim("sweep", compact.parent / "spec.toml", "-o", compact, "--quiet")
    assert one_line_error(code, err) and "part layout" in err


def test_a_stray_part_of_another_layout_is_not_read(memsim, spec, four, tmp_path):
    other = sweep_in_shards(spec, tmp_path / "one", n=1)
    shutil.copy(other / "part-00000-of-00001.parquet", four)
    code, row, _ = summary(memsim, four)
    assert code == 0 and row["configurations"] == TOTAL  # not TOTAL twice


@pytest.mark.parametrize("damage", ['{"total": ', '["not", "an", "object"]', *[
    pytest.param(d, marks=pytest.mark.slow) for d in ('"total": 1e400', '"total": "120"', '"total": -5',
                                                      '"n_shards": 1e400', '"n_shards": 4.0', '"spec_digest": null')]])
def test_a_damaged_manifest_is_one_line_everywhere(memsim, spec, four, damage):
    manifest = four / "_memsim.json"
    if damage.startswith('"'):  # one field of a good manifest replaced
        key = damage.split(":")[0]
        manifest.write_text(re.sub(key + r": [^,\n]*", damage, manifest.read_text()))
        assert damage in manifest.read_text()
    else:
        manifest.write_text(damage)
    for argv in (["query", "summary", "--sweep", four], ["sql", "SELECT 1", "--sweep", four], ["verify", four],
                 ["sweep", spec, "--shard", "0/4", "-o", four, "--quiet"]):
        code, _, err = memsim(*argv)
        assert one_line_error(code, err) and "damaged" in err, (argv, err)


@pytest.mark.parametrize("table", [{"x": [1]}, pytest.param({"index": ["a", "b"]}, marks=pytest.mark.slow)])
def test_a_part_file_memsim_did_not_write_is_named_not_a_traceback(memsim, four, table):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(table), four / "part-00001-of-00004.parquet")
    code, report, err = memsim("verify", four)
    assert one_line_error(code, err) and "shard 1/4" in report and "no integer index column" in report
    assert "re-run:\nmemsim sweep" in report and "--valid-only" not in report
    code, _, err = summary(memsim, four)
    assert one_line_error(code, err) and "1/4" in err


@pytest.mark.slow
def test_the_report_of_a_partial_dataset_is_refused_or_carries_a_banner(memsim, four, tmp_path):
    drop_shard(four, 0)
    code, _, err = memsim("report", "--sweep", four, "-o", tmp_path / "r.html")
    assert one_line_error(code, err) and "--partial" in err and not (tmp_path / "r.html").exists()
    code, _, err = memsim("report", "--sweep", four, "-o", tmp_path / "r.html", "--partial")
    assert code == 0 and "PARTIAL" in err
    page = (tmp_path / "r.html").read_text()
    assert 'id="partial"' in page and "3 of 4 shards" in page


# --- 5. a re-run keeps the old part until the new one replaces it --------------------------------------------

def test_an_interrupted_rerun_of_a_complete_shard_loses_nothing(spec, four):
    before = pl.read_parquet(four / "part-00001-of-00004.parquet")
    with interrupted_after(chunks=1):
        run_sweep(spec, four, shard=(1, 4), chunk_rows=4, **QUIET)
    assert verify_dataset(four).ok
    assert pl.read_parquet(four / "part-00001-of-00004.parquet").equals(before)
    assert sorted(p.name for p in four.iterdir() if ".tmp" in p.name) == []


def test_a_rerun_that_fills_the_disk_keeps_the_old_part(memsim, spec, four, monkeypatch):
    import pyarrow.parquet as pq

    close = pq.ParquetWriter.close

    def full(self):  # the footer does not fit
        close(self)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "close", full)
    code, _, err = memsim("sweep", spec, "--shard", "3/4", "-o", four, "--quiet")
    monkeypatch.undo()
    assert one_line_error(code, err) and "No space left" in err
    assert verify_dataset(four).ok and not [p for p in four.iterdir() if ".tmp" in p.name]


# --- 6. two writers ------------------------------------------------------------------------------------------

def test_temporary_part_names_are_per_process(tmp_path):
    import pyarrow as pa

    writer = PartWriter(tmp_path, 0, 1, pa.schema([("index", pa.int64())]), {}, "lz4", [])
    try:
        assert str(os.getpid()) in writer.tmp.name and writer.tmp.name.startswith("part-00000-of-00001.parquet.tmp")
    finally:
        writer.abort()
    assert not list(tmp_path.iterdir())


def test_a_shard_another_process_is_writing_is_refused(memsim, spec, four):
    before = (four / "part-00002-of-00004.parquet").read_bytes()
    lock = four / "_shards" / "00002-of-00004.lock"
    with open(lock, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the other writer does; flock locks conflict across open files
        code, _, err = memsim("sweep", spec, "--shard", "2/4", "-o", four, "--quiet")
        assert one_line_error(code, err) and "being written by" in err
        code, _, _ = memsim("verify", four)
    assert (four / "part-00002-of-00004.parquet").read_bytes() == before
    assert code == 0  # a lock held is not a problem while nothing is half-written


def test_force_does_not_clear_a_dataset_while_a_shard_is_written(memsim, spec, four, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(SPEC.replace("micro_batch = [1, 2, 4]", "micro_batch = [1, 8]"))
    with open(four / "_shards" / "00000-of-00004.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, _, err = memsim("sweep", other, "-o", four, "--force", "--quiet")
    assert one_line_error(code, err) and "being written by" in err
    assert verify_dataset(four).ok


@pytest.mark.slow
def test_two_sweeps_of_different_specs_into_one_directory(spec, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(SPEC.replace("micro_batch = [1, 2, 4]", "micro_batch = [1, 8, 16]"))
    batches_of = {digest(spec): {1, 2, 4}, digest(other): {1, 8, 16}}
    for attempt in range(3):
        out = tmp_path / f"ds{attempt}"
        procs = [memsim_process("sweep", s, "-o", out, "--quiet") for s in (spec, other)]
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        for code, _, err in results:
            assert code == 0 or one_line_error(code, err), err
        assert any(code == 0 for code, _, _ in results)
        assert verify_dataset(out).ok
        # the published rows are those of the spec the manifest names (micro_batch tells the two apart)
        named = json.loads((out / "_memsim.json").read_text())["spec_digest"]
        assert set(pl.read_parquet(out / "part-00000-of-00001.parquet")["micro_batch"]) == batches_of[named]


@pytest.mark.slow
def test_two_sweeps_of_one_spec_at_once_never_share_a_file(tmp_path):
    spec = tmp_path / "big.toml"
    spec.write_text(SPEC + "seq_len = [512, 1024, 2048, 4096]\ntp = [1, 2, 4]\nlora_rank = [0, 8, 16, 64]\n"
                    "[output]\nrows_per_chunk = 4096\n")
    out = tmp_path / "ds"
    run_sweep(spec, out, **QUIET)  # the dataset exists: both runs join it, then race for its one shard
    for _ in range(3):
        procs = [memsim_process("sweep", spec, "-o", out, "--quiet") for _ in range(2)]
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        for code, _, err in results:
            assert code == 0 or (one_line_error(code, err) and "being written by" in err), err
        assert verify_dataset(out).ok and not [p for p in out.iterdir() if ".tmp" in p.name]


def digest(spec_path: Path) -> str:
    from engine.configure.grid import build_grid
    from engine.configure.spec import load_spec
    from engine.dataset.store import spec_digest

    return spec_digest(build_grid(load_spec(spec_path)))


# --- 8. the digest covers what a config.json path resolves to ------------------------------------------------

def test_a_config_json_edited_between_shards_makes_another_spec(memsim, tmp_path):
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    gpt2 = json.loads((REPO / "tests" / "fixtures" / "hf_configs" / "gpt2.json").read_text())
    config.write_text(json.dumps(gpt2))
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[axes]\nmodel = ["{config}"]\nseq_len = [256, 512, 1024]\nmicro_batch = [1, 2]\n')
    assert memsim("sweep", spec, "--shard", "0/2", "-o", tmp_path / "ds", "--quiet")[0] == 0
    config.write_text(json.dumps({**gpt2, "n_layer": gpt2["n_layer"] * 2}))
    code, _, err = memsim("sweep", spec, "--shard", "1/2", "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and "another spec" in err
    assert not (tmp_path / "ds" / "part-00001-of-00002.parquet").exists()


# --- 9. paths are literal; SIGTERM is an interruption ---------------------------------------------------------

@pytest.mark.parametrize("name", ["ds*", pytest.param("ds[12]", marks=pytest.mark.slow),
                                  pytest.param("ds?", marks=pytest.mark.slow)])
def test_a_sweep_path_with_glob_characters_is_read_literally(memsim, spec, tmp_path, name):
    sweep_in_shards(spec, tmp_path / name, n=1)
    for neighbour in ("ds1", "dsx"):  # what the name would match as a pattern
        sweep_in_shards(spec, tmp_path / neighbour, n=2)
    code, row, err = summary(memsim, tmp_path / name)
    assert code == 0 and row["configurations"] == TOTAL, err
    code, out, _ = memsim("sql", "SELECT count(*) AS n FROM sweep", "--sweep", tmp_path / name, "--read-only",
                          "--format", "csv")
    assert code == 0 and out == f"n\n{TOTAL}\n"


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_write_leaves_no_temporary(tmp_path, sig, code):
    spec = tmp_path / "big.toml"
    spec.write_text(SPEC + "seq_len = [512, 1024, 2048, 4096]\ntp = [1, 2, 4]\npp = [1, 2]\ncheckpointing = "
                    '["none", "selective", "full"]\nlora_rank = [0, 8, 16, 64]\nprecision = ["bf16", "amp_bf16", "fp32"]\n'
                    "attention = [\"eager\", \"sdpa_math\", \"flash\"]\ngrad_accum = [1, 2, 4, 8]\n"  # 2.5M rows: seconds
                    "[output]\nrows_per_chunk = 2048\n")
    out = tmp_path / "ds"
    proc = memsim_process("sweep", spec, "-o", out, "--quiet")
    deadline = time.monotonic() + 120
    while not list(out.glob("part-*.tmp*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the sweep finished before it could be stopped: make the spec larger"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and err.count("\n") == 1 and "nothing half-written" in err, err
    assert not list(out.glob("part-*")) and not list(out.glob("_shards/*.json"))


@pytest.mark.slow
def test_a_killed_writer_leaves_a_temporary_that_verify_names_and_the_rerun_removes(memsim, tmp_path):
    spec = tmp_path / "big.toml"
    spec.write_text(SPEC + "seq_len = [512, 1024, 2048, 4096]\ntp = [1, 2, 4]\npp = [1, 2]\nlora_rank = [0, 8, 16, 64]\n"
                    "[output]\nrows_per_chunk = 512\n")
    out = tmp_path / "ds"
    proc = memsim_process("sweep", spec, "-o", out, "--quiet")
    while not list(out.glob("part-*.tmp*")) and proc.poll() is None:
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    code, report, _ = memsim("verify", out)
    assert code == 2 and "was killed mid-write" in report
    assert memsim("sweep", spec, "-o", out, "--quiet")[0] == 0
    assert memsim("verify", out)[0] == 0 and not list(out.glob("*.tmp*"))


# --- read-only SQL --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sql", ["COPY (SELECT 1) TO '{part}' (USE_TMP_FILE false)", "ATTACH '{dir}/x.db' AS x",
                                 "EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{part}' (FORMAT parquet, USE_TMP_FILE false)",
                                 *[pytest.param(sql, marks=pytest.mark.slow) for sql in (
                                     ("/* a comment */ explain -- and another\n analyse COPY (SELECT 1 AS x) TO '{part}' "
                                      "(FORMAT parquet, USE_TMP_FILE false)"),
                                     "EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 1) TO '{dir}/x.csv' (USE_TMP_FILE false)",
                                     "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
                                     "COPY (SELECT 1) TO '{dir}/x.csv'", "INSTALL httpfs", "LOAD httpfs",
                                     "SELECT * FROM read_csv('/etc/passwd')", "SET enable_external_access = true",
                                     "CREATE TABLE t AS SELECT 1", "SELECT 1; COPY (SELECT 1) TO '{dir}/x.csv'",
                                     "PRAGMA enable_profiling")]])
def test_read_only_sql_writes_nothing_attaches_nothing_installs_nothing(memsim, four, sql):
    part = four / "part-00000-of-00004.parquet"
    before = part.read_bytes()
    code, _, err = memsim("sql", sql.format(dir=four, part=part), "--sweep", four, "--read-only")
    assert one_line_error(code, err)
    assert not (four / "x.csv").exists() and not (four / "x.db").exists() and part.read_bytes() == before


def test_read_only_sql_still_answers(memsim, four):
    code, out, _ = memsim("sql", "SELECT count(*) AS n FROM sweep JOIN gpus USING (gpu)", "--sweep", four,
                          "--read-only", "--format", "csv")
    assert (code, out) == (0, f"n\n{TOTAL}\n")
    for explain in ("EXPLAIN SELECT count(*) FROM sweep", "EXPLAIN ANALYZE SELECT count(*) FROM sweep"):
        assert memsim("sql", explain, "--sweep", four, "--read-only")[0] == 0


def test_named_queries_run_read_only(memsim, four, tmp_path, monkeypatch):
    from engine.ask import queries

    evil = tmp_path / "queries"
    evil.mkdir()
    (evil / "evil.sql").write_text(f"-- A query file someone edited.\n-- params: none\n-- returns: nothing\n"
                                   f"COPY (SELECT * FROM sweep) TO '{tmp_path}/stolen.csv';\n")
    monkeypatch.setattr(queries, "QUERIES_DIR", evil)
    code, _, err = memsim("query", "evil", "--sweep", four)
    assert one_line_error(code, err) and not (tmp_path / "stolen.csv").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_inside_a_duckdb_query_is_one_line(tmp_path, sig, code):
    slow = "SELECT count(*) FROM range(3000000) a(x), range(3000000) b(y) WHERE (x * y) % 7 = 3"
    proc = memsim_process("sql", slow)
    time.sleep(4)  # imports, then well inside the query
    assert proc.poll() is None
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    finally:  # a query the signal did not stop would run on for an hour on every core
        proc.kill()
    assert proc.returncode == code and err.count("\n") == 1 and "Traceback" not in err, err
    assert time.monotonic() - t0 < 10
