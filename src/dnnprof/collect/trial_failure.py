"""What went wrong in a trial: out-of-memory (of which memory), a CUDA error, a crash, a hang (pure).

Used twice: inside the trial process (a probe, or the trial hooks of a script) on the exception it caught, and in
the sweep on a child's exit status and the tail of its stderr, for children that died before they could say (killed
by the kernel, aborted by C++, a script). It sits in ``collect/`` because the trial process imports it.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

#: Messages that mean the GPU ran out of memory (PyTorch caching allocator, CUDA runtime, cuBLAS, cuDNN, NCCL).
GPU_OOM_PATTERNS = (
    r"CUDA out of memory",
    r"torch\.(cuda\.)?OutOfMemoryError",
    r"OutOfMemoryError: CUDA",
    r"CUDA error: out of memory",
    r"cudaErrorMemoryAllocation",
    r"CUBLAS_STATUS_ALLOC_FAILED",
    r"CUDNN_STATUS_ALLOC_FAILED",
    r"CUFFT_ALLOC_FAILED",
    r"NCCL.*(out of memory|Cuda failure 'out of memory')",
)
#: Messages that mean host memory ran out (allocator failures under an address-space limit, Python's own).
HOST_OOM_PATTERNS = (
    r"DefaultCPUAllocator: can't allocate memory",
    r"DefaultCPUAllocator: not enough memory",
    r"\bMemoryError\b",
    r"std::bad_alloc",
    r"Cannot allocate memory",
    r"cannot allocate memory for thread-local data",
    r"OpenBLAS.*(memory allocation|Memory allocation still failed)",
    r"failed to allocate \d+ bytes",
    r"CUDA error: .*cudaErrorHostMemoryAllocation|pinned memory.*(alloc|out of memory)",
)
_GPU_OOM = re.compile("|".join(GPU_OOM_PATTERNS), re.IGNORECASE)
_HOST_OOM = re.compile("|".join(HOST_OOM_PATTERNS))
#: The size of the allocation that failed: PyTorch's CUDA caching allocator ("Tried to allocate 11.95 GiB") and
#: its CPU allocator ("you tried to allocate 10485760 bytes").
_REQUEST = re.compile(r"tried to allocate\s+([0-9][0-9.,]*)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b", re.IGNORECASE)
_UNIT = {"bytes": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE = r"([0-9][0-9.,]*)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"
#: PyTorch's CUDA caching allocator, when it fails: "Of the allocated memory 335.75 MiB is allocated by PyTorch, and
#: 78.25 MiB is reserved by PyTorch but unallocated." With CUDA graphs' private pools in use it inserts "with 1.00
#: GiB allocated in private pools (e.g., CUDA Graphs), " before "and".
_HELD = re.compile(_SIZE + r"\s+is allocated by PyTorch,\s*(?:with\s+" + _SIZE + r"\s+allocated in private pools"
                   r"(?:\s*\([^)]*\))?,\s*)?and\s+" + _SIZE + r"\s+is reserved by PyTorch but unallocated", re.IGNORECASE)
_CUDA_ERROR = re.compile(r"CUDA error|CUDNN_STATUS_|CUBLAS_STATUS_|cudaError|illegal memory access|device-side assert")
#: Lines that are noise at the end of a traceback, never the message.
_NOISE = re.compile(r"^(\s*$|Traceback|\s+File |\s+\^+|\s{4}|During handling|The above exception|"
                    r"CUDA kernel errors might|For debugging consider|Compile with `TORCH_USE_CUDA_DSA`)")


@dataclass(frozen=True)
class Failure:
    """A trial's failure.

    Attributes:
        status: ``oom``, ``error`` or ``timeout``.
        limited_by: the resource that ran out: ``gpu_memory``, ``host_memory``, ``timeout``, ``cuda_error``,
            ``crash`` or ``error``.
        message: one line saying what happened.
    """

    status: str
    limited_by: str
    message: str


def classify_text(text: str) -> tuple[str, str] | None:
    """``(status, limited_by)`` when ``text`` (an exception message or stderr) shows an out-of-memory, else None."""
    if _GPU_OOM.search(text):
        return "oom", "gpu_memory"
    if _HOST_OOM.search(text):
        return "oom", "host_memory"
    return None


def classify_exception(exc: BaseException) -> Failure:
    """A caught exception as a failure (inside a probe)."""
    name = type(exc).__name__
    text = f"{name}: {exc}" if str(exc) else f"{name} (no message)"
    if name == "OutOfMemoryError" or isinstance(exc, MemoryError):
        where = "gpu_memory" if name == "OutOfMemoryError" else "host_memory"
        return Failure("oom", where, first_line(text))
    found = classify_text(text)
    if found:
        return Failure(found[0], found[1], first_line(text))
    if _CUDA_ERROR.search(text):
        return Failure("error", "cuda_error", first_line(text))
    return Failure("error", "error", first_line(text))


def classify_exit(returncode: int | None, stderr_tail: str, *, timed_out: bool, timeout_s: float) -> Failure | None:
    """A finished child's failure from its exit status and stderr, or None when it exited 0 with no error shown.

    Args:
        returncode: the exit status (negative: killed by that signal).
        stderr_tail: the end of its stderr.
        timed_out: the sweep killed it for running past ``timeout_s``.
    """
    if timed_out:
        return Failure("timeout", "timeout", f"no result after {timeout_s:g} s; the trial was killed")
    if returncode is None or returncode == 0:
        return None  # a clean exit fits, whatever it printed (a script may catch an OOM and carry on)
    found = classify_text(stderr_tail)
    if found:
        return Failure(found[0], found[1], last_error_line(stderr_tail) or "out of memory")
    if returncode < 0:
        sig = _signal_name(-returncode)
        if -returncode == signal.SIGKILL:
            return Failure("oom", "host_memory", f"killed by {sig} (most likely the kernel's out-of-memory killer)")
        return Failure("error", "crash", f"crashed with {sig}" + _suffix(stderr_tail))
    if _CUDA_ERROR.search(stderr_tail):
        return Failure("error", "cuda_error", last_error_line(stderr_tail) or f"exit status {returncode}")
    return Failure("error", "error", last_error_line(stderr_tail) or f"exit status {returncode}")


def requested_bytes(text: str) -> int | None:
    """The size of the allocation an out-of-memory message says failed, in bytes; None when it does not say.

    With the memory in use when it failed, it bounds what the failing batch needed from below, which is what lets
    the batch search place the edge (``search.BatchSearch``). PyTorch rounds the size to two decimals of its unit.
    """
    m = _REQUEST.search(text or "")
    if not m:
        return None
    try:
        value = float(m.group(1).replace(",", ""))
    except ValueError:
        return None
    return int(value * _UNIT[m.group(2).lower()])


def _bytes(value: str, unit: str) -> int | None:
    try:
        return int(float(value.replace(",", "")) * _UNIT[unit.lower()])
    except (ValueError, KeyError):
        return None


def allocator_state(text: str) -> tuple[int | None, int | None]:
    """``(allocated, reserved but unallocated)`` bytes of PyTorch's CUDA caching allocator at the moment an
    out-of-memory was raised, as its message says; ``(None, None)`` when it does not say.

    This is the state *at the failure*, which the peak counters of the trial (the largest allocation of the whole
    run) do not give: a batch can fail early in a step with less in use than an earlier step's peak.
    """
    m = _HELD.search(text or "")
    if not m:
        return None, None
    allocated = _bytes(m.group(1), m.group(2))
    private = _bytes(m.group(3), m.group(4)) if m.group(3) else 0  # CUDA graphs' pools: in use too
    return (None if allocated is None or private is None else allocated + private), _bytes(m.group(5), m.group(6))


def first_line(text: str, limit: int = 400) -> str:
    """The first non-empty line of ``text``, shortened to ``limit`` characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def last_error_line(text: str, limit: int = 400) -> str:
    """The line of a stderr tail that says what failed: the last one that is not traceback furniture."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    for ln in reversed(lines):
        if not _NOISE.match(ln):
            s = ln.strip()
            return s if len(s) <= limit else s[: limit - 1] + "…"
    return ""


def _suffix(stderr_tail: str) -> str:
    line = last_error_line(stderr_tail)
    return f": {line}" if line else ""


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
