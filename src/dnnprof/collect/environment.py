"""What the profiled process runs on (versions, GPU) and the backend settings the rules judge."""

from __future__ import annotations

import os
import platform
import warnings
from typing import Any


def run_settings(torch: Any) -> dict[str, Any]:
    """``cudnn_benchmark``, ``cudnn_deterministic``, ``float32_matmul_precision`` as the script left them.

    Read without letting a deprecation warning reach the script's output.
    """
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cudnn = getattr(torch.backends, "cudnn", None)
        if cudnn is not None:
            out["cudnn_benchmark"] = bool(cudnn.benchmark)
            out["cudnn_deterministic"] = bool(cudnn.deterministic)
        precision = getattr(torch, "get_float32_matmul_precision", None)
        if precision is not None:
            out["float32_matmul_precision"] = str(precision())
    return out


def environment(torch: Any, pid: int, device: int | None, driver: str | None) -> dict[str, Any]:
    """Python, platform, torch/CUDA/cuDNN versions, the GPU in use and the driver (when NVML gave it)."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "pid": pid,
        "torch": torch.__version__,
        "cuda_runtime": getattr(torch.version, "cuda", None),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if device is not None:
        p = torch.cuda.get_device_properties(device)
        env["gpu"] = {"index": device, "name": p.name, "compute_capability": f"{p.major}.{p.minor}",
                      "sm_count": p.multi_processor_count, "memory_total_bytes": int(p.total_memory),
                      "uuid": str(getattr(p, "uuid", ""))}
    if driver is not None:
        env["driver"] = driver
    if os.environ.get("RANK") is not None:  # a worker of a multi-process job (torchrun): which one was profiled
        env["distributed"] = {k.lower(): os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                      "LOCAL_WORLD_SIZE")}
    return env


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``), else what ``platform`` says of the processor or machine."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
