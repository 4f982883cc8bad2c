"""The decorator every memory formula wears, and the integer helpers they share."""

import numba

# cache=True: compiled once per machine; kernel.py calls these very functions (STYLE.md 2.2).
formula = numba.njit(cache=True)


@formula
def ceil_div(x, y):
    """Smallest integer >= x / y for x >= 0, y > 0: a shard is never fractional."""
    return -(-x // y)
