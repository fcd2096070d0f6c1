"""What rules look at: the analysed profile, the summary document, the device, and lazily built helpers.

Everything expensive (the idle-gap timeline, theoretical occupancy) is computed once, on first use, so a rule
that does not need it costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property
from typing import Any

import numpy as np

from dnnprof.analysis.attribution import op_label
from dnnprof.analysis.intervals import merge, union_ns
from dnnprof.analysis.kernel_summary import KernelRow
from dnnprof.analysis.summary import Analysis
from dnnprof.model.device import DeviceInfo
from dnnprof.model.gpu_specs import GpuSpec, lookup_gpu
from dnnprof.model.mapped_columns import release_pages, release_pages_of
from dnnprof.model.profile import Profile
from dnnprof.model.schema import OP_CATEGORIES

#: Ops that only move data between host and device; evidence names the op above them (``aten::ctc_loss``).
PLUMBING_OPS = frozenset({
    "aten::copy_", "aten::_to_copy", "aten::to", "aten::_local_scalar_dense", "aten::item", "aten::is_nonzero",
    "aten::cpu", "aten::_pin_memory", "aten::pin_memory", "aten::contiguous", "aten::clone", "aten::tolist",
})
_STEP_LIKE = ("ProfilerStep#", "dnnprof.step", "## ")
#: Unprofiled steps before and after the profiled ones that differ by more than this factor give no measure of the
#: capture's cost (the run was still warming up or changed pace; ``dnnprof run`` says so too).
UNSTEADY_BASELINE_RATIO = 1.25
#: Kernel rows :meth:`Context.busy_ns` reads at a time.
_BLOCK_ROWS = 1 << 20
_PY_FRAME = re.compile(r"^(?P<file>[^()]+\.py)\((?P<line>\d+)\): (?P<func>.+)$")
_LIBRARY_PATHS = ("site-packages", "dist-packages", "/torch/", "\\torch\\", "<frozen", "/lib/python", "threading.py")

#: Run settings a trace can carry: ``prof.add_metadata_json("dnnprof_run", json.dumps({...}))`` puts them in
#: the trace; the summary document may carry them under ``meta``; the file name may carry a token (see
#: :data:`FILE_NAME_FLAGS`).
RUN_META_KEYS = ("dnnprof_run", "run", "meta")
#: File-name tokens that record a setting when nothing else does: ``…cudnn-benchmark-off…`` → False.
FILE_NAME_FLAGS = {
    "cudnn_benchmark": (("cudnn-benchmark-on", True), ("cudnn-benchmark-off", False)),
}


class Context:
    """One rank of one profile, analysed, as the rules see it."""

    def __init__(self, analysis: Analysis, doc: dict[str, Any] | None) -> None:
        """``doc``: the summary document, or None until it is made (:meth:`with_doc`; meanwhile only what rests on
        the analysis alone may be asked for: reading the document raises)."""
        self.a = analysis
        self.doc: dict[str, Any] = _NoDocYet() if doc is None else doc
        self.profile: Profile = analysis.profile
        self.rank = analysis.rank
        self.kernels: list[KernelRow] = analysis.kernels
        self.util = analysis.utilization

    def with_doc(self, doc: dict[str, Any]) -> Context:
        """This context, its summary document now made."""
        self.doc = doc
        return self

    # --- sizes -----------------------------------------------------------------------------------------------
    @cached_property
    def window_ns(self) -> int:
        """Step time: the sum of the GPU-side step windows (the whole GPU span when there are no steps)."""
        return self.util.total("window_ns")

    @cached_property
    def n_windows(self) -> int:
        return max(1, len(self.util.steps))

    @cached_property
    def has_steps(self) -> bool:
        return not self.util.whole_trace

    @cached_property
    def kernel_step(self) -> np.ndarray:
        return self.profile.tables["kernels"]["step"]

    def in_window_ns(self, rows: np.ndarray) -> int:
        """Kernel time of ``rows`` that belongs to a step (all of it when the profile has no steps)."""
        k = self.profile.tables["kernels"]
        d = k["dur_ns"][rows]
        if self.has_steps:
            d = d[k["step"][rows] >= 0]
        return int(d.sum())

    def busy_ns(self, rows: list[KernelRow]) -> int:
        """Wall time the launches of ``rows`` occupy inside the steps: the union of their intervals. Kernels that
        run at the same time on several streams (a bidirectional RNN's two directions, compute beside NCCL) count
        once here, where their summed durations count them twice."""
        if not rows:
            return 0
        k = self.profile.tables["kernels"]
        idx = np.concatenate([r.rows for r in rows])
        idx.sort()  # in row order: a reader's kernels are in order of start, so the union needs no sort of its own
        release_pages()  # a big trace's kernel columns, read by the rule before: none resident when the blocks start

        def intervals(block_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for a in range(0, idx.size, block_rows):
                i = idx[a:a + block_rows]
                if self.has_steps:
                    i = i[k["step"][i] >= 0]
                start = k["start_ns"][i].astype(np.int64)
                yield start, start + k["dur_ns"][i].astype(np.int64)
                release_pages_of(k["step"], k["start_ns"], k["dur_ns"])

        total = union_ns(intervals(_BLOCK_ROWS))  # a big trace's kernels are millions: a block at a time
        if total is None:  # not in order of start (a table not from a reader): the whole union at once
            s, e = merge(*next(intervals(max(idx.size, 1))), spend_ends=True)
            total = int((e - s).sum())
        return total

    def overlap_evidence(self, factor: float) -> dict[str, float]:
        """``{"overlap_factor": …}`` for a finding's evidence when kernels overlapped, else nothing."""
        return {} if factor >= 1.0 else {"overlap_factor": round(factor, 3)}

    def overlap_factor(self, rows: list[KernelRow]) -> float:
        """:meth:`busy_ns` over the summed kernel time of ``rows`` (1.0 when none of them overlap): what a gain
        computed from summed kernel time is scaled by, so that it is a share of wall time, never above it."""
        total = sum(self.in_window_ns(r.rows) for r in rows)
        return min(1.0, self.busy_ns(rows) / total) if total else 1.0

    @cached_property
    def kernel_ns(self) -> int:
        """Kernel time inside the step windows."""
        return int(sum(self.in_window_ns(r.rows) for r in self.kernels))

    # --- device ----------------------------------------------------------------------------------------------
    @cached_property
    def device(self) -> DeviceInfo | None:
        p = self.profile
        return p.device(self.util.device, self.rank) or (p.devices[0] if p.devices else None)

    @cached_property
    def spec(self) -> GpuSpec | None:
        """Datasheet peaks of the device, when the GPU is in the spec table."""
        dev = self.device
        name = dev.name if dev else str(self.doc.get("device", {}).get("name") or "")
        mem = dev.memory_bytes if dev and dev.memory_bytes > 0 else None
        return lookup_gpu(name, mem) if name else None

    @cached_property
    def sm_count(self) -> int | None:
        dev = self.device
        if dev and dev.sm_count > 0:
            return dev.sm_count
        n = self.doc.get("device", {}).get("sm_count")
        if isinstance(n, int) and n > 0:
            return n
        return self.spec.sm_count if self.spec else None

    @cached_property
    def vendor(self) -> str:
        """``"nvidia"``, ``"amd"``, ``"meta"`` or ``""`` (unknown): who made the device, as ingest read it."""
        return str(self.doc.get("device", {}).get("vendor") or (self.device.vendor if self.device else ""))

    @cached_property
    def compute_major(self) -> int | None:
        dev = self.device
        if dev and dev.compute_major >= 0:
            return dev.compute_major
        cc = str(self.doc.get("device", {}).get("compute_capability") or "")
        return int(cc.split(".")[0]) if cc.split(".")[0].isdigit() else None

    # --- what the capture itself cost -------------------------------------------------------------------------
    @cached_property
    def capture_cost(self) -> dict[str, Any] | None:
        """The run's own measure of the profiler's cost, when the profile comes from ``dnnprof run``/``profile``:
        the median step in the timed window against the median of the unprofiled steps of the same process
        (``meta["capture"]["overhead"]``). None for a trace without that measure or without enough steps."""
        o = (self.profile.meta.get("capture") or {}).get("overhead") or {}
        base = (o.get("baseline") or {}).get("median_us")
        timed = (o.get("profiled") or {}).get("median_us")
        if not base or not timed or base <= 0 or timed <= 0:
            return None
        before = (o.get("baseline_before") or {}).get("median_us")
        after = (o.get("baseline_after") or {}).get("median_us")
        if before and after and max(before, after) / min(before, after) > UNSTEADY_BASELINE_RATIO:
            return None  # still warming up, or changing pace: the unprofiled steps are no measure
        return {"unprofiled_step_us": round(float(base), 1), "profiled_step_us": round(float(timed), 1),
                "added_us_per_step": round(max(0.0, float(timed) - float(base)), 1),
                "unprofiled_steps": int((o.get("baseline") or {}).get("count") or 0)}

    def net_of_capture(self, idle_ns: int) -> tuple[int, int] | None:
        """``(idle, window)`` in ns with the capture's added step time taken out of both, or None without a measure.

        Where the host sets the pace, what the profiler adds to each launch shows up as GPU idle time, so the idle
        time a fix can recover is at most the measured idle minus the time the capture added to each step, and
        the step it is a share of is the unprofiled one."""
        cost = self.capture_cost
        if cost is None or not cost["added_us_per_step"]:
            return None
        added = int(cost["added_us_per_step"] * 1000) * self.n_windows
        return max(0, idle_ns - added), max(1, self.window_ns - added)

    # --- lazily built analyses --------------------------------------------------------------------------------
    @cached_property
    def timeline(self) -> Any:
        from dnnprof.analysis.rules.timeline import build_timeline

        return build_timeline(self)

    @cached_property
    def doc_kernels(self) -> dict[str, dict[str, Any]]:
        """The summary's per-kernel entries by full name (they carry occupancy/counter keys when measured)."""
        return {k.get("name", ""): k for k in self.doc.get("kernels", []) if isinstance(k, dict)}

    # --- ops -------------------------------------------------------------------------------------------------
    @cached_property
    def op_name_set(self) -> list[str]:
        """The ops' distinct names, in id order ("" last when an op has none); a big trace's ops are tens of
        millions of rows, a column of their names as many objects."""
        return self.profile.distinct_names(self.profile.tables["ops"]["name_id"])

    def raw_op_name(self, row: int) -> str:
        """The name op ``row`` has in the trace; "" for -1."""
        return self.profile.name(int(self.profile.tables["ops"]["name_id"][row])) if row >= 0 else ""

    def op_name(self, row: int) -> str:
        """The name of op ``row`` as evidence shows it (dnnprof's module ranges as their layer); "" for -1."""
        return op_label(self.raw_op_name(row))

    def plumbing_top(self, row: int) -> int:
        """The outermost op of the chain of data-movement ops (``aten::to`` → ``aten::copy_``) containing ``row``."""
        parent = self.profile.tables["ops"]["parent_row"]
        top = row
        while row >= 0 and self.op_name(row) in PLUMBING_OPS:
            top = row
            row = int(parent[row])
        return top

    def user_op(self, row: int) -> tuple[str, str]:
        """(op, the op it runs inside) for evidence: ``("aten::to", "aten::ctc_loss")``; "" when unknown."""
        if row < 0:
            return "", ""
        top = self.plumbing_top(row)
        parent = int(self.profile.tables["ops"]["parent_row"][top])
        outer = self.op_name(parent)
        if outer.startswith(_STEP_LIKE) or self._is_python(parent):
            outer = ""
        return self.op_name(top), outer

    def _is_python(self, row: int) -> bool:
        return row >= 0 and int(self.profile.tables["ops"]["category"][row]) == OP_CATEGORIES.index(
            "python_function")

    def source_line(self, row: int) -> str | None:
        """The innermost user frame (``train.py:42 (step)``) above op ``row`` when the trace has Python stacks."""
        ops = self.profile.tables["ops"]
        seen = 0
        while row >= 0 and seen < 200:
            sid = int(ops["stack_id"][row])
            if sid >= 0:
                for frame in self.profile.strings[sid].split(";"):
                    hit = _user_frame(frame.strip())
                    if hit:
                        return hit
            if self._is_python(row):
                hit = _user_frame(self.op_name(row))
                if hit:
                    return hit
            row = int(ops["parent_row"][row])
            seen += 1
        return None

    def kernel_op_row(self, r: KernelRow) -> int:
        """The launching op of the kernel row's longest launch (-1 when unknown)."""
        k = self.profile.tables["kernels"]
        i = r.rows[int(np.argmax(k["dur_ns"][r.rows]))]
        return int(k["op_row"][i])

    def kernel_offender(self, r: KernelRow, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Evidence row for one kernel: name, time, layer, phase, launching op and source line."""
        op_row = self.kernel_op_row(r)
        op, outer = self.user_op(op_row)
        in_win = self.in_window_ns(r.rows)
        out = {
            "kernel": r.short_name, "layer": r.layer or None, "op": op or None, "in_op": outer or None,
            "phase": r.phase, "calls": r.calls, "time_us": round(in_win / 1e3, 1),
            "pct_of_step": round(100.0 * in_win / self.window_ns, 2) if self.window_ns else None,
            "source": self.source_line(op_row),
        }
        if extra:
            out.update(extra)
        return out

    # --- run settings ----------------------------------------------------------------------------------------
    def run_setting(self, key: str) -> Any:
        """A recorded run setting (``cudnn_benchmark`` …) or None when the run did not record it."""
        for holder in (self.doc, self.profile.meta):
            if key in holder and holder[key] is not None:
                return holder[key]
            for mk in RUN_META_KEYS:
                block = holder.get(mk)
                if isinstance(block, str):
                    block = _parse_json_object(block)
                if isinstance(block, dict) and block.get(key) is not None:
                    return block[key]
        path = str(self.profile.meta.get("source", {}).get("path", "")) or str(
            self.doc.get("source", {}).get("path", ""))
        name = path.replace("\\", "/").rsplit("/", 1)[-1].lower()
        for token, value in FILE_NAME_FLAGS.get(key, ()):
            if token in name:
                return value
        return None


class _NoDocYet(dict[str, Any]):
    """The document of a context made before it: any read is a mistake, said at once rather than read as empty."""

    def _missing(self, *args: object, **kwargs: object) -> Any:
        raise RuntimeError("the rules' context was asked for the summary document before it was made")

    get = __getitem__ = __contains__ = __iter__ = __len__ = keys = items = values = _missing
    __setitem__ = setdefault = update = copy = __eq__ = _missing


def _parse_json_object(s: str) -> dict[str, Any] | None:
    import json

    try:
        v = json.loads(s)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


def _user_frame(text: str) -> str | None:
    m = _PY_FRAME.match(text)
    if not m:
        return None
    path = m.group("file")
    if any(lib in path for lib in _LIBRARY_PATHS):
        return None
    return f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{m.group('line')} ({m.group('func').strip()})"
