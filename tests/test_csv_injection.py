"""Issue #23 item 9: CSV cells that a spreadsheet would run as a formula are written as text.

A text cell that begins with = + - @ (or a tab or carriage return) gets a leading single quote, as Excel,
LibreOffice and Google Sheets expect, in `estimate -o out.csv` and in `query`/`sql --format csv`; numbers stay
numbers (-1 is written as -1), and so does a text cell that is a plain number.
"""

import csv
import io
import shutil
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.csv_cells import spreadsheet_safe

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf_configs"
EVIL = "=cmd|' /C calc'!A0"  # the model path: a config.json at a relative path that reads as a formula
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def rows_of(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def evil_model(tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / EVIL).parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "gpt2.json", tmp_path / EVIL)
    return EVIL


def test_estimate_csv_quotes_a_model_path_that_reads_as_a_formula(memsim, evil_model, tmp_path):
    with open(tmp_path / "cases.csv", "w", newline="") as f:
        csv.writer(f).writerows([["model", "seq_len"], [evil_model, 512], ["gpt2", 1024]])
    code, _, err = memsim("estimate", "cases.csv", "-o", "out.csv")
    assert code == 0, err
    rows = rows_of((tmp_path / "out.csv").read_text())
    assert [r["model"] for r in rows] == ["'" + EVIL, "gpt2"]
    assert rows[0]["weight_bytes"] == rows[1]["weight_bytes"] and int(rows[0]["weight_bytes"]) > 0


def test_estimate_parquet_keeps_the_model_path_as_it_is(memsim, evil_model, tmp_path):
    (tmp_path / "cases.csv").write_text(f'model,seq_len\n"{evil_model}",512\n')
    assert memsim("estimate", "cases.csv", "-o", "out.parquet")[0] == 0
    assert pl.read_parquet(tmp_path / "out.parquet")["model"].to_list() == [EVIL]  # only CSV is for spreadsheets


def test_sql_csv_quotes_formula_text_and_leaves_numbers_alone(memsim):
    sql = ("SELECT '=1+2' AS eq, '+SUM(A1)' AS plus, '-2+3' AS minus, '@A1' AS at, chr(9) || '=x' AS tab, "
           "'-5' AS negative_text, -1 AS negative, -2.5 AS fraction, 'plain' AS word")
    code, out, err = memsim("sql", sql, "--format", "csv")
    assert code == 0, err
    assert rows_of(out) == [{"eq": "'=1+2", "plus": "'+SUM(A1)", "minus": "'-2+3", "at": "'@A1", "tab": "'\t=x",
                             "negative_text": "-5", "negative": "-1", "fraction": "-2.5", "word": "plain"}]


@pytest.mark.slow
def test_query_csv_quotes_a_swept_model_path_that_reads_as_a_formula(memsim, evil_model, tmp_path):
    (tmp_path / "spec.toml").write_text(f'[axes]\nmodel = ["{evil_model}"]\ngpu = ["h100-sxm-80gb"]\nn_gpus = [1, 2]\nseq_len = [512]\n')
    assert memsim("sweep", "spec.toml", "-o", "ds", "--quiet")[0] == 0
    code, out, err = memsim("query", "min_gpus", "--sweep", "ds", "--format", "csv")
    assert code == 0, err
    assert [r["model"] for r in rows_of(out)] == ["'" + EVIL]
    code, out, _ = memsim("query", "min_gpus", "--sweep", "ds", "--format", "json")
    assert EVIL in out and "'" + EVIL not in out  # JSON is not for spreadsheets: the value as it is


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=8), st.lists(st.integers(-10**12, 10**12), min_size=1, max_size=8))
def test_no_text_cell_is_written_as_a_formula_and_none_is_lost(cells, numbers):
    frame = pl.DataFrame({"text": cells})
    written = spreadsheet_safe(frame).write_csv()
    back = [r["text"] for r in csv.DictReader(io.StringIO(written))]
    for original, cell in zip(cells, back, strict=True):
        if cell.startswith(FORMULA_START):
            assert cell == original and is_plain_number(cell)  # a number, which a spreadsheet reads as one
        elif cell != original:
            assert cell == "'" + original and original.startswith(FORMULA_START)
    numeric = spreadsheet_safe(pl.DataFrame({"n": numbers})).write_csv()
    assert [int(r["n"]) for r in csv.DictReader(io.StringIO(numeric))] == numbers


def is_plain_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() == text and not text.lower().lstrip("+-").startswith(("inf", "nan"))
