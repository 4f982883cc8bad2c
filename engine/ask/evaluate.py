"""Every output of one configuration, or of a batch evaluated at once: the numbers explain, suggest, plan and
validate read (engine.model.kernel's evaluate over resolved records)."""

import numpy as np

from engine.configure.resolve import resolve_case
from engine.errors import UserError
from engine.inputs.vocabulary import RECORD
from engine.model.kernel import evaluate


def python_value(v):
    """A kernel output as a Python number: int64 columns as int, time columns as float (None when NaN)."""
    if isinstance(v, np.floating):
        return None if np.isnan(v) else float(v)
    return int(v)


def evaluate_cases(cases: list[dict]) -> list[dict]:
    """Every output of each configuration, as {column: value} with its resolved record and labels, evaluated in
    one batch; a case the inputs reject (e.g. an odd GPU count) comes back as None."""
    resolved = []
    for case in cases:
        try:
            resolved.append(resolve_case(case))
        except UserError:
            resolved.append(None)
    ok = [r for r in resolved if r is not None]
    out = evaluate(np.array([rec for rec, _, _ in ok], dtype=RECORD)) if ok else None
    results, k = [], 0
    for r in resolved:
        if r is None:
            results.append(None)
            continue
        rec, model, gpu = r
        results.append({"record": rec, "model": model, "gpu": gpu, **{n: python_value(v[k]) for n, v in out.items()}})
        k += 1
    return results


def evaluate_case(case: dict) -> dict:
    """Every output of one configuration (its input errors raise)."""
    rec, model, gpu = resolve_case(case)
    out = evaluate(np.array([rec], dtype=RECORD))
    return {"record": rec, "model": model, "gpu": gpu, **{n: python_value(v[0]) for n, v in out.items()}}
