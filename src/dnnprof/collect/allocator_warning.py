"""Keep c10's CPU allocator warning off the profiled script's stderr.

While a profiler records memory, freeing a CPU block allocated before it started makes c10 log "Memory block of
unknown size was allocated before the profiling started, …" through its C++ logger, the first time and then once
every 1,000 such frees in the process (``ProfiledCPUMemoryReporter``). The logger has one switch for all of torch's
C++ warnings, so it is not turned off for the run. Instead, right after the first memory-recording window starts,
one block allocated just before is freed with the logger raised to errors for that instant: the warning's count
moves past its first print, and the next would need 999 more such frees inside memory windows. The freed block is
of unknown size, so it leaves no event in the trace. Where the logger's level cannot be reached (a torch without
``libc10`` as a shared library), nothing is done and the warning appears as before.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

_C10_ERROR = 2  # c10's level numbers: 0 info, 1 warning, 2 error
_spent = False  # once per process: the warning's count is per process


def _log_level(torch: Any) -> Any:
    """c10's ``FLAGS_caffe2_log_level`` as a ctypes int, or None."""
    lib_dir = Path(torch.__file__).parent / "lib"
    for name in ("libc10.so", "libc10.dylib"):
        if (lib_dir / name).is_file():
            try:
                return ctypes.c_int.in_dll(ctypes.CDLL(str(lib_dir / name)), "FLAGS_caffe2_log_level")
            except (OSError, ValueError):  # not loadable, or a build without the flag
                return None
    return None


def spend_first_warning(torch: Any) -> Callable[[], None]:
    """Call before starting a memory-recording profiler; call what it returns right after it started."""
    if _spent or os.environ.get("TORCH_CPP_LOG_LEVEL"):  # the user chose what the C++ logger shows: leave it
        return lambda: None
    level = _log_level(torch)
    if level is None:
        return lambda: None
    block = [torch.empty(16, dtype=torch.uint8)]  # allocated while memory is not recorded: of unknown size later

    def free() -> None:
        global _spent
        _spent = True
        before = level.value
        level.value = max(before, _C10_ERROR)
        try:
            block.clear()
        finally:
            level.value = before

    return free
