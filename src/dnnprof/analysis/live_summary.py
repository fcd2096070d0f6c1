"""Mean and p95 of each recorded GPU metric (``dnnprof monitor``'s summary), from the recorded columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MetricStats:
    metric: str
    mean: float
    p95: float
    samples: int


@dataclass(frozen=True)
class GpuSummary:
    """One GPU's recording: ``stats`` for every metric with values, in the order of ``metrics``."""

    gpu: int
    samples: int
    duration_s: float
    stats: tuple[MetricStats, ...]

    def get(self, metric: str) -> MetricStats | None:
        return next((s for s in self.stats if s.metric == metric), None)


def summarize(columns: Mapping[str, Sequence[object]], metrics: Sequence[str]) -> list[GpuSummary]:
    """Per GPU (column ``gpu``), mean and 95th percentile of each metric over its non-missing samples.

    Args:
        columns: the recording (``t_s``, ``gpu`` and metric columns; None where a sample lacks a metric).
        metrics: which metric columns to summarise, in output order.
    """
    gpu = np.asarray(columns["gpu"], dtype=np.int64)
    t = np.asarray(columns["t_s"], dtype=np.float64)
    out: list[GpuSummary] = []
    for g in sorted(set(gpu.tolist())):
        rows = gpu == g
        stats = []
        for m in metrics:
            v = np.asarray([np.nan if x is None else x for x in columns[m]], dtype=np.float64)[rows]
            v = v[~np.isnan(v)]
            if len(v):
                stats.append(MetricStats(m, float(v.mean()), float(np.percentile(v, 95)), len(v)))
        tg = t[rows]
        out.append(GpuSummary(int(g), int(rows.sum()), float(tg.max() - tg.min()) if len(tg) else 0.0,
                              tuple(stats)))
    return out
