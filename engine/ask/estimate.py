"""`memsim estimate`: evaluate an explicit list of configurations and write every output beside the inputs."""

from pathlib import Path

import polars as pl
import pyarrow as pa

from engine.configure.resolve import resolve_cases
from engine.dataset.columns import output_columns
from engine.errors import UserError
from engine.inputs.vocabulary import INPUT_FIELDS, arrow_column, check_columns
from engine.model.kernel import evaluate
from engine.model.outputs import OUTPUTS

INPUT_COLUMNS = [f.name for f in INPUT_FIELDS if f.name not in OUTPUTS]  # capacity_bytes is an output


def read_cases(path: str | Path, extra: tuple[str, ...] = ()) -> list[dict]:
    """A case list (CSV or Parquet) as one dict per row; every column must be a CONFIG.md input (or in `extra`)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no case list at {path}")
    try:
        if path.suffix == ".parquet":
            frame = pl.read_parquet(path)
        else:
            frame = pl.read_csv(path, infer_schema=False)  # every cell as text; resolve parses by column
    except Exception as err:  # a malformed file is the user's to fix: one line, no traceback
        raise UserError(f"cannot read case list {path}: {str(err).splitlines()[0]}") from None
    if frame.height == 0:
        raise UserError(f"case list {path} has no rows")
    check_columns(frame.columns, extra)
    return frame.to_dicts()


def estimate_table(rows: list[dict]) -> pa.Table:
    """Resolved inputs (CONFIG.md names) followed by every output column, one row per case."""
    records, models, gpus = resolve_cases(rows)
    out = evaluate(records)
    recipes = [str(row.get("recipe", "")).strip() or "none" for row in rows]
    names = {"model": models, "recipe": recipes, "gpu": gpus}  # written as given; the rest as resolved
    columns = {}
    for name in INPUT_COLUMNS:
        columns[name] = (pa.array(names[name]).dictionary_encode() if name in names
                         else arrow_column(name, records[name]))
    columns.update(output_columns(out))
    return pa.table(columns)
