"""Multi-GPU layouts the harness measures (rank 0 of a world simulated in one process).

``check(c)`` refuses what no path runs yet: today one device only.
"""

from __future__ import annotations

from engine.errors import UserError

SINGLE_DEVICE = ("tp", "pp", "cp", "ep", "n_gpus", "dp")


def check(c: dict) -> None:
    """UserError for a layout the harness cannot run."""
    for k in SINGLE_DEVICE:
        if c[k] != 1:
            raise UserError(f"{k}={c[k]} cannot be measured: the harness runs one device (all parallel degrees 1)")
    if c["zero_stage"] or c["sp"]:
        raise UserError("zero_stage and sp need several devices: measure with zero_stage=0, sp=false")
    if c["framework"] != "pytorch":
        raise UserError(f"framework={c['framework']!r} cannot be measured here; accepted: pytorch")
    if c["n_experts"]:
        raise UserError("mixture-of-experts models are not measured (n_experts must be 0)")
    if c["loss_parallel"]:
        raise UserError("loss_parallel needs tp > 1, which the harness does not run")
