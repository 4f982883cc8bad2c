"""The caching-allocator model on sequences worked out by hand from the rules of CUDACachingAllocator.cpp, and on
the sequences PyTorch's own tests (pytorch/pytorch test/test_cuda.py, read at commit 000e43cd) check.

Constants used in the comments: requests round up to 512 B; <= 1 MiB is "small" (2 MiB segments), 1-10 MiB
gets a 20 MiB segment, >= 10 MiB a segment of its own size rounded up to 2 MiB. A cached block is split when the
rest is >= 512 B (small pool, expandable segments) or > 1 MiB (large pool).
"""

import random

import pytest

from engine.checks.measure.allocator_config import AllocatorConfig, MiB, round_size
from engine.checks.measure.caching_allocator import CachingAllocator, OutOfMemoryError

KiB = 1024
EXPANDABLE = AllocatorConfig(expandable_segments=True)


def blocks(a: CachingAllocator) -> list[list[tuple[int, bool]]]:
    """Each segment's blocks as (size, allocated), segments by address."""
    return [[(b.size, b.allocated) for b in s.blocks] for s in a.snapshot()]


# ---- rounding and pools ---------------------------------------------------------------------------------------

def test_a_tiny_request_takes_512_bytes():
    a = CachingAllocator()
    a.malloc(4)  # round_size: < 512 -> 512
    assert a.allocated.current == 512 and a.reserved.current == 2 * MiB  # small pool: a 2 MiB segment


def test_three_600kib_requests_share_one_small_segment():
    # 600 KiB = 614,400 B, a multiple of 512, <= 1 MiB: small pool. The first gets a new 2 MiB segment and
    # splits it (rest 1,482,752 >= 512); the second and third split the rest: 2,097,152 - 3 x 614,400 = 253,952 free.
    a = CachingAllocator()
    for _ in range(3):
        a.malloc(600 * KiB)
    assert a.reserved.current == 2 * MiB
    assert blocks(a) == [[(614400, True)] * 3 + [(253952, False)]]


def test_a_5mib_request_reserves_20mib_and_the_next_splits_the_rest():
    # 5 MiB: between 1 and 10 MiB -> a 20 MiB segment, split (rest 15 MiB > 1 MiB). The second 5 MiB fits the
    # cached 15 MiB block and splits it again: 5 + 5 + 10 free, nothing more reserved.
    a = CachingAllocator()
    a.malloc(5 * MiB)
    assert a.reserved.current == 20 * MiB
    a.malloc(5 * MiB)
    assert a.reserved.current == 20 * MiB
    assert blocks(a) == [[(5 * MiB, True), (5 * MiB, True), (10 * MiB, False)]]


def test_a_12mib_request_reserves_its_size_rounded_to_2mib():
    # 12 MiB >= 10 MiB: its own segment, 12 MiB exactly. 12 MiB + 1 B rounds to 12 MiB + 512, its segment to
    # 14 MiB; the rest, 2 MiB - 512 B, is > 1 MiB, so it is split off and cached.
    a = CachingAllocator()
    a.malloc(12 * MiB)
    assert a.reserved.current == 12 * MiB
    a.malloc(12 * MiB + 1)
    assert a.reserved.current == 26 * MiB
    assert blocks(a)[1] == [(12 * MiB + 512, True), (2 * MiB - 512, False)]


def test_a_large_block_is_not_split_for_a_rest_of_1mib_or_less():
    # A cached 12 MiB block serves an 11.5 MiB request whole: the rest, 0.5 MiB, is not > 1 MiB. The allocator
    # counts the whole block as allocated (what max_memory_allocated reports).
    a = CachingAllocator()
    a.free(a.malloc(12 * MiB))
    a.malloc(11 * MiB + 512 * KiB)
    assert a.allocated.current == 12 * MiB and a.reserved.current == 12 * MiB


def test_freeing_then_asking_for_more_reserves_a_new_segment():
    # The freed 12 MiB block cannot hold 14 MiB: a new 14 MiB segment, and the 12 MiB one stays cached.
    a = CachingAllocator()
    a.free(a.malloc(12 * MiB))
    a.malloc(14 * MiB)
    assert a.reserved.current == 26 * MiB and a.allocated.current == 14 * MiB


