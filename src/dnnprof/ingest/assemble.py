"""From what the collector left in a run directory (raw traces, ``collector.json``, samples) to one Profile.

* clock: the offset between the wall clock the collector used (``time.time_ns``) and the trace clock, from a
  probe whose wall-clock bracket is known (a ``dnnprof.clock_sync`` range or a ``cudaDeviceSynchronize``);
* steps: every window carries ``ProfilerStep#N`` ranges, which the Kineto reader already turned into steps; a
  trace without them (a CUDA-only timing window of an older dnnprof) gets its steps from the collector's boundary
  times, moved onto the trace clock;
* capture edges: a timed step at the first or last place of the timing window whose host time is off the other
  timed steps' median by more than ``EDGE_STEP_MAX_DEVIATION_PCT`` is dropped (its rows get ``step = -1``) and
  named in ``edge_steps_dropped``: the capture only partly covers it (the profiler's start drains the GPU's launch
  queue, so the first step runs ahead of a GPU-bound loop; a capture stopped mid-step cuts the last one);
* validity: a trace whose GPU events all have zero times (what Kineto writes for a session saved after a later
  session started; older dnnprof runs did that) cannot time anything; this is said, not hidden;
* attribution: the attribution window (with ``--full``: the full-detail window, shapes, stacks and memory events)
  is joined onto the timing window (``join``);
* module ranges: recorded with the fast record-function (Kineto files them as ``cpu_op``), relabelled here as the
  ``user_annotation`` ranges they are;
* samples: NVML/GPM readings moved onto the trace clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.ingest.compiled import apply_compiled_kernels, load_records
from dnnprof.ingest.graph_replays import apply_graph_replays
from dnnprof.ingest.join import join_attribution
from dnnprof.ingest.kineto import read_kineto
from dnnprof.model.profile import Profile
from dnnprof.model.run_format import MODULE_RANGE_PREFIX as PREFIX
from dnnprof.model.run_format import RESULT_FILE
from dnnprof.model.schema import OP_CATEGORIES, STEP_SOURCES, empty_table
from dnnprof.model.steps import assign_steps

_STEP_SOURCE = {"optimizer": "optimizer", "marker": "marker", "explicit": "marker", "dataloader": "dataloader"}
#: Samples kept this far around the profiled windows (GPM values describe the preceding ~0.1 s).
SAMPLE_MARGIN_NS = 1_000_000_000
#: A timed step at an edge of the capture whose host time is off the median of the other timed steps by more than
#: this is not counted (a steady GPU-bound loop measured a 52.6 ms first step against a median of 87.5 ms).
EDGE_STEP_MAX_DEVIATION_PCT = 25.0
#: Edge steps are judged only when at least this many timed steps remain to give the median.
EDGE_STEP_MIN_OTHERS = 3


class AssembleError(ValueError):
    """The run directory has nothing a profile can be built from; the message says why."""


def load_collector(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / RESULT_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise AssembleError(f"{path}: unreadable collector results ({e})") from None


def clock_offset(profile: Profile, probe: dict[str, Any]) -> dict[str, Any]:
    """Offset (ns) to add to a wall-clock time to get an absolute trace time, from a probe of ``profile``."""
    out: dict[str, Any] = {"offset_ns": 0, "method": probe.get("method", "none"), "found": False}
    if not probe:
        out["note"] = "no clock probe; wall clock assumed equal to the trace clock"
        return out
    t0, t1 = int(probe["t0_ns"]), int(probe["t1_ns"])
    table = "ops" if probe["method"] == "record_function" else "runtime"
    t = profile.tables[table]
    sid = profile.string_id(probe["name"])
    rows = np.flatnonzero(t["name_id"] == sid) if sid >= 0 else np.empty(0, dtype=np.int64)
    if rows.size == 0:
        out["note"] = f"probe {probe['name']} not in the trace; wall clock assumed equal to the trace clock"
        return out
    base = int(profile.meta.get("base_time_ns", 0))
    starts = t["start_ns"][rows] + base
    ev = int(starts[np.argmin(np.abs(starts - (t0 + t1) // 2))])
    # The event happened between t0 and t1 on the wall clock: shift only as far as needed to make that true.
    out.update(offset_ns=int(ev - min(max(ev, t0), t1)), uncertainty_ns=t1 - t0, found=True)
    return out


def relabel_module_ranges(profile: Profile) -> int:
    """Mark dnnprof's module ranges (``dnnprof.module:…``) as user annotations; returns how many."""
    ops = profile.tables["ops"]
    if not ops["name_id"].size:
        return 0
    ids = [i for i, s in enumerate(profile.strings) if s.startswith(PREFIX)]
    sel = np.isin(ops["name_id"], np.asarray(ids, dtype=np.int32))
    ops["category"][sel] = OP_CATEGORIES.index("user_annotation")
    return int(sel.sum())


