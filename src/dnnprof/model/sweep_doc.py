"""The ``dnnprof.sweep/1`` document as far as a report reads it (``sweep-1.schema.json``), checked with msgspec."""

from __future__ import annotations

import msgspec


class SweepDocError(ValueError):
    """The document does not have the fields and types a report reads."""


_Num = float | None  # msgspec takes ints for these too
_Int = int | None


class _Point(msgspec.Struct):
    """A sweep point as far as the report reads it: its place and the numbers it plots (``sweep-1.schema.json``)."""

    batch_size: int
    precision: str
    mode: str
    status: str
    kind: str
    throughput_samples_per_s: _Num = None
    throughput_items_per_s: _Num = None
    step_time_ms: _Num = None
    step_time_p90_ms: _Num = None
    gpu_busy_pct: _Num = None
    sm_active_pct: _Num = None
    sm_occupancy_pct: _Num = None
    tensor_active_pct: _Num = None
    dram_bw_util_pct: _Num = None
    tensor_core_pct: _Num = None
    peak_memory_bytes: _Int = None
    peak_allocated_bytes: _Int = None
    peak_reserved_bytes: _Int = None
    memory_capacity_bytes: _Int = None
    steps_timed: _Int = None
    wall_s: _Num = None
    phases_pct: dict[str, _Num] | None = None
    top_kernels: list[dict] | None = None  # type: ignore[type-arg]
    families: list[dict] | None = None  # type: ignore[type-arg]


class _MaxBatch(msgspec.Struct):
    precision: str
    mode: str
    batch_size: _Int
    limited_by: str | None


class _Sweep(msgspec.Struct):
    schema: str
    points: list[_Point]
    max_batch_size: list[_MaxBatch] = msgspec.field(default_factory=list)


def check_sweep(doc: object) -> None:
    """Raise :class:`SweepDocError` naming the first bad field (e.g. "Expected `int`, got `str` - at ...")."""
    try:
        msgspec.convert(doc, _Sweep)
    except msgspec.ValidationError as e:
        raise SweepDocError(str(e)) from None
