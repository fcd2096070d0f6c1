"""Self-checks: invariants of an analysed profile that its own data can contradict, stated when broken.

A report that prints numbers built on a broken invariant is confidently wrong; these checks say which invariant
broke and which numbers rest on it, so renderers can mark those numbers instead of printing them bare. Each check
has a stable id (a public contract, like finding ids) and returns ``ok`` with a one-line ``detail`` either way.

* ``profile-invariants`` — :meth:`Profile.self_check` (schema, links, ordering, step numbers);
* ``step-durations`` — every host step has a positive duration;
* ``step-windows`` — GPU step windows are positive, disjoint and inside the GPU span of the rank;
* ``kernel-totals`` — the summary's kernel table adds up to the trace's kernel time, and the kernel time counted
  in the step windows is not more than the kernels' own time;
* ``phases-sum`` — forward + backward + optimizer + other = kernel time;
* ``forward-present`` — every step with backward kernels has forward kernels;
* ``attribution-coverage`` — how much kernel time reached a layer; broken when the trace links kernels to CPU
  ops but most kernel time still has no layer;
* ``busy-vs-nvml`` — trace GPU busy % within ``NVML_MAX_DIFF_PCT`` points of the sampled activity (NVML
  GPU-Util, else GPM graphics-engine active; GPM SM active may not exceed it) when the profile has samples;
* ``finding-offenders`` — a phase-scoped finding names kernels of that phase (added with the findings, by
  :func:`review_findings`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dnnprof.analysis.attribution import PHASES
from dnnprof.analysis.intervals import covered_per_window, merge
from dnnprof.model.mapped_columns import gather, release_pages, release_pages_of
from dnnprof.model.units import ns_text

if TYPE_CHECKING:
    from dnnprof.analysis.summary import Analysis

#: Largest gap in percentage points between trace busy % and the sampled GPU activity before it is reported.
NVML_MAX_DIFF_PCT = 10.0
#: Below this share of kernel time with a layer, while most kernel time has a launching CPU op, attribution broke.
MIN_ATTRIBUTED_PCT = 50.0
#: Sampled metrics comparable with trace busy % (time with any kernel running), best first, with the time each
#: sample averages over, before its time stamp: NVML's utilisation covers its own sample period, "between 1 second
#: and 1/6 second depending on the product" (NVML API reference), so only the longest is safe; a GPM value spans
#: the pair of GPM samples it comes from (at least 0.1 s; dnnprof pairs them 110 ms apart).
_BUSY_METRICS = (("gpu_util_pct", "NVML GPU-Util", 1_000_000_000),
                 ("gr_engine_active_pct", "GPM graphics engine active", 110_000_000))
_SM_ACTIVE = "sm_active_pct"
_GPM_SPAN_NS = 110_000_000
#: Findings about one phase and the phases their offenders may have.
FINDING_PHASES: dict[str, tuple[str, ...]] = {
    "optimizer-not-fused": ("optimizer",),
    "compile-not-used": ("forward", "backward", "other"),
}
#: Findings whose numbers rest on what a check verifies (besides the summary keys each check names).
_FINDINGS_RESTING_ON = {
    "step-windows": ("gpu-idle", "launch-bound"),
    "step-durations": ("unstable-steps",),
    "forward-present": tuple(FINDING_PHASES),
    "phases-sum": tuple(FINDING_PHASES),
}
_OPTIMIZER_NAMES = ("Optimizer.step#", "Optimizer.zero_grad#", "dnnprof.optimizer")
_BACKWARD_NAMES = re.compile(r"Backward\d*$|^autograd::engine::evaluate_function")
_MODULE_LAYER = re.compile(r"^\S+ \([A-Za-z_][\w.]*\)$")  # "lm_head (Linear)": a model layer, never the optimizer


@dataclass(frozen=True)
class Check:
    """One verified invariant: ``affects`` names the summary keys (``gpu.busy_pct``) and findings
    (``finding:gpu-idle``) whose numbers rest on it."""

    id: str
    ok: bool
    detail: str
    affects: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "ok": self.ok, "detail": self.detail, "affects": list(self.affects)}


def _listed(items: list[str], n: int = 3) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def _affects(check_id: str, keys: Iterable[str]) -> tuple[str, ...]:
    return (*keys, *(f"finding:{f}" for f in _FINDINGS_RESTING_ON.get(check_id, ())))


# --- the checks --------------------------------------------------------------------------------------------------
def profile_invariants(a: Analysis) -> Check:
    problems = a.profile.self_check()
    if not problems:
        return Check("profile-invariants", True, "tables match the schema; row links and step numbers resolve")
    return Check("profile-invariants", False, _listed(problems, 2), ("kernels", "steps", "gpu"))


def step_durations(a: Analysis) -> Check:
    st = a.profile.tables["steps"]
    sel = np.flatnonzero(st["rank"] == a.rank)
    keys = _affects("step-durations", ("steps.mean_us", "steps.median_us", "steps.cv_pct"))
    if sel.size == 0:
        return Check("step-durations", True, "no steps", keys)
    dur = st["dur_ns"][sel]
    bad = np.flatnonzero(dur <= 0)
    if bad.size == 0:
        return Check("step-durations", True, f"{sel.size} step{'s' if sel.size != 1 else ''}, each with a positive host duration", keys)
    named = [f"step {int(st['number'][sel[i]])}: {ns_text(float(dur[i]))}" for i in bad]
    return Check("step-durations", False, f"{bad.size} of {sel.size} steps have a host duration ≤ 0 "
                                          f"({_listed(named)})", keys)


def _gpu_span(a: Analysis) -> tuple[int, int] | None:
    lo, hi = [], []
    for name in ("kernels", "memcpy", "memset"):
        t = a.profile.tables[name]
        sel = t["rank"] == a.rank
        if sel.any():
            lo.append(int(t["start_ns"][sel].min()))
            hi.append(int((t["start_ns"][sel] + t["dur_ns"][sel]).max()))
    return (min(lo), max(hi)) if lo else None


def step_windows(a: Analysis) -> Check:
    keys = _affects("step-windows", ("gpu.busy_pct", "gpu.window_us", "gpu.idle_us", "gpu.idle_breakdown_us",
                                     "steps.gpu_durations_us"))
    st = a.profile.tables["steps"]
    sel = np.flatnonzero((st["rank"] == a.rank) & (st["gpu_start_ns"] >= 0))
    span = _gpu_span(a)
    if sel.size == 0 or span is None:
        return Check("step-windows", True, "no GPU step windows: the window is the GPU span", keys)
    order = sel[np.argsort(st["gpu_start_ns"][sel], kind="stable")]
    num, lo, hi = st["number"][order], st["gpu_start_ns"][order], st["gpu_end_ns"][order]
    problems = []
    empty = np.flatnonzero(hi <= lo)
    if empty.size:
        problems.append(f"{empty.size} not positive ({_listed([f'step {num[i]}: {ns_text(hi[i] - lo[i])}' for i in empty])})")
    over = np.flatnonzero(hi[:-1] > lo[1:])
    if over.size:
        problems.append(f"{over.size} overlap the next ({_listed([f'step {num[i]} ends {ns_text(hi[i] - lo[i + 1])} after step {num[i + 1]} starts' for i in over])})")
    outside = np.flatnonzero((lo < span[0]) | (hi > span[1]))
    if outside.size:
        problems.append(f"{outside.size} reach outside the GPU span ({_listed([f'step {num[i]}' for i in outside])})")
    total = int(np.maximum(hi - lo, 0).sum())
    sums = f"windows add up to {ns_text(total)} for a GPU span of {ns_text(span[1] - span[0])}"
    if not problems:
        return Check("step-windows", True, f"{order.size} windows, positive, disjoint and inside the GPU span; "
                                           f"{sums}", keys)
    return Check("step-windows", False, f"of {order.size} GPU step windows, {'; '.join(problems)}; {sums}", keys)


def _rank_kernels(a: Analysis) -> np.ndarray:
    k = a.profile.tables["kernels"]
    return np.flatnonzero(k["rank"] == a.rank)


def kernel_totals(a: Analysis, doc: dict[str, Any]) -> Check:
    k = a.profile.tables["kernels"]
    rows = _rank_kernels(a)
    keys = ("kernels", "families", "gpu.kernel_us")
    raw = int(k["dur_ns"][rows].sum())
    listed = sum(r.total_ns for r in a.kernels)
    in_steps = int(k["dur_ns"][rows][k["step"][rows] >= 0].sum())
    own = int(k["dur_ns"][rows][k["device"][rows] == a.utilization.device].sum())
    counted = a.utilization.total("kernel_ns")
    problems = []
    if listed != raw:
        problems.append(f"the kernel table adds up to {ns_text(listed)} but the trace's kernels run {ns_text(raw)}")
    if counted > own:
        problems.append(f"the step windows count {ns_text(counted)} of kernel time on GPU {a.utilization.device}, more "
                        f"than its kernels' own {ns_text(own)} (windows count some kernels twice)")
    has_steps = bool((a.profile.tables["steps"]["rank"] == a.rank).any())
    split = f"{ns_text(in_steps)} in steps + {ns_text(raw - in_steps)} outside = {ns_text(raw)}" if has_steps else \
        f"{ns_text(raw)} in all"
    if problems:
        return Check("kernel-totals", False, f"{'; '.join(problems)} ({split})", keys)
    return Check("kernel-totals", True, f"kernel time {split}", keys)


def phases_sum(a: Analysis, doc: dict[str, Any]) -> Check:
    keys = _affects("phases-sum", ("phases",))
    rows = _rank_kernels(a)
    raw_us = float(a.profile.tables["kernels"]["dur_ns"][rows].sum()) / 1e3
    ph = doc.get("phases") or {}
    total_us = float(sum(ph.get(f"{p}_us", 0.0) for p in PHASES))
    tolerance = 0.001 * (len(PHASES) + 1) + 1e-9 * raw_us  # each phase is rounded to 1 ns
    parts = " + ".join(f"{p} {ns_text(ph.get(f'{p}_us', 0.0) * 1e3)}" for p in PHASES)
    if abs(total_us - raw_us) > tolerance:
        return Check("phases-sum", False, f"{parts} = {ns_text(total_us * 1e3)}, but kernel time is {ns_text(raw_us * 1e3)}",
                     keys)
    return Check("phases-sum", True, f"{parts} = kernel time", keys)


def forward_present(a: Analysis) -> Check:
    keys = _affects("forward-present", ("phases",))
    uniq, per_phase = _kernel_ns_per_step_and_phase(a)
    if uniq.size == 0:
        return Check("forward-present", True, "no kernels in steps", keys)

    def per_step(p: str) -> np.ndarray:
        return per_phase[:, PHASES.index(p)]

    fwd, bwd, opt = per_step("forward"), per_step("backward"), per_step("optimizer")
    training = bwd > 0
    bad = training & (fwd <= 0)
    if not training.any():
        return Check("forward-present", True, "no step has backward kernels (not a training step)", keys)
    if not bad.any():
        return Check("forward-present", True, f"each step with backward kernels ({int(training.sum())}) has forward "
                                              "kernels", keys)
    named = [f"step {int(uniq[i])}" for i in np.flatnonzero(bad)]
    return Check("forward-present", False,
                 f"{int(bad.sum())} of {int(training.sum())} steps with backward kernels have no forward kernel "
                 f"({_listed(named)}; backward {ns_text(bwd[bad].sum())}, optimizer {ns_text(opt[bad].sum())}): forward "
                 "work is labelled as another phase", keys)


def _kernel_ns_per_step_and_phase(a: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """The steps of the rank's kernels (sorted) and each one's kernel time per phase (steps × phases): a block of
    kernels at a time (a big trace's are millions; the sums of integer nanoseconds are exact whatever the blocks)."""
    k = a.profile.tables["kernels"]
    has_steps = bool((a.profile.tables["steps"]["rank"] == a.rank).any())
    phase_of = a.attribution.phase
    sums: dict[int, np.ndarray] = {}
    for lo in range(0, k["dur_ns"].size, _BLOCK_ROWS):
        hi = lo + _BLOCK_ROWS
        mine = np.flatnonzero(k["rank"][lo:hi] == a.rank)
        steps = k["step"][lo:hi][mine] if has_steps else np.zeros(mine.size, np.int32)
        inside = steps >= 0
        phase = phase_of[lo:hi][mine][inside] if phase_of.size else np.full(int(inside.sum()), PHASES.index("other"))
        uniq, inv = np.unique(steps[inside], return_inverse=True)
        w = np.bincount(inv.reshape(-1) * len(PHASES) + phase, weights=k["dur_ns"][lo:hi][mine][inside],
                        minlength=uniq.size * len(PHASES)).reshape(uniq.size, len(PHASES))
        for st, row in zip(uniq.tolist(), w, strict=True):
            sums[st] = sums[st] + row if st in sums else row
        release_pages_of(k["rank"], k["step"], k["dur_ns"])
    order = sorted(sums)
    table = np.array([sums[st] for st in order]).reshape(len(order), len(PHASES))
    return np.array(order, dtype=np.int64), table


#: Kernels a check reads at once.
_BLOCK_ROWS = 1 << 20


def attribution_coverage(a: Analysis, doc: dict[str, Any]) -> Check:
    keys = ("layers", "phases")
    rows = _rank_kernels(a)
    k = a.profile.tables["kernels"]
    dur = k["dur_ns"][rows].astype(np.float64)
    total = float(dur.sum())
    if total <= 0:
        return Check("attribution-coverage", True, "no kernel time to attribute", keys)
    layered = 100.0 * float(dur[a.attribution.layered()[rows]].sum()) / total if a.attribution.phase.size else 0.0
    op_row = k["op_row"][rows]
    ops = a.profile.tables["ops"]
    # A kernel launched straight under the step marker has no op to name it: that is no attribution failure.
    # One test per distinct name, not a string per kernel.
    ids = gather(ops["name_id"], np.clip(op_row, 0, None)) if ops["name_id"].size else np.full(rows.size, -1)
    step_marker = a.profile.name_tests(ids)(lambda s: s.startswith("ProfilerStep#"))
    del ids
    real_op = (op_row >= 0) & ~step_marker
    linked = 100.0 * float(dur[real_op].sum()) / total
    level = a.attribution.level
    text = (f"{layered:.1f}% of kernel time reached a layer ({level} level); {linked:.1f}% has a launching CPU op")
    if linked >= MIN_ATTRIBUTED_PCT and layered < MIN_ATTRIBUTED_PCT:
        return Check("attribution-coverage", False, text + ": the ops were found but not turned into layers", keys)
    if linked < MIN_ATTRIBUTED_PCT:
        text += " (the trace links few kernels to CPU ops: layers and phases are partial)"
    return Check("attribution-coverage", True, text, keys)


def busy_vs_nvml(a: Analysis) -> Check:
    """Trace busy % against NVML/GPM samples taken inside the GPU step windows of the rank's device."""
    keys = ("gpu.busy_pct",)
    s = a.profile.tables["samples"]
    u = a.utilization
    if s["metric_id"].size == 0 or not u.steps:
        return Check("busy-vs-nvml", True, "no NVML/GPM samples in this profile", keys)
    st = a.profile.tables["steps"]
    wsel = (st["rank"] == a.rank) & (st["gpu_start_ns"] >= 0)
    if u.whole_trace or not wsel.any():
        span = _gpu_span(a)
        lo, hi = (span if span else (0, -1))
    else:
        lo, hi = int(st["gpu_start_ns"][wsel].min()), int(st["gpu_end_ns"][wsel].max())
    names = a.profile.names(s["metric_id"])
    mine = (s["rank"] == a.rank) & (s["device"] == u.device)
    act_s, act_e = _activity(a)

    def mean(metric: str, span_ns: int) -> tuple[float, float, int] | None:
        """Mean of the samples whose whole averaging period lies inside the steps (a sample stamped early in
        the steps still describes time before them: the capture's start, the previous window), and the trace's
        own busy % over those same periods."""
        ts = s["ts_ns"]
        sel = mine & (names == metric) & (ts - span_ns >= lo) & (ts <= hi) & np.isfinite(s["value"])
        if not sel.any():
            return None
        t1 = ts[sel].astype(np.int64)
        t0 = t1 - max(span_ns, 1)
        trace = covered_per_window(act_s, act_e, t0, t1) / (t1 - t0)
        return float(s["value"][sel].mean()), 100.0 * float(trace.mean()), int(t1.size)

    # An export that says how long its samples average over (nsys GPU metrics: the sampling period) is taken at
    # its word; NVML/GPM samples from a dnnprof run use the periods above.
    spans = a.profile.meta.get("sample_spans_ns") or {}
    ref = next(((label.replace("GPM", "nsys GPU metrics") if metric in spans else label, m)
                for metric, label, span in _BUSY_METRICS
                if (m := mean(metric, int(spans.get(metric, span)))) is not None), None)
    sm = mean(_SM_ACTIVE, int(spans.get(_SM_ACTIVE, _GPM_SPAN_NS)))
    if ref is None and sm is None:
        return Check("busy-vs-nvml", True,
                     f"not compared: no NVML/GPM sample's period lies inside the profiled steps "
                     f"({(hi - lo) / 1e9:.2f} s of GPU windows; NVML GPU-Util averages over up to 1 s, GPM over "
                     f"0.11 s)", keys)
    parts, problems = [], []
    if ref is not None:
        (label, (value, busy, n)) = ref
        parts.append(f"{label} {value:.1f}% against trace busy {busy:.1f}% over the same "
                     f"{n} sample period{'s' if n != 1 else ''}")
        if abs(busy - value) > NVML_MAX_DIFF_PCT:
            problems.append(f"{label} differs by {abs(busy - value):.1f} points")
    if sm is not None:
        value, busy, n = sm
        source = "nsys GPU metrics" if _SM_ACTIVE in spans else "GPM"
        parts.append(f"{source} SM active {value:.1f}% against trace busy {busy:.1f}%")
        if value > busy + NVML_MAX_DIFF_PCT:  # SMs cannot be active while no kernel runs
            problems.append(f"SM active exceeds busy by {value - busy:.1f} points")
    text = f"trace busy {u.busy_pct:.1f}% over the steps; " + ", ".join(parts)
    if problems:
        return Check("busy-vs-nvml", False, f"{text}: {'; '.join(problems)} (over {NVML_MAX_DIFF_PCT:g})", keys)
    return Check("busy-vs-nvml", True, f"{text}: within {NVML_MAX_DIFF_PCT:g} points", keys)


def _activity(a: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals of the rank's device activity (kernels, copies, memsets): what busy % counts."""
    starts, ends = [], []
    for table in ("kernels", "memcpy", "memset"):
        t = a.profile.tables[table]
        sel = (t["rank"] == a.rank) & (t["device"] == a.utilization.device)
        starts.append(t["start_ns"][sel])
        ends.append(t["start_ns"][sel] + t["dur_ns"][sel])
    return merge(np.concatenate(starts).astype(np.int64), np.concatenate(ends).astype(np.int64))


#: The checks that need no findings, in the order the summary lists them: (function, whether it reads the summary).
_PROFILE_CHECKS = (
    ("profile_invariants", False), ("step_durations", False), ("step_windows", False), ("kernel_totals", True),
    ("phases_sum", True), ("forward_present", False), ("attribution_coverage", True), ("busy_vs_nvml", False),
)


def _check(name: str) -> Callable[..., Check]:
    return globals()[name]  # looked up when run, as a direct call would be


def analysis_checks(a: Analysis) -> dict[str, Check]:
    """The checks that read the analysis alone, by function name: made before the summary is (in another thread)
    and handed to :func:`profile_checks`."""
    out = {}
    for name, reads_doc in _PROFILE_CHECKS:
        if not reads_doc:
            out[name] = _check(name)(a)
            release_pages()  # a big trace's mapped columns: one check's pages at a time (model.mapped_columns)
    return out


def profile_checks(a: Analysis, doc: dict[str, Any], made: dict[str, Check] | None = None) -> list[Check]:
    """Every check that needs no findings, in a fixed order; ``doc`` is the summary built so far; ``made``: the
    :func:`analysis_checks` already made."""
    out = []
    for name, reads_doc in _PROFILE_CHECKS:
        if made is not None and name in made:
            out.append(made[name])
            continue
        out.append(_check(name)(a, doc) if reads_doc else _check(name)(a))
        release_pages()  # a big trace's mapped columns: one check's pages at a time (model.mapped_columns)
    return out


# --- findings ----------------------------------------------------------------------------------------------------
def _implied_phase(o: dict[str, Any]) -> str | None:
    """The phase an offender's own names imply: 'optimizer', 'backward', 'model' (inside a model layer: forward or
    backward, never the optimizer) or None when they say nothing."""
    names = [str(o.get(x) or "") for x in ("layer", "op", "in_op")]
    if any(n.startswith(_OPTIMIZER_NAMES) for n in names):
        return "optimizer"
    if any(_BACKWARD_NAMES.search(n) for n in names if n):
        return "backward"
    if _MODULE_LAYER.match(names[0]):
        return "model"
    return None


def _offender_problem(o: dict[str, Any], allowed: tuple[str, ...]) -> str | None:
    label, implied = o.get("phase"), _implied_phase(o)
    what = str(o.get("kernel") or o.get("op") or "?")
    where = f" in {o['layer']}" if o.get("layer") else ""
    if label is not None and label not in allowed:
        return f"{what}{where} is a {label} kernel"
    if implied == "model" and "optimizer" in allowed and "forward" not in allowed:
        return f"{what} runs inside the model layer {o.get('layer')}, not in the optimizer"
    if implied is not None and implied != "model" and implied not in allowed:
        return f"{what}{where} is launched by {implied} work"
    return None


def finding_offenders(findings: list[dict[str, Any]]) -> tuple[Check, dict[str, str]]:
    """The ``finding-offenders`` check and, per failing finding id, why."""
    failed: dict[str, str] = {}
    scoped = 0
    for f in findings:
        allowed = FINDING_PHASES.get(str(f.get("id")))
        top = (f.get("evidence") or {}).get("top") if isinstance(f.get("evidence"), dict) else None
        if not allowed or not top:
            continue
        scoped += 1
        problems = [p for o in top if isinstance(o, dict) and (p := _offender_problem(o, allowed))]
        if problems:
            failed[str(f["id"])] = f"{f['id']} is about {'/'.join(allowed)} kernels but {_listed(problems, 2)}"
    affects = tuple(f"finding:{i}" for i in failed)
    if failed:
        return Check("finding-offenders", False, "; ".join(failed.values()), affects), failed
    detail = (f"the offenders of {scoped} phase-scoped finding{'s' if scoped != 1 else ''} belong to their phase"
              if scoped else "no phase-scoped finding")
    return Check("finding-offenders", True, detail), failed


def review_findings(doc: dict[str, Any], findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add the ``finding-offenders`` check to ``doc["checks"]`` and mark each finding that rests on a broken check
    with ``unreliable`` (the check's id and detail); marked findings go last, the others keep their order."""
    check, failed = finding_offenders(findings)
    checks = [c for c in doc.get("checks", []) if c.get("id") != check.id] + [check.to_dict()]
    doc["checks"] = checks
    reasons: dict[str, str] = {}
    for c in checks:
        if c.get("ok"):
            continue
        for key in c.get("affects", []):
            fid = key.removeprefix("finding:")
            if key.startswith("finding:") and fid not in reasons:
                reasons[fid] = failed.get(fid) or f"{c['id']}: {c['detail']}"
    out, marked = [], []
    for f in findings:
        why = reasons.get(str(f.get("id")))
        if why is None:
            out.append(f)
        else:
            marked.append({**f, "unreliable": why})
    return out + marked
