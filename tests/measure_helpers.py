"""Shared by the measurement harness's tests: quiet libraries, the committed sets' rows, "a committed row
reproduces exactly" (every measured_* column, spelled as the set's CSV spells it), and "refused in one line"."""

import csv
import warnings
from pathlib import Path

import pytest

MEASURED = Path(__file__).resolve().parent.parent / "data" / "measured"


@pytest.fixture
def quiet_harness():
    """transformers' logging and every warning silenced for the test (overridden kernels, deprecations)."""
    import transformers

    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def committed_rows(name: str) -> list[dict]:
    """The rows of data/measured/<name>, as the CSV reader gives them (text cells)."""
    with open(MEASURED / name, newline="") as f:
        return list(csv.DictReader(f))


def skip_unless_made_with(row: dict, have: dict) -> None:
    """Skip the test when the row was measured with other library versions than ``have`` (name -> version)."""
    if any(have[k] != row[k] for k in have):
        pytest.skip(f"set made with other versions ({ {k: row[k] for k in have} })")


def assert_same_measured(got: dict, row: dict, columns) -> None:
    """Every measured_* column among ``columns`` of the new measurement equals the committed row's text."""
    from engine.checks.measure.reference_writer import cell

    for k in columns:
        if k.startswith("measured_"):
            assert cell(got[k]) == row[k], k


def assert_refused(case: dict, word: str) -> None:
    """Measuring ``case`` on the fake device is a one-line UserError that names ``word``."""
    from engine.checks.measure.measure import measure_case
    from engine.errors import UserError

    with pytest.raises(UserError) as refused:
        measure_case(case, "fake")
    assert word in str(refused.value) and "\n" not in str(refused.value)