def test_freed_neighbours_merge_into_one_block():
    # 5 + 5 + 10 free in one 20 MiB segment; freeing both 5s merges all three back into one 20 MiB block,
    # which then serves a 15 MiB request without a new segment.
    a = CachingAllocator()
    x, y = a.malloc(5 * MiB), a.malloc(5 * MiB)
    a.free(x)
    a.free(y)
    assert blocks(a) == [[(20 * MiB, False)]]
    a.malloc(15 * MiB)
    assert a.reserved.current == 20 * MiB


@pytest.mark.parametrize("sizes, freed, asked, taken", [
    # Cached: 16 MiB (freed first: older) and 12 MiB. An 11 MiB request takes the 12 MiB block (rest 1 MiB: not split).
    pytest.param((16, 12), (0, 1), 11, 1, id="the-smallest-block-that-fits"),
    # Two cached 12 MiB blocks, the higher one freed first: the request takes the lower one all the same.
    pytest.param((12, 12), (1, 0), 12, 0, id="ties-go-to-the-lowest-address"),
])
def test_best_fit_takes(sizes, freed, asked, taken):
    a = CachingAllocator()
    segments = [a.malloc(size * MiB) for size in sizes]  # >= 10 MiB: a segment each, in address order
    for k in freed:
        a.free(segments[k])
    a.malloc(asked * MiB)
    assert blocks(a) == [[(size * MiB, k == taken)] for k, size in enumerate(sizes)]


def test_streams_do_not_share_cached_blocks():
    a = CachingAllocator()
    a.free(a.malloc(12 * MiB, stream=0))
    a.malloc(12 * MiB, stream=1)
    assert a.reserved.current == 24 * MiB


# ---- max_split_size_mb, the GC, retries on OOM, empty_cache --------------------------------------------------

def test_max_split_size_keeps_oversize_blocks_whole():
    # max_split_size_mb:40. A cached 60 MiB block is oversize: a 30 MiB request (below 40) may not use it, so a new
    # 30 MiB segment is reserved (90 MiB). Without the option the 60 MiB block is split (60 MiB reserved).
    for conf, reserved in (("max_split_size_mb:40", 90 * MiB), ("", 60 * MiB)):
        a = CachingAllocator(AllocatorConfig.parse(conf))
        a.free(a.malloc(60 * MiB))
        a.malloc(30 * MiB)
        assert a.reserved.current == reserved


def test_an_oversize_block_serves_oversize_requests_up_to_20mib_smaller():
    # max_split_size_mb:40: the cached 60 MiB block serves 45 MiB (60 < 45 + 20) whole, unsplit; a cached 100 MiB
    # block does not serve 50 MiB (100 >= 50 + 20): a new 50 MiB segment.
    a = CachingAllocator(AllocatorConfig.parse("max_split_size_mb:40"))
    a.free(a.malloc(60 * MiB))
    a.malloc(45 * MiB)
    assert a.allocated.current == 60 * MiB and a.reserved.current == 60 * MiB
    a.free(a.malloc(100 * MiB))
    a.malloc(50 * MiB)
    assert a.reserved.current == 210 * MiB


def test_the_gc_frees_the_oldest_cached_blocks_first():
    # Capacity 400 MiB, fraction 0.5: 200 MiB allowed; threshold 0.5: GC above 100 MiB reserved.
    # 40 MiB allocated and freed (cached after search 1), then 70 MiB (cached after search 2): 110 MiB cached. An
    # 80 MiB request (search 3) finds no block: GC runs. Ages (searches since cached): 40 MiB block 2, 70 MiB block 1;
    # average 1.5, so the 40 MiB block goes; 40 >= the 10 MiB over the threshold, so the GC stops:
    # 70 + 80 = 150 MiB. Without GC: 110 + 80 = 190 MiB (within the 200 allowed).
    for gc, reserved in ((0.5, 150 * MiB), (0.0, 190 * MiB)):
        a = CachingAllocator(AllocatorConfig(garbage_collection_threshold=gc, memory_fraction=0.5), 400 * MiB)
        a.free(a.malloc(40 * MiB))
        a.free(a.malloc(70 * MiB))
        a.malloc(80 * MiB)
        assert a.reserved.current == reserved


