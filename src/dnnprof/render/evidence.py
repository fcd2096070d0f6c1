"""A finding's evidence as text a person reads, whatever rule wrote it.

Rules put their numbers in ``evidence`` and their offenders in ``evidence.top`` under names that carry the unit
(``gap_us``, ``pct_of_step``, ``shared_memory_bytes``, ``nccl_us_per_step``; docs/findings.md). The text is built
from those names alone, so the evidence of a rule the renderers have never heard of still shows, and a key that
holds nothing (``None``, ``""``) is left out rather than printed as "None".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dnnprof.model.units import bytes_text, number_text, pct_text, us_text

#: Keys that name the offender itself; the first one present leads its line, without a label.
NAME_KEYS = ("kernel", "op", "name", "what")
#: Wording for keys whose bare name reads badly; every other key reads as its name without the unit suffix.
LABELS = {"in_op": "in", "host_op": "host in", "next_kernel_op": "next kernel from", "sm_count": "SMs",
          "apis": "via"}
#: Keys that are not evidence numbers: the one-line summary and the offender list have their own place.
NOT_NUMBERS = ("summary", "top")
#: Most items of a list shown on one line.
LIST_ITEMS = 5

_UNITS: tuple[tuple[str, Callable[[float], str]], ...] = (
    ("_us", us_text),
    ("_ns", lambda v: us_text(v / 1e3)),
    ("_ms", lambda v: us_text(v * 1e3)),
    ("_s", lambda v: f"{v:,.2f} s"),
    ("_pct", pct_text),
    ("_bytes", bytes_text),
    ("_share", lambda v: pct_text(100.0 * v)),
    ("_w", lambda v: f"{v:,.0f} W"),
    ("_mhz", lambda v: f"{v:,.0f} MHz"),
    ("_c", lambda v: f"{v:,.0f} °C"),
)
_PER = ("_per_step", "_per_s")


def _unit_of(key: str) -> tuple[str, Callable[[float], str] | None, str]:
    """(label stem, number formatter or None, rate suffix) of a key: ``nccl_us_per_step`` → ("nccl", us, "/step")."""
    stem, per = key, ""
    for p in _PER:
        if stem.endswith(p):
            stem, per = stem[: -len(p)], "/" + p[len("_per_"):]
            break
    if stem == "bytes":
        return "", bytes_text, per
    for suffix, fmt in _UNITS:
        if stem.endswith(suffix):
            return stem[: -len(suffix)], fmt, per
    return stem, None, per


def _empty(v: Any) -> bool:
    return v is None or v == "" or v == [] or v == {}


def value_text(key: str, v: Any) -> str:
    """The value of evidence key ``key`` in the unit its name carries ("" when there is nothing to show)."""
    if _empty(v):
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if key.startswith("pct_of_") or key == "pct":
            return pct_text(v)
        _, fmt, per = _unit_of(key)
        return (fmt(v) if fmt else number_text(v)) + per
    if isinstance(v, dict):
        # Inner numbers without a unit of their own take the outer key's: by_family_us = {"reduction": 311.4}.
        # A dict of records (idle_by_cause = {"sync": {...}}) reads "sync (…)"; a dict-valued field with a unit
        # (idle_by_cause_us = {...}) reads as a field.
        parts = [f"{k} ({offender_text(x)})" if isinstance(x, dict) and _unit_of(str(k))[1] is None
                 else item_text(str(k), x, unit_from=key) for k, x in v.items() if not _empty(x)]
        return "; ".join(p for p in parts if p and not p.endswith("()"))
    if isinstance(v, (list, tuple)):
        shown = [offender_text(x) if isinstance(x, dict) else value_text(key, x) for x in v[:LIST_ITEMS]]
        shown = [s for s in shown if s]
        more = f" … ({len(v)} in all)" if len(v) > LIST_ITEMS else ""
        return (" | " if any(isinstance(x, dict) for x in v) else ", ").join(shown) + more if shown else ""
    return str(v)


def label(key: str) -> str:
    """What a key reads as: ``empty_sm_time_us`` → "empty sm time", ``in_op`` → "in"."""
    if key in LABELS:
        return LABELS[key]
    stem, _, _ = _unit_of(key)
    return stem.replace("_", " ").strip()


def item_text(key: str, v: Any, unit_from: str = "") -> str:
    """``gap 238.0 µs``, ``3.6% of the step``, ``host in aten::_foreach_add_``; "" when ``v`` holds nothing."""
    if unit_from and isinstance(v, (int, float)) and not isinstance(v, bool) and _unit_of(key)[1] is None \
            and not key.startswith("pct"):
        text = value_text(unit_from, v)
    else:
        text = value_text(key, v)
    if not text:
        return ""
    if key.startswith("pct_of_"):
        whole = key[len("pct_of_"):].replace("_", " ")
        return f"{text} of {'the step' if whole == 'step' else whole}"
    name = label(key)
    return f"{name}: {text}" if isinstance(v, (dict, list, tuple)) and name else (f"{name} {text}" if name else text)


def offender_text(o: dict[str, Any], context: dict[str, Any] | None = None) -> str:
    """One line for one offender of ``evidence.top``: its name first, then every other key that holds something.

    Keys whose value equals the same key of ``context`` (the finding's evidence) are left out: the line names what
    differs per offender (``sm_count`` is the same for every small-grid kernel).
    """
    context = context or {}
    name_key = next((k for k in NAME_KEYS if not _empty(o.get(k))), None)
    parts = [str(o[name_key])] if name_key else []
    shown = {o[name_key]} if name_key else set()
    for k, v in o.items():
        if k == name_key or (k in context and context[k] == v and k not in NAME_KEYS):
            continue
        if isinstance(v, str):  # a name already on the line (the layer is also the op it ran inside)
            if v in shown:
                continue
            shown.add(v)
        text = item_text(k, v)
        if text:
            parts.append(text)
    return ", ".join(parts)


def offenders(evidence: Any, n: int = LIST_ITEMS) -> list[str]:
    """Lines for the first ``n`` offenders of a finding's evidence (none empty)."""
    if not isinstance(evidence, dict):
        return []
    top = evidence.get("top") or []
    context = {k: v for k, v in evidence.items() if k not in NOT_NUMBERS}
    lines = [offender_text(o, context) if isinstance(o, dict) else value_text("", o) for o in top[:n]]
    return [x for x in lines if x]


def evidence_items(evidence: Any) -> list[str]:
    """The finding's own numbers (every evidence key but the summary and the offenders), one text each."""
    if not isinstance(evidence, dict):
        return []
    items = [item_text(k, v) for k, v in evidence.items() if k not in NOT_NUMBERS]
    return [x for x in items if x]


def gain_text(gain: float | None, short: bool = False) -> str:
    """The expected gain as shown: ``≤12%``, ``≤0.3%``; a gain of 0 is "no measurable gain" (``none`` when
    ``short``), an unknown one ``-``."""
    if gain is None:
        return "-"
    if gain <= 0:
        return "none" if short else "no measurable gain"
    return f"≤{gain:.1f}%" if gain < 1 else f"≤{gain:.0f}%"
