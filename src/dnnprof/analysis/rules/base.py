"""The pieces every rule shares: the finding record, the registry, severities and evidence helpers.

A rule is a function ``(ctx: Context) -> Finding | None`` registered with :func:`rule`. It returns ``None`` when
its pattern is absent or when the data it needs was not measured; it never raises for missing data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dnnprof.analysis.rules.context import Context

#: Severity labels, most urgent first (the order used to break ties in the ranking).
SEVERITIES = ("high", "medium", "low", "info")
#: A finding whose estimated gain is at least this share of step time is ``high``.
HIGH_GAIN_PCT = 10.0
#: ... at least this share is ``medium``; anything below is ``low``.
MEDIUM_GAIN_PCT = 3.0


@dataclass
class Finding:
    """One diagnosis: what is wrong, the numbers that show it, what to change and what it should buy.

    ``est_gain_pct`` is the share of step time (the GPU-side step windows) the fix is expected to recover,
    ``None`` when a rule cannot put a number on it; ``how_estimated`` says how the number was obtained.
    """

    id: str
    title: str
    summary: str
    recommendation: str
    est_gain_pct: float | None
    how_estimated: str
    evidence: dict[str, Any] = field(default_factory=dict)
    top: list[dict[str, Any]] = field(default_factory=list)
    severity: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready ``findings[]`` entry of the summary document."""
        evidence = {"summary": self.summary, **_clean(self.evidence), "top": _clean(self.top)}
        # Kernel time on concurrent streams can add up to more than the window: a share is at most 100%.
        gain = None if self.est_gain_pct is None else round(min(100.0, max(0.0, float(self.est_gain_pct))), 1)
        return {
            "id": self.id,
            "severity": self.severity or severity_for(gain),
            "title": self.title,
            "evidence": evidence,
            "recommendation": self.recommendation,
            "est_gain_pct": gain,
            "how_estimated": self.how_estimated,
        }


def severity_for(gain_pct: float | None) -> str:
    """``high``/``medium``/``low`` from the estimated gain; ``info`` when there is none."""
    if gain_pct is None:
        return "info"
    if gain_pct >= HIGH_GAIN_PCT:
        return "high"
    if gain_pct >= MEDIUM_GAIN_PCT:
        return "medium"
    return "low"


def _clean(x: Any) -> Any:
    """JSON-ready copy: numpy scalars to Python, NaN to None, floats rounded to 3 decimals."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else round(x, 3)
    return x


RuleFn = Callable[["Context"], "Finding | None"]


@dataclass(frozen=True)
class RuleSpec:
    """A registered rule: its public id, the function, the catalogue group it belongs to, and whether it rests on
    NVIDIA-only knowledge (kernel names of NVIDIA libraries, occupancy tables per compute capability): such a rule
    stays quiet on another vendor's device rather than print NVIDIA conclusions."""

    id: str
    fn: RuleFn
    group: str
    nvidia_only: bool = False


#: Every rule, in registration order. Ids are a public contract (docs/findings.md).
REGISTRY: dict[str, RuleSpec] = {}


def rule(rule_id: str, group: str, nvidia_only: bool = False) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as the rule ``rule_id`` (a decorator); ids must be unique."""

    def deco(fn: RuleFn) -> RuleFn:
        if rule_id in REGISTRY:
            raise ValueError(f"rule id {rule_id!r} registered twice")
        REGISTRY[rule_id] = RuleSpec(rule_id, fn, group, nvidia_only)
        return fn

    return deco


def rank_key(f: dict[str, Any]) -> tuple[float, int, str]:
    """Sort key: larger estimated gain first, then the more severe, then by id (stable output)."""
    gain = f.get("est_gain_pct")
    return (-(gain if gain is not None else -1.0), SEVERITIES.index(f["severity"]), f["id"])


def us(ns: float) -> float:
    """Nanoseconds to microseconds, rounded for evidence."""
    return round(float(ns) / 1000.0, 1)


def pct(part: float, whole: float) -> float:
    """``part`` as a percentage of ``whole`` (0 when ``whole`` is 0)."""
    return 100.0 * float(part) / float(whole) if whole else 0.0