def _read(run_dir: Path, window: dict[str, Any], rank: int | None = None) -> Profile:
    profile = read_kineto(run_dir / window["trace"], rank=rank)
    relabel_module_ranges(profile)
    compiled = load_records(run_dir)
    if compiled is not None:
        if window.get("ops", True):
            apply_compiled_kernels(profile, compiled)
        apply_graph_replays(profile, compiled)  # needs no ops: a replay's kernels share its launch's correlation
    return profile


def _timed_steps(profile: Profile, col: dict[str, Any], window: dict[str, Any], offset: int) -> list[int]:
    first, last = int(window["first_step"]), int(window["last_step"])
    starts = np.asarray(col["step_start_ns"], dtype=np.int64)
    ends = np.asarray(col["step_end_ns"], dtype=np.int64)
    numbers = np.arange(first, min(last, ends.size - 1) + 1, dtype=np.int32)
    base = int(profile.meta.get("base_time_ns", 0))
    assign_steps(profile, starts[numbers] + offset - base, ends[numbers] + offset - base,
                 _STEP_SOURCE.get(col.get("step_source") or "", "marker"), numbers=numbers)
    return numbers.tolist()


def drop_edge_steps(profile: Profile, rank: int = 0) -> list[dict[str, Any]]:
    """Drop the first/last timed step when the capture only partly covers it (see the module docstring); returns
    what was dropped (``step``, ``host_us``, ``median_us``)."""
    steps = profile.tables["steps"]
    sel = np.flatnonzero(steps["rank"] == rank)
    sel = sel[np.argsort(steps["start_ns"][sel], kind="stable")]
    if sel.size < EDGE_STEP_MIN_OTHERS + 1:
        return []
    dur = steps["dur_ns"][sel].astype(np.float64)
    keep = np.ones(sel.size, dtype=bool)
    dropped = []
    for i in (0, sel.size - 1):
        others = np.delete(dur, i)
        med = float(np.median(others))
        if med > 0 and abs(dur[i] - med) > med * EDGE_STEP_MAX_DEVIATION_PCT / 100.0 \
                and int(keep.sum()) - 1 >= EDGE_STEP_MIN_OTHERS:
            keep[i] = False
            dropped.append({"step": int(steps["number"][sel[i]]), "host_us": round(dur[i] / 1000.0, 3),
                            "median_us": round(med / 1000.0, 3)})
    if not dropped:
        return []
    kept = sel[keep]
    source = STEP_SOURCES[int(steps["source"][kept[0]])]
    assign_steps(profile, steps["start_ns"][kept], steps["start_ns"][kept] + steps["dur_ns"][kept], source,
                 numbers=steps["number"][kept], name_ids=steps["name_id"][kept], rank=rank)
    return dropped


def _label_steps(profile: Profile, col: dict[str, Any]) -> None:
    """``ProfilerStep#N`` ranges mark steps the collector found from its own source: say which (optimizer …)."""
    steps = profile.tables["steps"]
    source = _STEP_SOURCE.get(col.get("step_source") or "")
    if source is None or not steps["number"].size:
        return
    mine = steps["source"] == STEP_SOURCES.index("profiler_step")
    steps["source"][mine] = STEP_SOURCES.index(source)


def zero_gpu_times(profile: Profile) -> str:
    """A sentence when the trace has GPU activity but no GPU times (every kernel at ts = dur = 0), else ``""``."""
    k = profile.tables["kernels"]
    if k["dur_ns"].size == 0 or np.any(k["dur_ns"] > 0):
        return ""
    return (f"the timing trace has {k['dur_ns'].size} kernels, all with zero start and duration (Kineto writes "
            "that for a trace saved after another profiler session started): kernel times are unknown")


def _whole_trace_step(profile: Profile) -> None:
    if profile.tables["steps"]["number"].size:
        return
    lo, hi = [], []
    for name in ("ops", "runtime", "kernels", "memcpy", "memset"):
        t = profile.tables[name]
        if t["start_ns"].size:
            lo.append(int(t["start_ns"].min()))
            hi.append(int((t["start_ns"] + t["dur_ns"]).max()))
    if lo:
        assign_steps(profile, np.array([min(lo)]), np.array([max(hi) + 1]), "whole_trace",
                     numbers=np.array([0]))


