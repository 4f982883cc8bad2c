"""PyTorch's CUDA caching allocator, modelled in plain Python: what ``torch.cuda.memory_reserved()`` holds.

A faithful, readable port of ``DeviceCachingAllocator`` in pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp``
for one device. Read at the revision with ``AcceleratorAllocatorConfig`` and ``large_segment_size()`` (2.9 and
later, the one torch 2.13's headers match: kSmallBuffer ... kRoundLarge in ``c10/core/AllocatorConfig.h``), checked
against pytorch/pytorch commit 001074d25084 (2.5 era: the same rules with ``kLargeBuffer`` in place of
``large_segment_size()`` and the GC gated by ``set_fraction``). Each rule below names the function it ports.

    malloc(size)    round_size; pick the pool (<= 1 MiB small, else large; per stream by the set's ordering);
                    get_free_block (best fit: the smallest cached block of this stream at least this large,
                    ties to the lowest address); else garbage_collect_cached_blocks (if a GC threshold and a
                    memory fraction are set), alloc_block (a new cudaMalloc segment of get_allocation_size, or
                    mapping pages of the stream's expandable segment), release_available_cached_blocks
                    (oversize blocks, with max_split_size) and alloc_block again, release_cached_blocks (every
                    unsplit cached segment) and alloc_block again; else out of memory. Then should_split and
                    alloc_found_block: the block is split when the remainder is >= 512 B (small pool or
                    expandable) or > 1 MiB (large pool, request below max_split_size).
    free(block)     free_block: merge with free neighbours (try_merge_blocks), back into its pool.
    empty_cache()   release_cached_blocks: cudaFree every cached segment that is one whole free block; unmap
                    every whole free page of expandable segments.

Modelled: the rules above, per stream, with max_split_size_mb, max_non_split_rounding_mb,
roundup_power2_divisions, garbage_collection_threshold (with set_per_process_memory_fraction), expandable_segments,
large_segment_size_mb and a device capacity for cudaMalloc failures. Not modelled: cross-stream uses
(``recordStream`` events delay a free until the other stream passes it), CUDA graph private pools and mempools,
free-memory callbacks, IPC, and the driver's choice of addresses (new segments get increasing addresses here, so
ties between equal-sized free blocks go to the older segment).

Examples
--------
>>> a = CachingAllocator()
>>> x = a.malloc(600 * 1024)  # small pool: a 2 MiB segment
>>> a.reserved.current // MiB, a.allocated.current // 1024
(2, 600)
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.checks.measure.allocator_blocks import Block, BlockPool, ExpandableSegment, snapshot
from engine.checks.measure.allocator_expandable import ExpandableSegments
from engine.checks.measure.allocator_release import ReleasingCachedBlocks
from engine.checks.measure.allocator_config import (
    K_MIN_BLOCK_SIZE,
    K_SMALL_SIZE,
    AllocatorConfig,
    MiB,
    allocation_size,
    is_small,
    round_size,
)

ADDRESS_START = 0x7F00_0000_0000  # where the modelled device's segments start (any value works)
ADDRESS_ALIGN = 2 * MiB  # each new segment starts on a 2 MiB boundary


class OutOfMemoryError(RuntimeError):
    """``torch.OutOfMemoryError``: no cached block fits and the device has no room for a new segment."""


@dataclass
class Stat:
    """``Stat``: a current value and its high-water mark."""

    current: int = 0
    peak: int = 0

    def increase(self, n: int) -> None:
        self.current += n
        self.peak = max(self.peak, self.current)

    def decrease(self, n: int) -> None:
        self.current -= n
        assert self.current >= 0, "negative stat: the model freed more than it had"


class _Request:
    """``AllocParams``: one malloc's rounded size, pool, stream, segment size and (once found) block."""

    def __init__(self, size: int, stream: int, pool: BlockPool, alloc_size: int, owner) -> None:
        self.size, self.stream, self.pool, self.alloc_size, self.owner = size, stream, pool, alloc_size, owner
        self.block: Block | None = None


