"""Replaying an allocation log through the caching-allocator model (allocator_replay.py), on logs written by hand."""

from dataclasses import dataclass
from types import SimpleNamespace

from engine.checks.measure.allocator_config import MiB
from engine.checks.measure.allocator_replay import (
    EXPANDABLE,
    log_events,
    replay_log,
    replay_records,
    bisected_capacity,
    first_failure,
    runs_in,
)


@dataclass
class Rec:
    """The fields of tracker.Alloc the replay reads."""

    nbytes: int
    born: int
    died: int | None = None
    host: bool = False


def test_the_reserved_peak_keeps_a_freed_segment():
    # 12 MiB born at 1, freed at 2; 14 MiB born at 3 cannot reuse it: 12 + 14 = 26 MiB reserved, 14 MiB allocated.
    r = replay_records([Rec(12 * MiB, 1, 2), Rec(14 * MiB, 3)])
    assert (r.reserved_peak_bytes, r.allocated_peak_bytes) == (26 * MiB, 14 * MiB)


def test_host_records_are_not_replayed():
    r = replay_records([Rec(12 * MiB, 1), Rec(40 * MiB, 2, host=True)])
    assert r.reserved_peak_bytes == 12 * MiB


def test_the_snapshot_is_taken_at_the_reserved_peak_with_owners():
    # 5 MiB (a 20 MiB segment, 15 MiB of it cached), 16 MiB (too big for that: its own segment): peak 36 MiB at
    # event 1; the frees after it do not move it.
    log = [Rec(5 * MiB, 1, 4), Rec(16 * MiB, 2, 3)]
    r = replay_records(log)
    assert r.peak_event == 1 and [s.total_size for s in r.segments_at_peak] == [20 * MiB, 16 * MiB]
    assert r.segments_at_peak[1].blocks[0].owner is log[1]


def _two_steps():
    """A weight; step 0 (ticks 2-9): a gradient born at 4 that lives on, activations; step 1 (ticks 10-17): zero_grad
    frees step 0's gradient (tick 11), a new gradient is born (13) and lives on."""
    weight = Rec(30 * MiB, 1)
    step0 = [Rec(50 * MiB, 3, 5), Rec(30 * MiB, 4, 11), Rec(12 * MiB, 6, 7)]
    step1 = [Rec(50 * MiB, 12, 14), Rec(30 * MiB, 13), Rec(12 * MiB, 15, 16)]
    lb = SimpleNamespace(records=[weight, *step0, *step1], marks={"step0": 2, "end0": 9, "step1": 10, "end1": 17})
    return lb


def test_repeating_the_last_step_frees_its_survivors_in_the_next():
    # Step 1 frees the gradient step 0 left (30 MiB) and leaves its own; each repetition frees the previous one's.
    # Reserved then stays where two steps put it, and every carried-in free finds its match.
    lb = _two_steps()
    two, five = replay_log(lb), replay_log(lb, steps=5)
    assert five.unmatched_frees == 0
    assert five.reserved_peak_bytes == two.reserved_peak_bytes
    assert five.allocated_peak_bytes == two.allocated_peak_bytes == (30 + 50 + 30) * MiB  # weight, acts, grad


def test_expandable_segments_replay_the_same_log():
    # The same two steps with expandable segments: one growing segment, reserved a whole number of 20 MiB pages.
    r = replay_log(_two_steps(), EXPANDABLE)
    assert r.reserved_peak_bytes % (20 * MiB) == 0 and len(r.segments_at_peak) == 1


def test_a_run_needs_what_no_release_can_free_not_its_reserved_peak():
    # 60 MiB freed, then 20 MiB splits its segment (40 MiB free inside it) and 50 MiB makes a new one: 110 MiB, which
    # the run needs, since no release frees a segment that holds a block. Once the 20 MiB block goes, 100 MiB makes a
    # third segment (210 MiB reserved), but a failed cudaMalloc would first release the wholly free 60 MiB one: the
    # run needs 150 MiB where max_memory_reserved() says 210.
    log = [Rec(60 * MiB, 1, 2), Rec(20 * MiB, 3, 5), Rec(50 * MiB, 4), Rec(100 * MiB, 6)]
    assert replay_records(log).reserved_peak_bytes == 210 * MiB
    events = log_events(log)
    assert bisected_capacity(events) == 150 * MiB and not runs_in(events, 148 * MiB)
    assert first_failure(events, 150 * MiB) is None and first_failure(events, 140 * MiB) == 140 * MiB


def test_a_run_can_fail_on_a_device_larger_than_one_it_runs_on():
    # A failed cudaMalloc early on a 44 MiB device releases a cached segment, and later blocks go elsewhere than on a
    # 46 MiB device, where that release never happens and the last request finds nothing wholly free to release.
    # So a capacity found by bisection is an estimate, and FITS is checked on every larger device (first_failure).
    log = [Rec(19 * MiB, 1, 2), Rec(25 * MiB, 3, 5), Rec(11 * MiB, 4, 10), Rec(int(10.8 * MiB), 6, 8), Rec(MiB, 7, 9)]
    events = log_events(log)
    assert replay_records(log).reserved_peak_bytes == 48 * MiB
    assert [runs_in(events, n * MiB) for n in (44, 46, 48)] == [True, False, True]
    assert first_failure(events, 44 * MiB) == 46 * MiB
