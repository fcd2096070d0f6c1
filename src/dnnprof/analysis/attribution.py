"""Who launched each GPU activity: op → nn.Module layer (→ source line), and the phase it belongs to.

Layers come from, in order of preference:
1. dnnprof's own module ranges (``dnnprof.module:<fqn>|<Class>`` record_function ranges, from ``dnnprof run``);
2. torch.profiler ``with_modules`` Python events (``nn.Module: Linear_0``) or a ``Module Hierarchy`` op argument;
3. otherwise the op level: the outermost op under the step marker (``aten::linear``, ``Optimizer.step#AdamW.step``).
Backward kernels run on the autograd thread, outside any module range: they follow the ``fwdbwd`` flow from their
autograd node back to the forward op and take that op's layer, so ``AddmmBackward0``'s GEMMs land on the
``Linear`` that ran the forward ``addmm``.

Phases: ``optimizer`` (under ``Optimizer.step#``/``Optimizer.zero_grad#``, and the optimizer-side ops outside
any module: ``aten::_foreach_*``/``aten::_fused_*`` (gradient clipping, hand-written multi-tensor updates) and
GradScaler's ``aten::_amp_*``), ``backward`` (under an autograd engine evaluate_function, an op named
``…Backward…``, or linked by ``fwdbwd``), ``forward`` (other ops in a step), ``other`` (no launching op, data
loading, input transfers at the top of the step).

A step marker is a root: nothing inside ``ProfilerStep#N`` inherits a phase or a layer from a range around it.
An optimizer range that runs a closure (Lightning's automatic optimization, LBFGS: ``optimizer.step(closure)``
runs forward and backward inside ``Optimizer.step#``) is the optimizer only after the last backward op that began
inside it has ended; the forward and backward it ran before keep their own phases.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dnnprof.analysis.factorize import unique_strings
from dnnprof.model.mapped_columns import gather, release_pages, release_pages_of, rows_where
from dnnprof.model.profile import Profile
from dnnprof.model.schema import OP_CATEGORIES

PHASES = ("forward", "backward", "optimizer", "other")
_CODED = ("layer", "op_name", "source")  # the object fields Attribution.of_codes keeps as codes
MODULE_RANGE_PREFIX = "dnnprof.module:"
_TORCH_MODULE_PREFIX = "nn.Module: "
_STEP_PREFIXES = ("ProfilerStep#",)
_OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#", "dnnprof.optimizer")
#: Multi-tensor and AMP-scaler ops that, outside any module, belong to the optimizer side of a step.
_OPTIMIZER_SIDE_OPS = ("aten::_foreach_", "aten::_fused_", "aten::_amp_")
_BACKWARD_MARKERS = ("autograd::engine::evaluate_function", "Backward0", "Backward1", "backward")
_DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "DataLoader", "dnnprof.dataloader")
_INPUT_COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::pin_memory", "aten::_pin_memory"})


@dataclass
class Attribution:
    """Per-row attribution of one GPU table (same length as the table).

    :func:`attribute` keeps ``layer``, ``op_name`` and ``source`` as codes (:meth:`codes`): each object column is
    built when first read (a big trace's kernels are millions of rows, and the analysis groups by the codes)."""

    layer: np.ndarray  # object array of str ("" when unattributed)
    phase: np.ndarray  # int8 index into PHASES
    op_name: np.ndarray  # object array: the launching op ("" when none)
    level: str  # "module", "op" or "none": the best level reached for most GPU time
    source: np.ndarray | None = None  # object array: innermost user-code frame "file.py:line (func)", "" unknown
    # np.unique of a field, kept once computed: the fields are read-only once the codes exist (see codes());
    # dataclasses.replace gives a new Attribution with none kept
    _codes: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, init=False, repr=False,
                                                              compare=False)

    @classmethod
    def of_codes(cls, phase: np.ndarray, level: str, codes: dict[str, tuple[np.ndarray, np.ndarray]]) -> Attribution:
        """An attribution given as the codes of ``layer``, ``op_name`` and ``source`` (each ``(distinct values
        sorted, each row's index)``, as :meth:`codes`); their object columns are built when first read."""
        out = cls.__new__(cls)
        out.phase, out.level, out._codes = phase, level, dict(codes)
        return out

    def __getattr__(self, name: str) -> np.ndarray:  # only for an attribute not set: a field kept as codes
        kept = self.__dict__.get("_codes", {})
        if name not in _CODED or name not in kept:
            raise AttributeError(name)
        uniq, inv = kept[name]
        values = uniq[inv]
        values.flags.writeable = False  # as keep_codes leaves a field: no write can leave the codes stale
        setattr(self, name, values)
        return values

    def known(self, name: str) -> bool:
        """Whether ``layer``, ``op_name`` or ``source`` has values (``source`` is None when not recorded), without
        building its object column."""
        return name in self._codes or getattr(self, name) is not None

    def codes(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``np.unique(<field name>, return_inverse=True)`` of ``layer``, ``op_name`` or ``source``: the distinct
        values, sorted, and each row's index into them; computed once (:func:`attribute` fills them from the
        string ids it had, without sorting the rows)."""
        if name not in self._codes:
            values = getattr(self, name)  # a field kept as codes is in _codes: never built here
            values = np.empty(0, dtype=object) if values is None else values
            uniq, inv = np.unique(values, return_inverse=True)
            self.keep_codes(name, uniq, inv.reshape(-1))
        return self._codes[name]

    def keep_codes(self, name: str, uniq: np.ndarray, inv: np.ndarray) -> None:
        """Keep ``codes(name)``; the field becomes read-only, so that no write can leave the codes stale."""
        values = getattr(self, name)
        if values is not None:
            values.flags.writeable = False
        self._codes[name] = (uniq, inv)

    def layered(self) -> np.ndarray:
        """Which rows reached a layer (``layer != ""``), from the codes rather than a comparison of every string."""
        uniq, inv = self.codes("layer")
        return inv != (0 if uniq.size and uniq[0] == "" else -1)  # "" sorts first


# A field's default stays in the generated __init__; without it on the class, an Attribution of codes reads its
# source through __getattr__ (built from the codes) rather than as the class's None.
del Attribution.source


def inherit(own: np.ndarray, parent: np.ndarray, in_place: bool = False) -> np.ndarray:
    """For every op, the value of its nearest ancestor-or-self whose ``own`` value is >= 0 (-1 when none).
    ``in_place``: the answer is written into ``own`` when its type holds it and it is an array of its own (the
    caller's column of labels is spent; never a view, such as a table's column), not into a copy.

    When every parent's row comes before its child's (the nested op tables: :func:`parents_first`), rows are
    answered a block at a time in row order: a row whose parent lies before its block takes the parent's final
    answer, the rest jump pointers within the block. Besides the answer, the memory is a block's. Otherwise, pointer
    jumping over the whole table: O(n log depth) with numpy, no Python loop over rows.
    """
    # a copy (the caller's column stays as it is), 32-bit where the values allow (rows and string ids), 8 or 16
    # where they are (flags)
    hi, lo = (int(own.max()), int(own.min())) if own.size else (-1, -1)
    wide = hi > _INT32_MAX or lo < -1 or own.size > _INT32_MAX
    narrow = own.dtype in (np.int8, np.int16, np.int32)
    dtype = np.int64 if wide else (own.dtype if narrow else np.int32)
    own_array = own.base is None and own.flags.writeable
    lab = own if in_place and own_array and own.dtype == dtype else own.astype(dtype)
    if hi == -1 and lo == -1:  # no op labelled: -1 everywhere, nothing to look up
        return lab
    if parents_first(parent):
        for a in range(0, lab.size, _INHERIT_ROWS):
            _inherit_block(lab, parent, a, min(a + _INHERIT_ROWS, lab.size))
        return lab
    return _jump_pointers(lab, parent.astype(np.int64 if wide else np.int32))


def parents_first(parent: np.ndarray) -> bool:
    """Whether every row's parent (-1: none) comes before it, checked a block of rows at a time."""
    for a in range(0, parent.size, _INHERIT_ROWS):
        p = parent[a:a + _INHERIT_ROWS]
        if (p >= np.arange(a, a + p.size)).any():
            return False
    return True


