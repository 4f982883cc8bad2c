"""The expandable-segments half of the caching allocator (``expandable_segments:True``).

Ports, from pytorch/pytorch ``c10/cuda/CUDACachingAllocator.cpp``, Note [Expandable Segments] and
``find_expandable_block``, ``map_block``, ``try_allocate_expandable_block``, ``unmap_block`` and
``release_expandable_segment``. Instead of one ``cudaMalloc`` per segment, each stream and pool reserves one
virtual range ("1 1/8 the total memory on the GPU") and maps physical pages into it as requests need them: pages
of ``kSmallBuffer`` (2 MiB) in the small pool and of ``large_segment_size()`` (``kLargeBuffer``, 20 MiB, unless
``large_segment_size_mb`` says otherwise) in the large pool: the note's "we use 2MiB pages for our small pool and
20MiB pages for our large pool". A request that no free block fits is placed at the lowest address where free
and unmapped space together hold it, mapping just the pages it lacks; freed blocks merge with their neighbours,
so the mapped part of a segment stays one run of blocks. ``emptyCache`` (and the retry after a failed map)
unmaps every whole free page.

A mixin of ``caching_allocator.CachingAllocator``: it reads ``config``, ``capacity``, ``reserved``,
``expandable_segments``, ``_new_address``, ``_device_has_room`` and ``_try_merge_blocks`` from there.
"""

from __future__ import annotations

from engine.checks.measure.allocator_blocks import Block, BlockPool, ExpandableSegment
from engine.checks.measure.allocator_config import K_SMALL_BUFFER

NO_CAPACITY_ADDRESS_SPACE = 1 << 40  # virtual bytes an expandable segment reserves when no capacity is given


class ExpandableSegments:
    """``expandable_segments:True``: map pages of one growing segment per stream and pool."""

    def _find_expandable_block(self, stream: int, pool: BlockPool, size: int, owner=None) -> Block:
        """``find_expandable_block``: the lowest-address run of free-then-unmapped blocks of this stream holding
        ``size`` bytes, or a new segment's whole unmapped range."""
        allocatable = lambda b: b is not None and not b.allocated

        def has_room(b: Block | None) -> bool:
            got = 0
            while got < size and allocatable(b):
                got, b = got + b.size, b.next
            return got >= size

        i = pool.unmapped.lower_bound((stream, 0))
        while i < len(pool.unmapped) and pool.unmapped.at(i).stream == stream:
            c = pool.unmapped.at(i)
            if allocatable(c.prev):  # a free mapped block just before the unmapped range counts too
                c = c.prev
            if has_room(c):
                return c
            i += 1
        page = K_SMALL_BUFFER if pool.is_small else self.config.large_segment_size
        total = self.capacity if self.capacity is not None else NO_CAPACITY_ADDRESS_SPACE
        max_handles = -(-(total + total // 8) // page)  # address space for 1 1/8 of the device's memory
        es = ExpandableSegment(self._new_address(max_handles * page), page, max_handles, stream)
        self.expandable_segments.append(es)
        self.segment_owner[es.base] = owner
        candidate = Block(es.size(), es.base, stream, pool, expandable=es, mapped=False)
        pool.unmapped.insert(candidate)
        return candidate

    def _map_block(self, to_map: Block, size: int) -> bool:
        """``map_block``: back the first ``size`` bytes of an unmapped block with whole pages; the unmapped rest
        becomes its own block; merge with free mapped neighbours and cache. False when the device is full."""
        es, pool = to_map.expandable, to_map.pool
        begin, end = es.page_range(to_map.ptr, size, outward=True)
        assert es.base + begin * es.page_size == to_map.ptr, "unmapped blocks start on a page"
        nbytes = (end - begin) * es.page_size
        if nbytes == 0 or not self._device_has_room(nbytes):
            return False
        es.mapped_pages.update(range(begin, end))
        pool.unmapped.erase(to_map)
        to_map.mapped = True
        if nbytes < to_map.size:
            rest = Block(to_map.size - nbytes, to_map.ptr + nbytes, to_map.stream, pool, expandable=es, mapped=False)
            rest.splice(to_map, to_map.next)
            pool.unmapped.insert(rest)
            to_map.size = nbytes
        self._try_merge_blocks(to_map, to_map.prev, pool)
        self._try_merge_blocks(to_map, to_map.next, pool)
        pool.insert_into_blocks(to_map)
        self.reserved.increase(nbytes)
        self.num_device_alloc += 1
        return True

    def _try_allocate_expandable_block(self, p) -> Block | None:
        """``try_allocate_expandable_block``: map pages until the found run holds the request; the run's block,
        out of the pool, or None when mapping fails (the pages mapped so far stay cached)."""
        candidate = self._find_expandable_block(p.stream, p.pool, p.size, p.owner)
        if not candidate.mapped and not self._map_block(candidate, min(candidate.size, p.size)):
            return None
        while candidate.size < p.size:  # free -> unmapped: map the missing bytes, which merge into the free block
            following = candidate.next
            if not self._map_block(following, min(p.size - candidate.size, following.size)):
                return None
            candidate = following
        p.pool.blocks.erase(candidate)
        return candidate

    def _unmap_block(self, block: Block) -> None:
        """``unmap_block``: give back the whole pages inside a free block; partial pages at either end stay as
        free mapped blocks."""
        es, pool = block.expandable, block.pool
        begin, end = es.page_range(block.ptr, block.size, outward=False)
        if begin >= end:
            return
        es.mapped_pages.difference_update(range(begin, end))
        ptr, nbytes = es.base + begin * es.page_size, (end - begin) * es.page_size
        pool.blocks.erase(block)
        before = ptr - block.ptr
        if before > 0:
            head = Block(before, block.ptr, block.stream, pool, expandable=es)
            head.splice(block.prev, block)
            pool.insert_into_blocks(head)
        after = block.size - (before + nbytes)
        if after > 0:
            tail = Block(after, ptr + nbytes, block.stream, pool, expandable=es)
            tail.splice(block, block.next)
            pool.insert_into_blocks(tail)
        block.ptr, block.size, block.mapped = ptr, nbytes, False
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.unmapped.insert(block)
        self.reserved.decrease(nbytes)
        self.num_device_free += 1

    def _release_expandable_segment(self, block: Block) -> None:
        """``release_expandable_segment``: a wholly unmapped segment gives back its address range."""
        assert block.size == block.expandable.size() and not block.mapped
        self.expandable_segments.remove(block.expandable)
        self.segment_owner.pop(block.expandable.base, None)
        block.pool.unmapped.erase(block)
