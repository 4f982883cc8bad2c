"""The CUDA caching allocator's constants, its ``PYTORCH_CUDA_ALLOC_CONF`` options and its size rules.

Source: pytorch/pytorch ``c10/core/AllocatorConfig.h`` and ``.cpp`` (the constants and the option parser, shared by
CUDA and XPU since 2.8; the same constants ship in torch 2.13's ``torch/include/c10/core/AllocatorConfig.h``) and
``c10/cuda/CUDACachingAllocator.cpp`` (``round_size``, ``roundup_power2_next_division``, ``get_allocation_size``,
``get_pool``). ``caching_allocator.py`` says which revisions were read.

    constant          bytes        meaning (AllocatorConfig.h)
    kMinBlockSize     512          every request rounds up to a multiple of this
    kSmallSize        1 MiB        requests up to this go to the small pool
    kSmallBuffer      2 MiB        small-pool segments (and expandable small-pool pages)
    kLargeBuffer      20 MiB       large_segment_size default: segments for 1-10 MiB requests, expandable
                                   large-pool pages, the max_non_split_rounding default
    kMinLargeAlloc    10 MiB       requests from here on get a segment of their own size
    kRoundLarge       2 MiB        ...rounded up to this
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_LARGE_BUFFER = 20 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_ROUND_LARGE = 2 * MiB
SIZE_MAX = (1 << 64) - 1  # std::numeric_limits<size_t>::max(): "no limit" for max_split_size
ROUNDUP_INTERVALS = 16  # AllocatorConfig.cpp kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB, one per power of two


@dataclass(frozen=True)
class AllocatorConfig:
    """The options of ``PYTORCH_CUDA_ALLOC_CONF`` that change what is reserved (defaults as in AllocatorConfig.h).

    Examples
    --------
    >>> AllocatorConfig.parse("expandable_segments:True").expandable_segments
    True
    >>> AllocatorConfig.parse("max_split_size_mb:128").max_split_size // MiB
    128
    """

    max_split_size: int = SIZE_MAX
    """Blocks this large or larger are never split (``max_split_size_mb``, at least 20); default: no limit."""
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    """An unsplittable block serves a request at most this much smaller (``max_non_split_rounding_mb``)."""
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    """Divisions per power-of-two interval from 1 MiB (index 0) to 32 GiB and above (index 15); 0 or 1 = off."""
    garbage_collection_threshold: float = 0.0
    """Free old cached blocks when reserved exceeds this share of the allowed memory (needs memory_fraction < 1)."""
    expandable_segments: bool = False
    """One growing segment per stream and pool instead of one ``cudaMalloc`` per segment."""
    large_segment_size: int = K_LARGE_BUFFER
    """Segment size for 1-10 MiB requests and the large pool's expandable page (``large_segment_size_mb``)."""
    memory_fraction: float = 1.0
    """``torch.cuda.set_per_process_memory_fraction``: below 1 it caps reserved memory and enables the GC."""

    @classmethod
    def parse(cls, conf: str) -> "AllocatorConfig":
        """The config a ``PYTORCH_CUDA_ALLOC_CONF`` string sets (``AcceleratorAllocatorConfig::parseArgs``)."""
        out: dict = {}
        for item in filter(None, (s.strip() for s in _split_top_level(conf))):
            key, _, value = item.partition(":")
            if key == "max_split_size_mb":
                assert int(value) >= K_LARGE_BUFFER // MiB, "max_split_size_mb must be >= 20 (parseMaxSplitSize)"
                out["max_split_size"] = int(value) * MiB
            elif key == "max_non_split_rounding_mb":
                out["max_non_split_rounding_size"] = int(value) * MiB
            elif key == "garbage_collection_threshold":
                out["garbage_collection_threshold"] = float(value)
            elif key == "expandable_segments":
                out["expandable_segments"] = value == "True"
            elif key == "large_segment_size_mb":
                out["large_segment_size"] = int(value) * MiB
            elif key == "roundup_power2_divisions":
                out["roundup_power2_divisions"] = _parse_divisions(value)
            else:
                raise ValueError(f"option {key!r} does not change reserved memory or is unknown")
        return cls(**out)


def _split_top_level(conf: str) -> list[str]:
    """Split on commas outside ``[...]`` (the divisions list has commas of its own)."""
    parts, depth, cur = [], 0, ""
    for ch in conf:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def _parse_divisions(value: str) -> tuple[int, ...]:
    """``roundup_power2_divisions``: one number for every interval, or ``[64:8,256:4,>:1]`` keyed by MiB
    (``parseRoundUpPower2Divisions``: entries below the first key take its value, ``>`` fills the rest)."""
    value = value.strip()
    if not value.startswith("["):
        return (int(value),) * ROUNDUP_INTERVALS
    out, first, last = [0] * ROUNDUP_INTERVALS, True, 0
    for entry in value.strip("[]").split(","):
        key, _, div = entry.partition(":")
        if key.strip() == ">":
            out[last:] = [int(div)] * (ROUNDUP_INTERVALS - last)
            continue
        index = min(int(key).bit_length() - 1, ROUNDUP_INTERVALS - 1)
        if first:
            out[:index] = [int(div)] * index
            first = False
        out[index], last = int(div), index
    return tuple(out)


def divisions_for(size: int, config: AllocatorConfig) -> int:
    """``roundup_power2_divisions(size)``: the interval is floor(log2 size) - 20 (1 MiB), clamped to 0..15."""
    index = min(max(size.bit_length() - 1 - 20, 0), ROUNDUP_INTERVALS - 1)
    return config.roundup_power2_divisions[index]


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round ``size`` up to the next of ``divisions`` equal steps between two powers of two
    (``roundup_power2_next_division``: 1200 with 4 divisions of 1024..2048 gives 1280)."""
    if size & (size - 1) == 0:
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    step = power2_floor >> (divisions.bit_length() - 1)
    if step == 0:
        return power2_floor << 1
    floor = size & ~(step - 1)
    return size if floor == size else floor + step


def round_size(size: int, config: AllocatorConfig) -> int:
    """Bytes a request of ``size`` occupies (``round_size``): at least 512, a multiple of 512, or the next
    power-of-two division when ``roundup_power2_divisions`` is set for its interval."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = divisions_for(size, config)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * -(-size // K_MIN_BLOCK_SIZE)


def allocation_size(size: int, config: AllocatorConfig) -> int:
    """The segment ``cudaMalloc`` gets for a rounded request that no cached block serves (``get_allocation_size``):
    2 MiB up to 1 MiB, ``large_segment_size`` (20 MiB) below 10 MiB, else the request rounded up to 2 MiB."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return config.large_segment_size
    return K_ROUND_LARGE * -(-size // K_ROUND_LARGE)


def is_small(size: int) -> bool:
    """``get_pool``: rounded requests up to 1 MiB come from the small pool, larger ones from the large pool."""
    return size <= K_SMALL_SIZE
