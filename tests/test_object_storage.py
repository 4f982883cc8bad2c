"""Issue #25: a dataset in an S3 bucket is swept, verified, queried and reported on exactly as a local one.

A real S3-compatible server (moto's server mode, tests/s3_server.py) on a loopback port, reached only through the
standard AWS_* variables; memsim opens `s3://` URIs through pyarrow's filesystems and DuckDB reads the parts
through Arrow. One small spec (120 configurations) is swept once locally and once into the bucket in 2 shards.
"""

import json
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pytest

from tests.dataset_helpers import QUIET, interrupted_after, one_line_error, small_spec, sweep_in_shards, write_spec
from tests.dataset_helpers import SMALL_TOTAL as TOTAL
from tests.s3_server import s3, s3_fs  # noqa: F401 (the fixture)

SPEC = small_spec("object storage test")
COUNT = "SELECT count(*) AS n, count(DISTINCT index) AS distinct_index, sum(device_peak_bytes) AS bytes FROM sweep"


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    return write_spec(tmp_path_factory.mktemp("s3spec"), SPEC)


@pytest.fixture(scope="module")
def local(spec, tmp_path_factory) -> Path:
    return sweep_in_shards(spec, tmp_path_factory.mktemp("s3local") / "ds", n=2)


def sweep_to_bucket(memsim, spec, uri: str, n: int = 2) -> str:
    for k in range(n):
        code, _, err = memsim("sweep", spec, "--shard", f"{k}/{n}", "-o", uri, "--quiet")
        assert code == 0, err
    return uri


@pytest.fixture(scope="module")
def bucket_dataset(s3, spec):  # noqa: F811 (the fixture imported above)
    from engine.cli import main

    uri = s3.uri("sweeps/two-shards")
    for k in range(2):
        assert main(["sweep", str(spec), "--shard", f"{k}/2", "-o", uri, "--quiet"]) == 0
    return uri


def objects(prefix: str) -> list[str]:
    infos = s3_fs().get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return sorted(i.path.removeprefix(prefix + "/") for i in infos if i.type == pafs.FileType.File)


def test_a_sweep_into_a_bucket_writes_the_local_layout(bucket_dataset, local):
    assert objects("memsim-test/sweeps/two-shards") == sorted(
        p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and p.suffix != ".lock")


def test_verify_passes_a_dataset_in_a_bucket(memsim, bucket_dataset):
    code, out, err = memsim("verify", bucket_dataset)
    assert code == 0, err
    assert out.startswith(f"OK: {bucket_dataset}: 2 of 2 shards complete, {TOTAL} rows")


def test_sql_over_a_bucket_answers_as_over_the_local_dataset(memsim, bucket_dataset, local):
    answers = [memsim("sql", COUNT, "--sweep", where, "--format", "json") for where in (bucket_dataset, local)]
    assert answers[0][0] == 0 and answers[0][1] == answers[1][1], answers
    assert json.loads(answers[0][1])[0]["n"] == TOTAL


def test_a_named_query_over_a_bucket_answers_as_over_the_local_dataset(memsim, bucket_dataset, local):
    argv = ["query", "min_gpus", "--format", "csv"]
    remote, here = memsim(*argv, "--sweep", bucket_dataset), memsim(*argv, "--sweep", local)
    assert remote[0] == 0 and remote[1] == here[1] and remote[1].count("\n") > 1


@pytest.mark.slow
def test_a_report_is_built_straight_from_a_bucket(memsim, bucket_dataset, tmp_path):
    code, _, err = memsim("report", "--sweep", bucket_dataset, "-o", tmp_path / "r.html")
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "object storage test" in page and "llama-3.1-8b" in page