def test_a_failed_cudamalloc_frees_cached_segments_and_retries():
    # Capacity 100 MiB: 60 MiB cached + a new 70 MiB does not fit; the retry frees the cached segment.
    a = CachingAllocator(capacity_bytes=100 * MiB)
    a.free(a.malloc(60 * MiB))
    a.malloc(70 * MiB)
    assert a.reserved.current == 70 * MiB and a.num_alloc_retries == 1


def test_out_of_memory_when_nothing_cached_can_go():
    a = CachingAllocator(capacity_bytes=100 * MiB)
    a.malloc(60 * MiB)
    with pytest.raises(OutOfMemoryError):
        a.malloc(50 * MiB)


def test_empty_cache_frees_whole_free_segments_only():
    # One 20 MiB segment holds a live 5 MiB block (its free 15 MiB stays); a free 12 MiB segment goes.
    a = CachingAllocator()
    a.malloc(5 * MiB)
    a.free(a.malloc(12 * MiB))
    a.empty_cache()
    assert a.reserved.current == 20 * MiB


# ---- expandable segments -------------------------------------------------------------------------------------

def test_expandable_segments_map_20mib_pages_in_the_large_pool():
    # 3 x 30 MiB = 90 MiB in one growing segment: ceil(90 / 20) = 5 pages of 20 MiB = 100 MiB (caching: 90 MiB).
    a = CachingAllocator(EXPANDABLE)
    for _ in range(3):
        a.malloc(30 * MiB)
    assert a.reserved.current == 100 * MiB and len(a.snapshot()) == 1


def test_expandable_segments_map_2mib_pages_in_the_small_pool():
    # 5 x 600 KiB = 3,000 KiB in the small pool's segment: 2 pages of 2 MiB.
    a = CachingAllocator(EXPANDABLE)
    for _ in range(5):
        a.malloc(600 * KiB)
    assert a.reserved.current == 4 * MiB


def test_expandable_segments_keep_reserved_near_allocated_when_requests_grow():
    # Requests growing from 10 to 20 MiB, each freed before the next: the caching allocator cannot reuse a smaller
    # cached segment for a larger request and reserves 10 + 12 + ... + 20 = 90 MiB; the expandable segment grows
    # the one free block in place, to 20 MiB = one page.
    sizes = [n * MiB for n in range(10, 21, 2)]
    for config, reserved in ((AllocatorConfig(), 90 * MiB), (EXPANDABLE, 20 * MiB)):
        a = CachingAllocator(config)
        for n in sizes:
            a.free(a.malloc(n))
        assert a.reserved.peak == reserved


def test_empty_cache_unmaps_the_free_pages_of_an_expandable_segment():
    # 30 MiB live, 30 MiB freed: 60 MiB = 3 pages mapped. The free block spans 30..60 MiB; whole pages inside it:
    # 40..60 MiB, one page. 40 MiB stay mapped.
    a = CachingAllocator(EXPANDABLE)
    a.malloc(30 * MiB)
    a.free(a.malloc(30 * MiB))
    a.empty_cache()
    assert a.reserved.current == 40 * MiB


def test_a_replay_of_random_traffic_keeps_the_books():
    # Allocated never exceeds reserved, and after freeing everything and empty_cache nothing stays reserved.
    rng = random.Random(7)
    for config in (AllocatorConfig(), EXPANDABLE, AllocatorConfig.parse("max_split_size_mb:64")):
        a, live = CachingAllocator(config), []
        for _ in range(3000):
            if live and rng.random() < 0.45:
                a.free(live.pop(rng.randrange(len(live))))
            else:
                live.append(a.malloc(rng.choice([rng.randrange(1, 1 << 20), rng.randrange(1, 200 << 20)])))
            assert a.allocated.current <= a.reserved.current
        for b in live:
            a.free(b)
        a.empty_cache()
        assert a.reserved.current == 0 and a.allocated.current == 0


# ---- PyTorch's own tests (test/test_cuda.py), replayed ---------------------------------------------------------

