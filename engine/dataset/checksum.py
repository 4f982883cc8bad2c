"""A part file's bytes against what its completion marker records, so a flipped bit is refused, never read.

The writer hashes the bytes as they go out (HashingSink: no second read of the part) and the marker records
    bytes          the part's size
    sha256         SHA-256 of every byte                     (memsim verify reads the whole part to check it)
    footer_sha256  SHA-256 of the Parquet footer and its length (every reader checks it: one small read)
and every data page carries Parquet's own CRC-32 (written with `write_page_checksum`), which Arrow checks as it
reads a page (PARQUET_FORMAT below): a reader refuses a damaged footer before it runs anything, and a damaged page
as soon as a query touches it. A damaged page that no query reads changes no answer; verify finds it all the same.
A marker without these fields (a part written before them) is read as before, unchecked.
"""

import hashlib

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

BLOCK = 8 << 20  # bytes read at a time when hashing a whole part
TAIL = 256 << 10  # bytes read from a part's end in one request: the footer of a memsim part fits (tens of KiB)
PARQUET_FORMAT = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True))


class Damaged(Exception):
    """A part's bytes differ from what its marker records; the message says how."""


class HashingSink:
    """A writable file that passes every byte on to `stream` and hashes it on the way (the Parquet writer's sink)."""

    def __init__(self, stream):
        self.stream, self.sha = stream, hashlib.sha256()
        self.size = 0
        self.recording = None  # a list: keep a copy of what is written from now on (the footer, at close)

    def write(self, data) -> int:
        self.sha.update(data)  # releases the GIL for large buffers
        self.size += len(data)
        self.stream.write(data)
        if self.recording is not None:
            self.recording.append(bytes(data))  # the writer may reuse its buffer once this returns
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        self.stream.close()

    @property
    def closed(self) -> bool:
        return self.stream.closed

    def writable(self) -> bool:
        return True


def footer_of(tail: bytes) -> bytes:
    """The footer (Thrift metadata, its 4-byte length, the magic) at the end of a part's last bytes."""
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise Damaged("it does not end as a Parquet file does")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 > len(tail):
        raise Damaged(f"its footer length ({length:,} bytes) runs past the bytes read")
    return tail[-(length + 8):]


def read_footer(f, size: int) -> bytes:
    """The footer of an open part (a pyarrow input file) of `size` bytes: one read, two for a very large footer."""
    tail = f.read_at(min(size, TAIL), max(0, size - TAIL))
    if len(tail) >= 8 and tail[-4:] == b"PAR1":
        length = int.from_bytes(tail[-8:-4], "little")
        if TAIL < length + 8 <= size:
            tail = f.read_at(length + 8, size - length - 8)
    return footer_of(tail)


def footer_metadata(footer: bytes) -> pq.FileMetaData:
    """The parsed footer (row count, key-value metadata) of the footer bytes alone."""
    return pq.read_metadata(pa.BufferReader(b"PAR1" + footer))


def record(sink: HashingSink, footer: bytes) -> dict:
    """The marker's checksum fields for a part written through `sink`."""
    return {"bytes": sink.size, "sha256": sink.sha.hexdigest(), "footer_sha256": hashlib.sha256(footer).hexdigest()}


def read_checked_footer(f, marker: dict) -> bytes:
    """The footer of an open part, after its size and footer are checked against the marker (a marker without
    checksums passes); Damaged says what differs."""
    size = f.size()
    if "bytes" in marker and size != marker["bytes"]:
        raise Damaged(f"it is {size:,} bytes, its completion marker records {marker['bytes']:,}")
    footer = read_footer(f, size)
    check_footer(footer, marker)
    return footer


def check_footer(footer: bytes, marker: dict) -> None:
    if "footer_sha256" in marker and hashlib.sha256(footer).hexdigest() != marker["footer_sha256"]:
        raise Damaged("its footer's bytes do not match the checksum its completion marker records")


def check_whole(fs, path: str, marker: dict) -> None:
    """Every byte against the marker's SHA-256 (nothing to check without one); Damaged when they differ."""
    if "sha256" not in marker:
        return
    sha = hashlib.sha256()
    with fs.open_input_stream(path) as f:
        while block := f.read(BLOCK):
            sha.update(block)
    if sha.hexdigest() != marker["sha256"]:
        raise Damaged("its bytes do not match the SHA-256 its completion marker records (a flipped bit or an edit)")


def has_checksums(marker: dict) -> bool:
    return all(key in marker for key in ("bytes", "sha256", "footer_sha256"))
