"""OUTPUTS: every output column of CONFIG.md and the formula that computes it.

`row(c)` evaluates them all at once (the peak once, not once per column) in OUTPUTS order; the kernel stores
what it returns. Each column also has its own small formula, the readable reference that tests/test_kernel.py
compares the kernel against. Codes: peak_phase and bottleneck are engine.inputs.codes members, fits and valid 0/1,
and NULL (-1) marks a value that needs model dims the configuration does not have.
"""

from engine.inputs.codes import Invalid
from engine.model import formula
from engine.model.derived import derive
from engine.model.overhead import allocator_slack_bytes, overhead_bytes
from engine.model.params import has_dims
from engine.model.peak import (
    bottleneck,
    host_fits,
    invalid_reason,
    peak,
    sequence_reason,
    usable_bytes,
)
from engine.model.states import (
    device_grad_bytes,
    device_optimizer_bytes,
    device_weight_bytes,
    host_bytes,
)

NULL = -1

OUTPUTS = [
    "weight_bytes",
    "grad_bytes",
    "optimizer_bytes",
    "activation_bytes",
    "temp_bytes",
    "allocated_peak_bytes",
    "reserved_peak_bytes",
    "overhead_bytes",
    "device_peak_bytes",
    "peak_phase",
    "capacity_bytes",
    "fits",
    "bottleneck",
    "host_bytes",
    "valid",
    "invalid_reason",
    # Extensions: the model states live at the peak, so that the components add up to allocated_peak_bytes
    # (gradients are not yet allocated at a forward peak; paged optimizer states can be evicted).
    "peak_grad_bytes",
    "peak_optimizer_bytes",
]
BYTES_COLUMNS = [n for n in OUTPUTS if n.endswith("_bytes")]
CODE_COLUMNS = {"peak_phase", "bottleneck", "invalid_reason"}
BOOL_COLUMNS = {"fits", "valid"}


@formula
def row(c):
    """Every output of one configuration, in OUTPUTS order (derives the record's rank_* fields first)."""
    derive(c)
    return row_of_derived(c)


@formula
def row_of_derived(c):
    """row() for a record whose rank_* fields derive() has already filled (the sweep kernel's hoisting).

    A layout that cannot run keeps its model states and reason; what needs the layout to run is NULL."""
    weights, grads, optim = c.rank_weight_bytes, c.rank_grad_bytes, c.rank_optimizer_bytes
    reason = c.rank_layout_reason if c.rank_layout_reason != 0 else sequence_reason(c).value
    overhead, host = overhead_bytes(c), c.rank_host_bytes
    if not has_dims(c) or reason != 0:
        return (weights, grads, optim, NULL, NULL, NULL, NULL, overhead, NULL, NULL, c.capacity_bytes,
                0 if reason != 0 else NULL, NULL, host, int(reason == 0), reason, NULL, NULL)
    at_peak = peak(c)
    allocated, phase, act, temp, grads_live = at_peak
    reserved = allocated + allocator_slack_bytes(act + temp)
    device = reserved + overhead
    return (weights, grads, optim, act, temp, allocated, reserved, overhead, device, phase,
            c.capacity_bytes, int(device <= usable_bytes(c) and host_fits(c)), bottleneck(c, at_peak, overhead), host,
            1, reason, grads if grads_live else 0, allocated - weights - act - temp - (grads if grads_live else 0))


# --- one formula per column: the readable reference of row(), on a record derive() has filled ---------


@formula
def weight_bytes(c):
    return device_weight_bytes(c)


@formula
def grad_bytes(c):
    return device_grad_bytes(c)


@formula
def optimizer_bytes(c):
    return device_optimizer_bytes(c)


@formula
def runs(c):
    """The configuration has dims and a layout that can run: the peak is defined."""
    return has_dims(c) and invalid_reason(c) == Invalid.OK


@formula
def activation_bytes(c):
    return peak(c)[2] if runs(c) else NULL


@formula
def temp_bytes(c):
    return peak(c)[3] if runs(c) else NULL


@formula
def allocated_peak_bytes(c):
    return peak(c)[0] if runs(c) else NULL


@formula
def reserved_peak_bytes(c):
    if not runs(c):
        return NULL
    allocated, _, act, temp, _ = peak(c)
    return allocated + allocator_slack_bytes(act + temp)


@formula
def device_peak_bytes(c):
    return reserved_peak_bytes(c) + overhead_bytes(c) if runs(c) else NULL


@formula
def peak_phase(c):
    return peak(c)[1] if runs(c) else NULL


@formula
def capacity_bytes(c):
    return c.capacity_bytes


@formula
def fits(c):
    """1 when the device peak is within capacity less headroom, for a layout that can run at all."""
    if invalid_reason(c) != Invalid.OK:
        return 0
    if not has_dims(c):
        return NULL
    return int(device_peak_bytes(c) <= usable_bytes(c) and host_fits(c))


@formula
def bottleneck_code(c):
    return bottleneck(c, peak(c), overhead_bytes(c)) if runs(c) else NULL


@formula
def valid(c):
    return int(invalid_reason(c) == Invalid.OK)


@formula
def invalid_reason_code(c):
    return invalid_reason(c).value


@formula
def peak_grad_bytes(c):
    """Gradients live at the peak: all of them at the optimizer step, none at a forward peak without
    accumulation (zero_grad(set_to_none=True))."""
    return (device_grad_bytes(c) if peak(c)[4] else 0) if runs(c) else NULL


@formula
def peak_optimizer_bytes(c):
    """Optimizer states live at the peak (paged ones may be evicted during forward and backward)."""
    if not runs(c):
        return NULL
    allocated, _, act, temp, grads = peak(c)
    return allocated - device_weight_bytes(c) - act - temp - (device_grad_bytes(c) if grads else 0)


COLUMN_FORMULAS = {
    "weight_bytes": weight_bytes,
    "grad_bytes": grad_bytes,
    "optimizer_bytes": optimizer_bytes,
    "activation_bytes": activation_bytes,
    "temp_bytes": temp_bytes,
    "allocated_peak_bytes": allocated_peak_bytes,
    "reserved_peak_bytes": reserved_peak_bytes,
    "overhead_bytes": overhead_bytes,
    "device_peak_bytes": device_peak_bytes,
    "peak_phase": peak_phase,
    "capacity_bytes": capacity_bytes,
    "fits": fits,
    "bottleneck": bottleneck_code,
    "host_bytes": host_bytes,
    "valid": valid,
    "invalid_reason": invalid_reason_code,
    "peak_grad_bytes": peak_grad_bytes,
    "peak_optimizer_bytes": peak_optimizer_bytes,
}
assert list(COLUMN_FORMULAS) == OUTPUTS
