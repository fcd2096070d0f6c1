"""``dnnprof device``: which GPU this is (deviceQuery-style), its spec-sheet peaks, and with ``--measure`` what it
really does — device-to-device copy bandwidth and GEMM rates per precision — cached per GPU."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import statistics
from pathlib import Path
from typing import Any

import typer

from dnnprof.cli import options as opt
from dnnprof.cli.errors import UserError
from dnnprof.model.gpu_specs import PRECISIONS, lookup_gpu
from dnnprof.model.units import fixed_text

CACHE_FORMAT = "dnnprof.device-measure/1"
#: (label, torch dtype name, allow TF32, matrix size) of the GEMMs ``--measure`` times.
GEMMS = (("fp64", "float64", False, 4096), ("fp32", "float32", False, 8192), ("tf32", "float32", True, 8192),
         ("fp16", "float16", False, 8192), ("bf16", "bfloat16", False, 8192))
COPY_BYTES = 1 << 30  # per buffer; smaller when free memory is short
TARGET_S = 0.4  # time budget per measurement (repeats adapt to it)


# --- properties --------------------------------------------------------------------------------------------------
def _torch_properties(index: int) -> tuple[dict[str, Any] | None, str]:
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device"
    if index >= torch.cuda.device_count():
        return None, f"device {index} does not exist ({torch.cuda.device_count()} visible)"
    p = torch.cuda.get_device_properties(index)
    get = (lambda k, d=None: getattr(p, k, d))  # noqa: E731 - attribute names vary across torch versions
    return {
        "index": index, "name": p.name, "compute_capability": f"{p.major}.{p.minor}", "memory_bytes": p.total_memory,
        "sm_count": p.multi_processor_count, "max_threads_per_sm": get("max_threads_per_multi_processor"),
        "registers_per_sm": get("regs_per_multiprocessor"), "warp_size": get("warp_size"),
        "shared_memory_per_block_bytes": get("shared_memory_per_block"),
        "shared_memory_per_block_optin_bytes": get("shared_memory_per_block_optin"),
        "shared_memory_per_sm_bytes": get("shared_memory_per_multiprocessor"), "l2_bytes": get("L2_cache_size"),
        "uuid": str(get("uuid")) if get("uuid") is not None else None,
        "torch_version": torch.__version__, "cuda_runtime": torch.version.cuda,
    }, ""


def _nvml_properties(index: int, nvml: Any = None) -> tuple[dict[str, Any] | None, str]:
    """NVML facts torch does not give (clocks, bus width, power, driver), through dnnprof's one NVML wrapper
    (``collect.nvml.Nvml``): a query NVML cannot answer is left out, never raised."""
    from dnnprof.collect.nvml import Nvml

    nv = nvml or Nvml()
    if not nv.open():
        return None, nv.reason
    try:
        h = nv.handle(index=index)
        if h is None:
            return None, f"NVML has no device {index}"
        info = nv.device_info(h)
        out: dict[str, Any] = {k: v for k, v in info.items() if k != "memory_total_bytes"}
        if "memory_total_bytes" in info:
            out["memory_bytes"] = info["memory_total_bytes"]
        sm, mem = nv.const("NVML_CLOCK_SM", 1), nv.const("NVML_CLOCK_MEM", 2)
        for key, fn, args in (("max_sm_clock_mhz", "nvmlDeviceGetMaxClockInfo", (h, sm)),
                              ("max_memory_clock_mhz", "nvmlDeviceGetMaxClockInfo", (h, mem)),
                              ("memory_bus_width_bits", "nvmlDeviceGetMemoryBusWidth", (h,))):
            v = nv.query(fn, *args)
            if v is not None:
                out[key] = v
        power = nv.query("nvmlDeviceGetPowerManagementLimit", h)
        if power is not None:
            out["power_limit_w"] = power / 1000.0
        driver = nv.driver_version()
        if driver is not None:
            out["driver_version"] = driver
        cc = nv.query("nvmlDeviceGetCudaComputeCapability", h)
        if cc is not None:
            out["compute_capability"] = "{}.{}".format(*cc)
        return out, ""
    finally:
        nv.close()


def probe_device(index: int = 0) -> dict[str, Any]:
    """Properties of GPU ``index`` from torch.cuda and NVML (either suffices); UserError when neither sees one."""
    tp, why_t = _torch_properties(index)
    nv, why_n = _nvml_properties(index)
    if tp is None and nv is None:
        raise UserError(f"no NVIDIA GPU found: {why_t}; {why_n}")
    props = dict(nv or {})
    props.update({k: v for k, v in (tp or {}).items() if v is not None})
    if nv and nv.get("uuid"):
        props["uuid"] = nv["uuid"]
    if nv and nv.get("memory_bytes"):
        props["memory_bytes"] = nv["memory_bytes"]
    props.setdefault("index", index)
    return props


# --- measuring ---------------------------------------------------------------------------------------------------
def cache_path(props: dict[str, Any]) -> Path:
    """``$DNNPROF_CACHE_DIR`` or ``~/.cache/dnnprof``, file ``device-<uuid or name>.json``."""
    base = os.environ.get("DNNPROF_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dnnprof")
    key = props.get("uuid") or props.get("name") or "unknown"
    return Path(base) / f"device-{re.sub(r'[^A-Za-z0-9_.-]+', '_', str(key))}.json"


def _timed_ms(torch: Any, fn: Any) -> list[float]:
    """Median-ready CUDA-event timings of ``fn``: warm up, size the repeat count to :data:`TARGET_S`."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    reps = 3
    while len(times) < reps:
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        if len(times) == 1:
            reps = max(3, min(20, int(TARGET_S * 1e3 / max(times[0], 1e-3))))
    return times


