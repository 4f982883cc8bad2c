"""DuckDB over a sweep dataset: the views `sweep`, `models` and `gpus` that every query reads.

`sweep` reads the part files and adds, as constants, every CONFIG.md input the spec did not sweep (so SQL can
always say `seq_len` or `precision`), with the value the sweep used: its default.
"""

import json
from pathlib import Path

import duckdb

from engine import QUERIES_DIR
from engine.dataset.store import MANIFEST
from engine.errors import UserError
from engine.inputs.resolve import MODEL_FIELD_NAMES
from engine.inputs.vocabulary import GPU_ATTRIBUTES, INPUT_FIELDS, sql_literal
from engine.model import catalog


def check_dataset(sweep_dir: Path) -> list[Path]:
    if not (sweep_dir / MANIFEST).is_file():
        raise UserError(f"{sweep_dir} is not a memsim sweep directory (no {MANIFEST}); run `memsim sweep SPEC -o {sweep_dir}` first")
    parts = sorted(sweep_dir.glob("part-*.parquet"))
    if not parts:
        raise UserError(f"{sweep_dir} has no complete part files yet")
    return parts


def connect(sweep_dir: str | Path | None = None, con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the catalog views, the macros of queries/_macros.sql, and when a dataset is given
    the `sweep` view and the table macros of queries/_views.sql."""
    con = con or duckdb.connect()
    con.execute((QUERIES_DIR / "_macros.sql").read_text())
    con.register("models_arrow", catalog.models_table().to_arrow())
    con.register("gpus_arrow", catalog.gpus_table().to_arrow())
    con.execute("CREATE OR REPLACE VIEW models AS SELECT * FROM models_arrow")
    con.execute("CREATE OR REPLACE VIEW gpus AS SELECT * FROM gpus_arrow")
    if sweep_dir is not None:
        sweep_dir = Path(sweep_dir)
        check_dataset(sweep_dir)
        pattern = str(sweep_dir / "part-*.parquet").replace("'", "''")
        present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{pattern}')").fetchall()}
        skip = present | set(MODEL_FIELD_NAMES) | set(GPU_ATTRIBUTES) | {"n_params", "dropout"}  # model, GPU: catalogs
        extra = [f"{sql_literal(f.name)} AS {f.name}" for f in INPUT_FIELDS if f.name not in skip]
        select = ", ".join(["*"] + extra)
        con.execute(f"CREATE OR REPLACE VIEW sweep AS SELECT {select} FROM read_parquet('{pattern}')")
        con.execute((QUERIES_DIR / "_views.sql").read_text())
    return con


def manifest(sweep_dir: str | Path) -> dict:
    return json.loads((Path(sweep_dir) / MANIFEST).read_text())
