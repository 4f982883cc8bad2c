"""`memsim measure`: real training steps of each configuration (no GPU needed), beside memsim's estimate."""

import warnings

import pyarrow as pa

from engine.ask.estimate import INPUT_COLUMNS, estimate_table, read_cases
from engine.errors import UserError


def measure_table(rows: list[dict], device: str) -> pa.Table:
    """`memsim estimate`'s columns for every case, plus the measured_* columns and library versions."""
    warnings.filterwarnings("ignore")  # torch/transformers chatter about overridden kernels and deprecations
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        from engine.checks.measure import measure_case
    except ImportError as err:
        raise UserError(f"memsim measure needs the optional extra: pip install 'memsim[measure]' ({err})") from None
    table = estimate_table(rows)
    inputs = table.select(INPUT_COLUMNS).to_pylist()  # resolved: the model's dims, every default spelled out
    measured = []
    for i, case in enumerate(inputs):
        try:
            m = measure_case(case, device)
        except UserError as err:
            raise UserError(f"row {i + 1}: {err}") from None
        measured.append({k: v for k, v in m.items() if k.startswith("measure") or k.endswith("_version")})
    for name in measured[0]:
        table = table.append_column(name, pa.array([m[name] for m in measured]))
    return table


def run_measure(cases: str, output: str, device: str) -> pa.Table:
    from engine.atomic import write_atomic

    table = measure_table(read_cases(cases), device)
    if output.endswith(".csv"):
        import pyarrow.csv as pacsv

        write_atomic(output, lambda tmp: pacsv.write_csv(table, tmp))
    else:
        import pyarrow.parquet as pq

        write_atomic(output, lambda tmp: pq.write_table(table, tmp))
    return table

