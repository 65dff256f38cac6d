"""Integers written as runs: [0, 1, 2, 3, 5, 7, 8] -> "0-3,5,7-8" (CPU sets, iteration numbers)."""

from __future__ import annotations


def number_ranges(values) -> str:
    """Runs of consecutive integers joined by commas; "" for no values."""
    nums = sorted(set(int(v) for v in values))
    if not nums:
        return ""
    runs, start, prev = [], nums[0], nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        runs.append(f"{start}-{prev}" if prev > start else f"{start}")
        if n is not None:
            start = prev = n
    return ",".join(runs)