def add_samples(profile: Profile, columns: dict[str, Any], offset: int, lo_ns: int, hi_ns: int) -> int:
    """Put NVML samples (wall-clock ``ts_ns``) into ``profile.tables["samples"]``; returns rows added."""
    ts = np.asarray(columns.get("ts_ns", []), dtype=np.int64)
    keep = np.flatnonzero((ts >= lo_ns - SAMPLE_MARGIN_NS) & (ts <= hi_ns + SAMPLE_MARGIN_NS))
    ts = ts[keep]
    order = np.argsort(ts, kind="stable")
    keep = keep[order]
    ids = np.array([profile.intern(n) for n in columns.get("metrics", [])] + [-1], dtype=np.int32)
    t = empty_table("samples", keep.size)
    t["rank"][:] = 0
    t["device"][:] = np.asarray(columns.get("device", []), dtype=np.int16)[keep]
    t["ts_ns"][:] = ts[order] + offset - int(profile.meta.get("base_time_ns", 0))
    t["metric_id"][:] = ids[np.asarray(columns.get("metric", []), dtype=np.int64)[keep]]
    t["value"][:] = np.asarray(columns.get("value", []), dtype=np.float64)[keep]
    profile.tables["samples"] = t
    return int(keep.size)


def assemble(run_dir: Path, col: dict[str, Any], rank: int | None = None) -> tuple[Profile, dict[str, Any]]:
    """The canonical profile of a run and a description of how it was put together.

    ``rank``: the rank its rows get (default: the trace's ``distributedInfo.rank``, else 0).

    Raises:
        AssembleError: the collector recorded no trace (too few steps, or nothing ran).
        dnnprof.ingest.errors.TraceError: a trace file is unreadable (e.g. cut short by a crash).
    """
    windows = {w["kind"]: w for w in col.get("windows", []) if w.get("trace")}
    info: dict[str, Any] = {"windows": sorted(windows)}
    if "timing" in windows:
        profile = _read(run_dir, windows["timing"], rank)
        info["clock"] = clock = clock_offset(profile, windows["timing"].get("clock_probe", {}))
        if profile.tables["steps"]["number"].size:
            info["timed_steps"] = profile.tables["steps"]["number"].tolist()
        else:
            info["timed_steps"] = _timed_steps(profile, col, windows["timing"], clock["offset_ns"])
        broken = zero_gpu_times(profile)
        if broken:
            info["invalid"] = broken
        detail = next((k for k in ("attribution", "full") if k in windows), None)
        if detail is not None:
            attrib = _read(run_dir, windows[detail], rank)
            info["attribution_clock"] = clock_offset(attrib, windows[detail].get("clock_probe", {}))
            attrib.meta["base_time_ns"] = int(attrib.meta.get("base_time_ns", 0)) + (
                clock["offset_ns"] - info["attribution_clock"]["offset_ns"])
            info["attribution"] = join_attribution(profile, attrib)
            if "compiled" in attrib.meta:
                profile.meta["compiled"] = attrib.meta["compiled"]
            info["attribution"]["window"] = detail
            profile.meta["sources"] = [windows["timing"]["trace"], windows[detail]["trace"]]
        else:
            info["attribution"] = {"note": "no attribution window (the run ended first): kernels have no ops"}
        # After the join: a dropped step's kernels keep their ops, layers and phases; only its step goes.
        dropped = drop_edge_steps(profile)
        if dropped:
            info["edge_steps_dropped"] = dropped
            info["timed_steps"] = profile.tables["steps"]["number"].tolist()
            profile.meta.setdefault("source", {}).setdefault("notes", []).append(
                "not counted, the capture only partly covers them: " + ", ".join(
                    f"step {d['step']} ({d['host_us'] / 1000:.1f} ms against a median of {d['median_us'] / 1000:.1f} ms)"
                    for d in dropped))
    elif windows:
        kind = next(k for k in ("full", "cpu", "whole_run") if k in windows)
        profile = _read(run_dir, windows[kind], rank)
        info["clock"] = clock_offset(profile, windows[kind].get("clock_probe", {}))
        if kind == "whole_run":
            _whole_trace_step(profile)
        info["timed_steps"] = profile.tables["steps"]["number"].tolist()
    else:
        raise AssembleError(_no_trace_reason(col))
    _label_steps(profile, col)
    offset = int(info["clock"]["offset_ns"])
    samples = run_dir / col["samples_file"] if col.get("samples_file") else None
    if samples is not None and samples.is_file():
        lo = min(int(w["started_ns"]) for w in windows.values())
        hi = max(int(w.get("stopped_ns") or w["started_ns"]) for w in windows.values())  # None: never stopped
        info["samples"] = add_samples(profile, json.loads(samples.read_text()), offset, lo, hi)
    return profile, info


def _no_trace_reason(col: dict[str, Any]) -> str:
    status = col.get("status")
    if status == "too_few_steps":
        plan = col.get("plan", {})
        return (f"the script ended after {col.get('steps_completed', 0)} steps, before the profiled window "
                f"(warm-up {plan.get('warmup')} + {plan.get('steps')} steps); run more iterations or lower "
                "--warmup-steps/--steps")
    if status == "no_steps":
        return ("no iterations were found and no nn.Module ever ran, so nothing was recorded; mark iterations with "
                "--step-marker NAME or dnnprof.step()")
    return f"the collector recorded no trace (status {status!r})"
