"""Where a dataset lives: a local directory, or a URI that pyarrow's filesystems open (file://, s3://, gs://, hdfs://).

Every command that writes or reads a dataset (sweep, verify, query, sql, report) resolves its argument here, so
they all take the same names. Credentials and endpoints come from where the cloud SDKs look for them: for S3 the
standard AWS_* environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL for
an S3-compatible server such as MinIO or Ceph), ~/.aws/config and credentials, or an instance profile; query
options in the URI (`?region=`, `?endpoint_override=`) override them.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from engine.errors import UserError


@dataclass(frozen=True)
class Location:
    """A pyarrow filesystem, the dataset's path in it, and the name the user gave (for messages)."""

    fs: pafs.FileSystem
    base: str
    uri: str

    @property
    def local(self) -> bool:
        return is_local(self.fs)

    @property
    def object_store(self) -> bool:
        """Whether an object appears only once its upload completes (S3, GCS): a write is atomic by itself."""
        return self.fs.type_name in ("s3", "gcs")

    def path(self, name: str) -> str:
        """The path of a file of the dataset (`name` relative to it, e.g. `_shards/00000-of-00004.json`)."""
        return f"{self.base}/{name}"

    def shown(self, name: str) -> str:
        """A file of the dataset as the user would name it."""
        return f"{self.uri.rstrip('/')}/{name}"

    def kind(self, name: str = "") -> pafs.FileType:
        return self.fs.get_file_info(self.path(name) if name else self.base).type

    def read_bytes(self, name: str) -> bytes | None:
        """A file's bytes, None when there is none."""
        try:
            with self.fs.open_input_stream(self.path(name)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_json(self, name: str):
        """A JSON file's value, None when there is none (ValueError when it is not JSON)."""
        data = self.read_bytes(name)
        return None if data is None else json.loads(data)

    def write_bytes(self, name: str, data: bytes) -> None:
        """A small file, whole: on an object store an object appears only once its upload completes."""
        with self.fs.open_output_stream(self.path(name)) as f:
            f.write(data)


def filesystem(uri: str | Path) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the dataset's path in it: a local path, file://..., s3://..., gs://..."""
    uri = str(uri)
    if "://" not in uri:
        return pafs.LocalFileSystem(), str(Path(uri).resolve())
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, ValueError, OSError) as err:
        raise UserError(f"cannot open {uri}: {str(err).strip().splitlines()[0][:200]}") from None
    return fs, path.rstrip("/")


def locate(uri: str | Path) -> Location:
    if uri is None or not str(uri).strip():
        raise UserError("the dataset path is empty: name a directory or a URI (s3://bucket/path)")
    fs, base = filesystem(uri)
    return Location(fs, base, str(uri))


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return json.loads(f.read())
