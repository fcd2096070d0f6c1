"""The Nsight Compute driver: counters for the kernels that matter, over one steady-state step, quickly.

Plan (pure, testable): from a profile's kernel launches in one step, :func:`select_signatures` picks the unique
signatures (name, grid, block, registers, shared memory) that together cover ≥ 95% of GPU time;
:func:`plan_filters` turns them into ncu filters and *predicts* which launches ncu will profile:

* ``--nvtx --nvtx-include "<range>/" --nvtx-push-pop-scope process`` — only the step's NVTX push/pop range. The
  scope matters: push/pop ranges are per thread by default, and PyTorch launches backward kernels from its
  autograd thread, so a thread-scoped "step3/" silently drops the whole backward pass.
* ``--kernel-name-base demangled`` and a name regex built from patterns — a kernel's base name followed by a few
  distinctive template-argument words (ncu and Kineto print parameters and namespaces differently, ``T2 *`` vs
  ``long*``, so parameters and qualifiers are never used). By default the regex *excludes* the kernels not wanted
  (``^(?!.*(p1|p2|…))``, :data:`FILTER_MODES`): an include regex silently missed some cuBLAS and cuDNN kernels on
  an H100, an exclude regex can only let a kernel through that was not wanted.
* a launch limit (:data:`STRATEGIES`): by default ``--kernel-id ::regex:…:1 --filter-mode per-launch-config``, the
  first launch of every (kernel, launch configuration) in the range; the plan then drops whole kernels whose
  coverage the other profiled launches already bring (``prune``).

Run (:func:`run_ncu`): one subprocess with a timeout, ``--clock-control none`` (ncu's default locks clocks at
base, up to 32% slower on an H200), ``--csv --page raw`` into a log file. Failures never raise: the result
carries a status and a message (ncu not found, ERR_NVGPUCTRPERM and how to fix it, unsupported GPU, nothing
matched, timeout, application error).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from dnnprof.ingest.ncu_csv import PERMISSION_HELP, NcuFormatError, NcuTable, ncu_install_dirs, read_ncu_csv
from dnnprof.model.profile import Profile
from dnnprof.model.sol_metrics import MEMORY_THROUGHPUT_PARTS, SM_THROUGHPUT_PARTS

_COMMON_METRICS = (
    "dram__bytes.sum", "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second",
    "sm__cycles_elapsed.avg.per_second",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
    "launch__waves_per_multiprocessor",
    *(f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum" for p in "dfh" for op in ("add", "mul", "fma")),
    *(f"sm__sass_thread_inst_executed_op_{p}fma_pred_on.sum.peak_sustained" for p in "dfh"),
)
#: What every capture asks for on sm_90 (names verified there with Nsight Compute 2025.3): the *parts* of the two
#: speed-of-light throughputs (:mod:`dnnprof.model.sol_metrics`), whose maximum is ncu's throughput. Replay passes
#: per launch (``benchmarks/gpu/ncu_pass_counts.py``, H100/H200): the parts 5 (4 on an H200 for 13 of them), where
#: ncu's two top-level throughputs cost 10; duration, DRAM bytes, clocks, occupancy and waves 1; the SASS FLOP
#: counters 1; the tensor-core counters below 7; all together 12 (17 with the top-level throughputs). Every pass of
#: a launch after the first restores all the device memory the process holds (5.6 GB for a 4-layer GPT-2 step).
NCU_METRICS = ("gpu__time_duration.sum", *SM_THROUGHPUT_PARTS, *MEMORY_THROUGHPUT_PARTS, *_COMMON_METRICS)
#: Other architectures keep ncu's own two throughputs: some parts (``sm__pipe_fmaheavy…``) are not on every one,
#: and a metric ncu does not know fails the whole pass.
NCU_METRICS_PORTABLE = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", *_COMMON_METRICS)
#: Tensor-core work and dense peaks on sm_90 (Hopper). Other architectures get the tensor roofline section.
NCU_TENSOR_METRICS_SM90 = (
    "sm__ops_path_tensor_src_fp64.sum", "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp16.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum", "sm__ops_path_tensor_src_fp8_sparsity_on.sum",
    "sm__ops_path_tensor_src_int8.sum",
    "sm__ops_path_tensor_src_fp64.sum.peak_sustained", "sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained",
    *(f"sm__ops_path_tensor_op_hgmma_src_{t}_sparsity_off.sum.peak_sustained"
      for t in ("bf16_dst_fp32", "fp16", "tf32_dst_fp32")),
)
NCU_TENSOR_SECTION = "SpeedOfLight_HierarchicalTensorRooflineChart"
DEFAULT_COVERAGE = 0.95
MAX_PATTERN_WORDS = 3

NCU_GLOBS = ("/usr/local/cuda*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu",
             "/usr/local/NVIDIA-Nsight-Compute*/ncu")


# --- launches and signatures -----------------------------------------------------------------------------------
@dataclass
class LaunchSequence:
    """Kernel launches of one step in launch order (what ncu will see inside the NVTX range)."""

    names: np.ndarray  # object (str)
    grid: np.ndarray  # (n, 3)
    block: np.ndarray  # (n, 3)
    registers: np.ndarray  # (n,)
    smem_bytes: np.ndarray  # (n,) static + dynamic
    dur_ns: np.ndarray  # (n,)

    def __len__(self) -> int:
        return int(self.dur_ns.shape[0])

    @classmethod
    def from_profile(cls, profile: Profile, step: int | None = None, rank: int = 0) -> LaunchSequence:
        """The launches of ``step`` (all steps when None) of one rank, ordered by CUPTI correlation id."""
        k = profile.tables["kernels"]
        m = k["rank"] == rank
        if step is not None:
            m &= k["step"] == step
        idx = np.flatnonzero(m)
        idx = idx[np.lexsort((k["start_ns"][idx], k["correlation"][idx]))]
        return cls(profile.names(k["name_id"][idx]),
                   np.column_stack([k["grid_x"], k["grid_y"], k["grid_z"]])[idx],
                   np.column_stack([k["block_x"], k["block_y"], k["block_z"]])[idx],
                   k["registers_per_thread"][idx].astype(np.int64), k["shared_memory_bytes"][idx].astype(np.int64),
                   k["dur_ns"][idx].astype(np.int64))

    def signature_ids(self) -> tuple[np.ndarray, list[tuple]]:
        """(signature index per launch, the signatures as (name, grid, block, registers, smem) tuples)."""
        sigs: dict[tuple, int] = {}
        ids = np.empty(len(self), dtype=np.int64)
        for i in range(len(self)):
            key = (str(self.names[i]), tuple(int(x) for x in self.grid[i]), tuple(int(x) for x in self.block[i]),
                   int(self.registers[i]), int(self.smem_bytes[i]))
            ids[i] = sigs.setdefault(key, len(sigs))
        return ids, list(sigs)


@dataclass(frozen=True)
class Signature:
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    smem_bytes: int
    total_ns: int
    launches: int


@dataclass
class Selection:
    """The signatures chosen for counters, heaviest first, and the share of GPU time they cover."""

    signatures: list[Signature]
    covered_ns: int
    total_ns: int
    unique_signatures: int
    target: float

    @property
    def coverage(self) -> float:
        return self.covered_ns / self.total_ns if self.total_ns else 0.0


def select_signatures(seq: LaunchSequence, coverage: float = DEFAULT_COVERAGE) -> Selection:
    """The fewest signatures, by total GPU time, whose launches add up to ``coverage`` of the step's kernel time."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must be in (0, 1], got {coverage}")
    ids, sigs = seq.signature_ids()
    total = np.bincount(ids, weights=seq.dur_ns, minlength=len(sigs)) if len(seq) else np.zeros(0)
    count = np.bincount(ids, minlength=len(sigs)) if len(seq) else np.zeros(0, dtype=int)
    order = np.argsort(-total, kind="stable")
    grand = float(total.sum())
    chosen: list[Signature] = []
    acc = 0.0
    for s in order:
        if grand and acc >= coverage * grand:
            break
        name, g, b, r, sm = sigs[s]
        chosen.append(Signature(name, g, b, r, sm, int(total[s]), int(count[s])))
        acc += total[s]
    return Selection(chosen, int(acc), int(grand), len(sigs), coverage)


