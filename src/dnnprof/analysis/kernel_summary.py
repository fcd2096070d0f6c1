"""nvprof-style kernel summary: per distinct kernel (full name) and per family, over the whole trace."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dnnprof.analysis.attribution import PHASES, Attribution
from dnnprof.analysis.factorize import row_keys
from dnnprof.analysis.kernel_names import family, precision, short_name, uses_tensor_cores
from dnnprof.model.mapped_columns import release_pages, release_pages_of
from dnnprof.model.profile import Profile


@dataclass
class KernelRow:
    """One distinct kernel (by full name); times in ns."""

    name: str
    short_name: str
    family: str
    tensor_core: bool
    precision: str
    calls: int
    total_ns: int
    pct: float
    mean_ns: float
    min_ns: int
    max_ns: int
    layer: str  # the layer with the most time in this kernel
    phase: str  # the phase with the most time in this kernel
    grid: list[int]  # launch configuration with the most time
    block: list[int]
    registers_per_thread: int
    shared_memory_bytes: int
    est_achieved_occupancy_pct: float  # Kineto's estimate, time-weighted over calls (NaN when absent)
    rows: np.ndarray  # rows of the kernels table
    source: str = ""  # user source line that launched most of its time (with_stack traces)
    theoretical_occupancy_pct: float = float("nan")  # occupancy calculator, time-weighted over calls
    occupancy_limiters: tuple[str, ...] = ()  # what limits the launch configuration with the most time


def _dominant(keys: np.ndarray, weights: np.ndarray) -> object:
    uniq, inv = np.unique(keys, return_inverse=True)
    return uniq[int(np.argmax(np.bincount(inv, weights=weights)))]


def _dominant_code(uniq: np.ndarray, codes: np.ndarray, weights: np.ndarray) -> object:
    """``_dominant(uniq[codes], weights)`` for codes into sorted distinct values (``Attribution.codes``): the
    same answer, ties included, from a sort of small integers instead of strings."""
    return uniq[_dominant_index(codes, weights)]


def _dominant_index(codes: np.ndarray, weights: np.ndarray) -> int:
    """The non-negative integer code with the most weight among those present (ties: the smallest), by a count over
    the codes' range rather than a sort of them (one kernel name's launches can be millions)."""
    w = np.bincount(codes, weights=weights)
    w[np.bincount(codes, minlength=w.size) == 0] = -np.inf  # a code not present never wins, whatever the weights
    return int(np.argmax(w))


def _dominant_config_position(config: list[np.ndarray], rows: np.ndarray, d: np.ndarray) -> int:
    """The position in ``rows`` of a launch of the configuration with the most time (``config``: the launch
    configuration's columns; ties: the configuration first in the columns' order, as :func:`row_keys` orders its
    keys). The keys are made for these rows only: a big trace's kernels are millions, one name's far fewer."""
    def gathered() -> Iterator[np.ndarray]:  # a column at a time, its mapped pages given back once copied
        for c in config:
            yield c[rows]
            release_pages_of(c)

    _, first, inv = np.unique(row_keys(gathered()), return_index=True, return_inverse=True)
    return int(first[int(np.argmax(np.bincount(inv.reshape(-1), weights=d)))])


def kernel_summary(profile: Profile, attribution: Attribution, rank: int | None = None,
                   occupancy: dict[str, np.ndarray] | None = None) -> list[KernelRow]:
    """Every distinct kernel, sorted by total time (descending).

    ``occupancy`` is ``analysis.occupancy.kernel_occupancy`` of the whole kernels table, when available.
    """
    k = profile.tables["kernels"]
    n = k["start_ns"].size
    sel = None if rank is None else np.flatnonzero(k["rank"] == rank)
    if sel is not None and sel.size == n:
        sel = None  # every row: no index to keep (a big trace's temporaries are a few columns of every kernel)
    if (n if sel is None else sel.size) == 0:
        return []
    ids = k["name_id"] if sel is None else k["name_id"][sel]
    dur = k["dur_ns"] if sel is None else k["dur_ns"][sel]
    grand = float(dur.sum()) or 1.0
    order = np.lexsort((dur, ids))
    ids_s, dur_s = ids[order], dur[order]
    rows_s = order if sel is None else sel[order]
    del ids, dur, order, sel
    release_pages()  # the name and duration columns, sorted into these copies
    bounds = np.flatnonzero(np.diff(ids_s)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [ids_s.size]])
    totals = np.add.reduceat(dur_s, starts)
    # the table's own columns, read at one row per kernel: no copy of eight columns stacked
    config = [k[c] for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                             "shared_memory_bytes")]
    occ = k["est_occupancy_pct"]  # float32, widened per kernel below (exactly)
    layers = attribution.codes("layer") if attribution.phase.size else None
    sources = attribution.codes("source") if attribution.known("source") else None
    out: list[KernelRow] = []
    for a, b, total in zip(starts.tolist(), ends.tolist(), totals.tolist(), strict=True):
        rows = rows_s[a:b]
        d = dur_s[a:b].astype(np.float64)
        name = profile.strings[int(ids_s[a])]
        best = rows[_dominant_config_position(config, rows, d)]  # a launch of the dominant configuration
        o = occ[rows].astype(np.float64)
        ok = ~np.isnan(o)
        out.append(KernelRow(
            name=name, short_name=short_name(name), family=family(name), tensor_core=uses_tensor_cores(name),
            precision=precision(name), calls=int(b - a), total_ns=int(total), pct=100.0 * total / grand,
            mean_ns=float(total) / (b - a), min_ns=int(dur_s[a]), max_ns=int(dur_s[b - 1]),
            layer=str(_dominant_code(layers[0], layers[1][rows], d)) if layers is not None else "",
            phase=PHASES[_dominant_index(attribution.phase[rows], d)] if attribution.phase.size else "other",
            grid=[int(c[best]) for c in config[0:3]], block=[int(c[best]) for c in config[3:6]],
            registers_per_thread=int(config[6][best]), shared_memory_bytes=int(config[7][best]),
            est_achieved_occupancy_pct=float(np.average(o[ok], weights=d[ok])) if ok.any() and d[ok].sum() > 0
            else (float(o[ok].mean()) if ok.any() else float("nan")),
            rows=rows,
            source=str(_dominant_code(sources[0], sources[1][rows], d)) if sources is not None and rows.size else "",
            **_occupancy_fields(occupancy, rows, d, best),
        ))
        release_pages_of(*config, occ)  # a big trace's mapped columns: one kernel's pages at a time
    # ties by name: the same order however the profile numbered its strings (one rank alone, or merged after others)
    out.sort(key=lambda r: (-r.total_ns, r.name))
    return out


def _occupancy_fields(occ: dict[str, np.ndarray] | None, rows: np.ndarray, d: np.ndarray,
                      best: int) -> dict[str, object]:
    if occ is None:
        return {}
    pct = occ["theoretical_occupancy_pct"][rows].astype(np.float64)
    ok = ~np.isnan(pct)
    if not ok.any():
        return {}
    mean = float(np.average(pct[ok], weights=d[ok])) if d[ok].sum() > 0 else float(pct[ok].mean())
    lim = str(occ["limiter"][best])
    return {"theoretical_occupancy_pct": mean, "occupancy_limiters": tuple(x for x in lim.split("+") if x)}


@dataclass
class GroupRow:
    """A group of kernels (a family, a layer, a phase); times in ns."""

    name: str
    calls: int
    total_ns: int
    pct: float


def group_by(keys: np.ndarray, dur_ns: np.ndarray) -> list[GroupRow]:
    """Total time and calls per key, sorted by time."""
    if keys.size == 0:
        return []
    uniq, inv = np.unique(keys, return_inverse=True)
    return group_by_sorted(uniq, inv.reshape(-1), dur_ns)


def group_by_codes(names: np.ndarray, codes: np.ndarray, dur_ns: np.ndarray) -> list[GroupRow]:
    """``group_by(names[codes], dur_ns)`` for integer codes into distinct ``names``: the same rows in the same
    order, without sorting the keys of every row."""
    if codes.size == 0:
        return []
    present, inv = np.unique(codes, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(names[present], kind="stable")  # group_by's order: by name, before the sort by time
    rank_of = np.empty(order.size, dtype=np.int64)
    rank_of[order] = np.arange(order.size)
    return group_by_sorted(names[present][order], rank_of[inv], dur_ns)


def group_by_sorted(uniq: np.ndarray, inv: np.ndarray, dur_ns: np.ndarray) -> list[GroupRow]:
    """Total time and calls per key, sorted by time (stable: ties keep ``uniq``'s order); ``inv``: each row's
    index into the sorted distinct keys ``uniq``."""
    totals = np.bincount(inv, weights=dur_ns.astype(np.float64), minlength=uniq.size)
    calls = np.bincount(inv, minlength=uniq.size)
    grand = float(totals.sum()) or 1.0
    rows = [GroupRow(str(u), int(c), int(t), 100.0 * t / grand)
            for u, c, t in zip(uniq.tolist(), calls.tolist(), totals.tolist(), strict=True)]
    rows.sort(key=lambda r: -r.total_ns)
    return rows