def _inherit_block(lab: np.ndarray, parent: np.ndarray, a: int, b: int) -> None:
    """Answer rows [a, b) of :func:`inherit`, every row before ``a`` answered already."""
    mine = lab[a:b]  # a view: written in place
    p = parent[a:b]
    need = np.flatnonzero((mine < 0) & (p >= 0))
    if need.size == 0:
        return
    up = p[need].astype(np.int64)
    before = up < a
    mine[need[before]] = lab[up[before]]  # final: answered in an earlier block
    inside, up = need[~before], up[~before] - a
    if inside.size == 0:
        return
    ptr = np.full(mine.size, -1, dtype=np.int64)  # the block's rows still waiting on a row of the block
    ptr[inside] = up
    while True:
        live = np.flatnonzero(ptr >= 0)
        if live.size == 0:
            return
        nxt = ptr[live]
        mine[live] = mine[nxt]
        ptr[live] = np.where(mine[live] >= 0, -1, ptr[nxt])  # a row answered, or waiting, or done with -1


def _jump_pointers(lab: np.ndarray, p: np.ndarray) -> np.ndarray:
    """:func:`inherit` for any parents: rows are updated a block at a time (a big trace's temporaries are a
    block's); a row may then read a pointer or value already moved on in this round, which only gets it there
    sooner. Each row keeps pointing at an ancestor whose answer is its own, with no labelled op in between, so the
    answer does not depend on the blocks. ``lab`` and ``p`` are written."""
    while True:
        moved = False
        for a in range(0, lab.size, _INHERIT_ROWS):
            need = np.flatnonzero((lab[a:a + _INHERIT_ROWS] < 0) & (p[a:a + _INHERIT_ROWS] >= 0)) + a
            if need.size == 0:
                continue
            moved = True
            up = p[need]
            lab[need] = lab[up]
            p[need] = p[up]
        if not moved:
            return lab


