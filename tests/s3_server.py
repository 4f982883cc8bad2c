"""A local S3-compatible server for the object-storage tests: moto's server mode, in its own process.

The fixture starts `python -m moto.server` on a free loopback port, creates a bucket, and points the standard
AWS_* variables at it (AWS_ENDPOINT_URL, keys, region) for the module, as a user's shell would for MinIO: memsim
is given nothing else. It skips, with the reason, only when moto's server is not installed (the `s3` extra).
"""

import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

NO_MOTO = "the object-storage tests need moto's server: pip install -e '.[s3]' (or pip install 'moto[server]')"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str

    def uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto's server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"moto's server did not listen on port {port} within {seconds} s")


def start_s3_server(bucket: str = "memsim-test"):
    """(server, process, environment) with the bucket made; the caller sets the environment and stops the process."""
    pytest.importorskip("moto.server", reason=NO_MOTO)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port, proc)
    except RuntimeError:
        proc.kill()
        raise
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "memsim-test", "AWS_SECRET_ACCESS_KEY": "memsim-test",
           "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="memsim-test",
                 aws_secret_access_key="memsim-test").create_bucket(Bucket=bucket)
    return S3Server(endpoint, bucket), proc, env


@pytest.fixture(scope="module")
def s3():
    server, proc, env = start_s3_server()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("AWS_PROFILE", raising=False)
        try:
            yield server
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def s3_fs():
    """The bucket's filesystem, from the environment the fixture set (as memsim opens it)."""
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri("s3://memsim-test/")[0]
