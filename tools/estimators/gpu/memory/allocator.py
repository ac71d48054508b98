"""A replay of PyTorch's CUDA caching allocator over a sequence of allocations and frees.

The rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` with its default settings
(no ``PYTORCH_CUDA_ALLOC_CONF``, one stream, no expandable segments):

- a request is rounded up to a multiple of 512 bytes (``kMinBlockSize``);
- requests of at most 1 MiB (``kSmallSize``) come from the small pool, larger ones from
  the large pool; a free block is reused best-fit (the smallest free block of that pool
  that is big enough, the lowest address among equals);
- with no free block big enough, a new segment is ``cudaMalloc``'d: 2 MiB
  (``kSmallBuffer``) for a small request, 20 MiB (``kLargeBuffer``) for a request under
  10 MiB (``kMinLargeAlloc``), else the request rounded up to 2 MiB (``kRoundLarge``);
- a block is split when what remains is at least 512 bytes (small pool) or more than
  1 MiB (large pool); the remainder stays a free block of the same segment;
- a freed block merges with free neighbours of its segment;
- when ``cudaMalloc`` would exceed the device (``capacity_bytes``), the allocator frees
  every cached segment with nothing allocated in it and tries again; if that fails too,
  the step is out of memory.

``allocated`` counts block sizes (what ``torch.cuda.max_memory_allocated`` reports: a
request's rounded size, or the whole block when the remainder was too small to split);
``reserved`` counts segment sizes (``torch.cuda.max_memory_reserved``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "K_LARGE_BUFFER",
    "K_MIN_BLOCK_SIZE",
    "K_MIN_LARGE_ALLOC",
    "K_ROUND_LARGE",
    "K_SMALL_BUFFER",
    "K_SMALL_SIZE",
    "AllocatorPeaks",
    "CachingAllocator",
    "MemoryEvent",
    "OutOfMemory",
    "replay",
    "round_size",
    "segment_size",
]

K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One allocation (``alloc``, ``size_bytes`` requested) or free of storage ``key``."""

    action: Literal["alloc", "free"]
    key: int
    size_bytes: int = 0


class OutOfMemory(Exception):
    """A request the device cannot hold even after the cache is emptied."""

    def __init__(self, size_bytes: int, reserved_bytes: int, capacity_bytes: int) -> None:
        self.size_bytes = size_bytes
        super().__init__(
            f"out of memory: a {size_bytes} B segment on top of {reserved_bytes} B reserved "
            f"exceeds {capacity_bytes} B"
        )


