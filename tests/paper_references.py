"""Reference formulas transcribed from the papers, independently of the implementation, for tests to compare with."""

from __future__ import annotations

import math


def paper_get_slopes(n: int) -> list[float]:
    """Press et al.'s reference ALiBi ``get_slopes`` (github.com/ofirpress/attention_with_linear_biases)."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_get_slopes(2 * closest)[0::2][: n - closest]
