"""Issue #23 item 8: `memsim sql` is read-only by default; --allow-writes is the explicit opt-out.

By default the SQL reads the views (sweep, models, gpus) and nothing else: no file read outside the dataset, no
COPY ... TO or EXPORT, no ATTACH, no INSTALL or LOAD, no SET. Each refusal is one line and exit 2, and leaves
nothing behind. With --allow-writes a trusted statement may write a file.
"""

from pathlib import Path

import pytest

from tests.dataset_helpers import SMALL_TOTAL, one_line_error, small_spec, swept


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return swept(tmp_path_factory.mktemp("sqlsafety"), small_spec("sql safety test"))


REFUSED = {
    "read a file": "SELECT * FROM read_csv('/etc/passwd')",
    "read a file as text": "SELECT * FROM read_text('/etc/passwd')",
    "glob the disk": "SELECT * FROM glob('/etc/*')",
    "copy to a file": "COPY (SELECT * FROM sweep) TO '{out}/stolen.csv'",
    "export the database": "EXPORT DATABASE '{out}/exported'",
    "attach a database": "ATTACH '{out}/x.db' AS x",
    "install an extension": "INSTALL httpfs",
    "load an extension": "LOAD httpfs",
    "change a setting": "SET enable_external_access = true",
    "copy after a select": "SELECT 1; COPY (SELECT 1) TO '{out}/stolen.csv'",
}


@pytest.mark.parametrize("sql", REFUSED.values(), ids=REFUSED.keys())
def test_plain_sql_is_refused_anything_but_reading_the_views(memsim, ds, tmp_path, sql):
    code, out, err = memsim("sql", sql.format(out=tmp_path), "--sweep", ds)
    assert one_line_error(code, err) and out == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sql", [REFUSED["read a file"], REFUSED["copy to a file"], REFUSED["attach a database"]])
def test_plain_sql_without_a_sweep_is_read_only_too(memsim, tmp_path, sql):
    code, _, err = memsim("sql", sql.format(out=tmp_path))
    assert one_line_error(code, err) and list(tmp_path.iterdir()) == []


def test_plain_sql_still_reads_the_sweep_and_the_catalogs(memsim, ds):
    code, out, _ = memsim("sql", "SELECT count(*) AS n FROM sweep JOIN gpus USING (gpu)", "--sweep", ds,
                          "--format", "csv")
    assert (code, out) == (0, f"n\n{SMALL_TOTAL}\n")


def test_allow_writes_lets_a_trusted_statement_write_a_file(memsim, ds, tmp_path):
    code, _, err = memsim("sql", f"COPY (SELECT gpu FROM sweep ORDER BY index) TO '{tmp_path}/gpus.csv'",
                          "--sweep", ds, "--allow-writes")
    assert code == 0, err
    assert (tmp_path / "gpus.csv").read_text().splitlines()[0] == "gpu"


def test_read_only_and_allow_writes_together_are_one_line(memsim, ds):
    code, _, err = memsim("sql", "SELECT 1", "--sweep", ds, "--read-only", "--allow-writes")
    assert one_line_error(code, err) and "--allow-writes" in err


def test_the_read_only_flag_of_older_scripts_still_runs(memsim, ds):
    assert memsim("sql", "SELECT count(*) FROM sweep", "--sweep", ds, "--read-only")[0] == 0


def test_sql_help_and_the_readme_document_the_opt_out(capsys):
    from engine.cli import main

    with pytest.raises(SystemExit):
        main(["sql", "--help"])
    help_text = capsys.readouterr().out
    assert "--allow-writes" in help_text and "read_csv('/etc/passwd')" in help_text
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    sql_row = next(line for line in readme.splitlines() if line.startswith("| `memsim sql"))
    assert "--allow-writes" in sql_row and "read-only" in sql_row
