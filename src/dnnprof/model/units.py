"""Quantities as text, the one place they are scaled for a reader.

Values are stored and passed in base units, named ``<what>_<unit>`` (``time_ns``, ``time_us``, ``size_bytes``,
``share_pct``); a helper ``<unit>_text`` takes a value in the unit it is named after and picks the scale a person
reads (``ns_text(1_500_000)`` → ``1.50 ms``). Tables, finding messages, self-check details and reports all format
through here, so one quantity reads the same wherever it shows. ``missing`` is what an unknown value reads as:
``-`` in the terminal, ``–`` in HTML and Markdown, ``?`` inside a sentence.
"""

from __future__ import annotations

#: Binary size units, smallest first.
_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
#: Decimal prefixes for rates, largest first.
_RATE_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def us_text(time_us: float | None, missing: str = "-") -> str:
    """A duration for a table: ``12.3 µs``, ``4.56 ms``."""
    if time_us is None:
        return missing
    if abs(time_us) >= 1000:
        return f"{time_us / 1000:,.2f} ms"
    return f"{time_us:,.1f} µs"


def ns_text(time_ns: float | None, missing: str = "-") -> str:
    """A duration in nanoseconds for a table or a check's detail: ``12.3 µs``, ``4.56 ms``."""
    return missing if time_ns is None else us_text(time_ns / 1e3)


def ns_brief_text(time_ns: float) -> str:
    """A duration inside a finding's sentence, at the precision it deserves there: ``12.3 ms`` or ``45 µs``."""
    if time_ns >= 1e6:
        return f"{time_ns / 1e6:.1f} ms"
    return f"{time_ns / 1e3:.0f} µs"


def pct_text(share_pct: float | None, digits: int = 1, missing: str = "-") -> str:
    """A share: ``12.3%`` (``12%`` with ``digits=0``)."""
    return missing if share_pct is None else f"{share_pct:.{digits}f}%"


def bytes_text(size_bytes: float | None, digits: int = 1, missing: str = "-") -> str:
    """A size in binary units: ``512 B``, ``1.5 GiB`` (``1.50 GiB`` with ``digits=2``)."""
    if size_bytes is None:
        return missing
    n = float(size_bytes)
    for unit in _SIZE_UNITS:
        if abs(n) < 1024 or unit == _SIZE_UNITS[-1]:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.{digits}f} {unit}"
        n /= 1024
    return str(n)  # not reached: the last unit takes every size


def rate_text(value_per_s: float | None, unit: str, missing: str = "-") -> str:
    """A rate with a decimal prefix and three significant digits: ``3.35 TB/s``, ``989 TFLOP/s``."""
    if value_per_s is None:
        return missing
    for scale, prefix in _RATE_PREFIXES:
        if abs(value_per_s) >= scale:
            return f"{value_per_s / scale:,.3g} {prefix}{unit}"
    return f"{value_per_s:,.3g} {unit}"


def number_text(x: float) -> str:
    """A plain count or ratio: ``1,153``, ``0.57``, ``14.8``."""
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def fixed_text(x: float | None, digits: int = 1, missing: str = "-") -> str:
    """A number with a fixed count of decimals, grouped: ``1,234.5``; from a million up, whole: ``1,234,568``."""
    if x is None:
        return missing
    return f"{x:,.{digits}f}" if abs(x) < 1e6 else f"{x:,.0f}"


def times_text(ratio: float | None, missing: str = "-") -> str:
    """A ratio of two like things: ``1.85×``."""
    return missing if ratio is None else f"{ratio:.2f}×"
