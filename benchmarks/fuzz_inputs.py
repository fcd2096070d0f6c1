"""The inputs of ``benchmarks/fuzz.py``: real seeds, hostile values, and the mutations that turn one into the other.

A ``Seeds`` object holds each seed once per process, parsed as far as the mutations need it (a trace as its
top-level fields plus one encoded bytes string per event, an ncu CSV as rows, a folder as a pristine copy), so an
input costs its mutations and one write, not a parse and a re-encoding of the whole seed. Folder inputs are hard
links to the pristine copy except the files mutated, which are detached first (``_detach``): a mutation never
writes through a link into the seed, and ``Seeds.check_pristine`` reports a seed changed by the command under test.

Every ``make_*`` takes a ``random.Random`` and an empty folder and returns the ``dnnprof`` arguments of one input.
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
#: The foreign corpus beside the checkout; ``DNNPROF_FOREIGN`` names another place (a machine with only the repository).
FOREIGN = Path(os.environ.get("DNNPROF_FOREIGN") or ROOT.parent / "shared" / "foreign")
FORMATS = ("kineto", "ncu", "profile", "rundir", "summary")

KINETO_SOURCES = [DATA / "cpu_mlp_train" / "trace.json.gz", DATA / "graph_replay_h100" / "trace.json.gz",
                  DATA / "cpu_mlp_memory" / "trace.json.gz", *sorted((DATA / "h100_recorded").glob("*.json.gz")),
                  *(FOREIGN / n for n in ("hta__alexnet_critical_path.json.gz", "hta__mi250_minitoy_train.json.gz",
                                          "hta__cpu_only_rank34.json.gz", "hta__cuda_event_sync.json.gz",
                                          "hta__triton_example.json.gz", "kineto__docs_before_fix_trace.json",
                                          "hta__cupti_profiler_counters.json.gz",
                                          "hta__distributed_info_missing.json.gz",
                                          "hta__mtia_inference_rank0.json.gz",
                                          "kineto__tbplugin_resnet50_workers0.json.gz"))]
NCU_SOURCES = [*sorted(DATA.glob("ncu_*/*.csv")), *sorted(DATA.glob("ncu_*/*.csv.gz")),
               FOREIGN / "superbench__b200_cublaslt_ncu.csv"]
RUN_SOURCES = [DATA / "run_gpt2_infer_h100", DATA / "run_user_h100" / "cuda_fp16"]
SUMMARY_SOURCES = [DATA / "run_gpt2_infer_h100" / "expected_summary.json"]
#: Traces saved as profiles (once per process, at first use) to mutate.
PROFILE_SOURCES = [DATA / "cpu_mlp_train" / "trace.json.gz", DATA / "graph_replay_h100" / "trace.json.gz"]

#: A seed is picked with weight ``1 / max(bytes, SMALL_BYTES) ** SIZE_POWER``: small seeds (cheap inputs) come
#: often, a 1 MB one about a tenth as often as a 10 kB one, but every seed keeps coming.
SMALL_BYTES, SIZE_POWER = 16_384, 0.5

_DEEP = 2000


def _deep_list() -> Any:
    v: Any = 1
    for _ in range(300):  # json.dumps itself recurses; deeper nesting is written as bytes (mutate_bytes)
        v = [v]
    return v


#: Values put in place of a field: beyond int64, beyond float, non-finite, markup, terminal escapes, wrong types.
HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, -(10**30),
    1e308, -1e308, 9.3e15, 1e-320, 0.5, -0.0, "", " ", "x", "0", "-5", "inf", "-inf", "nan", "1e400", "1,234",
    "stream 99999999999999999999", "(99999999999999999999, 1, 1)", "[/]kernel", "[bold red]x[/bold red]",
    "[link=http://x.test]l[/link]", "\x1b]0;title\x07", "\x1b[2J\x1b[31m", "<script>alert(1)</script>",
    "[c](javascript:alert(1))", "a\nb|c", "\u202eevil", "\ud800", "\x00nul", "é" * 3, "k" * 200_000,
    [], {}, [1], [None], ["a", 1], {"a": 1}, {"ph": "X"}, [[1, 2, 3]], [2**64 - 1, 1, 1], _deep_list(),
]
_IMMUTABLE = (type(None), bool, int, float, str)


def _hostile(rng: random.Random) -> Any:
    v = rng.choice(HOSTILE)
    return v if isinstance(v, _IMMUTABLE) else copy.deepcopy(v)


# --- mutations ------------------------------------------------------------------------------------------------
def _containers(doc: Any, rng: random.Random, limit: int = 4000) -> list[Any]:
    """Up to ``limit`` dicts and lists inside ``doc`` (reservoir-sampled, so big documents cost little)."""
    seen: list[Any] = []
    stack, n = [doc], 0
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            items: Any = x.values()
        elif isinstance(x, list):
            items = x
        else:
            continue
        n += 1
        if len(seen) < limit:
            seen.append(x)
        else:
            j = rng.randrange(n)
            if j < limit:
                seen[j] = x
        stack.extend(v for v in items if isinstance(v, (dict, list)))
    return seen


def mutate_json(doc: Any, rng: random.Random, edits: int) -> Any:
    """``doc`` with ``edits`` structural mutations in place: a field replaced by a hostile value, deleted,
    stringified, an element duplicated or dropped, a container replaced."""
    pool = _containers(doc, rng)
    for _ in range(edits):
        if not pool:
            return _hostile(rng)
        c = rng.choice(pool)
        op = rng.randrange(6)
        if isinstance(c, dict):
            if not c or op == 0:
                c[rng.choice(["args", "ph", "cat", "ts", "dur", "name", "id", "tid", "x", "External id"])] = \
                    _hostile(rng)
                continue
            k = rng.choice(list(c))
            if op == 1:
                del c[k]
            elif op == 2:
                c[k] = str(c[k]) if not isinstance(c[k], str) else (c[k] * 2)
            else:
                c[k] = _hostile(rng)
        else:
            if not c:
                c.append(_hostile(rng))
                continue
            i = rng.randrange(len(c))
            if op == 1:
                del c[i]
            elif op == 2:
                c.insert(i, copy.deepcopy(c[i]))
            else:
                c[i] = _hostile(rng)
    return doc


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Byte-level damage: truncation, flipped bytes, invalid UTF-8, a duplicated or dropped slice, deep nesting."""
    if not data:
        return b"\xff"
    op = rng.randrange(6)
    i = rng.randrange(len(data))
    if op == 0:
        return data[:i]
    if op == 1:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if op == 2:
        return data[:i] + rng.choice([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x00"]) + data[i:]
    if op == 3:
        j = min(len(data), i + rng.randint(1, 4096))
        return data[:j] + data[i:j] + data[j:]
    if op == 4:
        j = min(len(data), i + rng.randint(1, 4096))
        return data[:i] + data[j:]
    k = data.find(b'"args"', i)
    if k < 0:
        return data[:i] + b"[" * _DEEP + data[i:]
    return data[:k] + b'"deep": ' + b"[" * _DEEP + b"]" * _DEEP + b", " + data[k:]


def _load_json(path: Path) -> Any:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")


def _detach(path: Path) -> None:
    """Make ``path`` a file of its own (not a hard link to a seed) before it is changed."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)


# --- seeds ----------------------------------------------------------------------------------------------------
class KinetoSeed:
    """A trace as its top-level fields (without the events) and one JSON encoding per event."""

    def __init__(self, path: Path) -> None:
        doc = _load_json(path)
        if not isinstance(doc, dict):
            doc = {"traceEvents": doc}
        events = doc.pop("traceEvents", None) or []
        self.top: dict[str, Any] = doc
        self.events: list[bytes] = [_dump(e) for e in events]


class Seeds:
    """Every seed, loaded at first use and kept for the life of the process; pristine folder copies under ``work``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._kineto: dict[Path, KinetoSeed] = {}
        self._ncu: dict[Path, tuple[list[str], list[list[str]]]] = {}
        self._summary: dict[Path, tuple[Any, bytes]] = {}
        self._folders: dict[str, list[Path]] = {}
        self._stamps: dict[Path, tuple[int, int]] = {}

    def kineto(self, path: Path) -> KinetoSeed:
        if path not in self._kineto:
            self._kineto[path] = KinetoSeed(path)
        return self._kineto[path]

    def ncu(self, path: Path) -> tuple[list[str], list[list[str]]]:
        if path not in self._ncu:
            raw = path.read_bytes()
            text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode(errors="replace")
            lines = text.splitlines()
            head = [ln for ln in lines if ln.startswith("==")]
            rows = list(csv.reader(io.StringIO("\n".join(ln for ln in lines if not ln.startswith("==")))))
            self._ncu[path] = (head, rows)
        return self._ncu[path]

    def summary(self, path: Path) -> tuple[Any, bytes]:
        if path not in self._summary:
            doc = _load_json(path)
            self._summary[path] = (doc, _dump(doc))
        return self._summary[path]

    def folders(self, kind: str) -> list[Path]:
        """Pristine copies of the run directories ('rundir') or of the traces saved as profiles ('profile')."""
        if kind not in self._folders:
            out = []
            for src in RUN_SOURCES if kind == "rundir" else PROFILE_SOURCES:
                if not src.exists():
                    continue
                target = self.work / "seeds" / kind / src.parent.name
                if kind == "rundir":
                    target = target / src.name
                if not target.exists():
                    if kind == "rundir":
                        shutil.copytree(src, target)
                    else:
                        from dnnprof.ingest.kineto import read_kineto

                        read_kineto(src).save(target)
                for p in target.rglob("*"):
                    if p.is_file():
                        st = p.stat()
                        self._stamps[p] = (st.st_size, st.st_mtime_ns)
                out.append(target)
            self._folders[kind] = out
        return self._folders[kind]

    def check_pristine(self) -> list[str]:
        """Seed files changed or removed since they were made (the command under test wrote into its input); each
        is put back from its source so later inputs start clean."""
        changed = []
        for p, stamp in list(self._stamps.items()):
            try:
                st = p.stat()
                now: tuple[int, int] | None = (st.st_size, st.st_mtime_ns)
            except OSError:
                now = None
            if now != stamp:
                changed.append(str(p))
        if changed:
            shutil.rmtree(self.work / "seeds", ignore_errors=True)
            self._folders.clear()
            self._stamps.clear()
        return changed


def _weighted(rng: random.Random, paths: list[Path]) -> Path:
    present = [p for p in paths if p.exists()]
    weights = [1.0 / max(p.stat().st_size, SMALL_BYTES) ** SIZE_POWER for p in present]
    return rng.choices(present, weights)[0]


# --- inputs ---------------------------------------------------------------------------------------------------
_TOP_KEYS = ["deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceEvents", "schemaVersion",
             "displayTimeUnit", "traceName"]


def make_kineto(rng: random.Random, seeds: Seeds, out: Path) -> list[str]:
    seed = seeds.kineto(_weighted(rng, KINETO_SOURCES))
    events = list(seed.events)
    for i in rng.sample(range(len(events)), min(len(events), rng.randint(1, 6))):  # only these are decoded
        events[i] = _dump(mutate_json(json.loads(events[i]), rng, rng.randint(1, 3)))
    if events and rng.random() < 0.1:  # the event list itself: events dropped, repeated, moved, or not events
        i = rng.randrange(len(events))
        j = min(len(events), i + rng.randint(1, 64))
        op = rng.randrange(4)
        if op == 0:
            del events[i:j]
        elif op == 1:
            events[j:j] = events[i:j]
        elif op == 2:
            events[i:j] = events[i:j][::-1]
        else:
            events.insert(i, _dump(_hostile(rng)))
    top = seed.top
    if rng.random() < 0.15:
        top = mutate_json(copy.deepcopy(top), rng, 1) if rng.random() < 0.5 else {**top,
                                                                                  rng.choice(_TOP_KEYS): _hostile(rng)}
    if isinstance(top, dict) and "traceEvents" not in top:
        head = _dump(top)[:-1]
        data = head + (b", " if len(head) > 1 else b"") + b'"traceEvents": [' + b", ".join(events) + b"]}"
    else:  # the events were replaced as a whole, or the document is not an object
        data = _dump(top)
    return ["analyze", str(_write_input(out, "t.json", data, rng, mutate_p=0.25, gz_p=0.3, gz_mutate_p=0.1))]


_CSV_HOSTILE = ["", "inf", "-inf", "nan", "1e400", "1e308", "-1", "99999999999999999999", "70000", "n/a",
                "(99999999999999999999, 1, 1)", "(1, 2)", "()", "1.234.567,89", "x" * 200_000, "[/]k", "\x1b[2J",
                "<b>", "ERR_NVGPUCTRPERM", "0", "1,2,3", "==PROF=="]


def make_ncu(rng: random.Random, seeds: Seeds, out: Path) -> list[str]:
    head, base = seeds.ncu(_weighted(rng, NCU_SOURCES))
    rows = list(base)  # rows are copied when they change
    for _ in range(rng.randint(1, 5)):
        if not rows:
            break
        r = rng.randrange(len(rows))
        op = rng.randrange(7)
        if op <= 2 and rows[r]:
            rows[r] = list(rows[r])
            rows[r][rng.randrange(len(rows[r]))] = rng.choice(_CSV_HOSTILE)
        elif op == 3 and rows[r]:
            rows[r] = rows[r][:rng.randrange(len(rows[r]))]
        elif op == 4:
            rows.insert(r, rows[r])
        elif op == 5:
            del rows[r]
        else:
            j = rng.randrange(max(1, len(rows[0])))
            rows = [row[:j] + row[j + 1:] for row in rows]
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(rows)
    data = ("\n".join(head) + "\n" + buf.getvalue()).encode()
    return ["analyze", str(_write_input(out, "ncu.csv", data, rng, mutate_p=0.2, gz_p=0.2, gz_mutate_p=0.3))]


def _write_input(out: Path, name: str, data: bytes, rng: random.Random, *, mutate_p: float, gz_p: float,
                 gz_mutate_p: float) -> Path:
    """Write an input file: its bytes flipped with probability ``mutate_p``, gzipped (``name.gz``) with ``gz_p``,
    the compressed bytes flipped with ``gz_mutate_p`` (draws in that order, so an input stays the same for a
    seed and N)."""
    if rng.random() < mutate_p:
        data = mutate_bytes(data, rng)
    path = out / (f"{name}.gz" if rng.random() < gz_p else name)
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=1)
        if rng.random() < gz_mutate_p:
            data = mutate_bytes(data, rng)
    path.write_bytes(data)
    return path


def _mutate_file(path: Path, rng: random.Random) -> None:
    """One file of a folder: JSON mutated, bytes damaged, truncated, deleted, or a Parquet column rewritten."""
    op = rng.randrange(10)
    if op == 0:
        path.unlink()
        return
    _detach(path)
    if path.suffix == ".parquet" and op <= 6:
        _mutate_parquet(path, rng)
    elif path.suffix == ".json" and op <= 6:
        try:
            doc = json.loads(path.read_bytes())
        except ValueError:
            doc = None
        path.write_bytes(_dump(mutate_json(doc, rng, rng.randint(1, 4)) if rng.random() < 0.85 else _hostile(rng)))
    elif op == 7:
        path.write_bytes(path.read_bytes()[:rng.randrange(max(1, path.stat().st_size))])
    else:
        path.write_bytes(mutate_bytes(path.read_bytes(), rng))


def _mutate_parquet(path: Path, rng: random.Random) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(path)
    except (pa.ArrowException, OSError):
        path.write_bytes(mutate_bytes(path.read_bytes(), rng))
        return
    if not t.column_names:
        return
    name = rng.choice(t.column_names)
    col = t.column(name)
    op = rng.randrange(6)
    if op == 0:  # rewritten as text
        new = pa.array([str(x) for x in col.to_pylist()], type=pa.string())
    elif op == 1:  # nulls
        vals = col.to_pylist()
        for i in rng.sample(range(len(vals)), min(len(vals), rng.randint(1, 3))):
            vals[i] = None
        new = pa.array(vals, type=col.type)
    elif op == 2:  # a column dropped
        pq.write_table(t.drop_columns([name]), path)
        return
    elif op == 3:  # rows dropped from this table only
        pq.write_table(t.slice(0, rng.randrange(max(1, t.num_rows))), path)
        return
    elif op == 4 and pa.types.is_integer(col.type):  # ids pointing nowhere
        vals = col.to_pylist()
        for i in rng.sample(range(len(vals)), min(len(vals), rng.randint(1, 3))):
            vals[i] = rng.choice([2**31 - 1, -(2**31), 10**6, -7])
        try:
            new = pa.array(vals, type=col.type)
        except (pa.ArrowException, OverflowError):
            new = pa.array(vals, type=pa.int64())
    else:  # another type
        try:
            new = col.cast(pa.float64()) if not pa.types.is_floating(col.type) else col.cast(pa.int64())
        except pa.ArrowException:
            new = pa.array([str(x) for x in col.to_pylist()], type=pa.string())
    pq.write_table(t.set_column(t.column_names.index(name), name, new), path)


def _linked_copy(base: Path, target: Path) -> None:
    """``base`` as a tree of hard links (a copy where linking is not possible)."""
    shutil.copytree(base, target, copy_function=_link_or_copy)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _folder_input(rng: random.Random, base: Path, out: Path, files: int) -> Path:
    target = out / base.name
    _linked_copy(base, target)
    candidates = sorted(p for p in target.rglob("*") if p.is_file())
    for p in rng.sample(candidates, min(len(candidates), files)):
        if p.exists():
            _mutate_file(p, rng)
    return target


def make_profile(rng: random.Random, seeds: Seeds, out: Path) -> list[str]:
    base = rng.choice(seeds.folders("profile"))
    return ["analyze", str(_folder_input(rng, base, out, rng.randint(1, 2)))]


def make_rundir(rng: random.Random, seeds: Seeds, out: Path) -> list[str]:
    base = rng.choice(seeds.folders("rundir"))
    return ["analyze", str(_folder_input(rng, base, out, rng.randint(1, 2)))]


def make_summary(rng: random.Random, seeds: Seeds, out: Path) -> list[str]:
    doc, raw = seeds.summary(SUMMARY_SOURCES[0])
    new = mutate_json(copy.deepcopy(doc), rng, rng.randint(1, 4))
    if rng.random() < 0.3:
        new[rng.choice(["steps", "gpu", "kernels", "layers", "findings", "phases", "device"])] = _hostile(rng)
    a, b = out / "base.json", out / "new.json"
    a.write_bytes(raw)
    b.write_bytes(_dump(new) if rng.random() < 0.9 else mutate_bytes(_dump(new), rng))
    return ["diff", str(a), str(b)] if rng.random() < 0.5 else ["diff", str(b), str(a)]


MAKERS: dict[str, Callable[[random.Random, Seeds, Path], list[str]]] = {
    "kineto": make_kineto, "ncu": make_ncu, "profile": make_profile, "rundir": make_rundir,
    "summary": make_summary}
