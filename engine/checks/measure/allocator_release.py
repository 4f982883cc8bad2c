"""Giving cached memory back to the device: ``release_block``, the garbage collector, and the retries after a
failed ``cudaMalloc``.

Ports, from pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp``: ``release_block`` (``cudaFree`` of a cached
segment that is one whole free block), ``garbage_collect_cached_blocks`` (``garbage_collection_threshold``: runs
before a new segment is allocated, only when ``set_per_process_memory_fraction`` is below 1),
``release_available_cached_blocks`` (the first retry after ``cudaMalloc`` fails, only with ``max_split_size_mb``:
oversize cached segments) and ``release_cached_blocks`` / ``release_blocks`` (the last retry and ``emptyCache``:
every unsplit cached segment, and every whole free page of expandable segments).

A mixin of ``caching_allocator.CachingAllocator``: it reads ``config``, the pools, the stats and ``_unmap_block`` /
``_release_expandable_segment`` (``allocator_expandable``) from there.
"""

from __future__ import annotations

from engine.checks.measure.allocator_blocks import Block
from engine.checks.measure.allocator_config import SIZE_MAX


class ReleasingCachedBlocks:
    """The ways cached segments go back to the device."""

    def _release_block(self, block: Block) -> None:
        """``release_block``: ``cudaFree`` a whole cached segment."""
        assert block.expandable is None
        block.pool.blocks.erase(block)
        self.segment_owner.pop(block.ptr, None)
        self.segments.decrease(1)
        self.reserved.decrease(block.size)
        self.num_device_free += 1

    def _garbage_collect_cached_blocks(self) -> None:
        """``garbage_collect_cached_blocks``: when reserved exceeds threshold x allowed memory, free unsplit large
        cached segments at least as old as the average, oldest-threshold rounds until enough is reclaimed."""
        threshold = int(self.config.garbage_collection_threshold * self.allowed_memory_maximum)
        if self.reserved.current <= threshold:
            return
        target, reclaimed = self.reserved.current - threshold, 0
        freeable = [b for b in self.large_blocks.blocks if not b.is_split()]
        total_age, count = sum(b.gc_count() for b in freeable), len(freeable)
        freed = True
        while reclaimed < target and freed and count > 0:
            age_threshold = total_age / count
            freed = False
            for b in self.large_blocks.blocks:  # keeps going past the target: GC should not run again soon
                if not b.is_split() and b.expandable is None and b.gc_count() >= age_threshold:
                    freed = True
                    reclaimed += b.size
                    total_age -= b.gc_count()
                    count -= 1
                    self._release_block(b)

    def _release_available_cached_blocks(self, p) -> bool:
        """``release_available_cached_blocks``: with max_split_size set, free one oversize cached segment at least
        as large as the request, or else the largest oversize ones until their bytes cover it."""
        limit = self.config.max_split_size
        if limit == SIZE_MAX:
            return False
        blocks, key_size = p.pool.blocks, max(p.size, limit)
        i = blocks.lower_bound((p.stream, key_size, 0))
        if i == len(blocks) or blocks.at(i).stream != p.stream or blocks.at(i).expandable is not None:
            if i == 0:
                return False
            released, i = 0, i - 1
            while released < key_size and blocks.at(i).size >= limit and blocks.at(i).stream == p.stream:
                cur, first = blocks.at(i), i == 0
                i -= 0 if first else 1
                if cur.expandable is None:
                    released += cur.size
                    self._release_block(cur)
                if first:
                    break
            return released >= key_size
        self._release_block(blocks.at(i))
        return True

    def _release_cached_blocks(self) -> bool:
        """``release_cached_blocks`` (no graph pools): ``release_blocks`` of the large, then the small pool."""
        for pool in (self.large_blocks, self.small_blocks):
            to_unmap = []
            for b in pool.blocks:
                if b.expandable is not None:
                    to_unmap.append(b)
                elif not b.is_split():
                    self._release_block(b)
            for b in to_unmap:
                self._unmap_block(b)
                if not b.is_split():
                    self._release_expandable_segment(b)
        return True