def test_a_part_edited_in_the_bucket_is_refused_by_verify_and_sql(memsim, s3, spec):  # noqa: F811
    uri = sweep_to_bucket(memsim, spec, s3.uri("sweeps/flipped"))
    fs, part = s3_fs(), "memsim-test/sweeps/flipped/part-00001-of-00002.parquet"
    with fs.open_input_stream(part) as f:
        data = bytearray(f.read())
    data[len(data) // 3] ^= 0x01  # inside the row group's pages
    with fs.open_output_stream(part) as f:
        f.write(bytes(data))
    code, out, _ = memsim("verify", uri)
    assert code == 2 and "shard 1/2" in out and "do not match" in out
    code, _, err = memsim("sql", "SELECT * FROM sweep", "--sweep", uri, "--format", "csv")
    assert one_line_error(code, err) and "part-00001-of-00002.parquet" in err and "re-run shard 1/2" in err


def test_a_shard_missing_from_the_bucket_is_refused_unless_partial(memsim, s3, spec):  # noqa: F811
    uri = sweep_to_bucket(memsim, spec, s3.uri("sweeps/missing"))
    s3_fs().delete_file("memsim-test/sweeps/missing/_shards/00000-of-00002.json")
    code, _, err = memsim("sql", COUNT, "--sweep", uri)
    assert one_line_error(code, err) and "incomplete" in err and "0/2" in err
    code, out, err = memsim("sql", "SELECT count(*) AS n FROM sweep", "--sweep", uri, "--partial", "--format", "csv")
    assert code == 0 and out == f"n\n{TOTAL // 2}\n" and "PARTIAL" in err
    code, out, _ = memsim("verify", uri)
    assert code == 2 and f"memsim sweep SPEC --shard 0/2 -o {uri}" in out


def test_an_interrupted_upload_leaves_nothing_that_looks_written(memsim, s3, spec):  # noqa: F811
    from engine.dataset.shards import sweep_shard

    with interrupted_after(chunks=0):
        sweep_shard(spec, s3.uri("sweeps/interrupted"), shard=(0, 2), **QUIET)
    assert objects("memsim-test/sweeps/interrupted") == ["_memsim.json", "_spec.toml"]
    code, out, _ = memsim("verify", s3.uri("sweeps/interrupted"))
    assert code == 2 and "shard 0/2 [0, 60): missing" in out


def test_an_interrupted_rerun_in_a_bucket_keeps_the_old_part_and_a_finished_one_replaces_it(memsim, s3, spec):  # noqa: F811
    from engine.dataset.shards import sweep_shard

    uri, prefix = sweep_to_bucket(memsim, spec, s3.uri("sweeps/rerun")), "memsim-test/sweeps/rerun"
    before = {name: s3_fs().open_input_stream(f"{prefix}/{name}").read()
              for name in ("part-00000-of-00002.parquet", "_shards/00000-of-00002.json")}
    with interrupted_after(chunks=1):
        sweep_shard(spec, uri, shard=(0, 2), chunk_rows=8, **QUIET)
    assert objects(prefix) == sorted([*before, "_memsim.json", "_spec.toml", "part-00001-of-00002.parquet",
                                      "_shards/00001-of-00002.json"])  # no temporary left
    assert all(s3_fs().open_input_stream(f"{prefix}/{name}").read() == data for name, data in before.items())
    assert memsim("verify", uri)[0] == 0
    sweep_shard(spec, uri, shard=(0, 2), chunk_rows=8, **QUIET)  # through a temporary, moved over the old part
    assert memsim("verify", uri)[0] == 0 and objects(prefix) == sorted([*before, "_memsim.json", "_spec.toml",
                                                    "part-00001-of-00002.parquet", "_shards/00001-of-00002.json"])


@pytest.mark.parametrize("command", [["query", "summary", "--sweep"], ["sql", "SELECT 1", "--sweep"], ["verify"],
                                     ["report", "-o", "r.html", "--sweep"]])
def test_a_bucket_path_with_no_dataset_is_one_line(memsim, s3, command, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    code, _, err = memsim(*command, s3.uri("nothing/here"))
    assert one_line_error(code, err) and "s3://memsim-test/nothing/here" in err
    assert not (tmp_path / "r.html").exists()


def test_the_markers_in_a_bucket_record_their_writer_and_checksums(bucket_dataset):
    marker = json.loads(s3_fs().open_input_stream("memsim-test/sweeps/two-shards/_shards/00000-of-00002.json").read())
    part = s3_fs().get_file_info("memsim-test/sweeps/two-shards/part-00000-of-00002.parquet")
    assert marker["bytes"] == part.size and len(marker["sha256"]) == 64 and len(marker["footer_sha256"]) == 64
    assert marker["host"] and marker["memsim_version"] and marker["wall_s"] >= 0 and marker["ray_node"] is None


def test_polars_reads_the_parts_in_a_bucket_as_written(bucket_dataset, local):
    remote = pl.concat([pl.read_parquet(s3_fs().open_input_file(f"memsim-test/sweeps/two-shards/part-0000{k}-of-00002.parquet"))
                        for k in range(2)])
    assert remote.equals(pl.read_parquet(local / "part-*.parquet"))
