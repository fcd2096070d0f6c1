"""The expert system: ranked findings with evidence and the expected gain of each fix.

Entry points:

* :func:`findings_for` ``(profile, doc, rank=0) -> list[dict]`` — what ``dnnprof analyze`` calls; ``doc`` is the
  ``dnnprof.summary/1`` document (run directories add ``memory``, ``samples``, ``throughput``, ``meta``).
* :func:`findings_from_analysis` ``(analysis, doc) -> list[dict]`` — the same from an already computed
  :class:`~dnnprof.analysis.summary.Analysis` (saves analysing the profile twice).

Every rule lives in a module of this package and registers itself in :data:`REGISTRY` under its public id; the
catalogue with thresholds and estimation methods is ``docs/findings.md``.
"""

from __future__ import annotations

from typing import Any

from dnnprof.analysis.checks import review_findings
from dnnprof.analysis.rules import (  # noqa: F401
    compiled,
    distributed,
    idle,
    kernels,
    memory_steps,
    precision,
    sync,
)
from dnnprof.analysis.rules.base import REGISTRY, Finding, rank_key, severity_for
from dnnprof.analysis.rules.context import Context
from dnnprof.analysis.summary import Analysis, analyse
from dnnprof.model.mapped_columns import release_pages
from dnnprof.model.profile import Profile

#: Rule groups whose findings and gains rest on GPU kernel time: quiet when the GPU work is negligible
#: (``analysis.utilization.GPU_WORK_MIN_US``, ``GPU_WORK_MIN_HOST_PCT``).
GPU_WORK_GROUPS = ("kernels", "precision")

__all__ = ["REGISTRY", "Finding", "findings_for", "findings_from_analysis", "prepare", "run_rules", "severity_for"]


def findings_for(profile: Profile, doc: dict[str, Any], rank: int = 0) -> list[dict[str, Any]]:
    """Every finding for one rank of a profile, JSON-ready and ranked (largest expected gain first)."""
    return findings_from_analysis(analyse(profile, rank), doc)


def findings_from_analysis(analysis: Analysis, doc: dict[str, Any], prepared: Context | None = None) \
        -> list[dict[str, Any]]:
    """Like :func:`findings_for`, from an :class:`Analysis` the caller already has (``prepared``: its
    :func:`prepare`, made while the summary was).

    Also adds the ``finding-offenders`` check to ``doc["checks"]``; findings resting on a broken check carry
    ``unreliable`` (why) and come last (``analysis.checks.review_findings``).
    """
    ctx = Context(analysis, doc) if prepared is None else prepared.with_doc(doc)
    return review_findings(doc, [f.to_dict() for f in run_rules(ctx)])


def prepare(analysis: Analysis) -> Context:
    """The rules' context before the summary document exists, with what rests on the analysis alone built (the
    idle-gap timeline), so a caller can make it beside the summary and hand it to :func:`findings_from_analysis`."""
    ctx = Context(analysis, None)
    ctx.timeline  # noqa: B018 - built now, kept by the context
    return ctx


def run_rules(ctx: Context, only: set[str] | None = None) -> list[Finding]:
    """Run the registered rules (or the ids in ``only``) and rank what they find."""
    found: list[Finding] = []
    for spec in REGISTRY.values():
        if only is not None and spec.id not in only:
            continue
        if spec.nvidia_only and ctx.vendor not in ("", "nvidia"):
            continue
        if spec.group in GPU_WORK_GROUPS and ctx.util.gpu_work_negligible:
            continue  # their gains are shares of GPU time: of next to nothing, they would mislead
        f = spec.fn(ctx)
        release_pages()  # a big trace's mapped columns: one rule's pages at a time (model.mapped_columns)
        if f is not None:
            found.append(f)
    found.sort(key=lambda f: rank_key(f.to_dict()))
    return found
