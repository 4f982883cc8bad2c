"""Accuracy gate: memsim against the measured training steps it ships (data/measured/), within the stated
tolerance — median |error| of allocated_peak_bytes <= 3 %, worst <= 10 % (engine/validate.py)."""

import statistics

import pytest

from engine.checks import validate
from engine.cli import main

RESULTS = validate.measured_results()


def test_measured_set_is_large_and_varied():
    assert len(RESULTS) >= 60


def test_median_error_against_measured_steps_is_within_3_percent():
    median = statistics.median(abs(r["error_pct"]) for r in RESULTS)
    assert median <= validate.MEASURED_MEDIAN_TOL_PCT, f"median |error| {median:.2f}%"


@pytest.mark.parametrize("result", RESULTS, ids=[r["case_id"] for r in RESULTS])
def test_each_measured_case_is_within_10_percent(result):
    assert abs(result["error_pct"]) <= validate.MEASURED_MAX_TOL_PCT, f"{result['error_pct']:+.1f}%"


def test_validate_command_prints_the_table_and_passes(capsys):
    assert main(["validate", "--set", "measured", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| case |" in out and "median abs error" in out
