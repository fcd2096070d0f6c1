"""Join Nsight Compute results back to every kernel instance of a profile and fill its ``counters`` table.

ncu profiles one (or a few) launches per kernel signature; a profile has every launch. A launch's signature is
(kernel function, grid, block, registers per thread, static + dynamic shared memory). Names differ between the two
tools — Kineto prints ``void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, …)``, ncu prints
``void native::vectorized_gather_kernel<16, long>(char *, char *, T2 *, …)`` — so the match key uses the function's
base name (``vectorized_gather_kernel``) and launch geometry, and when several ncu kernels share a key (one
``vectorized_elementwise_kernel`` per functor) the one whose template-argument words overlap most wins.

Every launch of a matched signature gets the signature's counters (the mean over the ncu rows of that signature).
ncu rows that match no launch are kept with ``kernel_row = -1``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from dnnprof.analysis import bounds as B
from dnnprof.model.profile import Profile


class NcuRows(Protocol):
    """What the join needs from an ncu result (``dnnprof.ingest.ncu_csv.NcuTable`` provides it)."""

    kernel_name: np.ndarray
    grid: np.ndarray
    block: np.ndarray
    registers_per_thread: np.ndarray
    metrics: dict[str, np.ndarray]
    units: dict[str, str]

    @property
    def smem_bytes(self) -> np.ndarray: ...

    def __len__(self) -> int: ...


_ANON = re.compile(r"\(anonymous namespace\)|<unnamed>|\{anonymous\}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STOP = frozenset({
    "at", "native", "cuda", "anon_ns", "std", "c10", "void", "const", "volatile", "unsigned", "signed", "operator",
    "lambda", "instance", "true", "false", "u", "ul", "ull", "l", "ll", "detail"})
#: Two names with the same base and geometry are the same kernel only if their words overlap at least this much
#: (Jaccard). Same kernels score 1.0 on real Kineto/ncu pairs; different functors of one launcher ≤ 0.75.
MIN_NAME_SIMILARITY = 0.85


def _head(name: str) -> str:
    """The name up to its parameter list, without return type and with anonymous namespaces neutralised."""
    s = _ANON.sub("anon_ns", name.strip())
    if s.startswith("void "):
        s = s[5:]
    depth = 0
    for i, ch in enumerate(s):
        if ch in "<[{":
            depth += 1
        elif ch in ">]}":
            depth -= 1
        elif ch == "(" and depth <= 0:
            return s[:i].strip()
    return s


@lru_cache(maxsize=65536)
def kernel_base_name(name: str) -> str:
    """The kernel's function name without namespaces, template arguments or parameters (ncu's "function" base)."""
    head = _head(name)
    lt = head.find("<")
    qual = head[:lt] if lt >= 0 else head
    return qual.rsplit("::", 1)[-1].strip() or name.strip()


@lru_cache(maxsize=65536)
def kernel_name_words(name: str) -> frozenset[str]:
    """The base name plus the identifier words of the template arguments — not the function's namespaces (ncu
    shortens ``at::cuda::philox::`` to ``philox::``) nor the parameters (ncu prints template placeholders ``T2``)
    — without common namespaces and C++ keywords."""
    head = _head(name)
    lt = head.find("<")
    targs = head[lt:] if lt >= 0 else ""
    return frozenset([kernel_base_name(name)] + [w for w in _IDENT.findall(targs)
                                                 if w not in _STOP and not re.fullmatch(r"T\d+", w)])


def _key(base: str, g: np.ndarray, b: np.ndarray, regs: int, smem: int) -> tuple:
    return (base, *(int(x) for x in g), *(int(x) for x in b), int(regs), int(smem))


@dataclass
class CounterJoin:
    """Which ncu signature each profile kernel got, and how much GPU time that covers."""

    group_of_kernel: np.ndarray  # int32 per profile kernel row: index into ``groups``, -1 unmatched
    groups: list[np.ndarray]  # ncu row indexes of each ncu signature
    group_names: list[str]
    unmatched_ncu_rows: np.ndarray  # ncu rows whose signature no profile kernel has
    covered_ns: int
    total_ns: int
    matched_kernels: int
    total_kernels: int

    @property
    def coverage(self) -> float:
        """Share of the considered kernels' GPU time that has counters (0..1)."""
        return self.covered_ns / self.total_ns if self.total_ns else 0.0

    @property
    def message(self) -> str:
        return (f"counters for {self.matched_kernels:,} of {self.total_kernels:,} kernel launches "
                f"({100 * self.coverage:.1f}% of GPU kernel time) from {len(self.groups)} ncu signatures; "
                f"{len(self.unmatched_ncu_rows)} ncu launches matched no kernel")