#: Rows :func:`inherit` updates at once.
_INHERIT_ROWS = 1 << 18
_INT32_MAX = 2**31 - 1


def _needed_ops(ops: dict[str, np.ndarray], launching: np.ndarray) -> np.ndarray:
    """The rows (in order) whose features the attribution of ``launching`` ops reads: those ops, the forward ops
    that backward ops are linked to, and every ancestor of either. In a training trace a few of the ops launch
    work; the rest are Python frames, plumbing ops and ops that only ran on the host."""
    n = ops["start_ns"].size
    mark = np.zeros(n, dtype=bool)
    mark[launching[(launching >= 0) & (launching < n)]] = True
    for a in range(0, n, _INHERIT_ROWS):  # the forward ends of fwdbwd links, a block at a time
        fwd = ops["fwd_row"][a:a + _INHERIT_ROWS]
        fwd = fwd[(fwd >= 0) & (fwd < n)]
        mark[fwd] = True
        release_pages_of(ops["fwd_row"])
    parent = ops["parent_row"]
    frontier = np.flatnonzero(mark)
    while frontier.size:  # up one level of ancestors a round; the frontier only holds rows marked just now
        up = gather(parent, frontier)
        up = up[up >= 0]
        up = up[~mark[up]]
        mark[up] = True
        frontier = np.unique(up)
    rows = np.flatnonzero(mark)
    return rows.astype(np.int32) if n <= _INT32_MAX else rows


def _positions(rows: np.ndarray | None, of: np.ndarray) -> np.ndarray:
    """Where each op row of ``of`` is among the feature rows ``rows`` (in order, holding every row asked for);
    -1 stays -1. ``rows`` None: every op is a feature row, so a row is its own position."""
    if rows is None:
        return of
    out = np.empty(of.size, dtype=rows.dtype)
    for a in range(0, of.size, _INHERIT_ROWS):  # a block at a time: searchsorted's answers are 64-bit
        out[a:a + _INHERIT_ROWS] = np.searchsorted(rows, of[a:a + _INHERIT_ROWS])
    out[of < 0] = -1
    return out


