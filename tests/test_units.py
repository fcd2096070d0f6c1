"""``model/units.py``: every quantity a person reads is scaled there, the same way wherever it shows."""

from __future__ import annotations

import pytest

from dnnprof.model.units import bytes_text, fixed_text, ns_brief_text, ns_text, pct_text, rate_text, us_text
from dnnprof.render.counters_table import roofline_line


@pytest.mark.parametrize(("size_bytes", "digits", "text"), [
    (512, 1, "512 B"), (50 * 2**20, 1, "50.0 MiB"), (1.5 * 2**30, 2, "1.50 GiB"), (3 * 2**40, 1, "3.0 TiB"),
    (2048 * 2**40, 1, "2,048.0 TiB")])
def test_bytes_text(size_bytes: float, digits: int, text: str) -> None:
    assert bytes_text(size_bytes, digits) == text


def test_durations_read_the_same_from_ns_and_us() -> None:
    assert us_text(261.2) == ns_text(261_200) == "261.2 µs"
    assert us_text(62_410) == ns_text(62_410_000) == "62.41 ms"
    assert ns_text(-25_000_000) == "-25.00 ms"
    assert ns_brief_text(45_100_000) == "45.1 ms" and ns_brief_text(442_000) == "442 µs"


def test_unknown_values_read_as_the_caller_says() -> None:
    for fmt in (us_text, ns_text, pct_text, bytes_text, fixed_text):
        assert fmt(None) == "-" and fmt(None, missing="–") == "–"
    assert rate_text(None, "B/s", missing="?") == "?"


def test_rates_take_every_decimal_prefix() -> None:
    assert rate_text(3.35e12, "B/s") == "3.35 TB/s" and rate_text(1.07e15, "FLOP/s") == "1.07 PFLOP/s"
    assert rate_text(5e8, "B/s") == "500 MB/s" and rate_text(12.0, "B/s") == "12 B/s"


def test_counters_roofline_line_scales_a_slow_ceiling() -> None:
    # The counters table's own formatter stopped at G and printed a slower ceiling as "5e+08 B/s".
    roof = {"ceilings": {"dram_bytes_per_s": 5e8, "dram_source": "spec", "compute": {}}, "plotted": 0}
    assert "DRAM 500 MB/s (spec)" in roofline_line(roof)