# --- kernel-name filters ---------------------------------------------------------------------------------------
_ANON = re.compile(r"\(anonymous namespace\)|<unnamed>|\{anonymous\}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATTERN_STOP = frozenset({
    "at", "native", "cuda", "anon_ns", "std", "c10", "detail", "void", "const", "volatile", "unsigned", "signed",
    "operator", "lambda", "instance", "true", "false", "float", "double", "long", "short", "char", "bool", "half",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t", "array"})


_B = "(^|[^A-Za-z0-9_])"  # identifier boundary without ':' (kernel-id fields are ':'-separated)


def _head(name: str) -> str:
    s = _ANON.sub("anon_ns", name.strip())
    s = s[5:] if s.startswith("void ") else s
    depth = 0
    for i, ch in enumerate(s):
        depth += ch in "<[{"
        depth -= ch in ">]}"
        if ch == "(" and depth <= 0:
            return s[:i].strip()
    return s


def base_name(name: str) -> str:
    """Function name without namespaces, template arguments or parameters (ncu's ``function`` name base)."""
    head = _head(name)
    lt = head.find("<")
    return (head[:lt] if lt >= 0 else head).rsplit("::", 1)[-1].strip() or name.strip()


_CAST = re.compile(r"\([A-Za-z_][\w:]*\)(?=-?\d)")


def _template_words(targs: str) -> list[str]:
    """Identifiers of a template-argument list without namespace qualifiers (``a::b::name`` → ``name``: ncu drops
    or shortens namespaces) and without enum casts (Kineto's ``(cub::SortOrder)0`` is ncu's ``0``)."""
    targs = _CAST.sub("", targs)
    return [m.group(0) for m in _IDENT.finditer(targs) if not targs.startswith("::", m.end())]


def kernel_name_pattern(name: str, name_base: str = "demangled", max_words: int = MAX_PATTERN_WORDS) -> str:
    """A regex selecting this kernel in ncu's ``--kernel-name-base`` form that also matches the Kineto name.

    ``demangled``: ``(^|[^A-Za-z0-9_])vectorized_elementwise_kernel<.*tanh_kernel_cuda.*TensorIteratorBase`` —
    base name then up to ``max_words`` template-argument words in order (no namespaces, keywords, plain types or
    numbers, which the two tools print differently: ``2ul``/``2``, ``false``/``0``). ``function``:
    ``(^|[^A-Za-z0-9_])base$``. Patterns contain no ':' so they also fit ``--kernel-id ::regex:…:N``.
    """
    base = base_name(name)
    if name_base == "function":
        return f"{_B}{re.escape(base)}$"
    head = _head(name)
    lt = head.find("<")
    words: list[str] = []
    for w in _template_words(head[lt:] if lt >= 0 else ""):
        if w not in _PATTERN_STOP and len(w) >= 4 and not re.fullmatch(r"T\d+", w) and w not in words:
            words.append(w)
    if not words:
        return f"{_B}{re.escape(base)}([<(]|$)"
    return f"{_B}{re.escape(base)}<.*" + ".*".join(re.escape(w) for w in words[:max_words])


#: Filter strategies. "name": every launch whose name passes the filter; "per-launch-config": the first K
#: launches of each launch configuration (grid, block, shared memory) among them; "first-invocation":
#: ``--kernel-id ::regex:…:1``, the first launch of every kernel; "first-per-config": the same under
#: ``--filter-mode per-launch-config``, i.e. one launch per (kernel, configuration) — measured on an H100
#: (benchmarks/gpu/ncu_gpt2_counters.py, exclude filter): 71 launches profiled where 68 were predicted (ncu took a
#: second launch of 4 cuBLAS/cuDNN kernels and skipped one that shared its configuration with another).
STRATEGIES = ("name", "per-launch-config", "first-invocation", "first-per-config")
AUTO_STRATEGIES = ("first-per-config", "per-launch-config", "name")
#: Name-filter modes. "include": one alternative per wanted kernel. "exclude": every kernel *except* those not
#: wanted (``^(?!.*(p1|p2|…))``). On an H100, ncu's include filter silently skipped some cuBLAS (nvjet …coopA/B…)
#: and cuDNN SDPA kernels that every other filter profiled, losing 2.6% of the step's GPU time; an exclude filter
#: fails safe: a kernel it does not recognise is profiled (one launch too many), never lost.
FILTER_MODES = ("exclude", "include")
#: Exclusion patterns use more template words than inclusion ones, so that they do not hit a wanted kernel.
EXCLUDE_PATTERN_WORDS = 8
#: Pruning keeps the predicted coverage this far above the target: on an H100, ncu skipped one predicted cuBLAS
#: launch (0.6% of the step) whose launch configuration another selected kernel shared.
PRUNE_MARGIN = 0.01


@dataclass
class FilterPlan:
    """ncu filter options and what they are predicted to profile in the recorded launch order."""

    strategy: str
    kernel_regex: str  # without the "regex:" prefix; "" = no name filter
    name_base: str
    launch_count: int | None
    profiled: np.ndarray  # launch indexes predicted to be profiled
    predicted_coverage: float  # share of GPU time whose signature gets counters
    missed_signatures: int  # selected signatures the filter is predicted not to reach
    selection: Selection
    mode: str = "include"
    kernels: int = 0  # kernel names the filter lets through (in the recorded step)

    def options(self) -> list[str]:
        out: list[str] = []
        if self.strategy.startswith("first-"):
            out += ["--kernel-name-base", self.name_base, "--kernel-id", f"::regex:{self.kernel_regex or '.*'}:1"]
        elif self.kernel_regex:
            out += ["--kernel-name-base", self.name_base, "--kernel-name", f"regex:{self.kernel_regex}"]
        if self.strategy in ("per-launch-config", "first-per-config"):
            out += ["--filter-mode", "per-launch-config"]
        if self.launch_count is not None:
            out += ["--launch-count", str(self.launch_count)]
        return out


def _predict(seq: LaunchSequence, matched: np.ndarray, strategy: str, k: int = 1) -> np.ndarray:
    """Launch indexes ncu profiles under ``strategy`` given the launches its name filter matches (in order)."""
    if strategy == "name":
        return matched
    seen: dict[tuple, int] = {}
    out: list[int] = []
    for i in matched.tolist():
        cfg = (*seq.grid[i].tolist(), *seq.block[i].tolist(), int(seq.smem_bytes[i]))
        key = {"per-launch-config": cfg, "first-invocation": (str(seq.names[i]),),
               "first-per-config": (str(seq.names[i]), *cfg)}[strategy]
        if seen.get(key, 0) < k:
            seen[key] = seen.get(key, 0) + 1
            out.append(i)
    return np.asarray(out, dtype=np.int64)


class _NameFilters:
    """Name filters over one step's kernel names, with each pattern's matches computed once."""

    def __init__(self, names: list[str], mode: str, name_base: str) -> None:
        self.mode, self.name_base = mode, name_base
        self.names = list(dict.fromkeys(names))
        words = EXCLUDE_PATTERN_WORDS if mode == "exclude" and name_base != "function" else MAX_PATTERN_WORDS
        self.pattern = {n: kernel_name_pattern(n, name_base, words) for n in self.names}
        keys = [base_name(n) if name_base == "function" else n for n in self.names]
        self.hits = {p: frozenset(n for n, k in zip(self.names, keys, strict=True) if re.search(p, k))
                     for p in dict.fromkeys(self.pattern.values())}

    def build(self, wanted: set[str]) -> tuple[str, set[str]]:
        """(regex, the step's names it lets through) for the ``wanted`` kernel names."""
        if self.mode == "include":
            pats = list(dict.fromkeys(self.pattern[n] for n in self.names if n in wanted))
            through = set().union(*(self.hits[p] for p in pats)) if pats else set()
            return "|".join(f"({p})" for p in pats), through
        # exclude: one pattern per unwanted name, kept only when it hits no wanted name
        pats = list(dict.fromkeys(self.pattern[n] for n in self.names if n not in wanted))
        pats = [p for p in pats if not (self.hits[p] & wanted)]
        out = set(self.names).difference(*(self.hits[p] for p in pats))
        if not pats:
            return "", out
        return "^(?!.*(" + "|".join(f"({p})" for p in pats) + "))", out


def plan_filters(seq: LaunchSequence, selection: Selection, strategy: str = "auto", name_base: str = "demangled",
                 max_launch_count: int = 32, mode: str = "exclude", prune: bool = True) -> FilterPlan:
    """Filters for the selected signatures and their predicted effect; "auto" takes the candidate of
    :data:`AUTO_STRATEGIES` that reaches every selected signature with the fewest profiled launches.

    A name filter lets whole kernels through, so launches of unselected signatures of a selected kernel are
    profiled too and add coverage; with ``prune`` the plan then drops selected kernels, cheapest coverage first,
    while the predicted coverage stays at or above the selection's target plus :data:`PRUNE_MARGIN`."""
    if strategy != "auto" and strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected auto or one of {', '.join(STRATEGIES)}")
    if mode not in FILTER_MODES:
        raise ValueError(f"unknown filter mode {mode!r}; expected one of {', '.join(FILTER_MODES)}")
    ids, sigs = seq.signature_ids()
    index = {s: i for i, s in enumerate(sigs)}
    wanted_sigs = {index[(s.name, s.grid, s.block, s.registers, s.smem_bytes)] for s in selection.signatures}
    names = [str(n) for n in seq.names]
    dur = seq.dur_ns.astype(np.float64)
    total = float(dur.sum())
    filters = _NameFilters(names, mode, name_base)

    def build(wanted: set[str], strat: str) -> tuple[str, set[str], int | None, np.ndarray]:
        regex, through = filters.build(wanted)
        matched = np.flatnonzero([n in through for n in names]).astype(np.int64)
        if strat != "per-launch-config":
            return regex, through, None, _predict(seq, matched, strat)
        need = {i for i in wanted_sigs if sigs[i][0] in wanted}
        for k in range(1, max_launch_count + 1):  # smallest K that reaches every wanted signature
            prof = _predict(seq, matched, strat, k)
            if need <= set(ids[prof].tolist()) or k == max_launch_count:
                return regex, through, k, prof
        raise AssertionError("unreachable")

    def coverage(prof: np.ndarray) -> float:
        reached = np.unique(ids[prof]) if len(prof) else np.zeros(0, dtype=np.int64)
        return float(dur[np.isin(ids, reached)].sum()) / total if total else 0.0

    wanted_names = {sigs[i][0] for i in wanted_sigs}
    candidates = []
    for strat in (AUTO_STRATEGIES if strategy == "auto" else (strategy,)):
        regex, through, count, prof = build(wanted_names, strat)
        candidates.append((len(wanted_sigs - set(ids[prof].tolist())), len(prof), strat, wanted_names, regex,
                           through, count, prof))
    missed, _, strat, wanted, regex, through, count, prof = min(candidates, key=lambda c: c[:2])
    floor = min(selection.target + PRUNE_MARGIN, coverage(prof))
    if prune and missed == 0 and len(prof):
        # drop whole kernels, least GPU time per profiled launch first, while coverage holds
        per_name: dict[str, list[float]] = {}
        for i in prof.tolist():
            per_name.setdefault(names[i], [0.0, 0.0])[1] += 1
        for i, n in enumerate(names):
            if n in per_name:
                per_name[n][0] += dur[i]
        for n in sorted(per_name, key=lambda n: per_name[n][0] / per_name[n][1]):
            if n not in wanted:
                continue
            trial = build(wanted - {n}, strat)
            if coverage(trial[3]) >= floor and len(trial[3]) < len(prof):
                wanted = wanted - {n}
                regex, through, count, prof = trial
    reached = set(ids[prof].tolist()) if len(prof) else set()
    return FilterPlan(strat, regex, name_base, count, prof, coverage(prof),
                      len({i for i in wanted_sigs if sigs[i][0] in wanted} - reached), selection, mode,
                      len(through))


# --- the command -----------------------------------------------------------------------------------------------
def find_ncu(path: str | None = None, globs: Sequence[str] = NCU_GLOBS) -> str | None:
    """``$DNNPROF_NCU``, ``ncu`` on PATH, then the usual install places (newest last); None when absent."""
    env = os.environ.get("DNNPROF_NCU")
    if env and os.access(env, os.X_OK):
        return env
    on_path = shutil.which("ncu", path=path)
    if on_path:
        return on_path
    hits = [p for g in globs for p in sorted(glob.glob(g)) if os.access(p, os.X_OK)]
    if not hits:
        hits = [str(d / "ncu") for d in ncu_install_dirs() if os.access(d / "ncu", os.X_OK)]
    return hits[-1] if hits else None


@lru_cache(maxsize=8)
def ncu_help(ncu: str) -> str:
    """``ncu --help`` text ("" when it cannot run), to check for options older versions lack."""
    try:
        return subprocess.run([ncu, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def metrics_for(compute_capability: str | None) -> tuple[list[str], list[str]]:
    """(``--metrics`` names, ``--section`` identifiers) for a GPU's compute capability ("9.0")."""
    if compute_capability == "9.0":
        return [*NCU_METRICS, *NCU_TENSOR_METRICS_SM90], []
    return list(NCU_METRICS_PORTABLE), [NCU_TENSOR_SECTION]


def build_ncu_command(ncu: str, target: Sequence[str], log_path: str | os.PathLike[str], *,
                      nvtx_range: str | None = "step3", plan: FilterPlan | None = None,
                      compute_capability: str | None = "9.0", clock_control: str = "none",
                      cache_control: str = "all", process_scope: bool = True, extra: Sequence[str] = ()) -> list[str]:
    """The ncu command line for ``target`` (the workload's argv). ``plan=None`` profiles every kernel in the range;
    ``process_scope`` adds ``--nvtx-push-pop-scope process`` (Nsight Compute 2024.2+; see the module docstring)."""
    metrics, sections = metrics_for(compute_capability)
    cmd = [ncu, "--target-processes", "all", "--clock-control", clock_control, "--cache-control", cache_control]
    if nvtx_range:
        cmd += ["--nvtx", "--nvtx-include", f"{nvtx_range}/"]
        if process_scope:
            cmd += ["--nvtx-push-pop-scope", "process"]
    cmd += ["--metrics", ",".join(metrics), "--disable-extra-suffixes"]
    for s in sections:
        cmd += ["--section", s]
    if plan is not None:
        cmd += plan.options()
    cmd += [*extra, "--csv", "--page", "raw", "--print-units", "base", "--log-file", str(log_path), *target]
    return cmd


# --- running -----------------------------------------------------------------------------------------------------
@dataclass
class NcuRunResult:
    """What happened; ``table`` is set only when ``status == "ok"``."""

    status: str  # ok | ncu-not-found | permission | unsupported-gpu | no-kernels | timeout | failed
    message: str
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    wall_s: float = 0.0
    log_path: str = ""
    table: NcuTable | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def classify_ncu_output(text: str, returncode: int | None) -> tuple[str, str]:
    """(status, message) from ncu's console/log text and exit code, before the CSV is even looked at."""
    errors = [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]
    if "ERR_NVGPUCTRPERM" in text:
        return "permission", PERMISSION_HELP
    unsupported = next((e for e in errors if "not supported on" in e or "not supported by" in e), None)
    if unsupported:
        return "unsupported-gpu", (f"this Nsight Compute cannot profile the GPU ({unsupported[10:].strip()}); a newer "
                                   "release may (see 'ncu --list-chips'), or use --no-counters")
    if "No kernels were profiled" in text:
        return "no-kernels", ("ncu profiled no kernel: the NVTX range or the kernel-name filter matched nothing "
                              "(is the step wrapped in the expected NVTX push/pop range?)")
    if errors and returncode not in (0, None):
        return "failed", f"ncu failed (exit {returncode}): {errors[-1][10:].strip()}"
    if returncode not in (0, None):
        tail = " | ".join(ln.strip() for ln in text.splitlines()[-3:] if ln.strip())
        return "failed", f"ncu exited with code {returncode}: {tail or 'no output'}"
    return "ok", ""


def run_ncu(cmd: Sequence[str], log_path: str | os.PathLike[str], timeout_s: float = 600.0,
            env: dict[str, str] | None = None, cwd: str | None = None) -> NcuRunResult:
    """Run an ncu command line (from :func:`build_ncu_command`), parse its CSV log; never raises for ncu trouble."""
    cmd, log = list(cmd), Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                                start_new_session=True, errors="replace")
    except FileNotFoundError:
        return NcuRunResult("ncu-not-found", f"{cmd[0]}: not found; install Nsight Compute or set DNNPROF_NCU",
                            cmd, None, 0.0, str(log))
    except PermissionError:
        return NcuRunResult("ncu-not-found", f"{cmd[0]}: not executable", cmd, None, 0.0, str(log))
    try:
        console, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return NcuRunResult("timeout", f"ncu did not finish within {timeout_s:.0f} s and was stopped", cmd,
                            None, time.monotonic() - t0, str(log))
    wall = time.monotonic() - t0
    text = (log.read_text(errors="replace") if log.is_file() else "") + "\n" + (console or "")
    status, message = classify_ncu_output(text, proc.returncode)
    has_csv = log.is_file() and '"ID",' in text
    if status != "ok" and not (status == "failed" and has_csv):
        return NcuRunResult(status, message, cmd, proc.returncode, wall, str(log))
    try:
        table = read_ncu_csv(log)
    except NcuFormatError as e:
        return NcuRunResult("failed", f"ncu ran but its CSV could not be read: {e}", cmd, proc.returncode, wall,
                            str(log))
    note = f"; note: {message}" if message else ""
    return NcuRunResult("ok", f"profiled {len(table)} kernel launches in {wall:.1f} s{note}", cmd,
                        proc.returncode, wall, str(log), table)


#: Replay cost of one profiled launch with dnnprof's sm_90 metric list (12 passes), measured on an H100 with GPT-2's
#: kernels: 335–360 ms (benchmarks/RESULTS.md). Only for telling the user what to expect.
SECONDS_PER_PROFILED_LAUNCH = 0.35


def plan_message(plan: FilterPlan) -> str:
    """One line on what ncu is about to do and roughly how long its replays take."""
    n, k = len(plan.profiled), plan.kernels
    secs = n * SECONDS_PER_PROFILED_LAUNCH
    return (f"ncu will profile about {n} kernel launch{'es' if n != 1 else ''} ({k} kernel name{'s' if k != 1 else ''}, "
            f"{100 * plan.predicted_coverage:.1f}% of the step's GPU time): roughly {secs:.{0 if secs >= 10 else 1}f} s "
            "of replay once the program reaches that step")


def collect_counters(target: Sequence[str], seq: LaunchSequence, log_path: str | os.PathLike[str], *,
                     nvtx_range: str = "step3", coverage: float = DEFAULT_COVERAGE,
                     compute_capability: str | None = "9.0", timeout_s: float = 600.0, ncu: str | None = None,
                     env: dict[str, str] | None = None, cwd: str | None = None,
                     on_plan: Callable[[FilterPlan], None] | None = None) -> tuple[NcuRunResult, FilterPlan | None]:
    """Select, plan, build and run in one call. ``target`` must run the workload with ``seq``'s step wrapped in an
    NVTX push/pop range named ``nvtx_range``; ``on_plan`` sees the plan before ncu starts. Returns the run result
    and the plan (None when ncu is missing)."""
    exe = ncu or find_ncu()
    if exe is None:
        return NcuRunResult("ncu-not-found", "Nsight Compute (ncu) not found on PATH, in /usr/local/cuda*/bin or "
                            "/opt/nvidia/nsight-compute/*; install it or set DNNPROF_NCU"), None
    plan = plan_filters(seq, select_signatures(seq, coverage))
    if on_plan is not None:
        on_plan(plan)
    scope = "--nvtx-push-pop-scope" in ncu_help(exe) or not ncu_help(exe)
    cmd = build_ncu_command(exe, target, log_path, nvtx_range=nvtx_range, plan=plan,
                            compute_capability=compute_capability, process_scope=scope)
    return run_ncu(cmd, log_path, timeout_s=timeout_s, env=env, cwd=cwd), plan
