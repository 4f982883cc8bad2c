"""The decorator every memory formula wears, and the integer helpers they share."""

import numba.extending

# A formula is a plain Python function (the readable reference the tests call) that numba also compiles
# into every kernel that calls it, all in one LLVM module so small formulas inline (STYLE.md 2.2: one body
# of code for the kernel and the reference).
formula = numba.extending.register_jitable


@formula
def ceil_div(x, y):
    """Smallest integer >= x / y for x >= 0, y > 0: a shard is never fractional.

    Dividing by 1 (no parallelism along that axis, the common case) skips the 64-bit divide, which costs
    ~40 cycles and dominates the kernel's time otherwise.
    """
    if y == 1:
        return x
    return -(-x // y)
