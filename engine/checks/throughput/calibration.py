"""The time model's calibrated constants fitted on the published rows (`fit`), and each source predicted by
constants fitted without it (`leave_one_source_out`); THROUGHPUT.md "Calibration" gives the values found."""

import math
from contextlib import contextmanager

from engine.checks.throughput.rows import prepared, throughput_rows
from engine.model import gpu_rates as gpu_rates_module
from engine.model import step_work as step_work_module
from engine.model.gpu_rates import gpu_rates
from engine.model.stage import layer_bytes
from engine.model.step_work import step_work, work_rates
from engine.model.time import device_times

# The constants of the time model that `fit` calibrates, with the range a fit may move them in.
CALIBRATED = {
    "MATMUL_EFFICIENCY": (0.3, 1.0),
    "ATTENTION_EFFICIENCY": (0.05, 1.0),
    "MEMORY_PASSES": (0.5, 20.0),
}
# The module whose formulas read each of them (engine/model/gpu_rates.py, step_work.py): where `constants` sets it.
HOLDERS = {
    "MATMUL_EFFICIENCY": gpu_rates_module,
    "ATTENTION_EFFICIENCY": gpu_rates_module,
    "MEMORY_PASSES": step_work_module,
}


def current(name: str) -> float:
    """A calibrated constant as its module holds it now."""
    return getattr(HOLDERS[name], name)


def predicted(item: dict) -> float:
    """memsim's tokens/s per GPU for a prepared row, with the calibrated constants as they are now."""
    record, r = item["record"], item["rank"]
    work = step_work(record, r, layer_bytes(record, r), work_rates(record, r))
    times = device_times(work, gpu_rates(record, r))
    return times.tokens_per_gpu_s


@contextmanager
def constants(values: dict[str, float]):
    """The calibrated constants set to `values` for the plain-Python formulas (the compiled kernels keep
    the values in the file)."""
    saved = {name: current(name) for name in values}
    for name, value in values.items():
        setattr(HOLDERS[name], name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(HOLDERS[name], name, value)


def log_errors(items: list[dict], values: dict[str, float]) -> list[float]:
    with constants(values):
        return [math.log(predicted(i) / i["reference"]) for i in items]


def fit(items: list[dict]) -> dict[str, float]:
    """The calibrated constants that best match `items` (prepared, comparable rows): least squares on the log of
    memsim's over the published tokens/s with a soft-L1 loss (scipy.optimize.least_squares), so a few rows the
    model cannot explain move the constants little; within CALIBRATED's ranges."""
    from scipy.optimize import least_squares

    names = list(CALIBRATED)
    lower = [CALIBRATED[n][0] for n in names]
    upper = [CALIBRATED[n][1] for n in names]
    start = [min(max(current(n), lo), hi) for n, lo, hi in zip(names, lower, upper)]
    found = least_squares(lambda x: log_errors(items, dict(zip(names, x))), start, bounds=(lower, upper),
                          loss="soft_l1", f_scale=0.1, diff_step=1e-3)
    return {n: float(v) for n, v in zip(names, found.x)}


def comparable(items: list[dict]) -> list[dict]:
    return [i for i in items if not i["why_not"] and i["reference"]]


def leave_one_source_out(items: list[dict] | None = None) -> dict[str, dict]:
    """Each source predicted by constants fitted on the others: source -> the constants and its rows' errors."""
    items = comparable(prepared(throughput_rows())) if items is None else items
    out = {}
    for source in dict.fromkeys(i["source"] for i in items):
        values = fit([i for i in items if i["source"] != source])
        held = [i for i in items if i["source"] == source]
        errors = [100.0 * math.expm1(e) for e in log_errors(held, values)]
        out[source] = {"constants": values, "errors": dict(zip((i["row"]["case_id"] for i in held), errors))}
    return out
