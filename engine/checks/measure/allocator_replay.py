"""Replay a traced run's allocations and frees through the caching-allocator model: the run's reserved memory.

The tracker (``tracker.LiveBytes``) logs every storage with its size and the clock ticks of its birth and death;
every allocation and every free has a tick of its own, so sorting the events by tick gives the order in which
PyTorch's ``malloc`` and ``free`` saw them. ``replay_records`` feeds that order to ``caching_allocator`` and
returns the peaks PyTorch would report (``max_memory_reserved``, ``max_memory_allocated``) and the segments at
the reserved peak (``memory._snapshot()``), each allocated block labelled with the record it holds.

Over the steps the harness ran (step 0 creates the optimizer states, step 1 is measured) the log is replayed as
it is, from the start of step 0: what the harness allocated while it set the run up comes in only as far as it is
still alive then (the states training begins with). ``repeat_last_step`` adds more steps by replaying the last one
again: its storages get fresh identities, and a storage born before the step and freed in it (the previous step's
gradients, freed by ``zero_grad``) frees instead the storage of the same size that the previous repetition left
alive, matched first in, first out.

All storages are on one stream unless ``stream_of`` says otherwise: a multi-GPU rank logs the stream each
allocation was made on (``buffer_tags.stream_scopes``), and the caching allocator keeps one pool per stream.

Examples
--------
>>> from types import SimpleNamespace as Rec  # any object with the tracker's nbytes, born, died, host
>>> log = [Rec(nbytes=600 * 1024, born=1, died=3, host=False), Rec(nbytes=5 << 20, born=2, died=None, host=False)]
>>> r = replay_records(log)
>>> r.reserved_peak_bytes >> 20, r.allocated_peak_bytes
(22, 5857280)
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from engine.checks.measure.allocator_blocks import SegmentInfo
from engine.checks.measure.allocator_config import AllocatorConfig
from engine.checks.measure.caching_allocator import CachingAllocator, OutOfMemoryError

if TYPE_CHECKING:  # the replay reads only nbytes, born, died and host: it needs no torch
    from engine.checks.measure.tracker import Alloc

EXPANDABLE = AllocatorConfig(expandable_segments=True)  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True


@dataclass
class Replay:
    """What the allocator model reports after a replay."""

    reserved_peak_bytes: int
    """``torch.cuda.max_memory_reserved()``: the most the segments ever held."""
    allocated_peak_bytes: int
    """``torch.cuda.max_memory_allocated()``: the most the allocated blocks ever held (rounded sizes)."""
    segments_at_peak: list[SegmentInfo] = field(default_factory=list)
    """``memory._snapshot()`` just after the event that set the reserved peak; block owners are the records."""
    peak_event: int = -1
    """Index of that event in the replayed order (an allocation)."""
    unmatched_frees: int = 0
    """Repeated steps only: frees of carried-in storages no survivor of the previous repetition matched."""


Event = tuple[int, int, object, "Alloc"]  # (order, +1 alloc / -1 free, identity of the storage, its record)


def log_events(records: list[Alloc], until: int | None = None, since: int | None = None) -> list[Event]:
    """Allocations and frees of the device-resident records (host ones left out), in tick order, up to tick
    ``until`` (what is freed after the last step, when the harness drops the model, is not training). With
    ``since``, what the harness allocated before that tick is replayed only as far as it is still alive then,
    allocated at the start in birth order: the states a framework has when training begins, not the harness's way
    of making them (a multi-GPU rank materializes whole parameters before sharding them; torchtitan and
    accelerate initialize on the meta device and allocate only the shards)."""
    out = []
    for r in records:
        if r.host or (until is not None and r.born > until):
            continue
        if since is not None and r.born < since and r.died is not None and r.died <= since:
            continue  # the harness's own transient
        out.append((r.born, 1, id(r), r))
        if r.died is not None and (until is None or r.died <= until):
            out.append((r.died, -1, id(r), r))
    return sorted(out, key=lambda e: e[0])


def repeated_step_events(records: list[Alloc], start: int, end: int, repeats: int) -> tuple[list[Event], int]:
    """The events of the step logged between ticks ``start`` and ``end``, ``repeats`` more times; and how many
    frees of carried-in storages found no survivor to free."""
    born_in = lambda r: start <= r.born <= end
    step = [e for e in log_events(records, end) if e[0] >= start]
    survivors = defaultdict(deque)  # nbytes -> storages the step leaves alive, in birth order
    for r in sorted((r for r in records if not r.host and born_in(r) and (r.died is None or r.died > end)),
                    key=lambda r: r.born):
        survivors[r.nbytes].append(r)
    carried = sorted((e[3] for e in step if e[1] < 0 and not born_in(e[3])), key=lambda r: r.born)
    heir = {}  # carried-in storage -> the survivor of the same size that takes its place one step later
    for r in carried:
        if survivors[r.nbytes]:
            heir[id(r)] = survivors[r.nbytes].popleft()
    out, unmatched, offset = [], 0, end
    for k in range(1, repeats + 1):
        for tick, sign, _, r in step:
            if born_in(r):
                out.append((offset + tick - start + 1, sign, (k, id(r)), r))
            elif id(r) in heir:  # free what the previous repetition (or the logged step, k = 1) left alive
                s = heir[id(r)]
                out.append((offset + tick - start + 1, sign, (k - 1, id(s)) if k > 1 else id(s), s))
            else:
                unmatched += 1
        offset += end - start + 1
    return out, unmatched


def replay_events(events: list[Event], config: AllocatorConfig = AllocatorConfig(), capacity_bytes: int | None = None,
                  stream_of=lambda r: 0, stop_after: int | None = None) -> tuple[CachingAllocator, int]:
    """Run ``events`` through a fresh allocator (up to index ``stop_after``); the allocator and the index of the
    event that set its reserved peak."""
    a, live, best, best_at = CachingAllocator(config, capacity_bytes), {}, -1, -1
    for i, (_, sign, key, r) in enumerate(events):
        if sign > 0:
            live[key] = a.malloc(r.nbytes, stream_of(r), owner=r)
            if a.reserved.peak > best:
                best, best_at = a.reserved.peak, i
        else:
            a.free(live.pop(key))
        if i == stop_after:
            break
    return a, best_at


def replay_records(records: list[Alloc], config: AllocatorConfig = AllocatorConfig(), capacity_bytes: int | None = None,
                   stream_of=lambda r: 0, until: int | None = None, extra_events: list[Event] | None = None,
                   unmatched: int = 0, since: int | None = None) -> Replay:
    """Replay the logged run from tick ``since`` (``log_events``) up to tick ``until`` (plus ``extra_events``, e.g.
    repeated steps after it) and take the snapshot at the reserved peak."""
    events = log_events(records, until, since) + (extra_events or [])
    return replay(events, config, capacity_bytes, stream_of, unmatched)


def replay(events: list[Event], config: AllocatorConfig = AllocatorConfig(), capacity_bytes: int | None = None,
           stream_of=lambda r: 0, unmatched: int = 0) -> Replay:
    """Replay ``events`` and take the snapshot at the reserved peak."""
    a, peak_at = replay_events(events, config, capacity_bytes, stream_of)
    at_peak, _ = replay_events(events, config, capacity_bytes, stream_of, stop_after=peak_at)
    return Replay(a.reserved.peak, a.allocated.peak, at_peak.snapshot(), peak_at, unmatched)


def logged_events(lb, steps: int | None = None, last_step: int = 1) -> tuple[list[Event], int]:
    """The events of a ``LiveBytes`` log as ``replay_log`` replays them (the steps it holds, or ``steps`` in all by
    repeating step ``last_step``), and how many carried-in frees no survivor matched."""
    start, end = lb.marks[f"step{last_step}"], lb.marks[f"end{last_step}"]
    # training begins: the harness's setup transients are not replayed; or FSDP1 starts bringing rank 0's host copy
    # of the model to the GPU (fsdp1_init.py), whose transients the cache keeps into training
    since = lb.marks.get("init", lb.marks.get("step0"))
    if steps is None or steps <= last_step + 1:
        return log_events(lb.records, end, since), 0
    extra, unmatched = repeated_step_events(lb.records, start, end, steps - last_step - 1)
    return log_events(lb.records, end, since) + extra, unmatched


def replay_log(lb, config: AllocatorConfig = AllocatorConfig(), steps: int | None = None, last_step: int = 1,
               capacity_bytes: int | None = None, stream_of=lambda r: 0) -> Replay:
    """Replay a ``LiveBytes`` log: the steps it holds, or ``steps`` in all by repeating step ``last_step``.

    Examples
    --------
    ``replay_log(lb).reserved_peak_bytes`` is the reserved peak of the two logged steps;
    ``replay_log(lb, EXPANDABLE, steps=3)`` the same with expandable segments over three steps.
    """
    events, unmatched = logged_events(lb, steps, last_step)
    return replay(events, config, capacity_bytes, stream_of, unmatched)


def runs_in(events: list[Event], capacity_bytes: int, config: AllocatorConfig = AllocatorConfig(),
            stream_of=lambda r: 0) -> bool:
    """Whether the events run on a device of ``capacity_bytes`` without an out-of-memory error."""
    try:
        replay_events(events, config, capacity_bytes, stream_of)
    except OutOfMemoryError:
        return False
    return True


SEGMENT_STEP = 2 << 20  # every segment is a multiple of 2 MiB, so is the reserve: capacities differ in whole steps


def bisected_capacity(events: list[Event], config: AllocatorConfig = AllocatorConfig(), stream_of=lambda r: 0) -> int:
    """About the least device memory the events run in (what PyTorch may reserve: the GPU's memory less what lives
    outside its allocator): a capacity they run in where 2 MiB less fails, found by bisection between just below
    the allocated peak, where nothing runs, and the reserved peak, where the run is the unlimited one.

    It can be well under the reserved peak: when a cudaMalloc fails the allocator releases its cached segments that
    are wholly free (first those of oversize blocks, then every one, on every stream) and tries again before it
    raises (CUDACachingAllocator.cpp `malloc`: `release_available_cached_blocks`, `release_cached_blocks`); what
    it cannot release is the free space inside segments that still hold a block. But success is not monotonic in
    the capacity: a release early on changes where later blocks go, which can pin a segment that a larger device
    would have kept whole and released later (tests/test_allocator_replay.py has such a run). So this is an estimate
    of what a run needs, not a bound; whether a run completes on every device from a given size up is
    `first_failure`'s question.

    Examples
    --------
    A 40 MiB block freed, then a 60 MiB one: the cache keeps the first segment, so 100 MiB are reserved; on a
    device of 60 MiB the second cudaMalloc fails, the free 40 MiB segment is released, and the retry succeeds.

    >>> from types import SimpleNamespace as Rec
    >>> log = [Rec(nbytes=40 << 20, born=1, died=2, host=False), Rec(nbytes=60 << 20, born=3, died=None, host=False)]
    >>> events = log_events(log)
    >>> replay_events(events)[0].reserved.peak >> 20, bisected_capacity(events) >> 20
    (100, 60)
    """
    a, _ = replay_events(events, config, None, stream_of)
    lo, hi = -(-a.allocated.peak // SEGMENT_STEP) - 1, -(-a.reserved.peak // SEGMENT_STEP)  # lo fails, hi runs
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if runs_in(events, mid * SEGMENT_STEP, config, stream_of):
            hi = mid
        else:
            lo = mid
    return hi * SEGMENT_STEP


def first_failure(events: list[Event], from_bytes: int, config: AllocatorConfig = AllocatorConfig(),
                  stream_of=lambda r: 0) -> int | None:
    """The smallest device capacity of at least ``from_bytes`` (in whole 2 MiB steps) on which the events raise out
    of memory, or None where they run on every one: from the reserved peak up every capacity replays as an
    unlimited device does, so only the steps below it are tried."""
    reserved = replay_events(events, config, None, stream_of)[0].reserved.peak
    for step in range(-(-from_bytes // SEGMENT_STEP), -(-reserved // SEGMENT_STEP)):
        if not runs_in(events, step * SEGMENT_STEP, config, stream_of):
            return step * SEGMENT_STEP
    return None
