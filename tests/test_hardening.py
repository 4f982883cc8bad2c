"""Issue #13, inputs: what a careless or hostile user types ends in a result or in one line on stderr and exit 2,
never in a traceback, and never in a meaningless answer (a NaN capacity factor, GPT-2 past its learned
positions, a quoted "false" taken as true, an empty shard that looks complete, a spec table ignored).

The property tests at the end throw random values at every input through each way in: `memsim explain` flags,
case-list cells, sweep-spec TOML and config.json fields. A few examples run in the fast tier; the many-example
runs are marked slow.
"""

import json
import math
import os
import shutil
import stat

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.inputs.vocabulary import INPUT_FIELDS

GPT2_CONFIG = os.path.join(os.path.dirname(__file__), "fixtures", "hf_configs", "gpt2.json")


def one_line_error(code: int, err: str) -> bool:
    return code == 2 and err.startswith("memsim: error: ") and err.count("\n") == 1 and "Traceback" not in err


def write_spec(tmp_path, body: str, name: str = "spec.toml"):
    path = tmp_path / name
    path.write_text(body)
    return path


TWO_ROWS = '[axes]\nmodel = ["gpt2"]\nseq_len = [512, 1024]\n'


# --- 2. accepted but meaningless ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e400"])
def test_capacity_factor_must_be_a_positive_finite_number_everywhere(memsim, tmp_path, value):
    assert one_line_error(*memsim("explain", f"--capacity-factor={value}")[::2])
    cases = tmp_path / "cases.csv"
    cases.write_text(f"model,capacity_factor\nmixtral-8x7b,{value}\n")
    code, _, err = memsim("estimate", cases, "-o", tmp_path / "e.parquet")
    assert one_line_error(code, err) and "capacity_factor" in err and not (tmp_path / "e.parquet").exists()
    toml_value = {"nan": "nan", "inf": "inf", "-inf": "-inf", "1e400": "1e400"}.get(value, value)
    spec = write_spec(tmp_path, f'[axes]\nmodel = ["mixtral-8x7b"]\ncapacity_factor = [{toml_value}]\n')
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and "capacity_factor" in err and not (tmp_path / "ds").exists()


def test_a_sequence_past_the_learned_positions_is_an_invalid_row(memsim, tmp_path):
    code, _, err = memsim("explain", "--model", "gpt2", "--seq-len", "8192")
    assert one_line_error(code, err) and "learned positions" in err
    assert memsim("explain", "--model", "gpt2", "--seq-len", "1024")[0] == 0
    cases = tmp_path / "cases.csv"
    cases.write_text("model,seq_len\ngpt2,1024\ngpt2,1025\nllama-3.1-8b,131072\n")
    assert memsim("estimate", cases, "-o", tmp_path / "e.parquet")[0] == 0
    rows = pl.read_parquet(tmp_path / "e.parquet")
    assert rows["valid"].to_list() == [True, False, True]
    assert rows["fits"][1] is False and "n_positions" in rows["invalid_reason"][1]


@pytest.mark.parametrize("axis, says", [("headroom = [nan]", "headroom"), ("zero_stage = [4]", "zero_stage"),
                                        ("headroom = [1.0]", "headroom"), ("seq_len = [inf]", "seq_len"),
                                        ("tp = [1.5]", "tp"), ("seq_len = [[1, 2]]", "seq_len"),
                                        ("micro_batch = [{ a = 1 }]", "micro_batch")])
def test_a_spec_axis_explain_would_refuse_is_refused(memsim, tmp_path, axis, says):
    spec = write_spec(tmp_path, f'[axes]\nmodel = ["gpt2"]\n{axis}\n')
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and says in err and not (tmp_path / "ds").exists()


@pytest.mark.parametrize("option, says", [
    ('feasible_only = "false"', "feasible_only must be true or false"),
    ('valid_only = 1', "valid_only must be true or false"),
    ('compact = "yes"', "compact must be true or false"),
    ("rows_per_chunk = -5", "rows_per_chunk must be an integer from 1"),
    ("rows_per_chunk = 0", "rows_per_chunk must be an integer from 1"),
    ("rows_per_chunk = 1.5", "rows_per_chunk must be an integer from 1"),
    ("rows_per_chunk = inf", "rows_per_chunk must be an integer from 1"),
    ('rows_per_chunk = "8"', "rows_per_chunk must be an integer from 1"),
    ('compression = "zzz"', "compression must be one of"),
    ("compression = 3", "compression must be one of"),
])
def test_output_options_are_checked_by_type(memsim, tmp_path, option, says):
    spec = write_spec(tmp_path, f"{TWO_ROWS}[output]\n{option}\n")
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and says in err
    assert not (tmp_path / "ds").exists()  # nothing is written, least of all an empty shard that looks complete


def test_output_options_of_the_right_type_are_taken(memsim, tmp_path):
    spec = write_spec(tmp_path, f'{TWO_ROWS}[output]\nfeasible_only = false\nrows_per_chunk = 1\ncompression = "ZSTD"\n')
    assert memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")[0] == 0
    assert pl.read_parquet(tmp_path / "ds" / "part-00000-of-00001.parquet").height == 2


@pytest.mark.parametrize("body, says", [("[filters]\nfits = true\n", "[filters] is not supported"),
                                        ("[axis]\nseq_len = [1]\n", "unknown table"),
                                        ('output = "x"\n', "[output] must be a table"),
                                        ("title = 3\n", "title must be text")])
def test_an_unknown_or_malformed_spec_table_is_refused(memsim, tmp_path, body, says):
    spec = write_spec(tmp_path, body + TWO_ROWS if not body.startswith("[") else TWO_ROWS + body)
    code, _, err = memsim("sweep", spec, "-o", tmp_path / "ds", "--quiet")
    assert one_line_error(code, err) and says in err
