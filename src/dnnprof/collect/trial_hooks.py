"""Inside a script or profile trial: apply ``--memory-limit`` when torch loads, time steps, report at exit.

Installed by ``collect/_boot/sitecustomize.py`` when ``DNNPROF_SWEEP_TRIAL`` is set (by ``dnnprof sweep``). The first process of the trial that
imports torch is its *owner* and writes ``DNNPROF_SWEEP_RESULT`` at exit (DataLoader workers and other helpers never
do); in a command that never imports torch, the first process to exit reports its exception and host memory.

Steps are the calls of ``dnnprof.step()`` when the script makes them, else ``optimizer.step()`` calls, else (a
script that builds no optimizer: inference) the batches it takes from its DataLoader (``stepdetect``). The
GPU limit is applied through ``torch.cuda._lazy_call`` where it exists, so importing torch creates no CUDA context
(a script may still set ``CUDA_VISIBLE_DEVICES`` after import).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from dnnprof.collect.bootstrap import TorchImportWatcher

ENV_TRIAL = "DNNPROF_SWEEP_TRIAL"
ENV_RESULT = "DNNPROF_SWEEP_RESULT"
ENV_MEMORY_LIMIT = "DNNPROF_SWEEP_MEMORY_LIMIT"
ENV_WARMUP = "DNNPROF_SWEEP_WARMUP_STEPS"
#: CPU profile trials: the address-space limit, applied where torch is imported (not in dnnprof's parent process).
ENV_RLIMIT_AS = "DNNPROF_SWEEP_RLIMIT_AS"
FORMAT = "dnnprof.sweep.script/1"


class _State:
    def __init__(self) -> None:
        self.torch: Any = None
        self.pid = os.getpid()
        self.optimizer_ns: list[int] = []
        self.dataloader_ns: list[int] = []
        self.explicit_ns: list[int] = []
        self.explicit_items: list[float | None] = []
        self.exception: BaseException | None = None
        self.limit_bytes: int | None = None
        self.owner = False


_state: _State | None = None


def install() -> None:
    """Catch the exception that ends the script, report at exit, and watch for torch (now, if imported)."""
    global _state
    if _state is not None:
        return
    st = _state = _State()
    previous = sys.excepthook

    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        st.exception = exc
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    atexit.register(_at_exit)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "nn"):
        _on_torch(torch)
        return
    sys.meta_path.insert(0, TorchImportWatcher(_on_torch))


def _claim() -> bool:
    """Make this process the trial's owner (the one that reports); False when another process already is."""
    st = _state
    result = os.environ.get(ENV_RESULT)
    if st is None or not result:
        return False
    if st.owner:
        return True
    try:
        fd = os.open(result + ".owner", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except (FileExistsError, FileNotFoundError):
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    st.owner = True
    return True


def _on_torch(torch: ModuleType) -> None:
    _apply_limit(torch)
    st = _state
    if st is None or os.getpid() != st.pid or not _claim():
        return
    st.torch = torch
    try:  # torch.optim hides its `optimizer` submodule: import the function from it directly
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:  # torch < 2.0: steps come from dnnprof.step() only
        pass
    else:
        register_optimizer_step_post_hook(lambda *a, **k: st.optimizer_ns.append(time.perf_counter_ns()))
    from dnnprof.collect.stepdetect import DataLoaderItems, DataLoaderSteps

    batches = DataLoaderSteps(lambda source: st.dataloader_ns.append(time.perf_counter_ns()))
    batches.install(torch)
    DataLoaderItems(before=batches.before_batch).install(torch)
    import dnnprof

    if dnnprof._step_hook is None:  # under `dnnprof run` the collector owns dnnprof.step()
        def on_step(items: float | None = None) -> None:
            st.explicit_ns.append(time.perf_counter_ns())
            st.explicit_items.append(items)

        dnnprof._step_hook = on_step


def _at_exit() -> None:
    """The owner reports; a process that never imported torch reports too when no other process has."""
    st = _state
    result = os.environ.get(ENV_RESULT)
    if st is None or not result or os.getpid() != st.pid or not _claim():
        return
    _write(Path(result))


def _apply_limit(torch: ModuleType) -> None:
    rlimit = os.environ.get(ENV_RLIMIT_AS)
    if rlimit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(rlimit), int(rlimit)))
    text = os.environ.get(ENV_MEMORY_LIMIT)
    device = os.environ.get("DNNPROF_DEVICE", "cuda")
    if not text or device != "cuda":
        return
    from dnnprof.collect.limits import MemoryLimit, apply_cuda_limit

    limit = MemoryLimit.from_env(text)

    def apply() -> None:
        if torch.cuda.is_available():
            cap = apply_cuda_limit(torch, limit)
            if _state is not None:
                _state.limit_bytes = cap

    lazy = getattr(torch.cuda, "_lazy_call", None)
    if lazy is not None:
        lazy(apply)
    else:
        apply()


def _write(result: Path) -> None:
    st = _state
    if st is None:
        return
    from dnnprof.collect.limits import host_memory_peaks
    from dnnprof.collect.trial_failure import classify_exception

    warmup = int(os.environ.get(ENV_WARMUP, "1") or 1)
    explicit = bool(st.explicit_ns)
    source, marks = (("dnnprof.step", st.explicit_ns) if explicit else ("optimizer", st.optimizer_ns)
                     if st.optimizer_ns or not st.dataloader_ns else ("dataloader", st.dataloader_ns))
    doc: dict[str, Any] = {"format": FORMAT, "step_source": source,
                           "steps_seen": len(marks), "warmup_steps": warmup, "torch_imported": st.torch is not None}
    timed = marks[warmup:] if len(marks) > warmup + 1 else marks
    if len(timed) >= 2:
        doc["step_times_ms"] = [round((b - a) / 1e6, 4) for a, b in itertools.pairwise(timed)]
        doc["window_s"] = (timed[-1] - timed[0]) / 1e9
        items = st.explicit_items[-(len(timed) - 1):] if explicit else []
        doc["items"] = sum(i for i in items if i is not None) if items and all(i is not None for i in items) \
            else None
    if st.exception is not None:
        f = classify_exception(st.exception)
        doc["exception"] = {"type": type(st.exception).__name__, "status": f.status, "limited_by": f.limited_by,
                            "message": f.message}
    doc.update(host_memory_peaks())
    torch = st.torch
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            doc["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
            doc["peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
            free, _ = torch.cuda.mem_get_info()
            capacity = int(free) + int(torch.cuda.memory_reserved())
            doc["memory_capacity_bytes"] = min(capacity, st.limit_bytes) if st.limit_bytes else capacity
            p = torch.cuda.get_device_properties(torch.cuda.current_device())
            doc["device"] = {"kind": "cuda", "name": p.name, "memory_bytes": int(p.total_memory),
                             "compute_capability": f"{p.major}.{p.minor}"}
    except RuntimeError as e:  # a broken CUDA context after a device error: report what we have
        doc["cuda_error"] = str(e)[:400]
    doc["memory_limit_bytes"] = st.limit_bytes
    tmp = result.with_name(result.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(result)