class CachingAllocator(ExpandableSegments, ReleasingCachedBlocks):
    """One device's caching allocator.

    Parameters
    ----------
    config : AllocatorConfig
        The ``PYTORCH_CUDA_ALLOC_CONF`` options (defaults: PyTorch's).
    capacity_bytes : int, optional
        Device memory: ``cudaMalloc`` fails when reserved memory would exceed it (then cached blocks are released
        and the request retried, as PyTorch does); None never fails.
    """

    def __init__(self, config: AllocatorConfig = AllocatorConfig(), capacity_bytes: int | None = None) -> None:
        self.config, self.capacity = config, capacity_bytes
        self.large_blocks, self.small_blocks = BlockPool(small=False), BlockPool(small=True)
        self.active: set[Block] = set()
        self.allocated, self.reserved, self.requested, self.segments = Stat(), Stat(), Stat(), Stat()
        self.num_alloc_retries = self.num_device_alloc = self.num_device_free = 0
        self.expandable_segments: list[ExpandableSegment] = []
        self.segment_owner: dict[int, object] = {}  # segment address -> owner of the request that made it
        self._next_address = ADDRESS_START
        self.allowed_memory_maximum: int | None = None
        self.set_memory_fraction(config.memory_fraction)

    # ---- public API (malloc, free, emptyCache, snapshot) --------------------------------------------------

    def malloc(self, nbytes: int, stream: int = 0, owner=None) -> Block:
        """``malloc``: a block of at least ``nbytes`` on ``stream``, from the cache or a new segment. ``owner`` labels
        the block while it is allocated, and the segment if this request makes one (a snapshot's "frames")."""
        size = round_size(nbytes, self.config)
        pool = self.small_blocks if is_small(size) else self.large_blocks
        p = _Request(size, stream, pool, allocation_size(size, self.config), owner)
        found = self._get_free_block(p)
        if not found:
            if self.allowed_memory_maximum is not None and self.config.garbage_collection_threshold > 0:
                self._garbage_collect_cached_blocks()
            found = (self._alloc_block(p, retry=False)
                     or (self._release_available_cached_blocks(p) and self._alloc_block(p, retry=False))
                     or (self._release_cached_blocks() and self._alloc_block(p, retry=True)))
        if not found:
            raise OutOfMemoryError(f"tried to allocate {p.alloc_size} bytes with {self.reserved.current} reserved "
                                   f"and {self.allocated.current} allocated of {self.capacity}")
        block = self._alloc_found_block(p, nbytes, self._should_split(p.block, size))
        block.owner = owner
        return block

    def free(self, block: Block) -> None:
        """``free``: the block goes back to its pool (no other stream used it, so no events to wait for)."""
        assert block.allocated, "double free"
        block.allocated, block.owner = False, None
        self.allocated.decrease(block.size)
        self.requested.decrease(block.requested)
        self._free_block(block)

    def set_memory_fraction(self, fraction: float) -> None:
        """``setMemoryFraction``: cap reserved memory at ``fraction`` of the capacity (only below 1)."""
        self.allowed_memory_maximum = None
        if fraction < 1.0:
            assert self.capacity is not None, "a memory fraction needs the device capacity"
            self.allowed_memory_maximum = int(fraction * self.capacity)

    def set_allocator_settings(self, conf: str) -> None:
        """``torch.cuda.memory._set_allocator_settings``: options not named return to their defaults; the
        allocator reads them at every call, as the C++ one reads its global config."""
        self.config = AllocatorConfig.parse(conf)

    def empty_cache(self) -> None:
        """``emptyCache``: ``release_cached_blocks``."""
        self._release_cached_blocks()

    def snapshot(self):
        """``snapshot()``: the segments and their blocks now (``allocator_blocks.SegmentInfo``)."""
        free = [*self.small_blocks.blocks, *self.large_blocks.blocks]
        return snapshot([*free, *self.active], self.segment_owner)

    # ---- finding a cached block --------------------------------------------------------------------------

    def _gc_enabled(self) -> bool:
        return self.allowed_memory_maximum is not None and self.config.garbage_collection_threshold > 0

    def _get_free_block(self, p: _Request) -> bool:
        """``get_free_block``: best fit in the pool's (stream, size, address) order, with the expandable and
        max_split_size exceptions."""
        pool, cfg = p.pool, self.config
        if self._gc_enabled():
            pool.get_free_blocks_call_count += 1  # the GC's clock: block ages count these searches
        i = pool.blocks.lower_bound((p.stream, p.size, 0))
        if i == len(pool.blocks) or pool.blocks.at(i).stream != p.stream:
            return False
        if pool.blocks.at(i).expandable is not None and cfg.expandable_segments:
            # Best fit counts an expandable block as the size it can grow to (itself + the unmapped rest after it).
            grown = lambda b: b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
            while (pool.blocks.at(i).expandable is not None and i + 1 < len(pool.blocks)
                   and pool.blocks.at(i + 1).stream == p.stream
                   and grown(pool.blocks.at(i + 1)) < grown(pool.blocks.at(i))):
                i += 1
        elif pool.blocks.at(i).expandable is not None:  # expandable segments switched off since: skip their blocks
            i += 1
            while i < len(pool.blocks) and pool.blocks.at(i).expandable is not None \
                    and pool.blocks.at(i).stream == p.stream:
                i += 1
            if i == len(pool.blocks) or pool.blocks.at(i).stream != p.stream:
                return False
        b = pool.blocks.at(i)
        if p.size < cfg.max_split_size <= b.size:
            return False  # never hand an oversize block to a request that could split
        if p.size >= cfg.max_split_size and b.size >= p.size + cfg.max_non_split_rounding_size:
            return False  # an oversize block serves an oversize request only if at most 20 MiB larger
        pool.blocks.erase(b)
        p.block = b
        return True

    def _should_split(self, block: Block, size: int) -> bool:
        """``should_split``: split off the rest when it is >= 512 B (small pool or expandable segments), or
        > 1 MiB in the large pool for requests below max_split_size."""
        remaining = block.size - size
        if block.pool.is_small or self.config.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.config.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, p: _Request, orig_size: int, split: bool) -> Block:
        """``alloc_found_block``: take the front ``size`` bytes of the block, cache the remainder."""
        block = p.block
        if split:
            remaining = block
            block = Block(p.size, remaining.ptr, p.stream, p.pool, remaining.expandable)
            block.splice(remaining.prev, remaining)
            remaining.ptr += p.size
            remaining.size -= p.size
            p.pool.insert_into_blocks(remaining)
        block.allocated, block.requested = True, orig_size
        self.active.add(block)
        self.allocated.increase(block.size)
        self.requested.increase(orig_size)
        return block

    # ---- freeing ----------------------------------------------------------------------------------------

    def _free_block(self, block: Block) -> None:
        """``free_block``: merge with free neighbours and cache."""
        for neighbour in (block.prev, block.next):
            self._try_merge_blocks(block, neighbour, block.pool)
        self.active.discard(block)
        block.pool.insert_into_blocks(block)

    @staticmethod
    def _try_merge_blocks(dst: Block, src: Block | None, pool: BlockPool) -> int:
        """``try_merge_blocks``: absorb the free neighbour ``src`` (both mapped or both not); its bytes or 0."""
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        (pool.blocks if src.mapped else pool.unmapped).erase(src)
        if dst.prev is src:  # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # ---- new segments -----------------------------------------------------------------------------------

    def _device_has_room(self, nbytes: int) -> bool:
        return self.capacity is None or self.reserved.current + nbytes <= self.capacity

    def _new_address(self, nbytes: int) -> int:
        ptr = self._next_address
        self._next_address += -(-nbytes // ADDRESS_ALIGN) * ADDRESS_ALIGN
        return ptr

    def _alloc_block(self, p: _Request, retry: bool) -> bool:
        """``alloc_block``: a new ``cudaMalloc`` segment of ``alloc_size`` (or pages mapped into the stream's
        expandable segment), unless the memory fraction or the device is full."""
        self.num_alloc_retries += retry
        if self.allowed_memory_maximum is not None and self.reserved.current + p.alloc_size > self.allowed_memory_maximum:
            return False
        if self.config.expandable_segments:
            p.block = self._try_allocate_expandable_block(p)
            return p.block is not None
        if not self._device_has_room(p.alloc_size):
            return False
        p.block = Block(p.alloc_size, self._new_address(p.alloc_size), p.stream, p.pool)
        self.segment_owner[p.block.ptr] = p.owner
        self.segments.increase(1)
        self.reserved.increase(p.alloc_size)
        self.num_device_alloc += 1
        return True
