"""The canonical profile schema: every table, column, dtype and unit, in one place.

A profile is a set of columnar tables plus device and run metadata. All tables share these rules:

* Times are integer nanoseconds on the trace's clock (``start_ns``, ``dur_ns``); ``Profile.meta["base_time_ns"]``
  is added to get Unix-epoch nanoseconds (Kineto's ``baseTimeNanoseconds``; 0 when the trace was absolute).
* Every row carries ``rank`` (the process in a multi-GPU run; 0 for a single process).
* Names are dictionary-encoded: ``*_id`` columns are int32 indexes into ``Profile.strings``; -1 means none.
* Cross-table links are resolved once at ingest into row indexes (``*_row``, int32, -1 when absent), e.g. a kernel's
  ``launch_row`` is its CUDA runtime call in ``runtime`` and ``op_row`` the innermost CPU op that launched it.
* ``step`` is the iteration the row belongs to (the ``number`` in ``steps``), -1 when outside every step.
* Enumerations are small ints whose labels are listed here (``MEMCPY_KINDS`` …).

This module is the only place that defines columns; ``docs/profile-schema.md`` is generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

# Enumerations -------------------------------------------------------------------------------------------------

#: ``memcpy.kind`` labels, as CUPTI names them.
MEMCPY_KINDS = ("unknown", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP")
#: ``memcpy.src_mem`` / ``memcpy.dst_mem`` / ``memset.dst_mem`` labels.
MEMORY_KINDS = ("unknown", "device", "pageable", "pinned", "managed", "array")
#: ``ops.category`` labels.
OP_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
#: ``runtime.api_kind`` labels: what a CUDA runtime/driver call does.
API_KINDS = ("other", "launch", "memcpy", "memset", "sync", "event", "graph_launch")
#: ``steps.source`` labels: how the iteration boundary was found.
STEP_SOURCES = ("profiler_step", "marker", "optimizer", "pattern", "whole_trace", "dataloader")
#: ``memory_events.device_type`` labels: c10's ``DeviceType`` numbering, as Kineto writes ``Device Type``.
DEVICE_TYPES = ("cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla", "vulkan",
                "metal", "xpu", "mps", "meta", "hpu", "ve", "lazy", "ipu", "mtia", "privateuse1")


@dataclass(frozen=True)
class Column:
    """One column: name (with unit), numpy dtype, and what it means."""

    name: str
    dtype: str
    doc: str


def _cols(*specs: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(n, d, doc) for n, d, doc in specs)


_WHERE = (
    ("rank", "int16", "process rank in a multi-GPU run (0 for one process)"),
)
_GPU_WHERE = (
    *_WHERE,
    ("device", "int16", "CUDA device index"),
    ("stream", "int32", "CUDA stream id"),
    ("start_ns", "int64", "start on the trace clock, ns"),
    ("dur_ns", "int64", "duration, ns"),
    ("name_id", "int32", "name (index into strings)"),
    ("correlation", "int64", "CUPTI correlation id linking the GPU activity to its runtime call"),
    ("launch_row", "int32", "row of the launching call in `runtime`, -1 if not in the trace"),
    ("op_row", "int32", "row of the innermost CPU op enclosing the launch in `ops`, -1 if none"),
    ("step", "int32", "iteration number, -1 outside every step"),
    ("module_id", "int32", "nn.Module layer of work replayed from a CUDA graph, from the compile-time records "
                           "(-1: the launching op's layer)"),
)

TABLES: dict[str, tuple[Column, ...]] = {
    "kernels": _cols(
        *_GPU_WHERE,
        ("grid_x", "int32", "grid size x (blocks)"),
        ("grid_y", "int32", "grid size y"),
        ("grid_z", "int32", "grid size z"),
        ("block_x", "int32", "block size x (threads)"),
        ("block_y", "int32", "block size y"),
        ("block_z", "int32", "block size z"),
        ("registers_per_thread", "int16", "registers per thread (-1 unknown); ncu launch__registers_per_thread"),
        ("shared_memory_bytes", "int32", "static + dynamic shared memory per block, bytes (-1 unknown)"),
        ("blocks_per_sm", "float32", "grid blocks / SM count as Kineto reports it (NaN unknown)"),
        ("warps_per_sm", "float32", "blocks_per_sm x warps per block (NaN unknown)"),
        ("est_occupancy_pct", "float32", "Kineto 'est. achieved occupancy %' (NaN unknown)"),
        ("graph_id", "int64", "CUDA graph id when launched from a graph, -1 otherwise"),
    ),
    "memcpy": _cols(
        *_GPU_WHERE,
        ("kind", "int8", "direction, index into MEMCPY_KINDS"),
        ("src_mem", "int8", "source memory kind, index into MEMORY_KINDS"),
        ("dst_mem", "int8", "destination memory kind, index into MEMORY_KINDS"),
        ("bytes", "int64", "bytes copied"),
    ),
    "memset": _cols(
        *_GPU_WHERE,
        ("dst_mem", "int8", "memory kind, index into MEMORY_KINDS"),
        ("bytes", "int64", "bytes set"),
    ),
    "runtime": _cols(
        *_WHERE,
        ("tid", "int64", "host thread id"),
        ("start_ns", "int64", "start, ns"),
        ("dur_ns", "int64", "duration, ns"),
        ("name_id", "int32", "API name (cudaLaunchKernel, cuLaunchKernelEx, cudaStreamSynchronize, …)"),
        ("correlation", "int64", "CUPTI correlation id"),
        ("cbid", "int32", "CUPTI callback id (-1 unknown)"),
        ("api_kind", "int8", "what the call does, index into API_KINDS"),
        ("driver", "bool", "True for a driver API call (cu*), False for the runtime API (cuda*)"),
        ("op_row", "int32", "innermost CPU op enclosing the call, -1 if none"),
        ("step", "int32", "iteration number, -1 outside"),
    ),
    "ops": _cols(
        *_WHERE,
        ("tid", "int64", "host thread id"),
        ("start_ns", "int64", "start, ns"),
        ("dur_ns", "int64", "duration, ns"),
        ("name_id", "int32", "op or range name"),
        ("category", "int8", "index into OP_CATEGORIES"),
        ("parent_row", "int32", "enclosing op on the same thread, -1 at top level"),
        ("depth", "int16", "nesting depth on the thread, 0 at top level"),
        ("external_id", "int64", "Kineto External id (-1 unknown)"),
        ("sequence_nr", "int64", "autograd sequence number (-1 unknown)"),
        ("fwd_thread_id", "int64", "for backward ops, the forward thread id (-1 unknown)"),
        ("fwd_row", "int32", "for a backward op, the forward op linked by a `fwdbwd` flow, -1 otherwise"),
        ("module_id", "int32", "nn.Module hierarchy of the op when the trace carries it (-1 none)"),
        ("stack_id", "int32", "Python call stack, innermost frame first, ';'-joined (-1 none)"),
        ("input_dims_id", "int32", "input shapes as recorded with record_shapes (-1 none)"),
        ("step", "int32", "iteration number, -1 outside"),
    ),
    "gpu_annotations": _cols(
        *_WHERE,
        ("device", "int16", "CUDA device index"),
        ("stream", "int32", "stream id"),
        ("start_ns", "int64", "start, ns"),
        ("dur_ns", "int64", "duration, ns"),
        ("name_id", "int32", "range name projected onto the GPU (gpu_user_annotation)"),
    ),
    "syncs": _cols(
        *_GPU_WHERE[:6],
        ("correlation", "int64", "correlation id of the synchronising call"),
    ),
    "steps": _cols(
        *_WHERE,
        ("number", "int32", "iteration number"),
        ("name_id", "int32", "marker name (ProfilerStep#N, …), -1 when inferred"),
        ("source", "int8", "how the step was found, index into STEP_SOURCES"),
        ("start_ns", "int64", "host-side start, ns"),
        ("dur_ns", "int64", "host-side duration, ns"),
        ("gpu_start_ns", "int64",
         "first GPU activity launched in the step (-1 if none, or if not after the previous step's)"),
        ("gpu_end_ns", "int64", "end of the GPU-side window: next step's gpu_start_ns, for the last one the end of "
                                "all step GPU work; windows are disjoint"),
    ),
    "counters": _cols(
        *_WHERE,
        ("kernel_row", "int32", "row in `kernels` (-1 when the counter row could not be matched)"),
        ("metric_id", "int32", "metric name, as Nsight Compute spells it"),
        ("value", "float64", "value in the metric's unit"),
        ("unit_id", "int32", "unit string (ns, byte, %, …)"),
    ),
    "samples": _cols(
        *_WHERE,
        ("device", "int16", "device index"),
        ("ts_ns", "int64", "sample time on the trace clock, ns"),
        ("metric_id", "int32", "metric name (gpu_util_pct, sm_active_pct, power_w, …)"),
        ("value", "float64", "value, in the unit the metric name carries"),
    ),
    "memory_events": _cols(
        *_WHERE,
        ("tid", "int64", "host thread that allocated or freed"),
        ("ts_ns", "int64", "time of the allocation or free on the trace clock, ns"),
        ("device_type", "int8", "where the memory is, index into DEVICE_TYPES (torch.profiler `Device Type`)"),
        ("device", "int16", "device index (-1 for host memory)"),
        ("addr", "int64", "address of the block"),
        ("bytes", "int64", "bytes allocated (> 0) or freed (< 0)"),
        ("total_allocated_bytes", "int64", "bytes allocated on the device after the event (allocator's count)"),
        ("total_reserved_bytes", "int64", "bytes reserved by the caching allocator after the event (0 on the host)"),
        ("op_row", "int32", "innermost CPU op on the same thread enclosing the event, -1 if none"),
        ("step", "int32", "iteration number, -1 outside (and for events of a joined full-detail window)"),
    ),
    "collectives": _cols(
        *_WHERE,
        ("kernel_row", "int32", "the collective's kernel in `kernels` (an NCCL kernel), -1 when it is a host op"),
        ("op_row", "int32", "the collective's op in `ops` (`record_param_comms`), -1 when it is a kernel"),
        ("name_id", "int32", "collective as torch.distributed names it (allreduce, allgather, broadcast, …)"),
        ("pg_name_id", "int32", "process group name (`0` is the default group), -1 unknown"),
        ("pg_desc_id", "int32", "process group description (`default_pg` …), -1 unknown"),
        ("pg_ranks_id", "int32", "global ranks of the group as recorded (`[0, 1]`), -1 unknown"),
        ("group_size", "int32", "ranks in the group, -1 unknown"),
        ("seq", "int64", "the collective's sequence number in its group (Kineto `Seq`), -1 when not recorded"),
        ("in_nelems", "int64", "elements in (Kineto `In msg nelems`), -1 unknown"),
        ("out_nelems", "int64", "elements out (Kineto `Out msg nelems`), -1 unknown"),
        ("dtype_id", "int32", "element type as torch names it (Float, BFloat16, …), -1 unknown"),
        ("in_bytes", "int64", "in_nelems x element size, bytes (-1 unknown)"),
        ("out_bytes", "int64", "out_nelems x element size, bytes (-1 unknown)"),
    ),
}


def empty_table(name: str, n: int = 0, mapped: Path | None = None, prefill: bool = True) -> dict[str, np.ndarray]:
    """Columns of table ``name`` with ``n`` rows of fill values (:func:`fill_value`); ``mapped``: a folder in which
    the columns are temporary files mapped into memory (:mod:`dnnprof.model.mapped_columns`), for big tables.
    ``prefill=False``: mapped columns start as zeros, for a caller that writes every value of them or fills them."""
    out: dict[str, np.ndarray] = {}
    for col in TABLES[name]:
        dt = np.dtype(col.dtype)
        fill = fill_value(dt)
        if mapped is not None:
            from dnnprof.model.mapped_columns import mapped_column

            out[col.name] = mapped_column(mapped, dt, n, fill if prefill else 0)
        else:
            out[col.name] = np.full(n, fill, dtype=dt)
    return out


def fill_value(dtype: np.dtype) -> float | bool | int:
    """What a column of ``dtype`` holds where nothing is known: NaN, False or -1."""
    return np.nan if dtype.kind == "f" else False if dtype.kind == "b" else -1


def schema_markdown() -> str:
    """The schema as Markdown, for docs/profile-schema.md."""
    lines = ["# dnnprof canonical profile schema", "", (__doc__ or "").strip(), ""]
    enums = {
        "MEMCPY_KINDS": MEMCPY_KINDS,
        "MEMORY_KINDS": MEMORY_KINDS,
        "OP_CATEGORIES": OP_CATEGORIES,
        "API_KINDS": API_KINDS,
        "STEP_SOURCES": STEP_SOURCES,
        "DEVICE_TYPES": DEVICE_TYPES,
    }
    lines += ["## Enumerations", ""]
    for k, v in enums.items():
        lines.append(f"- `{k}`: " + ", ".join(f"{i}=`{s}`" for i, s in enumerate(v)))
    for table, cols in TABLES.items():
        lines += ["", f"## `{table}`", "", "| column | dtype | meaning |", "|---|---|---|"]
        lines += [f"| `{c.name}` | {c.dtype} | {c.doc} |" for c in cols]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(schema_markdown(), end="")
