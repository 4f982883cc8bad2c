"""The catalogs as tables for SQL: one row per model (its dims and parameter count), one per GPU, and one per
output column (the registry engine/inputs/outputs.py: what each column of `sweep` means, in what unit, from where).

The models table counts each model's parameters from its dims where the catalog gives no published count, so it
sits above the model (engine.model.params), while the catalogs themselves (engine.catalogs) sit below it.
"""

import polars as pl

from engine.catalogs.catalog import load_gpus, load_models, model_fields, model_record
from engine.catalogs.schema import GPU_SCHEMA, MODEL_SCHEMA
from engine.inputs.outputs import OUTPUT_COLUMNS, Output
from engine.model.params import param_count


def _table(key_column: str, entries: dict, schema: dict) -> pl.DataFrame:
    dtypes = {"str": pl.String, "int": pl.Int64, "bool": pl.Boolean, "float": pl.Float64, "list[str]": pl.List(pl.String)}
    columns = {key_column: pl.String} | {f: dtypes[k] if isinstance(k, str) else pl.String for f, k in schema.items()}
    rows = [{key_column: key} | {f: e.get(f) for f in schema} for key, e in entries.items()]
    return pl.DataFrame(rows, schema=columns)


def models_table() -> pl.DataFrame:
    """One row per catalog model: ``model``, every MODEL_FIELDS column (defaults filled), the extra fields.

    ``n_params`` is the published count, or ``param_count`` of the dims where none is given; counts are Int64.

    Examples
    --------
    >>> models_table().filter(pl.col("model") == "gpt2")["n_params"].item()
    124439808
    """
    entries = {}
    for key, e in load_models().items():
        fields = model_fields(e)
        if fields["n_params"] == 0:
            fields["n_params"] = int(param_count(model_record(e)))
        entries[key] = e | fields | {"dropout": e.get("dropout", 0.0), "exact_count": e.get("exact_count", True)}
    return _table("model", entries, MODEL_SCHEMA)


def gpus_table() -> pl.DataFrame:
    """One row per catalog GPU: ``gpu`` and every field (bytes as Int64, null where an entry leaves it out).

    Examples
    --------
    >>> gpus_table().schema["hbm_bytes"]
    Int64
    """
    return _table("gpu", load_gpus(), GPU_SCHEMA)


def outputs_table() -> pl.DataFrame:
    """One row per output column: name, dtype, unit, level, nullable, compact, meaning, source.

    Examples
    --------
    >>> outputs_table().filter(pl.col("name") == "fits")["dtype"].item()
    'bool'
    """
    return pl.DataFrame([o._asdict() for o in OUTPUT_COLUMNS], schema={name: pl.String for name in Output._fields}
                        | {"nullable": pl.Boolean, "compact": pl.Boolean})