def _op_features(profile: Profile, launching: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """What the attribution needs of each op: ``name_id``; ``module`` (the string id of its layer, -1 when none);
    ``top_op`` (the feature row of its op-level layer, -1); the ``optimizer``, ``backward``, ``dataloader`` and
    ``input_copy`` flags; ``source`` (the string id of its user-code line, -1).

    Without ``launching``, for every op, in row order. With it (the op rows of some GPU work), for the ops that
    work's attribution reads (:func:`_needed_ops`) and ``row``: the op row of each feature row. The answers are the
    same as for every op: what an op inherits comes from its ancestors, and a backward op's layer from the forward
    op it is linked to, both among those rows.
    """
    ops = profile.tables["ops"]
    n_ops = ops["start_ns"].size
    keep = None if launching is None else _needed_ops(ops, launching)
    n = n_ops if keep is None else keep.size
    # Row and string-id columns are 32-bit, as the table's own: a big trace's ops are tens of millions of rows.
    rows32 = np.int32 if n_ops <= _INT32_MAX else np.int64

    def col(name: str) -> np.ndarray:  # an op column at the feature rows (the table's own column for every op)
        return ops[name] if keep is None else gather(ops[name], keep)

    name_id = col("name_id")
    flag = profile.name_tests(name_id)
    parent = _positions(keep, col("parent_row"))
    cat = col("category")

    def names(rows: np.ndarray) -> np.ndarray:  # the names of some ops (an object column of every op is 8 B a row)
        return profile.names(name_id[rows])

    is_annot = cat == OP_CATEGORIES.index("user_annotation")
    is_py = cat == OP_CATEGORIES.index("python_function")
    del cat
    dn = is_annot & flag(lambda s: s.startswith(MODULE_RANGE_PREFIX))  # a big trace's ops are tens of millions:
    # every column here is made when needed and dropped once spent
    tm = is_py & flag(lambda s: s.startswith(_TORCH_MODULE_PREFIX))

    # A step's own marker range (ProfilerStep#N, or a repeating NVTX range an nsys export's steps were cut from).
    # By name, one test of each distinct id (np.isin of tens of millions of ids takes 14 bytes of temporaries each).
    marker_names = set(profile.distinct_names(profile.tables["steps"]["name_id"])) - {""}

    def is_marker(ids: np.ndarray, annot: np.ndarray) -> np.ndarray:
        return annot & profile.name_tests(ids)(lambda s: s.startswith(_STEP_PREFIXES) or s in marker_names)

    step_marker = is_marker(name_id, is_annot)
    del is_annot
    # Phases, layers and source lines are inherited within a step, never across its marker.
    parent = np.where(step_marker, -1, parent)
    optimizer_own = flag(lambda s: s.startswith(_OPTIMIZER_PREFIXES))
    backward_own = flag(lambda s: any(m in s for m in _BACKWARD_MARKERS)) | (col("fwd_row") >= 0)
    release_pages()  # a big trace's mapped columns (model.mapped_columns): what follows works on these copies
    # the closure cut reads the backward ops of the whole rank, launching or not
    backward_all = backward_own if keep is None or not optimizer_own.any() else (
        profile.name_tests(ops["name_id"])(lambda s: any(m in s for m in _BACKWARD_MARKERS)) | (ops["fwd_row"] >= 0))
    release_pages_of(ops["name_id"], ops["fwd_row"])  # read whole (a big trace's mapped columns)
    optimizer, closure = _optimizer_after_closure(ops, parent, optimizer_own, backward_all, keep)
    del optimizer_own, backward_all
    release_pages()
    # Own module label (a string id), -1 when the op is not a module range.
    own_module = np.full(n, -1, dtype=np.int32)
    for sel, fmt in ((dn, _dnnprof_layer), (tm, lambda s: s[len(_TORCH_MODULE_PREFIX):])):
        idx = np.flatnonzero(sel)
        if idx.size:
            own = names(idx)
            labels = {s: profile.intern(fmt(s)) for s in set(own.tolist())}
            own_module[idx] = [labels[s] for s in own]
    module_id = col("module_id")
    hier = np.flatnonzero((module_id >= 0) & (own_module < 0))
    if hier.size:
        own_module[hier] = module_id[hier]
    del module_id, hier
    # Python frames (with_stack) are call sites, not layers: look through them for the op-level layer. So is an
    # optimizer range that ran a closure: its forward's ops are the layers, not ``Optimizer.step#``.
    transparent = step_marker | dn | tm | is_py | closure
    del step_marker, dn, tm, closure
    # Outermost op below the step marker (the op-level "layer").
    anchor = np.where((parent < 0) | transparent[np.clip(parent, 0, None)], np.arange(n, dtype=rows32), -1)
    anchor[transparent] = -1
    top_op = inherit(anchor, np.where(transparent[np.clip(parent, 0, None)], -1, parent), in_place=True)
    del anchor
    top_op[transparent] = -1
    del transparent

    backward = _inherited_flag(backward_own, parent)
    del backward_own
    dataloader = _inherited_flag(flag(lambda s: s.startswith(_DATALOADER_PREFIXES)), parent)
    fwd_own = _fwd_links(profile, ops, keep, name_id, col("fwd_row"), parent, is_marker)
    fwd_link = inherit(_positions(keep, fwd_own), parent, in_place=True)
    del fwd_own
    module = inherit(own_module, parent, in_place=True)
    del own_module
    # Top-level multi-tensor ops outside modules: gradient clipping, GradScaler's unscale and update.
    side = (module < 0) & ~backward & (top_op == np.arange(n, dtype=rows32)) & flag(
        lambda s: s.startswith(_OPTIMIZER_SIDE_OPS))
    optimizer |= _inherited_flag(side, parent)
    # Backward ops take the module (and op-level layer) of the forward op their autograd node came from.
    linked = (module < 0) & (fwd_link >= 0)
    module[linked] = module[fwd_link[linked]]
    top_linked = fwd_link >= 0
    top_op[top_linked] = top_op[fwd_link[top_linked]]
    del linked, top_linked
    # Source line: the innermost Python frame of user code above the op (with_stack traces record frames as
    # python_function events named "path/file.py(123): func"); backward work takes its forward op's line.
    py_rows = np.flatnonzero(is_py)
    if py_rows.size:
        own_src = np.full(n, -1, dtype=np.int32)
        py_names = names(py_rows)
        frames = {s_: _user_frame(s_) for s_ in set(py_names.tolist())}
        labels = {f: profile.intern(f) for f in set(frames.values()) if f}
        own_src[py_rows] = [labels.get(frames[s_], -1) for s_ in py_names]
        source = inherit(own_src, parent, in_place=True)
        del own_src
        src_linked = (source < 0) & (fwd_link >= 0)
        source[src_linked] = source[fwd_link[src_linked]]
        del src_linked
    else:  # no Python frames (a trace without stacks): no op has a source line, and no column of -1 is kept
        source = np.broadcast_to(np.int32(-1), (n,))
    del fwd_link, parent, is_py, py_rows
    input_copy = flag(lambda s: s in _INPUT_COPY_OPS)
    top_input_copy = np.zeros(n, dtype=bool)
    ok = top_op >= 0
    top_input_copy[ok] = input_copy[top_op[ok]]
    release_pages()
    out = {"name_id": name_id, "module": module, "top_op": top_op, "optimizer": optimizer,
           "backward": backward, "dataloader": dataloader, "input_copy": top_input_copy, "source": source}
    if keep is not None:
        out["row"] = keep
    return out


def _rows_where_linked(fwd_row: np.ndarray, block_rows: int = 1 << 20) -> np.ndarray:
    """Rows whose ``fwd_row`` is set, a block at a time (a big trace's ops are tens of millions; their mapped
    column's pages are given back after each block)."""
    return rows_where(fwd_row.size, lambda lo, hi: fwd_row[lo:hi] >= 0, fwd_row, block_rows=block_rows)


def _fwd_links(profile: Profile, ops: dict[str, np.ndarray], keep: np.ndarray | None, name_id: np.ndarray,
               fwd_row: np.ndarray, parent: np.ndarray,
               is_marker: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Each feature row's own fwdbwd link (the op row of its forward op, -1). The flow ends on the autograd node op
    (``AddmmBackward0``); work the engine runs beside the node under the same ``evaluate_function`` (e.g. the
    bias-gradient sum) must follow it too, so the link is lifted to the engine op above the node. ``name_id``,
    ``fwd_row``, ``parent``: the feature rows' (``parent`` as positions, cut at step markers)."""
    fwd_own = fwd_row.astype(np.int32 if ops["start_ns"].size <= _INT32_MAX else np.int64)  # a copy
    if keep is None:
        linked_rows = np.flatnonzero(fwd_own >= 0)
        par = parent[linked_rows]
    else:  # a node op need not be a feature row (it may launch nothing): they are found among every op
        linked_rows = _rows_where_linked(ops["fwd_row"])
        par = gather(ops["parent_row"], linked_rows)
        annot = gather(ops["category"], linked_rows) == OP_CATEGORIES.index("user_annotation")
        par[is_marker(gather(ops["name_id"], linked_rows), annot)] = -1
        # only engine ops among the feature rows matter: no one reads the rest
        pos = np.searchsorted(keep, par)
        found = (par >= 0) & (pos < keep.size)
        found[found] = keep[pos[found]] == par[found]
        par = np.where(found, pos, -1)
    has_par = par >= 0
    linked_rows, par = linked_rows[has_par], par[has_par]
    engine = profile.name_tests(name_id[par])(lambda s: s.startswith("autograd::engine::evaluate_function"))
    lift = engine & (fwd_own[par] < 0)
    forward = (fwd_own[linked_rows[lift]] if keep is None
               else gather(ops["fwd_row"], linked_rows[lift]).astype(fwd_own.dtype))
    fwd_own[par[lift]] = forward
    return fwd_own


def _inherited_flag(own: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Whether each op or an ancestor has the flag."""
    return inherit(np.where(own, np.int8(1), np.int8(-1)), parent, in_place=True) > 0


def _optimizer_after_closure(ops: dict[str, np.ndarray], parent: np.ndarray, own: np.ndarray,
                             backward_own: np.ndarray, rows: np.ndarray | None = None
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Ops in an optimizer range, from the end of the last backward op that began inside that range on; and the
    optimizer ranges that ran such a closure.

    Without a closure nothing backward begins inside the range and the first is every op under it.
    ``parent`` and ``own`` are of the feature rows (``rows``: their op rows; None: every op); ``backward_own`` of
    every op, since the backward ops of a closure run on the autograd thread, outside the range's tree.
    """
    # the nearest optimizer range around (or at) each op
    root = inherit(np.where(own, np.arange(own.size, dtype=np.int32 if own.size <= _INT32_MAX else np.int64), -1),
                   parent, in_place=True)
    inside = root >= 0
    closure = np.zeros(own.size, dtype=bool)
    if not inside.any():
        return inside, closure

    def op_rows(r: np.ndarray) -> np.ndarray:
        return r if rows is None else rows[r]

    start, dur = ops["start_ns"], ops["dur_ns"]
    rank = ops["rank"] if "rank" in ops else np.zeros(start.size, dtype=np.int64)
    idx = np.flatnonzero(inside)
    roots, which = np.unique(root[idx], return_inverse=True)
    root_start = gather(start, op_rows(roots)).astype(np.int64)
    cuts = root_start.copy()
    root_end = root_start + gather(dur, op_rows(roots))
    root_rank = gather(rank, op_rows(roots))
    # The backward ops that began inside a range of their rank, a block of rows at a time (half a training trace's
    # ops are backward): by start within a block, those of a range are one slice, found by binary search.
    by_rank = [(r, np.flatnonzero(root_rank == r)) for r in np.unique(root_rank).tolist()]
    for a in range(0, backward_own.size, _INHERIT_ROWS):
        bwd = np.flatnonzero(backward_own[a:a + _INHERIT_ROWS]) + a
        b_rank = rank[bwd]
        for r, ks in by_rank:
            b = bwd[b_rank == r]
            b = b[np.argsort(start[b], kind="stable")]
            b_start = start[b]
            lo = np.searchsorted(b_start, root_start[ks], side="left")
            hi = np.searchsorted(b_start, root_end[ks], side="left")
            some = hi > lo
            for k, i, j in zip(ks[some].tolist(), lo[some].tolist(), hi[some].tolist(), strict=True):
                cuts[k] = max(cuts[k], int((b_start[i:j] + dur[b[i:j]]).max()))
        release_pages_of(start, dur, rank)  # a big trace's mapped columns: a block's pages at a time
    closure[roots[cuts > root_start]] = True
    after = np.zeros(own.size, dtype=bool)  # inside a range, from its cut on
    after[idx] = gather(start, op_rows(idx)) >= cuts[which.reshape(-1)]
    return after, closure


_FRAME = re.compile(r"^(?P<path>.+?\.py)\((?P<line>\d+)\): (?P<func>.+)$")
#: Frames from these places are library code, not the user's: the source line is the first frame outside them.
_LIBRARY_PATHS = ("site-packages/", "dist-packages/", "/torch/", "torch/nn/", "/lib/python", "<frozen", "<string>",
                  "/dnnprof/")


def _user_frame(name: str) -> str:
    m = _FRAME.match(name)
    if not m or any(x in m.group("path") for x in _LIBRARY_PATHS) or m.group("path").startswith("torch/"):
        return ""
    return f"{m.group('path')}:{m.group('line')} ({m.group('func')})"


def op_label(name: str) -> str:
    """An op's name as a person reads it: dnnprof's own module ranges are shown as the layer they stand for
    (``dnnprof.module:transformer|GPT2Model`` → ``transformer (GPT2Model)``), every other name as it is."""
    return _dnnprof_layer(name) if name.startswith(MODULE_RANGE_PREFIX) else name


def _dnnprof_layer(s: str) -> str:
    body = s[len(MODULE_RANGE_PREFIX):]
    fqn, _, cls = body.rpartition("|")
    if not fqn:
        return cls
    return f"{fqn} ({cls})" if cls else fqn


def attribute(profile: Profile, table: str = "kernels") -> Attribution:
    """Layer, phase and launching op of every row of a GPU table (kernels, memcpy or memset), or of every op
    (``table="ops"``: each op is its own launching op; a CPU-only profile's work)."""
    t = profile.tables[table]
    n = t["start_ns"].size
    op_row = np.arange(n, dtype=np.int64) if table == "ops" else t["op_row"]
    if n == 0:
        empty = np.empty(0, dtype=object)
        return Attribution(empty, np.empty(0, dtype=np.int8), empty, "none")
    f = _op_features(profile, None if table == "ops" else op_row)
    has_op = op_row >= 0
    r = np.clip(op_row, 0, None) if "row" not in f else _positions(f.pop("row"), np.where(has_op, op_row, 0))
    if f["name_id"].size == 0:
        has_op[:] = False
        r[:] = 0
        f = {k: np.zeros(1, dtype=v.dtype) if v.dtype != object else np.array([""], dtype=object)
             for k, v in f.items()}
        f["module"][:] = -1
        f["top_op"][:] = -1
        f["source"][:] = -1
        f["name_id"][:] = -1
    module = np.where(has_op, f["module"][r], -1)
    if table != "ops" and "module_id" in t:  # work replayed from a CUDA graph carries the layer it was captured in
        module = np.where(t["module_id"] >= 0, t["module_id"], module)
    top = np.where(has_op, f["top_op"][r], -1)
    # Layers, ops and source lines as string ids (-1: ""), kept as codes: no object column of the rows' strings
    op_level = (module < 0) & (top >= 0)
    layer_id = np.where(module >= 0, module, -1)
    layer_id[op_level] = f["name_id"][top[op_level]]
    del top
    phase = np.full(n, PHASES.index("forward"), dtype=np.int8)
    phase[has_op & f["backward"][r]] = PHASES.index("backward")
    phase[has_op & f["optimizer"][r]] = PHASES.index("optimizer")
    other = ~has_op | (has_op & f["dataloader"][r]) | (has_op & (module < 0) & f["input_copy"][r])
    phase[other] = PHASES.index("other")
    del other
    dur = t["dur_ns"].astype(np.float64)
    total = dur.sum() or 1.0
    by_module = dur[module >= 0].sum() / total
    by_op = dur[has_op].sum() / total
    del dur, module
    level = "module" if by_module >= 0.5 else ("op" if by_op >= 0.5 else "none")
    strings = np.asarray([*profile.strings, ""], dtype=object)
    codes = {"layer": unique_strings(layer_id, strings)}
    del layer_id
    codes["op_name"] = unique_strings(np.where(has_op, f["name_id"][r], -1), strings)
    codes["source"] = unique_strings(np.where(has_op, f["source"][r], -1), strings)
    return Attribution.of_codes(phase, level, codes)
