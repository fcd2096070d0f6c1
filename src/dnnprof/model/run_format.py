"""Names in a run directory that both sides read: the profiled process writes them (``collect``), ingest reads
them back (``ingest.assemble``)."""

from __future__ import annotations

#: The collector's results, written by the profiled process at its end.
RESULT_FILE = "collector.json"
#: Prefix of dnnprof's module ranges (``dnnprof.module:<fqn>|<Class>``), recorded as ``record_function`` ranges.
MODULE_RANGE_PREFIX = "dnnprof.module:"
#: NVTX range around the step the counters pass profiles (the profiled process opens it, ncu filters on it).
COUNTERS_RANGE = "dnnprof.counters"
#: A built-in workload's error, written by the profiled process for the parent to report.
CHILD_ERROR_FILE = "workload_error.txt"
#: Compile-time records of torch.compile's generated kernels (module paths, sources, forward/backward graph).
COMPILED_KERNELS_FILE = "compiled_kernels.json"


#: A multi-rank run keeps each profiled rank's collector results and traces in ``rank<N>/`` of the run directory.
RANK_DIR_PREFIX = "rank"


def rank_subdir(rank: int) -> str:
    """``rank3``: the sub-directory of rank 3 in a multi-rank run directory."""
    return f"{RANK_DIR_PREFIX}{int(rank)}"


def rank_of_subdir(name: str) -> int | None:
    """3 for ``rank3``; None for any other name."""
    tail = name[len(RANK_DIR_PREFIX):] if name.startswith(RANK_DIR_PREFIX) else ""
    return int(tail) if tail.isdigit() else None
