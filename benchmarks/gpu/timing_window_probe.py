"""Is each kind of profiler window valid, and what does it cost? One fresh process per scenario.

Run on the GPU machine (dnnprof from this checkout on PYTHONPATH, transformers present):
    OUT=out python benchmarks/gpu/timing_window_probe.py                 # ~2 min on an H100 (7 fresh processes)
    OUT=out python benchmarks/gpu/timing_window_probe.py --only timing,none
    python benchmarks/gpu/timing_window_probe.py --smoke                  # CPU check of this harness

Workload: GPT-2 124M, batch 8 x 512, bf16 autocast, fused AdamW, ``loss.item()`` every step (``overhead_gpt2.py``).
Each scenario runs in its own process: 6 unprofiled steps, a window of 10 steps opened and closed the way the
collector does it (``dnnprof.collect.windows.Window``, ``ProfilerStep#N`` ranges), the trace exported, then 10
unprofiled steps. Reported: median step before / inside / after the window (the first step after the stop pays
the CUPTI teardown and is shown apart), stop and export seconds, and whether the trace has GPU times (kernels with
a non-zero duration): PyTorch 2.11's CUDA-only sessions export ``ts = dur = 0`` for every GPU event.

Scenarios: ``none``; ``cuda_only`` (torch.profiler, CUDA activity alone, saved right after it stops);
``timing`` (dnnprof's timing window: CUDA + user ranges, no ops); ``timing_nvml20`` / ``timing_nvml50`` (plus the
NVML/GPM sampler every 20 / 50 ms); ``timing_stack`` (plus the host stack sampler, 10 ms); ``full_nostack``
(CPU ops, shapes, memory events, module ranges: ``--full`` without Python stacks). With ``--only``, also:
``timing_samplers`` (stack + NVML 20 ms), ``timing_default`` (stack 10 ms + NVML 50 ms: the collector's defaults),
``timing_stack50`` (stack sampler every 50 ms), ``timing_nvmlproc50`` / ``timing_stack_nvmlproc`` (NVML every
50 ms sampled in a helper process, without / with the stack sampler), ``kernels_only`` (GPU activity without runtime-call records, where
this PyTorch accepts activity filters), ``attribution``, ``full``, ``full_noranges`` (``--full`` without dnnprof's
module ranges), ``full_withmodules`` (torch's ``with_modules`` instead of dnnprof's module ranges), ``full_nomem``
(without memory events), ``full_noshapes`` (without shapes). ``timing_noextcorr`` (the timing window with
Kineto's external correlation off), ``timing_rtfilter`` / ``timing_rtfilter_b`` (the timing window with CUPTI's
runtime- and driver-call records cut down to launches, copies, memsets and syncs, through the libcupti Kineto has
loaded: (a) every other call switched off while the kinds are on, (b) the kinds off and the wanted calls switched on
one by one; reports CUPTI's return codes, and the trace's runtime-call count shows what took effect),
``timing_rtfilter_c`` ((b) with CUPTI's synchronization records on and a 13-byte marker memset at every step
boundary, whose correlation ids split the kernels into steps), ``cupti_kernels`` / ``cupti_ksync`` / ``cupti_launchrt`` / ``cupti_launchdrv`` /
``cupti_runtime`` / ``cupti_driver`` (CUPTI activity records taken straight through NVIDIA's cupti-python, no Kineto:
kernels, copies and memsets alone; plus synchronization records; plus runtime (or driver) call records for launches,
copies, memsets and syncs only; plus every runtime call; plus driver calls — what each kind of record costs; each
also checks step markers, correlation order, the CUPTI clock and a Kineto session afterwards; needs the
``cupti-python`` and ``pyelftools`` wheels). ``--only`` may name a scenario twice (e.g. ``none``
first and last, to see drift). ``PROBE_STEP=launches`` replaces GPT-2 with a host-bound step of
2,000 tiny launches (the host's cost per launch under each capture). ``--cycles N`` opens the window N times in each process (8 steps, then 6 plain
steps) and reports the median over cycles of (window / the plain steps around it): use it on a noisy host.
Writes $OUT/timing_window_probe.json and prints a table last.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("none", "cuda_only", "timing", "timing_nvml20", "timing_nvml50", "timing_stack", "full_nostack")
#: Run only when named with --only.
EXTRA = ("timing_samplers", "timing_default", "timing_stack50", "timing_nvmlproc50", "timing_stack_nvmlproc",
         "kernels_only", "attribution", "full", "full_noranges", "full_nomem", "full_noshapes", "full_withmodules",
         "timing_noextcorr", "timing_rtfilter", "timing_rtfilter_b", "timing_rtfilter_c", *(f"cupti_{k}" for k in ("kernels", "ksync", "launchrt", "launchdrv", "runtime", "driver")))
#: CUPTI activity kinds of the ``cupti_*`` scenarios (cupti-python, no Kineto session in the process): what each
#: kind of record costs on its own. ``launchrt`` / ``launchdrv`` record runtime / driver calls for launches, copies,
#: memsets and syncs only. Every ``cupti_*`` window also issues one 1-byte marker memset per step boundary (value
#: ``MARKER_VALUE``) and reports how the correlation ids of kernels fall between the markers' ids.
CUPTI_KINDS = {"kernels": ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET"),
               "ksync": ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION"),
               "launchrt": ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION", "RUNTIME"),
               "launchdrv": ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION", "DRIVER"),
               "runtime": ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME"),
               "driver": ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER")}
#: Profiler keyword overrides of the ``full_*`` variants.
FULL_VARIANTS = {"full_nostack": {"record_shapes": True, "profile_memory": True, "with_stack": False},
                 "full_nomem": {"profile_memory": False}, "full_noshapes": {"record_shapes": False},
                 "full_withmodules": {"with_modules": True}}
WARM, WINDOW, AFTER = 6, 10, 10
MARKER_VALUE = 0x5D
#: With ``--cycles N``: steps per window and plain steps after it (the first of them pays the CUPTI teardown).
CYCLE_WINDOW, CYCLE_PLAIN = 8, 6


def child_timeout_s(cycles: int) -> int:
    """Seconds one scenario process may take (a GPT-2 process takes ~25 s with 3 cycles on an H100)."""
    return 60 + 30 * cycles


def _trace_check(path: Path) -> dict[str, Any]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X"]
    kern = [e for e in ev if e.get("cat") == "kernel"]
    api = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    launched = {e.get("args", {}).get("correlation") for e in api}
    names: dict[str, int] = {}
    for e in api:
        names[e.get("name", "")] = names.get(e.get("name", ""), 0) + 1
    marks = sorted(e["args"]["correlation"] for e in ev if e.get("cat") == "gpu_memset"
                   and e.get("args", {}).get("bytes") == MARKER_BYTES and "correlation" in e.get("args", {}))
    kc = sorted(e["args"]["correlation"] for e in kern if "correlation" in e.get("args", {}))
    import bisect

    per_step = [bisect.bisect_left(kc, b) - bisect.bisect_left(kc, a) for a, b in itertools.pairwise(marks)]
    return {"markers": len(marks), "kernels_per_marked_step": per_step,
            "syncs": sum(1 for e in ev if e.get("cat") == "cuda_sync"),
            "memset_args": next((e.get("args") for e in ev if e.get("cat") == "gpu_memset"), None),
            "kernels": len(kern), "kernels_with_time": sum(1 for e in kern if e.get("dur", 0) > 0),
            "kernels_with_launch": sum(1 for e in kern if e.get("args", {}).get("correlation") in launched),
            "api_names": dict(sorted(names.items(), key=lambda kv: -kv[1])[:12]),
            "runtime": sum(1 for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")),
            "cpu_ops": sum(1 for e in ev if e.get("cat") == "cpu_op"),
            "user_ranges": sum(1 for e in ev if e.get("cat") == "user_annotation"),
            "bytes": path.stat().st_size}


def _session(torch: Any, scenario: str, out: Path) -> tuple[Any, Any, Any]:
    """(start, per-step hook, stop-and-export) callables for one scenario."""
    from dnnprof.collect import windows
    from dnnprof.collect.windows import Window

    cuda = torch.cuda.is_available()
    state: dict[str, Any] = {}
    if scenario.startswith(("timing", "full")) or scenario == "attribution":
        kind = "timing" if scenario.startswith("timing") else "full" if scenario.startswith("full") else scenario

        def start(k: int) -> None:
            w = Window(torch, kind, k, cuda=cuda)
            over = FULL_VARIANTS.get(scenario, {})
            orig, orig_ranges = torch.profiler.profile, windows.ModuleRanges
            if over:
                def profile(**kw: Any) -> Any:
                    return orig(**{**kw, **over})

                torch.profiler.profile = profile
            if scenario == "timing_noextcorr":
                def profile(**kw: Any) -> Any:
                    cfg = torch._C._profiler._ExperimentalConfig(disable_external_correlation=True)
                    return orig(**{**kw, "experimental_config": cfg})

                torch.profiler.profile = profile
            if scenario in ("full_noranges", "full_withmodules"):
                windows.ModuleRanges = _NoRanges
            try:
                w.start()
            finally:
                torch.profiler.profile, windows.ModuleRanges = orig, orig_ranges
            if scenario.startswith("timing_rtfilter"):
                state["rtfilter"] = _api_filter(scenario.endswith(("_b", "_c")))
            if scenario == "timing_rtfilter_c":
                lib, _ = _libcupti()
                state["rtfilter"]["sync_kind"] = lib.cuptiActivityEnable(_CUPTI_SYNC_KIND)
                state["marker"] = _marker(torch)
                state["marker"]()
            w.open_step(k)
            state["w"] = w
            if scenario in SAMPLERS:
                state["samplers"] = _samplers(torch, scenario)

        def step(k: int) -> None:
            state["w"].close_step()
            if "marker" in state:
                state["marker"]()
            state["w"].open_step(k)

        def stop() -> dict[str, Any]:
            t = time.perf_counter()
            state["w"].stop()
            stop_s = time.perf_counter() - t
            extra: dict[str, Any] = {}
            if "rtfilter" in state:
                extra["rtfilter"] = state.pop("rtfilter")
                extra["rtfilter"]["restore"] = _api_filter_restore(extra["rtfilter"])
                if state.pop("marker", None) is not None:
                    extra["rtfilter"]["sync_kind_off"] = _libcupti()[0].cuptiActivityDisable(_CUPTI_SYNC_KIND)
            for s in state.get("samplers", []):
                s.stop()
                if hasattr(s, "status"):
                    extra["nvml"] = {k: v for k, v in s.status().items()
                                     if k in ("ticks", "late_ticks", "gpm", "sampled_in", "error")}
            state["w"].export(out)
            w = state["w"]
            return {"stop_s": round(stop_s, 3), "export_s": w.export_s, "op_scopes": w.scopes, **extra,
                    **_trace_check(out / f"{w.kind}.json.gz")}

        return start, step, stop
    if scenario.startswith("cupti_"):
        return _cupti_session(scenario[len("cupti_"):], state)
    if scenario in ("cuda_only", "kernels_only"):
        pa = torch.profiler.ProfilerActivity

        def start(k: int) -> None:
            if scenario == "cuda_only":
                acts: list[Any] = [pa.CUDA if cuda else pa.CPU]
            else:
                from torch.profiler import profiler as tp

                if not hasattr(tp, "_parse_activities"):
                    raise NotImplementedError(f"torch {torch.__version__} takes no activity filters")
                acts = [pa.CPU, {pa.CUDA: ["CONCURRENT_KERNEL", "GPU_MEMCPY", "GPU_MEMSET"]}]
            state["p"] = torch.profiler.profile(activities=acts)
            state["p"].start()

        def stop() -> dict[str, Any]:
            t = time.perf_counter()
            state["p"].stop()
            stop_s = time.perf_counter() - t
            path = out / f"{scenario}.json.gz"
            t = time.perf_counter()
            state["p"].export_chrome_trace(str(path))
            return {"stop_s": round(stop_s, 3), "export_s": round(time.perf_counter() - t, 3), **_trace_check(path)}

        return start, lambda k: None, stop
    return (lambda k: None), (lambda k: None), (lambda: {})


#: Runtime/driver calls whose records the timing window needs: launches, copies, memsets, synchronizations.
API_KEEP = ("LaunchKernel", "Memcpy", "Memset", "LaunchCooperative", "Synchronize", "GraphLaunch", "StreamWaitEvent",
            "LaunchHostFunc")
_CUPTI_RUNTIME_KIND, _CUPTI_DRIVER_KIND, _CUPTI_SYNC_KIND = 5, 4, 38  # CUPTI_ACTIVITY_KIND_RUNTIME/DRIVER/SYNC...
MARKER_BYTES = 13


def _marker(torch: Any) -> Any:
    """A callable issuing one MARKER_BYTES-byte memset on the current stream (a step boundary in the trace)."""
    import ctypes

    libcuda = ctypes.CDLL("libcuda.so.1")
    buf = torch.empty(64, dtype=torch.uint8, device="cuda")

    def marker() -> None:
        rc = libcuda.cuMemsetD8Async(ctypes.c_uint64(buf.data_ptr()), ctypes.c_ubyte(MARKER_VALUE),
                                     ctypes.c_size_t(MARKER_BYTES), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc:
            raise RuntimeError(f"cuMemsetD8Async returned {rc}")

    return marker
_DOMAIN = {"runtime": 2, "driver": 1}  # CUPTI_CB_DOMAIN_RUNTIME_API / _DRIVER_API


def _libcupti() -> Any:
    """The libcupti this process has loaded (Kineto's), through ctypes."""
    import ctypes

    with open("/proc/self/maps") as f:
        paths = sorted({ln.split()[-1] for ln in f if "libcupti" in ln and ln.split()[-1].startswith("/")})
    if not paths:
        raise RuntimeError("no libcupti loaded in this process")
    lib = ctypes.CDLL(paths[0])
    lib.cuptiGetCallbackName.argtypes = [ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p)]
    for fn in ("cuptiActivityEnableRuntimeApi", "cuptiActivityEnableDriverApi"):
        getattr(lib, fn).argtypes = [ctypes.c_uint32, ctypes.c_uint8]
    lib.cuptiActivityEnable.argtypes = lib.cuptiActivityDisable.argtypes = [ctypes.c_int]
    return lib, paths[0]