def match_counters(profile: Profile, ncu: NcuRows, steps: Iterable[int] | None = None) -> CounterJoin:
    """Match every profile kernel to an ncu signature (see the module docstring). ``steps`` restricts which
    kernels are matched and counted in the coverage (default: all)."""
    k = profile.tables["kernels"]
    nk = profile.rows("kernels")
    consider = np.ones(nk, dtype=bool) if steps is None else np.isin(k["step"], np.asarray(list(steps)))
    # ncu signatures: distinct (full name, grid, block, registers, smem)
    n = len(ncu)
    names = [str(x) for x in ncu.kernel_name]
    smem = np.asarray(ncu.smem_bytes)
    sig_rows: dict[tuple, list[int]] = {}
    for i in range(n):
        sig = (names[i], *_key("", ncu.grid[i], ncu.block[i], ncu.registers_per_thread[i], smem[i])[1:])
        sig_rows.setdefault(sig, []).append(i)
    groups = [np.asarray(v, dtype=np.int64) for v in sig_rows.values()]
    group_names = [s[0] for s in sig_rows]
    by_key: dict[tuple, list[int]] = {}
    for gi, sig in enumerate(sig_rows):
        by_key.setdefault((kernel_base_name(sig[0]), *sig[1:]), []).append(gi)
    # profile signatures, matched once per distinct combination
    combo = np.column_stack([k["name_id"], k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"], k["block_y"],
                             k["block_z"], k["registers_per_thread"], k["shared_memory_bytes"]]).astype(np.int64)
    group_of = np.full(nk, -1, dtype=np.int32)
    if nk:
        uniq, inv = np.unique(combo[consider], axis=0, return_inverse=True)
        choice = np.asarray([_choose(profile.name(int(u[0])), u, by_key, group_names, groups) for u in uniq],
                            dtype=np.int32)
        group_of[np.flatnonzero(consider)] = choice[inv.reshape(-1)]
    used = np.zeros(len(groups), dtype=bool)
    used[group_of[group_of >= 0]] = True
    unmatched = np.concatenate([groups[g] for g in np.flatnonzero(~used)]) if (~used).any() else np.zeros(0, int)
    dur = k["dur_ns"].astype(np.int64)
    return CounterJoin(group_of, groups, group_names, np.sort(unmatched), int(dur[group_of >= 0].sum()),
                       int(dur[consider].sum()), int((group_of >= 0).sum()), int(consider.sum()))


def _choose(name: str, u: np.ndarray, by_key: dict[tuple, list[int]], group_names: list[str],
            groups: list[np.ndarray]) -> int:
    """Best ncu signature for one profile signature; -1 when none shares the key. Unknown registers or shared
    memory (-1 in the profile) match any value."""
    base = kernel_base_name(name)
    regs, smem = int(u[7]), int(u[8])
    geo = tuple(int(x) for x in u[1:7])
    cands = by_key.get((base, *geo, regs, smem), [])
    if not cands and (regs < 0 or smem < 0):
        cands = [g for key, gs in by_key.items() if key[0] == base and key[1:7] == geo
                 and (regs < 0 or key[7] == regs) and (smem < 0 or key[8] == smem) for g in gs]
    if not cands:
        return -1
    words = kernel_name_words(name)

    def score(g: int) -> tuple[float, int]:
        other = kernel_name_words(group_names[g])
        return (len(words & other) / max(1, len(words | other)), len(groups[g]))

    best = max(cands, key=score)
    return best if score(best)[0] >= MIN_NAME_SIMILARITY else -1


# --- the counters table --------------------------------------------------------------------------------------
_KEEP = re.compile(
    r"^(smsp__sass_thread_inst_executed_op_\w+_pred_on\.sum(\.per_cycle_elapsed)?|"
    r"sm__sass_thread_inst_executed_op_\w+_pred_on\.sum\.peak_sustained|"
    r"sm__ops_path_tensor_\w+\.sum(\.per_cycle_elapsed|\.peak_sustained)?|sm__inst_executed_pipe_tensor\w*\.sum|"
    r"launch__occupancy_limit_\w+|launch__(registers_per_thread|shared_mem_per_block_\w+|shared_mem_config_size|"
    r"grid_size|block_size|waves_per_multiprocessor|sm_count)|dram__bytes(_read|_write)?\.sum(\.per_second|"
    r"\.peak_sustained)?|[a-z0-9]+__\w+\.avg\.pct_of_peak_sustained_\w+|\w+__cycles_elapsed\.avg\.per_second|"
    r"gpu__time_duration\.sum|sm__maximum_warps_\w+|sm__warps_active\.\w+|l1tex__t_sector_hit_rate\.pct|"
    r"lts__t_sector_hit_rate\.pct)$")


def counter_metric_names(names: Iterable[str]) -> list[str]:
    """The metrics worth keeping per kernel: what :mod:`dnnprof.analysis.bounds` reads, occupancy limits, launch
    geometry, throughput percentages, clocks and peaks (not the ~200 device attributes)."""
    return sorted(n for n in names if _KEEP.match(n))


