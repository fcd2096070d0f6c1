"""Small statistics shared by the probe and the sweep (no numpy: the probe must import fast)."""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-quantile (0–1) of ``values`` with linear interpolation (numpy's default), or None when empty."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