def test_allocator_settings_roundup_power2_divisions():
    # test_allocator_settings: 21 Mi floats = 84 MiB. Plain: 84 MiB. roundup_power2_divisions:4 -> 64 MiB + 16 MiB
    # steps -> 96 MiB. [64:8,...]: 8 steps of 8 MiB -> 88 MiB; 100 Mi floats = 400 MiB in the 256 MiB interval,
    # 2 divisions -> 512 MiB. (power2_div in the test gives the same numbers.)
    nbytes, big = 4 * 21 * MiB, 4 * 100 * MiB
    assert round_size(nbytes, AllocatorConfig()) == nbytes
    assert round_size(nbytes, AllocatorConfig.parse("roundup_power2_divisions:4")) == 96 * MiB
    array = AllocatorConfig.parse("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    assert round_size(nbytes, array) == 88 * MiB and round_size(big, array) == 512 * MiB


def test_memory_snapshot_puts_x_second_in_its_segment():
    # test_memory_snapshot: a temporary rand(2*311, 411) fp32 (1,022,568 B: small pool, one 2 MiB segment) is
    # freed; unused = rand(310, 410) takes the segment's front, x = rand(311, 411) comes second; 1000 tensors of
    # 128 floats (512 B) tile into the same segment and are freed in random order; rand(128*5) comes and goes.
    a = CachingAllocator()
    a.free(a.malloc(2 * 311 * 411 * 4))
    unused, x = a.malloc(310 * 410 * 4), a.malloc(311 * 411 * 4)
    tensors = [a.malloc(128 * 4) for _ in range(1000)]
    rng = random.Random(0)
    while tensors:
        a.free(tensors.pop(rng.randrange(len(tensors))))
    a.free(a.malloc(128 * 5 * 4))
    (segment,) = a.snapshot()
    assert segment.blocks[1].requested_size == 311 * 411 * 4 and segment.blocks[1].allocated
    assert segment.address + segment.blocks[0].size == x.ptr and a.reserved.current == 2 * MiB
    a.free(unused)
    a.free(x)
    a.empty_cache()
    assert a.reserved.current == 0  # the test's last trace action is segment_free


def _fraction_of_120mib(capacity: int) -> float:
    return 120 * MiB / capacity  # the tests allow 120 MiB (plus what was reserved before: none here)


def test_max_split_expandable():
    # Fraction: 120 MiB. 40 MiB plain, 40 MiB expandable, 40 MiB plain (120 MiB); a fourth 40 MiB is out of memory.
    # After freeing all three, 120 MiB: release_available_cached_blocks frees the two plain oversize segments (80 MiB
    # < 120, so it reports failure), release_cached_blocks unmaps the expandable one, and the retry succeeds.
    capacity = 80 * 1024 * MiB
    a = CachingAllocator(capacity_bytes=capacity)
    a.set_memory_fraction(_fraction_of_120mib(capacity))
    held = []
    for conf in ("expandable_segments:False", "expandable_segments:True", "expandable_segments:False"):
        a.set_allocator_settings(conf + ",max_split_size_mb:40")
        held.append(a.malloc(40 * MiB))
    with pytest.raises(OutOfMemoryError):
        a.malloc(40 * MiB)
    for b in held:
        a.free(b)
    a.malloc(120 * MiB)
    assert a.reserved.current == 120 * MiB and not a.expandable_segments


def test_garbage_collect_expandable():
    # Fraction: 120 MiB, GC threshold 0.5 (60 MiB). 40 MiB plain, 40 MiB expandable, both freed; 80 MiB (expandable)
    # finds no block, so the GC runs: 80 > 60, it frees the unsplit plain segment (the expandable block is split
    # from its unmapped rest, so it stays), and the expandable segment grows by 2 pages: 40 + 40 = 80 MiB.
    capacity = 80 * 1024 * MiB
    a = CachingAllocator(capacity_bytes=capacity)
    a.set_memory_fraction(_fraction_of_120mib(capacity))
    a.set_allocator_settings("expandable_segments:False,garbage_collection_threshold:0.5")
    x = a.malloc(40 * MiB)
    a.set_allocator_settings("expandable_segments:True,garbage_collection_threshold:0.5")
    y = a.malloc(40 * MiB)
    a.free(x)
    a.free(y)
    a.malloc(80 * MiB)
    assert a.reserved.current == 80 * MiB and a.num_device_free == 1


def test_unknown_or_out_of_range_options_are_refused():
    with pytest.raises(AssertionError):
        AllocatorConfig.parse("max_split_size_mb:2")  # parseMaxSplitSize: at least 20
    with pytest.raises(ValueError):
        AllocatorConfig.parse("foo:1")
