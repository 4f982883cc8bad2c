"""Issue #23 item 6: a flipped bit inside a finished part is caught by `memsim verify` and refused by every reader.

Each marker records the part's size, its SHA-256 and its footer's SHA-256, and every page carries a CRC-32
(engine/dataset/checksum.py). verify hashes every byte; readers check size and footer before they run anything,
and each page's CRC as they read it: a damaged byte is refused (one line, exit 2) whenever an answer would have
used it. A 2-shard sweep of 120 configurations, copied fresh for each test that breaks it.
"""

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.dataset_helpers import SMALL_TOTAL as TOTAL
from tests.dataset_helpers import one_line_error, small_spec, swept

PART = "part-00000-of-00002.parquet"
MARKER = "_shards/00000-of-00002.json"
EVERY_ROW = "SELECT * FROM sweep ORDER BY index"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return swept(tmp_path_factory.mktemp("checksums"), small_spec("checksum test"), shards=2)


@pytest.fixture
def ds(pristine, tmp_path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "ds"))


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x04
    path.write_bytes(bytes(data))


def inside_column(path: Path, column: str) -> int:
    """An offset inside the data of the first row group's last page of `column` (a page's header comes first)."""
    meta = pq.read_metadata(path).row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    return start + chunk.total_compressed_size - 2


def test_a_marker_records_the_size_and_sha256_of_its_part(ds):
    marker, data = json.loads((ds / MARKER).read_text()), (ds / PART).read_bytes()
    assert marker["bytes"] == len(data) and marker["sha256"] == hashlib.sha256(data).hexdigest()
    footer_length = int.from_bytes(data[-8:-4], "little")
    assert marker["footer_sha256"] == hashlib.sha256(data[-footer_length - 8:]).hexdigest()


def test_every_page_carries_a_crc(ds):
    # pyarrow reads with page_checksum_verification only where the writer stored one; a page without would pass
    data = (ds / PART).read_bytes()
    data = bytearray(data)
    offset = inside_column(ds / PART, "device_peak_bytes")
    data[offset] ^= 0x04
    broken = ds / "broken.parquet"
    broken.write_bytes(bytes(data))
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(broken, columns=["device_peak_bytes"], page_checksum_verification=True)


@pytest.mark.parametrize("column", ["device_peak_bytes", "fits", "index",
                                    *[pytest.param(c, marks=pytest.mark.slow) for c in ("model", "step_time_s")]])
def test_a_flipped_byte_in_a_page_fails_verify_and_is_refused_by_sql(memsim, ds, column):
    flip(ds / PART, inside_column(ds / PART, column))
    code, out, _ = memsim("verify", ds)
    assert code == 2 and "shard 0/2" in out and "do not match the SHA-256" in out
    code, _, err = memsim("sql", f"SELECT {column} FROM sweep ORDER BY index", "--sweep", ds, "--format", "csv")
    assert one_line_error(code, err) and PART in err and "re-run shard 0/2" in err


def test_a_named_query_that_reads_a_damaged_page_is_refused(memsim, ds):
    flip(ds / PART, inside_column(ds / PART, "fits"))  # summary counts the rows that fit
    code, out, err = memsim("query", "summary", "--sweep", ds)
    assert one_line_error(code, err) and PART in err and out == ""


@pytest.mark.slow
def test_the_report_of_a_damaged_dataset_is_refused_and_writes_nothing(memsim, ds, tmp_path):
    flip(ds / PART, inside_column(ds / PART, "fits"))
    code, _, err = memsim("report", "--sweep", ds, "-o", tmp_path / "r.html")
    assert one_line_error(code, err) and PART in err and not (tmp_path / "r.html").exists()


def test_a_flipped_byte_in_the_footer_is_refused_before_any_query(memsim, ds):
    size = (ds / PART).stat().st_size
    flip(ds / PART, size - 40)  # inside the footer's Thrift metadata
    code, _, err = memsim("query", "summary", "--sweep", ds)
    assert one_line_error(code, err) and "0/2 (damaged part file" in err and "footer" in err
    code, out, err = memsim("query", "summary", "--sweep", ds, "--partial", "--format", "json")
    assert code == 0 and json.loads(out)[0]["configurations"] == TOTAL // 2


def test_a_part_replaced_by_one_of_another_size_is_refused(memsim, ds):
    (ds / PART).write_bytes((ds / PART).read_bytes() + b"\0")
    code, _, err = memsim("sql", "SELECT count(*) FROM sweep", "--sweep", ds)
    assert one_line_error(code, err) and "0/2 (damaged part file: it is" in err


def test_a_marker_without_checksums_is_read_and_verify_says_it_is_unchecked(memsim, ds):
    for k in range(2):  # as memsim wrote markers before they carried checksums
        marker = ds / f"_shards/0000{k}-of-00002.json"
        old = {key: v for key, v in json.loads(marker.read_text()).items() if key in ("range", "rows", "spec_digest", "file")}
        marker.write_text(json.dumps(old))
    code, out, _ = memsim("verify", ds)
    assert code == 0 and "2 complete shard(s) carry no checksums" in out and "unrecorded" in out
    code, out, _ = memsim("sql", "SELECT count(*) AS n FROM sweep", "--sweep", ds, "--format", "csv")
    assert (code, out) == (0, f"n\n{TOTAL}\n")


@pytest.mark.slow
def test_no_flipped_byte_anywhere_in_a_part_changes_an_answer(memsim, pristine, tmp_path):
    # 48 offsets spread over the whole part (magic, pages, page headers, footer): every one fails verify, and a
    # query of every row either is refused or gives exactly the original answer (a byte no answer reads)
    _, want, _ = memsim("sql", EVERY_ROW, "--sweep", pristine, "--format", "csv")
    size = (pristine / PART).stat().st_size
    refused = 0
    for offset in range(0, size, max(1, size // 48)):
        ds = Path(shutil.copytree(pristine, tmp_path / f"ds{offset}"))
        flip(ds / PART, offset)
        assert memsim("verify", ds)[0] == 2, offset
        code, out, err = memsim("sql", EVERY_ROW, "--sweep", ds, "--format", "csv")
        assert (code == 0 and out == want) or one_line_error(code, err), (offset, err)
        refused += code == 2
        shutil.rmtree(ds)
    assert refused >= 40  # nearly every byte of a part is read by a query of every row
