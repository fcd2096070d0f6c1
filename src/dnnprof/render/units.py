"""Numbers as a person reads them: durations, shares and sizes stored in base units, scaled only here."""

from __future__ import annotations


def us_text(us: float | None) -> str:
    """``12.3 µs``, ``4.56 ms``; ``-`` when unknown."""
    if us is None:
        return "-"
    if abs(us) >= 1000:
        return f"{us / 1000:,.2f} ms"
    return f"{us:,.1f} µs"


def pct_text(x: float | None) -> str:
    """``12.3%``; ``-`` when unknown."""
    return "-" if x is None else f"{x:.1f}%"


def bytes_text(n: float | None) -> str:
    """``512 B``, ``1.5 GiB``; ``-`` when unknown."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def number_text(x: float) -> str:
    """A plain count or ratio: ``1,153``, ``0.57``, ``14.8``."""
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