def fill_counters(profile: Profile, ncu: NcuRows, join: CounterJoin, metrics: Sequence[str] | None = None) -> int:
    """Write ``profile.tables["counters"]``: one row per (kernel launch, metric) for matched launches, with the
    mean of the signature's ncu rows, plus ncu rows that matched nothing (``kernel_row = -1``). Returns rows."""
    names = [m for m in (metrics if metrics is not None else counter_metric_names(ncu.metrics)) if m in ncu.metrics]
    mids = np.asarray([profile.intern(m) for m in names], dtype=np.int32)
    uids = np.asarray([profile.intern(ncu.units.get(m, "")) for m in names], dtype=np.int32)
    vals = np.vstack([np.asarray(ncu.metrics[m], dtype=np.float64) for m in names]).T if names else \
        np.zeros((len(ncu), 0))
    with np.errstate(all="ignore"):
        gmean = np.vstack([_nanmean_rows(vals[g]) for g in join.groups]) if join.groups else np.zeros((0, len(names)))
    kr = np.flatnonzero(join.group_of_kernel >= 0).astype(np.int32)
    nm = len(names)
    rank = profile.tables["kernels"]["rank"]
    parts = {
        "rank": [np.repeat(rank[kr], nm), np.zeros(len(join.unmatched_ncu_rows) * nm, dtype=np.int16)],
        "kernel_row": [np.repeat(kr, nm), np.full(len(join.unmatched_ncu_rows) * nm, -1, dtype=np.int32)],
        "metric_id": [np.tile(mids, len(kr)), np.tile(mids, len(join.unmatched_ncu_rows))],
        "value": [gmean[join.group_of_kernel[kr]].reshape(-1), vals[join.unmatched_ncu_rows].reshape(-1)],
        "unit_id": [np.tile(uids, len(kr)), np.tile(uids, len(join.unmatched_ncu_rows))],
    }
    dtypes = {"rank": np.int16, "kernel_row": np.int32, "metric_id": np.int32, "value": np.float64,
              "unit_id": np.int32}
    table = {c: np.concatenate(v).astype(dtypes[c]) for c, v in parts.items()}
    keep = np.isfinite(table["value"])
    profile.tables["counters"] = {c: v[keep] for c, v in table.items()}
    return int(keep.sum())


def _nanmean_rows(x: np.ndarray) -> np.ndarray:
    ok = np.isfinite(x)
    cnt = ok.sum(axis=0)
    return np.where(cnt > 0, np.where(ok, x, 0.0).sum(axis=0) / np.maximum(cnt, 1), np.nan)


def join_counters(profile: Profile, ncu: NcuRows, steps: Iterable[int] | None = None,
                  metrics: Sequence[str] | None = None) -> CounterJoin:
    """Match and fill in one call; the result says how much GPU time the counters cover."""
    join = match_counters(profile, ncu, steps)
    fill_counters(profile, ncu, join, metrics)
    return join


def counter_metrics(profile: Profile) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Pivot the ``counters`` table: (kernel rows that have counters, metric name → value per such row)."""
    c = profile.tables["counters"]
    mask = c["kernel_row"] >= 0
    kr, mid, val = c["kernel_row"][mask], c["metric_id"][mask], c["value"][mask]
    rows, rinv = np.unique(kr, return_inverse=True)
    mets, minv = np.unique(mid, return_inverse=True)
    mat = np.full((len(rows), len(mets)), np.nan)
    mat[rinv, minv] = val
    return rows.astype(np.int32), {profile.name(int(m)): mat[:, j] for j, m in enumerate(mets)}


def profile_bounds(profile: Profile) -> tuple[np.ndarray, B.KernelBounds]:
    """Bounds for every kernel launch that has counters: (kernel rows, :class:`~bounds.KernelBounds`)."""
    rows, metrics = counter_metrics(profile)
    if not len(rows):
        return rows, B.compute_bounds({B.M_DURATION: np.zeros(0)})
    return rows, B.compute_bounds(metrics)


def ncu_launch_rows(ncu: NcuRows) -> list[dict[str, object]]:
    """One summary row per ncu launch — for an ncu CSV analysed on its own (``dnnprof analyze ncu.csv``): the launch
    geometry plus :meth:`~bounds.KernelBounds.row`, longest first."""
    b = B.compute_bounds(ncu.metrics) if len(ncu) else B.compute_bounds({B.M_DURATION: np.zeros(0)})
    smem = np.asarray(ncu.smem_bytes)
    rows = [{"kernel_name": str(ncu.kernel_name[i]), "grid": [int(x) for x in ncu.grid[i]],
             "block": [int(x) for x in ncu.block[i]], "registers_per_thread": int(ncu.registers_per_thread[i]),
             "shared_memory_bytes": int(smem[i]),
             "duration_ns": float(b.duration_ns[i]) if np.isfinite(b.duration_ns[i]) else None, **b.row(i)}
            for i in range(len(ncu))]
    return sorted(rows, key=lambda r: -(r["duration_ns"] or 0.0))  # type: ignore[operator]
