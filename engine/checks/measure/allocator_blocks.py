"""The caching allocator's data: blocks, the ordered free-block pools, expandable segments, snapshots.

Mirrors the structs of pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp``: ``Block`` (a piece of a segment,
linked to its neighbours by ``prev``/``next``), ``BlockPool`` (free blocks ordered by ``BlockComparatorSize``:
stream, then size, then address; unmapped expandable ranges ordered by ``BlockComparatorAddress``),
``ExpandableSegment`` (a reserved virtual range mapped page by page) and the ``SegmentInfo`` rows of
``snapshot()``. The rules that move blocks between them live in ``caching_allocator.py``.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field


class Block:
    """A piece of a segment: free (in its pool) or allocated; ``mapped`` is False only for the unmapped part
    of an expandable segment."""

    __slots__ = ("size", "ptr", "stream", "pool", "allocated", "requested", "prev", "next", "expandable",
                 "mapped", "gc_count_base", "key", "owner")

    def __init__(self, size: int, ptr: int, stream: int, pool: "BlockPool", expandable=None, mapped: bool = True):
        self.size, self.ptr, self.stream, self.pool = size, ptr, stream, pool
        self.allocated, self.requested = False, 0
        self.prev: Block | None = None
        self.next: Block | None = None
        self.expandable: ExpandableSegment | None = expandable
        self.mapped = mapped
        self.gc_count_base = 0
        self.key: tuple | None = None  # its key in the pool set it is in (taken when inserted)
        self.owner = None  # what the caller allocated it for (a snapshot's "frames"), while allocated

    def is_split(self) -> bool:
        """``Block::is_split``: it shares its segment with a neighbour."""
        return self.prev is not None or self.next is not None

    def splice(self, before: "Block | None", after: "Block | None") -> None:
        """``Block::splice``: put this block between ``before`` and ``after``."""
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after

    def gc_count(self) -> int:
        """``Block::gc_count``: free-block searches in its pool since it was cached (its age for the GC)."""
        return self.pool.get_free_blocks_call_count - self.gc_count_base


class OrderedBlocks:
    """A ``std::set<Block*>`` ordered by a key function: ``lower_bound``, ordered iteration, erase by block."""

    def __init__(self, key) -> None:
        self._key = key
        self.keys: list[tuple] = []
        self.blocks: dict[tuple, Block] = {}

    def insert(self, b: Block) -> None:
        b.key = self._key(b)
        insort(self.keys, b.key)
        self.blocks[b.key] = b

    def erase(self, b: Block) -> None:
        i = bisect_left(self.keys, b.key)
        assert i < len(self.keys) and self.keys[i] == b.key, "block not in this set"
        del self.keys[i]
        del self.blocks[b.key]
        b.key = None

    def lower_bound(self, key: tuple) -> int:
        """Index of the first block whose key is not less than ``key``."""
        return bisect_left(self.keys, key)

    def at(self, i: int) -> Block:
        return self.blocks[self.keys[i]]

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self):
        return iter([self.blocks[k] for k in self.keys])  # a copy: callers release blocks while iterating


def by_size(b: Block) -> tuple:
    """``BlockComparatorSize``: stream, then size, then address."""
    return (b.stream, b.size, b.ptr)


def by_address(b: Block) -> tuple:
    """``BlockComparatorAddress``: stream, then address."""
    return (b.stream, b.ptr)


class BlockPool:
    """``BlockPool``: the cached free blocks of one pool (small or large), all streams in one ordered set."""

    def __init__(self, small: bool) -> None:
        self.is_small = small
        self.blocks = OrderedBlocks(by_size)
        self.unmapped = OrderedBlocks(by_address)
        self.get_free_blocks_call_count = 0

    def insert_into_blocks(self, b: Block) -> None:
        """``BlockPool::insert_into_blocks``: cache a free block and start its GC age."""
        b.gc_count_base = self.get_free_blocks_call_count
        self.blocks.insert(b)


class ExpandableSegment:
    """``ExpandableSegment``: a virtual range of ``max_handles`` pages of ``page_size`` bytes (2 MiB in the small
    pool, ``large_segment_size`` in the large one) of which some are mapped to physical memory."""

    def __init__(self, base: int, page_size: int, max_handles: int, stream: int) -> None:
        self.base, self.page_size, self.max_handles, self.stream = base, page_size, max_handles, stream
        self.mapped_pages: set[int] = set()

    def size(self) -> int:
        return self.max_handles * self.page_size

    def page_range(self, ptr: int, size: int, outward: bool) -> tuple[int, int]:
        """Pages ``[begin, end)`` covering (``outward``: ``segmentLeft``/``segmentRight`` as ``map`` takes them)
        or inside (``unmap``: only whole pages) the bytes ``[ptr, ptr + size)``."""
        lo, hi = ptr - self.base, ptr + size - self.base
        ceil = lambda n: -(-n // self.page_size)
        return (lo // self.page_size, ceil(hi)) if outward else (ceil(lo), hi // self.page_size)


@dataclass
class BlockInfo:
    """One block of a snapshot segment (``BlockInfo``)."""

    size: int
    requested_size: int
    allocated: bool
    owner: object = None


@dataclass
class SegmentInfo:
    """One segment of ``snapshot()`` (for expandable segments: one contiguous mapped range)."""

    address: int
    stream: int
    is_large: bool
    is_expandable: bool
    blocks: list[BlockInfo] = field(default_factory=list)
    made_by: object = None  # owner of the request that made the segment (``context_when_segment_allocated``)

    @property
    def total_size(self) -> int:
        return sum(b.size for b in self.blocks)

    @property
    def allocated_size(self) -> int:
        return sum(b.size for b in self.blocks if b.allocated)


def snapshot(blocks: list[Block], made_by: dict[int, object] | None = None) -> list[SegmentInfo]:
    """``snapshot()``: every segment, from its head block along ``next`` while mapped, ordered by address;
    ``made_by`` maps a segment's address to the owner of the request that made it."""
    out = []
    for head in blocks:
        if head.prev is not None and head.prev.mapped:
            continue
        if not head.mapped:
            continue  # an unmapped range is address space, not memory
        base = head.expandable.base if head.expandable is not None else head.ptr
        seg = SegmentInfo(head.ptr, head.stream, not head.pool.is_small, head.expandable is not None,
                          made_by=(made_by or {}).get(base))
        b = head
        while b is not None and b.mapped:
            seg.blocks.append(BlockInfo(b.size, b.requested, b.allocated, b.owner if b.allocated else None))
            b = b.next
        out.append(seg)
    return sorted(out, key=lambda s: s.address)