def _api_ids(lib: Any, domain: int) -> dict[int, str]:
    import ctypes

    out: dict[int, str] = {}
    misses = 0
    cbid = 1
    while misses < 64 and cbid < 4096:
        name = ctypes.c_char_p()
        if lib.cuptiGetCallbackName(domain, cbid, ctypes.byref(name)) == 0 and name.value:
            out[cbid] = name.value.decode()
            misses = 0
        else:
            misses += 1
        cbid += 1
    return out


def _api_filter(kinds_off: bool) -> dict[str, Any]:
    """Cut CUPTI's runtime/driver records down to :data:`API_KEEP` (see ``timing_rtfilter`` in the docstring)."""
    lib, path = _libcupti()
    res: dict[str, Any] = {"lib": path, "mode": "b" if kinds_off else "a"}
    if kinds_off:
        res["disable_kinds"] = [lib.cuptiActivityDisable(_CUPTI_RUNTIME_KIND), lib.cuptiActivityDisable(_CUPTI_DRIVER_KIND)]
    for dom, fn in (("runtime", lib.cuptiActivityEnableRuntimeApi), ("driver", lib.cuptiActivityEnableDriverApi)):
        ids = _api_ids(lib, _DOMAIN[dom])
        codes: dict[int, int] = {}
        kept = 0
        for cbid, name in ids.items():
            keep = any(w in name for w in API_KEEP)
            kept += keep
            if kinds_off and not keep:
                continue
            rc = fn(cbid, int(keep))
            codes[rc] = codes.get(rc, 0) + 1
        res[dom] = {"ids": len(ids), "kept": kept, "return_codes": codes, "kept_ids": [c for c, n in ids.items()
                                                                                        if any(w in n for w in API_KEEP)]}
    return res


