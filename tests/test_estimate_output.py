"""Issue #23 item 10 (part): `memsim estimate -o` writes the format its extension names, and never the case list.

.parquet, .csv and .json are written as such (JSON: one object per row, what a user naming x.json expects); any
other extension is one line and exit 2, as is -o naming the case list being read (itself or through a link),
and in both cases nothing is written or overwritten.
"""

import json
import os

import polars as pl
import pytest

CASES = "model,seq_len\ngpt2,512\nllama-3.2-1b,1024\n"


def one_line_error(code: int, err: str) -> bool:
    return code == 2 and err.startswith("memsim: error: ") and err.count("\n") == 1 and "Traceback" not in err


@pytest.fixture
def cases(tmp_path):
    path = tmp_path / "cases.csv"
    path.write_text(CASES)
    return path


def test_json_output_is_one_object_per_row_with_every_column(memsim, cases, tmp_path):
    assert memsim("estimate", cases, "-o", tmp_path / "e.parquet")[0] == 0
    code, _, err = memsim("estimate", cases, "-o", tmp_path / "e.json")
    assert code == 0, err
    rows = json.loads((tmp_path / "e.json").read_text())
    want = pl.read_parquet(tmp_path / "e.parquet")
    assert [r["model"] for r in rows] == ["gpt2", "llama-3.2-1b"] and list(rows[0]) == want.columns
    assert [r["device_peak_bytes"] for r in rows] == want["device_peak_bytes"].to_list()


def test_csv_output_is_csv_and_parquet_output_is_parquet(memsim, cases, tmp_path):
    for name in ("e.csv", "E.PARQUET"):
        assert memsim("estimate", cases, "-o", tmp_path / name)[0] == 0
    assert (tmp_path / "e.csv").read_text().startswith('"model","gpu"')
    assert (tmp_path / "E.PARQUET").read_bytes()[:4] == b"PAR1"


@pytest.mark.parametrize("name", ["e.txt", "e", "e.xlsx", "e.json.gz"])
def test_an_unknown_extension_is_one_line_and_writes_nothing(memsim, cases, tmp_path, name):
    code, _, err = memsim("estimate", cases, "-o", tmp_path / name)
    assert one_line_error(code, err) and ".parquet, .csv, .json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.csv"]


def test_output_onto_the_case_list_is_refused_and_the_case_list_kept(memsim, cases, tmp_path, monkeypatch):
    code, _, err = memsim("estimate", cases, "-o", cases)
    assert one_line_error(code, err) and "case list" in err and cases.read_text() == CASES
    monkeypatch.chdir(tmp_path)  # the same file by another name
    code, _, err = memsim("estimate", "cases.csv", "-o", "./sub/../cases.csv")
    assert one_line_error(code, err) and cases.read_text() == CASES


def test_output_onto_a_link_to_the_case_list_is_refused(memsim, cases, tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to(cases)
    code, _, err = memsim("estimate", cases, "-o", link)
    assert one_line_error(code, err) and cases.read_text() == CASES and link.is_symlink()
    hard = tmp_path / "hard.csv"
    os.link(cases, hard)
    code, _, err = memsim("estimate", cases, "-o", hard)
    assert one_line_error(code, err) and cases.read_text() == CASES
