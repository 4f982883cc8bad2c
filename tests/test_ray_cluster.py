"""Issue #25: a sharded sweep on a real multi-node Ray cluster, written into an S3 bucket, then verified, queried and
reported on straight from the bucket.

The cluster is three Ray nodes on this machine (ray.cluster_utils.Cluster): a head with no CPUs, where the driver
runs, and two worker nodes of 2 CPUs each, so every shard runs on a worker node and a shard (2 CPUs) fills one.
The bucket is tests/s3_server.py's moto server, reached by the workers through the AWS_* variables they inherit.
Slow (a cluster start is tens of seconds); skipped only when ray or moto's server is not installed.
"""

import json
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.dataset_helpers import QUIET, write_spec
from tests.s3_server import s3, s3_fs  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow

SPEC = """\
title = "ray cluster test"

[axes]
model = ["llama-3.2-1b", "llama-3.1-8b", "qwen2.5-14b"]
gpu = ["a100-sxm-80gb", "h100-sxm-80gb"]
n_gpus = [1, 2, 4, 8, 16]
tp = [1, 2]
zero_stage = [0, 3]
micro_batch = [1, 2, 4]
"""
TOTAL = 3 * 2 * 5 * 2 * 2 * 3
SHARDS = 6


@pytest.fixture(scope="module")
def cluster(s3):  # noqa: F811 (the bucket's variables are set before the nodes start: their workers inherit them)
    ray = pytest.importorskip("ray", reason="the Ray tests need ray: pip install -e '.[ray]'")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [nodes.add_node(num_cpus=2) for _ in range(2)]
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray, {w.node_id for w in workers}
    finally:
        ray.shutdown()
        nodes.shutdown()


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    return write_spec(tmp_path_factory.mktemp("rayspec"), SPEC)


@pytest.fixture(scope="module")
def spread(cluster, s3, spec):  # noqa: F811
    from engine.dataset.ray_backend import run_ray

    lines = []
    uri = s3.uri("ray/spread")
    result = run_ray(spec, uri, n_shards=SHARDS, say=lines.append)
    return uri, result, lines


def markers(prefix: str) -> list[dict]:
    fs = s3_fs()
    infos = fs.get_file_info(pafs.FileSelector(f"{prefix}/_shards"))
    return [json.loads(fs.open_input_stream(i.path).read()) for i in infos if i.path.endswith(".json")]


def test_the_shards_ran_on_both_worker_nodes_and_say_so(cluster, spread):
    _, workers = cluster
    uri, result, lines = spread
    assert result.evaluated == result.written == TOTAL
    written_by = [m["ray_node"] for m in markers(uri.removeprefix("s3://"))]
    assert len(written_by) == SHARDS and set(written_by) == workers  # more than one node, and never the head
    assert sum("done on node" in line for line in lines) == SHARDS


def test_verify_from_the_bucket_passes_and_sums_up_each_node(memsim, cluster, spread):
    _, workers = cluster
    code, out, err = memsim("verify", spread[0])
    assert code == 0, err
    assert out.startswith(f"OK: {spread[0]}: {SHARDS} of {SHARDS} shards complete, {TOTAL:,} rows")
    assert "written by 2 machines:" in out
    for node in workers:
        assert f"node {node[:8]}" in out


def test_queries_from_the_bucket_answer_as_one_local_process(memsim, spread, spec, tmp_path):
    from engine.dataset.sweep import run_sweep

    run_sweep(spec, tmp_path / "local", **QUIET)
    for argv in (["query", "min_gpus", "--format", "csv"],
                 ["sql", "SELECT count(*) AS n, count(DISTINCT index) AS i, sum(device_peak_bytes) AS b FROM sweep",
                  "--format", "csv"]):
        remote, here = memsim(*argv, "--sweep", spread[0]), memsim(*argv, "--sweep", tmp_path / "local")
        assert remote[0] == 0 and remote[1] == here[1], (remote, here)


def test_a_report_is_built_from_the_bucket(memsim, spread, tmp_path):
    code, _, err = memsim("report", "--sweep", spread[0], "-o", tmp_path / "r.html")
    assert code == 0, err
    assert "ray cluster test" in (tmp_path / "r.html").read_text()