def round_size(size_bytes: int) -> int:
    """The block size a request takes: a multiple of 512 bytes, at least 512."""
    if size_bytes < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * -(-size_bytes // K_MIN_BLOCK_SIZE)


def segment_size(size_bytes: int) -> int:
    """The ``cudaMalloc`` size of a new segment for a (rounded) request."""
    if size_bytes <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size_bytes < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * -(-size_bytes // K_ROUND_LARGE)


@dataclass(eq=False, slots=True)
class _Block:
    segment: int
    address: int
    size: int
    small: bool
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None


@dataclass(frozen=True, slots=True)
class AllocatorPeaks:
    """Peaks of one replay, in bytes, and the segments it had at the end."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_requested_bytes: int
    segments: int
    out_of_memory: bool = False


@dataclass(slots=True)
class CachingAllocator:
    """The allocator's state: segments, free pools and counters (one device, one stream)."""

    capacity_bytes: int | None = None
    allocated_bytes: int = 0
    reserved_bytes: int = 0
    requested_bytes: int = 0
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    peak_requested_bytes: int = 0
    _free: dict[bool, list[tuple[int, int, int]]] = field(
        default_factory=lambda: {True: [], False: []}
    )
    _by_address: dict[int, _Block] = field(default_factory=dict)
    _segments: dict[int, _Block] = field(default_factory=dict)  # id -> first block
    _live: dict[int, tuple[_Block, int]] = field(default_factory=dict)
    _next_address: int = 0
    _next_segment: int = 0

    def malloc(self, key: int, size_bytes: int) -> None:
        if key in self._live:
            raise ValueError(f"storage key {key} is already allocated")
        if size_bytes <= 0:
            return  # torch hands out no block for an empty tensor
        size = round_size(size_bytes)
        small = size <= K_SMALL_SIZE
        block = self._best_fit(size, small) or self._new_segment(size, small)
        remaining = block.size - size
        if remaining >= K_MIN_BLOCK_SIZE if small else remaining > K_SMALL_SIZE:
            rest = _Block(block.segment, block.address + size, remaining, small)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._by_address[rest.address] = rest
            self._insert_free(rest)
        block.allocated = True
        self._live[key] = (block, size_bytes)
        self.allocated_bytes += block.size
        self.requested_bytes += size_bytes
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        self.peak_requested_bytes = max(self.peak_requested_bytes, self.requested_bytes)

    def free(self, key: int) -> None:
        entry = self._live.pop(key, None)
        if entry is None:
            return  # an empty tensor's storage, never given a block
        block, requested = entry
        block.allocated = False
        self.allocated_bytes -= block.size
        self.requested_bytes -= requested
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                self._remove_free(neighbour)
                block = self._merge(block, neighbour)
        self._insert_free(block)

    def peaks(self, *, out_of_memory: bool = False) -> AllocatorPeaks:
        return AllocatorPeaks(
            peak_allocated_bytes=self.peak_allocated_bytes,
            peak_reserved_bytes=self.peak_reserved_bytes,
            peak_requested_bytes=self.peak_requested_bytes,
            segments=len(self._segments),
            out_of_memory=out_of_memory,
        )

    def _best_fit(self, size: int, small: bool) -> _Block | None:
        pool = self._free[small]
        index = bisect.bisect_left(pool, (size, -1, -1))
        if index == len(pool):
            return None
        _, address, _ = pool.pop(index)
        return self._by_address[address]

    def _new_segment(self, size: int, small: bool) -> _Block:
        wanted = segment_size(size)
        if self.capacity_bytes is not None and self.reserved_bytes + wanted > self.capacity_bytes:
            self._release_cached()
            if self.reserved_bytes + wanted > self.capacity_bytes:
                raise OutOfMemory(wanted, self.reserved_bytes, self.capacity_bytes)
        segment = self._next_segment
        self._next_segment += 1
        block = _Block(segment, self._next_address, wanted, small)
        self._next_address += wanted
        self._by_address[block.address] = block
        self._segments[segment] = block
        self.reserved_bytes += wanted
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        return block

    def _release_cached(self) -> None:
        """Free every segment that is one free block (``release_cached_blocks``)."""
        for segment, first in list(self._segments.items()):
            if not first.allocated and first.next is None:
                self._remove_free(first)
                del self._by_address[first.address]
                del self._segments[segment]
                self.reserved_bytes -= first.size

    def _merge(self, block: _Block, neighbour: _Block) -> _Block:
        first, second = (neighbour, block) if neighbour is block.prev else (block, neighbour)
        del self._by_address[second.address]
        first.size += second.size
        first.next = second.next
        if second.next is not None:
            second.next.prev = first
        return first

    def _insert_free(self, block: _Block) -> None:
        bisect.insort(self._free[block.small], (block.size, block.address, block.segment))

    def _remove_free(self, block: _Block) -> None:
        pool = self._free[block.small]
        index = bisect.bisect_left(pool, (block.size, block.address, block.segment))
        if index == len(pool) or pool[index][1] != block.address:
            raise RuntimeError(f"block at {block.address} is not in its free pool")
        pool.pop(index)


def replay(events: Iterable[MemoryEvent], capacity_bytes: int | None = None) -> AllocatorPeaks:
    """Peaks of the caching allocator over ``events`` (out_of_memory set when it fails)."""
    allocator = CachingAllocator(capacity_bytes=capacity_bytes)
    try:
        for event in events:
            if event.action == "alloc":
                allocator.malloc(event.key, event.size_bytes)
            else:
                allocator.free(event.key)
    except OutOfMemory:
        return allocator.peaks(out_of_memory=True)
    return allocator.peaks()