def _api_filter_restore(res: dict[str, Any]) -> dict[str, Any]:
    """After the window: every call back to its default (records follow the kinds again)."""
    lib, _ = _libcupti()
    out: dict[str, Any] = {}
    for dom, fn in (("runtime", lib.cuptiActivityEnableRuntimeApi), ("driver", lib.cuptiActivityEnableDriverApi)):
        ids = _api_ids(lib, _DOMAIN[dom])
        codes: dict[int, int] = {}
        for cbid in ids:
            rc = fn(cbid, 0 if res["mode"] == "b" else 1)
            codes[rc] = codes.get(rc, 0) + 1
        out[dom] = codes
    return out


def _cupti_session(which: str, state: dict[str, Any]) -> tuple[Any, Any, Any]:
    """CUPTI activity records straight from cupti-python (no Kineto), for the kinds ``CUPTI_KINDS[which]``, plus a
    1-byte marker memset at every step boundary."""
    import ctypes
    from collections import Counter

    import torch
    from cupti import cupti  # cupti-python

    kinds = [getattr(cupti.ActivityKind, k) for k in CUPTI_KINDS[which]]
    counts: Counter[str] = Counter()
    durs: list[int] = []
    kern_corr: list[int] = []
    marks: list[int] = []
    api: list[tuple[int, int, int]] = []  # (start, correlation, cbid) of runtime/driver records
    libcuda = ctypes.CDLL("libcuda.so.1")
    buf = torch.empty(64, dtype=torch.uint8, device="cuda")

    def marker() -> None:
        rc = libcuda.cuMemsetD8Async(ctypes.c_uint64(buf.data_ptr()), ctypes.c_ubyte(MARKER_VALUE),
                                     ctypes.c_size_t(1), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc:
            raise RuntimeError(f"cuMemsetD8Async returned {rc}")

    def requested() -> tuple[int, int]:
        return 8 * 1024 * 1024, 0

    def completed(activities: list[Any]) -> None:
        for a in activities:
            kind = a.kind
            counts[str(kind).split(".")[-1]] += 1
            if kind == cupti.ActivityKind.CONCURRENT_KERNEL:
                durs.append(a.end - a.start)
                kern_corr.append(a.correlation_id)
            elif kind == cupti.ActivityKind.MEMSET and a.bytes == 1 and a.value == MARKER_VALUE:
                marks.append(a.correlation_id)
            elif kind in (cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER):
                api.append((a.start, a.correlation_id, a.cbid))

    def api_filter(enum: Any, enable: Any) -> dict[str, int]:
        # Every real call id (not INVALID/SIZE/FORCE_INT); the members include name-mangled ``_Runtime…__`` ones.
        kept = refused = 0
        for member in enum:
            name = member.name
            if name in ("INVALID", "SIZE", "FORCE_INT"):
                continue
            keep = any(w in name for w in ("LaunchKernel", "Memcpy", "Memset", "LaunchCooperative", "Synchronize"))
            try:
                enable(int(member), int(keep))
                kept += keep
            except cupti.cuptiError:  # a call id this driver does not know
                refused += 1
        return {"kept": kept, "refused": refused}

    def start(k: int) -> None:
        if "registered" not in state:
            cupti.activity_register_callbacks(requested, completed)
            state["registered"] = True
        if which == "launchrt" and "filtered" not in state:
            state["filtered"] = api_filter(cupti.RuntimeApiTraceCbid, cupti.activity_enable_runtime_api)
        if which == "launchdrv" and "filtered" not in state:
            state["filtered"] = api_filter(cupti.DriverApiTraceCbid, cupti.activity_enable_driver_api)
        for kind in kinds:
            cupti.activity_enable(kind)
        marker()

    def stop() -> dict[str, Any]:
        t = time.perf_counter()
        marker()
        for kind in kinds:
            cupti.activity_disable(kind)
        cupti.activity_flush_all(1)
        stop_s = round(time.perf_counter() - t, 3)
        # Kernels between consecutive markers (by correlation id): one count per step when ids follow launch order.
        ms = sorted(marks)
        kc = sorted(kern_corr)
        import bisect
        per_step = [bisect.bisect_left(kc, b) - bisect.bisect_left(kc, a) for a, b in itertools.pairwise(ms)]
        # Do correlation ids follow the host order of the API records? Count inversions by start time.
        by_start = [c for _, c, _ in sorted(api)]
        inversions = sum(1 for a, b in itertools.pairwise(by_start) if b < a)
        t0, c0, t1 = time.time_ns(), cupti.get_timestamp(), time.time_ns()
        return {"stop_s": stop_s, "records": dict(counts), "runtime_filter": state.get("filtered"),
                "kernels": counts.get("CONCURRENT_KERNEL", 0), "kernels_with_time": sum(1 for d in durs if d > 0),
                "markers": len(ms), "kernels_per_step": per_step, "api_records": len(api),
                "api_order_inversions": inversions,
                "clock": {"cupti_minus_time_ns": c0 - (t0 + t1) // 2, "reading_ns": t1 - t0,
                          "cupti_minus_monotonic_ns": cupti.get_timestamp() - time.monotonic_ns()}}

    return start, lambda k: marker(), stop


def _kineto_after(torch: Any, step: Any, out: Path, first: int) -> dict[str, Any]:
    """Can a Kineto session still record GPU times in a process where CUPTI was driven directly? 3 steps of
    dnnprof's timing window, exported and checked."""
    from dnnprof.collect.windows import Window

    w = Window(torch, "timing", first, cuda=True)
    try:
        w.start()
        for k in range(3):
            w.close_step()
            w.open_step(first + k)
            step()
        w.export(out)
        return _trace_check(out / "timing.json.gz")
    except Exception as e:  # noqa: BLE001 - the probe reports what failed
        return {"error": f"{type(e).__name__}: {e}"}


class _NoRanges:
    """Stands in for ``ModuleRanges`` in ``full_noranges``: installs nothing."""

    fast = False
    calls = 0

    def __init__(self, torch: Any) -> None:
        pass

    def install(self) -> None:
        pass

    def remove(self) -> None:
        pass

    def live_roots(self) -> list[Any]:
        return []


#: Samplers per scenario: (stack sampler period or None, NVML period or None, NVML in a helper process).
SAMPLERS = {"timing_samplers": (0.01, 0.02, False), "timing_default": (0.01, 0.05, False),
            "timing_stack": (0.01, None, False), "timing_stack50": (0.05, None, False),
            "timing_nvml20": (None, 0.02, False), "timing_nvml50": (None, 0.05, False),
            "timing_nvmlproc50": (None, 0.05, True), "timing_stack_nvmlproc": (0.01, 0.05, True)}


def _samplers(torch: Any, scenario: str) -> list[Any]:
    """The host stack sampler and/or the NVML/GPM sampler, at the periods ``SAMPLERS`` gives for the scenario."""
    from dnnprof.collect.nvml import Nvml
    from dnnprof.collect.sampler import NvmlSampler
    from dnnprof.collect.stacks import StackSampler

    stack_s, nvml_s, proc = SAMPLERS.get(scenario, (None, None, False))
    out: list[Any] = [StackSampler(period_s=stack_s)] if stack_s else []
    nvml = Nvml()
    if nvml_s and torch.cuda.is_available() and nvml.open():
        uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
        h = nvml.handle(index=None if os.environ.get("CUDA_VISIBLE_DEVICES") else 0, uuid=str(uuid) if uuid else None)
        if h is not None:
            out.append(NvmlSampler(nvml, [(0, h)], period_s=nvml_s, process=proc))
    for s in out:
        s.start()
    return out


#: ``PROBE_STEP=launches``: a host-bound step of this many launches of a tiny element-wise kernel and one sync,
#: whose time is the host's cost per launch: what each capture adds to a launch, without GPT-2's GPU time around it.
LAUNCHES_PER_STEP = 2000


def _launch_step(torch: Any, smoke: bool) -> Any:
    x = torch.zeros(1024, device="cpu" if smoke else "cuda")

    def step() -> None:
        for _ in range(LAUNCHES_PER_STEP // (20 if smoke else 1)):
            x.add_(1.0)
        x.sum().item()

    return step


def child(scenario: str, out: Path, smoke: bool, cycles: int = 1) -> dict[str, Any]:
    """One scenario. ``cycles`` > 1: the window is opened ``cycles`` times (``CYCLE_WINDOW`` steps, then one
    teardown step and ``CYCLE_PLAIN`` plain steps) and each window is compared with the plain steps on both sides
    of it, which cancels the slow drifts of a noisy host."""
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    from capture_costs_gpt2 import build

    step = _launch_step(torch, smoke) if os.environ.get("PROBE_STEP") == "launches" else build(smoke)
    start, hook, stop = _session(torch, scenario, out)
    window, plain = (WINDOW, AFTER) if cycles == 1 else (CYCLE_WINDOW, CYCLE_PLAIN)
    # Per step: "warm", "on", "teardown" (first step after a stop) or "off".
    kinds = ["warm"] * WARM + (["on"] * window + ["teardown"] + ["off"] * (plain - 1)) * cycles
    times: list[int] = []
    info: dict[str, Any] = {}
    for i, kind in enumerate(kinds):
        if kind == "on" and (i == 0 or kinds[i - 1] != "on"):
            try:
                start(i)
            except NotImplementedError as e:
                return {"scenario": scenario, "skipped": str(e)}
        elif kind == "on":
            hook(i)
        elif kind == "teardown":
            info = stop()
        last = time.perf_counter_ns()
        step()
        times.append(time.perf_counter_ns() - last)
    if scenario.startswith("cupti_"):
        info["kineto_after"] = _kineto_after(torch, step, out, len(kinds))
    ms = [t / 1e6 for t in times]
    med = statistics.median
    # Runs of equal kinds, in order: the cycle ratios compare each "on" run with the plain runs around it.
    runs: list[tuple[str, list[float]]] = []
    for i, kind in enumerate(kinds):
        if kind == "warm" and i < 2:
            continue  # the first steps pay for CUDA/cuBLAS start-up
        k = "off" if kind == "warm" else kind
        if runs and runs[-1][0] == k:
            runs[-1][1].append(ms[i])
        else:
            runs.append((k, [ms[i]]))
    offs = [(j, v) for j, (k, v) in enumerate(runs) if k == "off"]
    ratios = []
    for j, (k, v) in enumerate(runs):
        if k != "on":
            continue
        around = [x for jj, vv in offs if abs(jj - j) <= 2 for x in vv]
        ratios.append(round(med(v) / med(around), 4))
    on = [x for k, v in runs if k == "on" for x in v]
    off = [x for _, v in offs for x in v]
    first_after = [ms[i] for i, k in enumerate(kinds) if k == "teardown"]
    return {"scenario": scenario, "cycles": cycles, "before_ms": med(ms[2:WARM]), "inside_ms": med(on),
            "first_after_ms": med(first_after), "after_ms": med(off), "cycle_ratios": ratios,
            "ratio": med(ratios), "steps_ms": [round(x, 2) for x in ms], **info}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", default="")
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--only", default="")
    p.add_argument("--cycles", type=int, default=1, help="open the window this many times per process")
    p.add_argument("--smoke", action="store_true")
    a = p.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    if a.child:
        import faulthandler

        faulthandler.dump_traceback_later(max(5, int(os.environ.get("PROBE_TIMEOUT_S", "600")) - 8), exit=False)
        tmp = out / f"probe_{a.child}_{a.index}"
        tmp.mkdir(exist_ok=True)
        print("RESULT " + json.dumps(child(a.child, tmp, a.smoke, a.cycles)))
        return
    names = a.only.split(",") if a.only else list(SCENARIOS)
    unknown = [n for n in names if n not in (*SCENARIOS, *EXTRA)]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join((*SCENARIOS, *EXTRA))}")
    rows = []
    for i, name in enumerate(names):
        cmd = [sys.executable, __file__, "--child", name, "--index", str(i), "--cycles", str(a.cycles),
               *(["--smoke"] if a.smoke else [])]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "PROBE_TIMEOUT_S": str(child_timeout_s(a.cycles))}
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = proc.communicate(timeout=child_timeout_s(a.cycles))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr = "timed out; stacks dumped before the kill:\n" + stderr
        got = [ln[7:] for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        rows.append(json.loads(got[-1]) if got else {"scenario": name, "error": stderr[-3000:]})
        print("ROW " + json.dumps({k: v for k, v in rows[-1].items() if k != "steps_ms"}), flush=True)
    import torch

    doc = {"gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
           "rows": rows}
    (out / "timing_window_probe.json").write_text(json.dumps(doc, indent=1))
    print(f"\n{doc['gpu']} torch {doc['torch']}: median ms/step (x = inside / before; with --cycles, the median "
          "over cycles of window / plain steps around it)")
    print(f"{'scenario':<17}{'before':>8}{'inside':>8}{'x':>7}{'1st aft':>8}{'after':>8}{'stop s':>7}{'exp s':>7}"
          f"{'kern':>7}{'timed':>7}{'rt':>7}{'ops':>7}")
    for r in rows:
        if "before_ms" not in r:
            print(f"{r['scenario']:<17} {r.get('skipped') or r.get('error', '').splitlines()[-1:]}")
            continue
        print(f"{r['scenario']:<17}{r['before_ms']:8.2f}{r['inside_ms']:8.2f}"
              f"{r['ratio'] if r['cycles'] > 1 else r['inside_ms'] / r['before_ms']:7.3f}"
              f"{r['first_after_ms']:8.1f}{r['after_ms']:8.2f}{r.get('stop_s', 0):7.2f}{r.get('export_s', 0):7.2f}"
              f"{r.get('kernels', 0):7d}{r.get('kernels_with_time', 0):7d}{r.get('runtime', 0):7d}"
              f"{r.get('cpu_ops', 0):7d}  {r['cycle_ratios'] if r['cycles'] > 1 else ''}")


if __name__ == "__main__":
    main()