def measure_device(index: int = 0) -> dict[str, Any]:
    """Copy bandwidth (bytes read + written per second, 1 GiB device-to-device) and dense GEMM TFLOP/s per precision
    (2·n³ per n×n matmul, random inputs), medians of CUDA-event-timed repeats."""
    try:
        import torch
    except ImportError:
        raise UserError("--measure needs PyTorch with CUDA (pip install torch)") from None
    if not torch.cuda.is_available():
        raise UserError("--measure needs a CUDA GPU visible to PyTorch")
    dev = torch.device("cuda", index)
    torch.cuda.set_device(dev)
    free, _ = torch.cuda.mem_get_info(dev)
    nbytes = max(1 << 24, min(COPY_BYTES, free // 8)) // 16 * 16
    src = torch.rand(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    t = statistics.median(_timed_ms(torch, lambda s=src, d=dst: d.copy_(s)))
    result: dict[str, Any] = {"copy_bytes": nbytes, "copy_bandwidth_gb_s": 2 * nbytes / (t * 1e-3) / 1e9,
                              "gemm_tflops": {}, "gemm_n": {}}
    del src, dst
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    try:
        for label, dtype_name, tf32, n in GEMMS:
            dtype = getattr(torch, dtype_name)
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            c = torch.empty(n, n, device=dev, dtype=dtype)
            t = statistics.median(_timed_ms(torch, lambda a=a, b=b, c=c: torch.mm(a, b, out=c)))
            result["gemm_tflops"][label] = 2 * n**3 / (t * 1e-3) / 1e12
            result["gemm_n"][label] = n
            del a, b, c
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
        torch.cuda.empty_cache()
    result["torch_version"] = torch.__version__
    return result


def measured(props: dict[str, Any], refresh: bool = False) -> dict[str, Any]:
    """Cached measurement for this GPU, measuring (and caching) when absent, unreadable or ``refresh``."""
    path = cache_path(props)
    if not refresh and path.is_file():
        try:
            doc = json.loads(path.read_text())
            if doc.get("format") == CACHE_FORMAT:
                return {**doc, "cached": True, "cache_path": str(path)}
        except (OSError, json.JSONDecodeError):
            pass
    doc = {"format": CACHE_FORMAT, "name": props.get("name"), "uuid": props.get("uuid"),
           "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           **measure_device(int(props.get("index", 0)))}
    from dnnprof.model.outputs import OutputError, write_text_atomic

    try:
        write_text_atomic(path, json.dumps(doc, indent=1))
    except OutputError as e:
        doc["cache_error"] = str(e)
    return {**doc, "cached": False, "cache_path": str(path)}


# --- output ------------------------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return fixed_text(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "-" if v is None else str(v)


def _print(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from dnnprof.render.safe_text import clean, markup

    con = Console()
    props, spec, meas = doc["device"], doc.get("spec"), doc.get("measured")
    t = Table(title=f"GPU {markup(props.get('index', 0))}: {markup(props.get('name', '?'))}", show_header=False)
    for k, v in props.items():
        if k not in ("index", "name"):
            t.add_row(Text(clean(k)), Text(clean(_fmt(v))))
    con.print(t)
    if not spec:
        con.print(Text(f"no spec-sheet entry for {clean(props.get('name', 'this GPU'))!r}: peak rates unknown"))
    p = Table(title="Peaks" + (f" (spec: {spec['name']}, dense)" if spec else ""))
    p.add_column("precision")
    p.add_column("spec TFLOPS", justify="right")
    if meas:
        p.add_column("measured GEMM TFLOPS", justify="right")
        p.add_column("% of spec", justify="right")
    spec_tf = (spec or {}).get("peak_tflops", {})
    # cuBLAS runs FP16/BF16/TF32 GEMMs on tensor cores and, where the GPU has DMMA (A100, H100), FP64 too: each
    # measured GEMM sits on the row of the peak it can reach
    gemm_row = {p: p for p in meas["gemm_tflops"]} if meas else {}
    if "fp64" in gemm_row and spec_tf.get("fp64_tensor"):
        gemm_row["fp64"] = "fp64_tensor"
    by_row = {r: (meas or {}).get("gemm_tflops", {}).get(p) for p, r in gemm_row.items()}
    for prec in PRECISIONS:
        row = [prec, _fmt(spec_tf.get(prec))]
        if meas:
            m = by_row.get(prec)
            row += [_fmt(m), _fmt(100 * m / spec_tf[prec]) if m and spec_tf.get(prec) else "-"]
        if row[1] != "-" or (meas and row[2] != "-"):
            p.add_row(*row)
    bw = spec["memory_bandwidth_gb_s"] if spec else None
    mrow = ["memory GB/s", _fmt(float(bw) if bw else None)]
    if meas:
        m = meas["copy_bandwidth_gb_s"]
        mrow += [f"{m:,.1f} (copy)", _fmt(100 * m / bw) if bw else "-"]
    p.add_row(*mrow)
    con.print(p)
    if meas:
        con.print(f"measured {'(cached) ' if meas.get('cached') else ''}{meas.get('measured_at', '')} "
                  f"→ {meas.get('cache_path', '')}")


def register(app: typer.Typer) -> None:
    @app.command("device")
    def device_cmd(
        measure: bool = typer.Option(False, "--measure", help="Measure copy bandwidth and GEMM rates (cached)."),
        refresh: bool = typer.Option(False, "--refresh", help="With --measure: measure again, ignore the cache."),
        # An index here; `profile`/`sweep --device` name a kind of device (cuda, cpu).
        index: int = typer.Option(0, "--device", "-d", help="CUDA device index."),
        as_json: bool = opt.json_flag(),
    ) -> None:
        """Device properties, spec-sheet peaks per precision, and measured bandwidth/GEMM rates."""
        props = probe_device(index)
        spec = lookup_gpu(str(props.get("name", "")), props.get("memory_bytes"))
        doc: dict[str, Any] = {"device": props, "spec": spec.to_dict() if spec else None}
        if measure or refresh:
            doc["measured"] = measured(props, refresh)
        if as_json:
            typer.echo(json.dumps(doc, indent=1, default=str))
        else:
            _print(doc)
