"""The JSON files of a ``dnnprof run`` directory, checked before anything reads them.

A run directory is files on a disk, written by the collector in the profiled process and by ``dnnprof run``; a
crash, an edit or a full disk can leave any of them garbled. :func:`check_run_dir` reads each one the assembly and
the run report read (``collector.json``, the samples file it names, ``meta.json``, ``collector_config.json``) and
checks the type of every field they use, so a garbled file is one line naming the file and the field
(:class:`~dnnprof.ingest.errors.TraceError`), never a traceback from deep inside the assembly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dnnprof.ingest.detect import RUN_RESULTS
from dnnprof.ingest.errors import TraceError

_INT64 = 2**63


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file that must hold an object; :class:`TraceError` naming the file otherwise."""
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))  # strict: json.loads(bytes) lets encoded surrogates by
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: invalid JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise TraceError(f"{path}: invalid JSON (nested too deeply)") from None
    if not isinstance(doc, dict):
        raise TraceError(f"{path}: a JSON {type(doc).__name__}, not the object dnnprof writes")
    return doc


# --- field types ----------------------------------------------------------------------------------------------
def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -_INT64 <= v < _INT64


def _num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e300) or _int(v)


def _sample(v: Any) -> bool:
    """A sampled value: any number, NaN included (the collector writes NaN for a metric the GPU did not give)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, float) or _int(v))


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


def _list_of(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        return isinstance(v, list) and all(ok(x) for x in v)
    check.what = f"a list of {_what(ok).removeprefix('an ').removeprefix('a ')} values"  # type: ignore[attr-defined]
    return check


def _or_none(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        return v is None or ok(v)
    check.what = f"{_what(ok)} or null"  # type: ignore[attr-defined]
    return check


def _what(ok: Callable[[Any], bool]) -> str:
    return getattr(ok, "what", None) or _WHAT.get(ok, "of the type dnnprof writes")


def _plain_name(v: Any) -> bool:
    """A file name inside the run directory (no folder parts: a garbled name must not read outside it)."""
    return (isinstance(v, str) and v not in ("", ".", "..") and "/" not in v and "\\" not in v and "\0" not in v
            and _name_fits(v))


#: Longest file name a file system takes (bytes); a longer one is no file of the run, and asking for it is an OSError.
NAME_MAX = 255


def _name_fits(name: str) -> bool:
    return len(name.encode("utf-8", "surrogatepass")) <= NAME_MAX


def _rel_path(v: Any) -> bool:
    """A relative path inside the run directory (``trace/timing.json.gz``)."""
    if not isinstance(v, str) or not v or "\0" in v or v.startswith(("/", "\\")):
        return False
    return ".." not in Path(v).parts and all(_name_fits(part) for part in Path(v).parts)


_WHAT: dict[Callable[[Any], bool], str] = {_int: "an integer", _num: "a number", _sample: "a number", _str: "text", _dict: "an object", _plain_name: "a file name",
         _rel_path: "a path inside the run directory"}

#: collector.json: field → check (absent fields are allowed: older collectors wrote fewer).
COLLECTOR: dict[str, Callable[[Any], bool]] = {
    "status": _or_none(_str), "step_source": _or_none(_str), "steps_completed": _or_none(_int),
    "plan": _or_none(_dict), "settings": _or_none(_dict), "memory": _or_none(_dict), "nvml": _or_none(_dict),
    "workload": _or_none(_dict), "host_hotspots": _or_none(_dict), "config": _or_none(_dict),
    "step_start_ns": _list_of(_int), "step_end_ns": _list_of(_int), "step_items": _list_of(_or_none(_num)),
    "notes": _list_of(_str), "samples_file": _or_none(_plain_name), "windows": _list_of(_dict),
}
_INTS = _list_of(_int)


def _pair(v: Any) -> bool:
    """A ``range(*pair)`` argument: two integers."""
    return isinstance(v, list) and len(v) == 2 and all(_int(x) for x in v)


_pair.what = "a pair of integers"  # type: ignore[attr-defined]
#: Objects inside collector.json: field → check.
NESTED: dict[str, dict[str, Callable[[Any], bool]]] = {
    "plan": {"warmup": _or_none(_int), "steps": _or_none(_int), "attribution": _or_none(_int),
             "baseline_after": _or_none(_int), "pre_baseline": _pair, "post_baseline": _pair},
    "memory": {"device": _or_none(_int), "device_total_bytes": _or_none(_int), "per_step": _or_none(_dict),
               "static": _or_none(_dict)},
    "nvml": {"period_s": _or_none(_num), "gpm_window_s": _or_none(_num)},
    "workload": {"items_per_step": _or_none(_num), "unit": _or_none(_str)},
    "host_hotspots": {"top_user_lines": _or_none(_list_of(_dict))},
}
PER_STEP: dict[str, Callable[[Any], bool]] = {"step": _INTS, "peak_allocated_bytes": _list_of(_or_none(_int)),
                                              "peak_reserved_bytes": _list_of(_or_none(_int))}
#: Windows whose steps the run report counts: they must say which.
STEP_WINDOWS = ("timing", "full", "cpu")
WINDOW: dict[str, Callable[[Any], bool]] = {
    "kind": _str, "trace": _or_none(_rel_path), "started_ns": _int, "stopped_ns": _or_none(_int),
    "first_step": _or_none(_int), "last_step": _or_none(_int), "clock_probe": _or_none(_dict),
}
PROBE: dict[str, Callable[[Any], bool]] = {"t0_ns": _int, "t1_ns": _int, "method": _str, "name": _str}
SAMPLES: dict[str, Callable[[Any], bool]] = {
    "metrics": _list_of(_str), "device": _list_of(lambda v: _int(v) and 0 <= v < 2**15), "ts_ns": _list_of(_int),
    "metric": _list_of(_int), "value": _list_of(_or_none(_sample)),
}
META: dict[str, Callable[[Any], bool]] = {"status": _or_none(_str), "complete": _or_none(lambda v: isinstance(v, bool)),
                                          "config": _or_none(_dict)}


def _check(doc: dict[str, Any], spec: dict[str, Callable[[Any], bool]], path: Path, where: str = "") -> None:
    for key, ok in spec.items():
        if key in doc and not ok(doc[key]):
            what = _what(ok)
            raise TraceError(f"{path}: {where}{key} is {str(doc[key])[:40]!r}, not {what}")


def check_run_dir(run_dir: Path) -> None:
    """Read and type-check the JSON files of ``run_dir`` that the assembly and the run report read.

    Raises:
        TraceError: a file is unreadable, not JSON, not an object, or a field has the wrong type or length.
    """
    path = run_dir / RUN_RESULTS
    if not path.is_file():
        return
    col = read_json_object(path)
    _check(col, COLLECTOR, path)
    for key, spec in NESTED.items():
        if isinstance(col.get(key), dict):
            _check(col[key], spec, path, f"{key}.")
    memory = col.get("memory") or {}
    if isinstance(memory.get("per_step"), dict):
        _check(memory["per_step"], PER_STEP, path, "memory.per_step.")
    if isinstance(memory.get("static"), dict):
        _check(memory["static"], dict.fromkeys(memory["static"], _or_none(_num)), path, "memory.static.")
    traced = set()
    for i, w in enumerate(col.get("windows") or []):
        _check(w, WINDOW, path, f"windows[{i}].")
        if "kind" not in w:
            raise TraceError(f"{path}: windows[{i}] has no kind")
        if w.get("trace"):
            traced.add(w["kind"])
        if isinstance(w.get("clock_probe"), dict) and w["clock_probe"]:
            _check(w["clock_probe"], PROBE, path, f"windows[{i}].clock_probe.")
            missing = [k for k in PROBE if k not in w["clock_probe"]]
            if missing:
                raise TraceError(f"{path}: windows[{i}].clock_probe has no {missing[0]}")
        if w.get("trace") and "started_ns" not in w:
            raise TraceError(f"{path}: windows[{i}] has a trace but no started_ns")
        if w.get("kind") in STEP_WINDOWS and not (_int(w.get("first_step")) and _int(w.get("last_step"))):
            raise TraceError(f"{path}: windows[{i}] ({w['kind']}) has no first_step and last_step")
    if traced and not traced & {*STEP_WINDOWS, "whole_run"}:
        raise TraceError(f"{path}: traces only of {', '.join(sorted(traced))} windows: no timing, full, cpu or "
                         "whole_run window to build the profile from")
    starts, ends = col.get("step_start_ns") or [], col.get("step_end_ns") or []
    if len(starts) != len(ends):
        raise TraceError(f"{path}: {len(starts)} step starts but {len(ends)} step ends")
    if col.get("samples_file") and (run_dir / col["samples_file"]).is_file():
        spath = run_dir / col["samples_file"]
        samples = read_json_object(spath)
        _check(samples, SAMPLES, spath)
        lengths = {k: len(samples.get(k) or []) for k in ("device", "ts_ns", "metric", "value")}
        if len(set(lengths.values())) > 1:
            raise TraceError(f"{spath}: columns of different lengths ({lengths})")
        names = len(samples.get("metrics") or [])
        if any(not -1 <= m < names for m in samples.get("metric") or []):
            raise TraceError(f"{spath}: a metric index points past the {names} metric names")
    for name, spec in (("meta.json", META), ("collector_config.json", {})):
        if (run_dir / name).is_file():
            _check(read_json_object(run_dir / name), spec, run_dir / name)
