"""The peak of a logged step and what was alive at it, classified by role.

Roles at the peak (each live storage in exactly one; they add up to the peak):
    weights     parameters and buffers
    grads       storages that are some parameter's ``.grad`` when the step's last backward ends
    optimizer   optimizer state tensors (AdamW/Adam ``step`` counters excluded: host memory on CUDA)
    activations made in a forward of this step and still alive when that micro-step's backward
                starts, i.e. kept for backward (the inputs and the loss included), autocast casts of
                weights left out
    weight_casts  the autocast cache's half-precision copies of weights (``_to_copy`` of a parameter
                outside the optimizer step)
    temp        everything else: logits and loss buffers that die before backward, activation
                gradients, optimizer-step temporaries, recompute buffers

The peak is the largest sum of live bytes just after any allocation inside the measured step;
``rounded`` repeats the sweep with every storage rounded up to the CUDA allocator's 512-byte blocks.
"""

from __future__ import annotations

from collections import defaultdict

from engine.checks.measure.allocator_config import AllocatorConfig
from engine.checks.measure.allocator_replay import EXPANDABLE, replay_log
from engine.checks.measure.tracker import Alloc, LiveBytes, rounded_bytes

ALLOCATOR_CONFIGS = {"caching": AllocatorConfig(), "expandable": EXPANDABLE}  # the `allocator` input's values
PHASE_OF = {"forward": "forward", "backward": "backward", "optimizer": "optimizer", "zero_grad": "optimizer", "eval": "eval"}


def _counted(lb: LiveBytes) -> list[Alloc]:
    return [r for r in lb.records if not r.host]


def peak(lb: LiveBytes, start: int, end: int, rounded: bool = False) -> tuple[int, int]:
    """(peak bytes, tick of the allocation that reached it) over ticks ``start``..``end``."""
    size = rounded_bytes if rounded else (lambda n: n)
    events, live = [], 0
    for r in _counted(lb):
        n = size(r.nbytes)
        if r.born < start and (r.died is None or r.died > start):
            live += n
        if start <= r.born <= end:
            events.append((r.born, n))
        if r.died is not None and start <= r.died <= end:
            events.append((r.died, -n))
    best, best_tick = live, start
    for tick, delta in sorted(events):
        live += delta
        if live > best:
            best, best_tick = live, tick
    return best, best_tick


def alive_at(lb: LiveBytes, tick: int) -> list[Alloc]:
    """Counted storages alive just after ``tick``."""
    return [r for r in _counted(lb) if r.born <= tick and (r.died is None or r.died > tick)]


def role(r: Alloc, lb: LiveBytes, roles: dict[str, set[int]], step: int) -> str:
    """The role of record ``r`` (see module docstring); ``roles`` maps role -> set of ``id(record)``."""
    for name in ("weights", "grads", "optimizer", "weight_casts"):
        if id(r) in roles[name]:
            return name
    if r.phase == "forward" and r.step == step:
        bw = lb.marks.get(f"backward{step}.{r.micro}")
        if bw is not None and (r.died is None or r.died > bw):
            return "activations"
    return "temp"


def classify(records: list[Alloc], lb: LiveBytes, roles: dict[str, set[int]], step: int) -> dict[str, int]:
    """Bytes per role over ``records``."""
    out = dict.fromkeys(("weights", "grads", "optimizer", "activations", "weight_casts", "temp"), 0)
    for r in records:
        out[role(r, lb, roles, step)] += r.nbytes
    return out


def saved_for_backward(lb: LiveBytes, roles: dict[str, set[int]], step: int, micro: int = 0) -> list[Alloc]:
    """Activations of micro-step ``micro`` alive when its backward starts (weight casts left out)."""
    bw = lb.marks[f"backward{step}.{micro}"]
    return [r for r in alive_at(lb, bw)
            if r.step == step and r.micro == micro and role(r, lb, roles, step) == "activations"]


def per_layer(records: list[Alloc]) -> dict[int | None, dict[tuple[str, str, str], int]]:
    """Bytes grouped by block index, then by (module, op, dtype)."""
    out: dict = defaultdict(lambda: defaultdict(int))
    for r in records:
        out[r.layer][(r.module, r.op, r.dtype)] += r.nbytes
    return out


def measured_columns(lb: LiveBytes, start: int, end: int, parts: dict[str, int], saved: list[Alloc],
                     n_params: int, trainable_params: int, stream_of=lambda r: 0, allocator: str = "caching") -> dict:
    """The ``measured_*`` columns of one measured step: its allocated peak, what is alive then by role, the saved
    activations, the op that allocated the peak's last block (none: the step's start was its peak), and the
    reserved peak of the logged steps replayed through the caching-allocator model (allocator_replay.py: the default
    PYTORCH_CUDA_ALLOC_CONF, or expandable_segments:True when ``allocator`` says 'expandable'; ``stream_of`` says
    which stream allocated a record, all the default stream unless a
    framework's buffers say otherwise; a run on a GPU replaces it with ``max_memory_reserved()``)."""
    peak_bytes, tick = peak(lb, start, end)
    born = next(r for r in lb.records if r.born == tick) if tick != start else None
    return {
        "measured_allocated_peak_bytes": peak_bytes,
        "measured_allocated_rounded_bytes": peak(lb, start, end, rounded=True)[0],
        "measured_weight_bytes": parts["weights"],
        "measured_grad_bytes": parts["grads"],
        "measured_optimizer_bytes": parts["optimizer"],
        "measured_activation_bytes": parts["activations"],
        "measured_temp_bytes": parts["temp"] + parts["weight_casts"],
        "measured_weight_cast_bytes": parts["weight_casts"],
        "measured_saved_activation_bytes": sum(r.nbytes for r in saved),
        "measured_peak_phase": PHASE_OF[born.phase] if born else "optimizer",
        "measured_peak_op": born.op if born else "",
        "measured_n_params": n_params,
        "measured_trainable_params": trainable_params,
        "measured_reserved_peak_bytes": replay_log(lb, ALLOCATOR_CONFIGS[allocator],
                                                   stream_of=stream_of).reserved_peak_bytes,
    }
