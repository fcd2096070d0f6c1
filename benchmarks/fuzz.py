"""Fuzz ``dnnprof analyze`` (and ``diff``) with mutated real inputs: no input may end in a traceback or a hang.

Usage:
    python benchmarks/fuzz.py [--seed 1] [--inputs 2000 | --minutes 5] [--formats kineto,ncu,profile,rundir,summary]
                              [--timeout-s 20] [--workdir DIR] [--keep]

Each input is a real one (the repository's test traces, Nsight Compute CSVs, a saved profile, recorded run
directories, a summary JSON; the foreign traces of ``../shared/foreign`` when present) with a few seeded
mutations: hostile values put in place of fields (integers beyond int64, inf, markup, terminal escapes, invalid
UTF-8, wrong types, deep nesting, long strings), fields and files deleted, rows shortened, bytes flipped, files
truncated, gzip corrupted, Parquet columns rewritten as text or nulls. ``dnnprof analyze`` runs on it in this
process with a time limit. Each input ends as one of:

* success: exit 0;
* clean error: exit 2 with one line on stderr (``dnnprof: error: …``);
* other exit: any other exit code or a multi-line error (listed, not a failure by itself);
* traceback: an exception escaped ``main`` (a failure; the first input of each distinct place is kept);
* hang: the time limit passed (a failure, kept).

Prints a JSON summary (inputs, outcomes per format, distinct tracebacks) and exits 1 when there was a traceback
or a hang. ``run_batch`` is the same for tests (``tests/test_fuzz.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import gzip
import io
import json
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
FOREIGN = ROOT.parent / "shared" / "foreign"
FORMATS = ("kineto", "ncu", "profile", "rundir", "summary")

KINETO_SOURCES = [DATA / "cpu_mlp_train" / "trace.json.gz", DATA / "graph_replay_h100" / "trace.json.gz",
                  DATA / "cpu_mlp_memory" / "trace.json.gz", *sorted((DATA / "h100_recorded").glob("*.json.gz"))[:3],
                  *(FOREIGN / n for n in ("hta__alexnet_critical_path.json.gz", "hta__mi250_minitoy_train.json.gz",
                                          "hta__cpu_only_rank34.json.gz", "hta__cuda_event_sync.json.gz",
                                          "hta__triton_example.json.gz", "kineto__docs_before_fix_trace.json"))]
NCU_SOURCES = [*sorted(DATA.glob("ncu_*/*.csv")), FOREIGN / "superbench__b200_cublaslt_ncu.csv"]
RUN_SOURCES = [DATA / "run_gpt2_infer_h100", DATA / "run_user_h100" / "cuda_fp16"]
SUMMARY_SOURCES = [DATA / "run_gpt2_infer_h100" / "expected_summary.json"]
#: Traces saved as profiles (by the harness, at start) to mutate.
PROFILE_SOURCES = [DATA / "cpu_mlp_train" / "trace.json.gz", DATA / "graph_replay_h100" / "trace.json.gz"]

_DEEP = 2000


def _deep_list() -> Any:
    v: Any = 1
    for _ in range(300):  # json.dumps itself recurses; deeper nesting is written as bytes (_bytes_deep)
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


@dataclass
class Outcome:
    """Counts of one batch."""

    inputs: Counter[str] = field(default_factory=Counter)  # per format
    results: dict[str, Counter[str]] = field(default_factory=dict)  # format → outcome → count
    tracebacks: dict[str, dict[str, Any]] = field(default_factory=dict)  # place → {count, example, error}
    hangs: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, fmt: str, kind: str) -> None:
        self.inputs[fmt] += 1
        self.results.setdefault(fmt, Counter())[kind] += 1

    def total(self, kind: str) -> int:
        return sum(c[kind] for c in self.results.values())

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": sum(self.inputs.values()), "per_format": {f: dict(c) for f, c in self.results.items()},
                "success": self.total("success"), "clean_error": self.total("clean_error"),
                "other_exit": self.total("other_exit"), "traceback": self.total("traceback"),
                "hang": self.total("hang"), "distinct_tracebacks": self.tracebacks, "hangs": self.hangs[:20],
                "other_examples": self.other[:20], "seconds": round(self.seconds, 1)}


class _Timeout(BaseException):
    """The per-input time limit passed (BaseException: the code under test must not swallow it)."""


# --- mutations ------------------------------------------------------------------------------------------------
def _hostile(rng: random.Random) -> Any:
    return copy.deepcopy(rng.choice(HOSTILE))


def _containers(doc: Any, rng: random.Random, limit: int = 4000) -> list[Any]:
    """Up to ``limit`` dicts and lists inside ``doc`` (reservoir-sampled, so big traces cost little)."""
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
    """``doc`` with ``edits`` structural mutations: a field replaced by a hostile value, deleted, stringified, an
    element duplicated or dropped, a container replaced."""
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


def make_kineto(rng: random.Random, cache: dict[Path, Any], out: Path) -> list[str]:
    src = rng.choice([p for p in KINETO_SOURCES if p.exists()])
    base = cache.get(src)
    if base is None:
        base = cache[src] = _load_json(src)
    doc = dict(base) if isinstance(base, dict) else {"traceEvents": list(base)}
    events = list(doc.get("traceEvents") or [])
    picked = rng.sample(range(len(events)), min(len(events), rng.randint(1, 6)))
    for i in picked:  # copy only the events that change
        events[i] = mutate_json(copy.deepcopy(events[i]), rng, rng.randint(1, 3))
    doc["traceEvents"] = events
    if rng.random() < 0.15:
        doc = mutate_json(doc, rng, 1) if rng.random() < 0.5 else {**doc, rng.choice(
            ["deviceProperties", "distributedInfo", "baseTimeNanoseconds"]): _hostile(rng)}
    data = _dump(doc)
    if rng.random() < 0.25:
        data = mutate_bytes(data, rng)
    path = out / ("t.json.gz" if rng.random() < 0.3 else "t.json")
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=1)
        if rng.random() < 0.1:
            data = mutate_bytes(data, rng)
    path.write_bytes(data)
    return ["analyze", str(path)]


_CSV_HOSTILE = ["", "inf", "-inf", "nan", "1e400", "1e308", "-1", "99999999999999999999", "70000", "n/a",
                "(99999999999999999999, 1, 1)", "(1, 2)", "()", "1.234.567,89", "x" * 200_000, "[/]k", "\x1b[2J",
                "<b>", "ERR_NVGPUCTRPERM", "0", "1,2,3", "==PROF=="]


def make_ncu(rng: random.Random, cache: dict[Path, Any], out: Path) -> list[str]:
    src = rng.choice([p for p in NCU_SOURCES if p.exists()])
    text = cache.get(src)
    if text is None:
        text = cache[src] = src.read_text(errors="replace")
    lines = text.splitlines()
    head = [ln for ln in lines if ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in lines if not ln.startswith("==")))))
    for _ in range(rng.randint(1, 5)):
        if not rows:
            break
        r = rng.randrange(len(rows))
        op = rng.randrange(7)
        if op <= 2 and rows[r]:
            rows[r][rng.randrange(len(rows[r]))] = rng.choice(_CSV_HOSTILE)
        elif op == 3 and rows[r]:
            rows[r] = rows[r][:rng.randrange(len(rows[r]))]
        elif op == 4:
            rows.insert(r, list(rows[r]))
        elif op == 5:
            del rows[r]
        else:
            j = rng.randrange(max(1, len(rows[0])))
            rows = [row[:j] + row[j + 1:] for row in rows]
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(rows)
    data = ("\n".join(head) + "\n" + buf.getvalue()).encode()
    if rng.random() < 0.2:
        data = mutate_bytes(data, rng)
    path = out / ("ncu.csv.gz" if rng.random() < 0.2 else "ncu.csv")
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=1)
        if rng.random() < 0.3:
            data = mutate_bytes(data, rng)
    path.write_bytes(data)
    return ["analyze", str(path)]


def _mutate_file(path: Path, rng: random.Random) -> None:
    """One file of a folder: JSON mutated, bytes damaged, truncated, deleted, or a Parquet column rewritten."""
    op = rng.randrange(10)
    if op == 0:
        path.unlink()
    elif path.suffix == ".parquet" and op <= 6:
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
        path.write_bytes(b"")
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


def _folder_input(rng: random.Random, base: Path, out: Path, files: int) -> Path:
    target = out / base.name
    shutil.copytree(base, target)
    candidates = [p for p in target.rglob("*") if p.is_file()]
    for p in rng.sample(candidates, min(len(candidates), files)):
        if p.exists():
            _mutate_file(p, rng)
    return target


def make_profile(rng: random.Random, cache: dict[Path, Any], out: Path) -> list[str]:
    base = rng.choice(cache["__profiles__"])
    return ["analyze", str(_folder_input(rng, base, out, rng.randint(1, 2)))]


def make_rundir(rng: random.Random, cache: dict[Path, Any], out: Path) -> list[str]:
    base = rng.choice([p for p in RUN_SOURCES if p.exists()])
    return ["analyze", str(_folder_input(rng, base, out, rng.randint(1, 2)))]


def make_summary(rng: random.Random, cache: dict[Path, Any], out: Path) -> list[str]:
    src = SUMMARY_SOURCES[0]
    doc = cache.get(src)
    if doc is None:
        doc = cache[src] = _load_json(src)
    new = mutate_json(copy.deepcopy(doc), rng, rng.randint(1, 4))
    if rng.random() < 0.3:
        new[rng.choice(["steps", "gpu", "kernels", "layers", "findings", "phases", "device"])] = _hostile(rng)
    a, b = out / "base.json", out / "new.json"
    a.write_bytes(_dump(doc))
    b.write_bytes(_dump(new) if rng.random() < 0.9 else mutate_bytes(_dump(new), rng))
    return ["diff", str(a), str(b)] if rng.random() < 0.5 else ["diff", str(b), str(a)]


MAKERS: dict[str, Callable[[random.Random, dict[Path, Any], Path], list[str]]] = {
    "kineto": make_kineto, "ncu": make_ncu, "profile": make_profile, "rundir": make_rundir,
    "summary": make_summary}


def _saved_profiles(work: Path) -> list[Path]:
    from dnnprof.ingest.kineto import read_kineto

    out = []
    for src in PROFILE_SOURCES:
        target = work / "profiles" / src.parent.name
        if not (target / "profile.json").is_file():
            read_kineto(src).save(target)
        out.append(target)
    return out


# --- running --------------------------------------------------------------------------------------------------
def _place(exc: BaseException) -> str:
    """Where an exception came from: its type and the innermost dnnprof frame (the traceback's signature)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "dnnprof" in f.filename] or frames
    f = ours[-1] if ours else None
    where = f"{Path(f.filename).name}:{f.lineno} {f.name}" if f else "?"
    return f"{type(exc).__name__} at {where}"


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout


def run_one(args: list[str], timeout_s: float) -> tuple[str, str]:
    """(outcome, detail) of ``dnnprof ARGS --quiet --json FILE`` run in this process."""
    import warnings

    from dnnprof.cli.main import main

    out_json = Path(args[-1]).parent / "out.json"
    argv = [*args, "--quiet", "--json", str(out_json)]
    err, out = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rc = main(argv)
    except _Timeout:
        return "hang", " ".join(args)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: BLE001 - the harness counts what escapes, whatever it is
        return "traceback", _place(e) + "\n" + "".join(traceback.format_exception(e))[-4000:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    if rc == 0:
        return "success", ""
    if rc == 2 and len(lines) == 1 and lines[0].startswith("dnnprof: error: "):
        return "clean_error", lines[0]
    return "other_exit", f"rc={rc}: " + " | ".join(lines)[:300]


def run_batch(seed: int, inputs: int | None = None, minutes: float | None = None,
              formats: tuple[str, ...] = FORMATS, timeout_s: float = 20.0, workdir: Path | None = None,
              keep: Path | None = None) -> Outcome:
    """Run mutated inputs, formats in turn, until ``inputs`` inputs or ``minutes`` have passed."""
    rng = random.Random(seed)
    result = Outcome()
    start = time.monotonic()
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="dnnprof-fuzz-")) if own else workdir
    try:
        cache: dict[Any, Any] = {}
        if "profile" in formats:
            cache["__profiles__"] = _saved_profiles(work)
        n = 0
        while (inputs is None or n < inputs) and (minutes is None or time.monotonic() - start < minutes * 60):
            fmt = formats[n % len(formats)]
            case = work / f"case-{n}"
            case.mkdir()
            sub = random.Random(rng.getrandbits(64))
            args = MAKERS[fmt](sub, cache, case)
            kind, detail = run_one(args, timeout_s)
            result.add(fmt, kind)
            if kind == "traceback":
                place = detail.split("\n", 1)[0]
                entry = result.tracebacks.setdefault(place, {"count": 0, "format": fmt, "example": None,
                                                             "trace": detail.split("\n", 1)[1][-1500:]})
                entry["count"] += 1
                if keep is not None and entry["example"] is None:
                    entry["example"] = str(_keep(case, keep, n))
            elif kind == "hang":
                result.hangs.append(str(_keep(case, keep, n)) if keep is not None else detail)
            elif kind == "other_exit":
                result.other.append(detail)
            shutil.rmtree(case, ignore_errors=True)
            n += 1
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)
    result.seconds = time.monotonic() - start
    return result


def _keep(case: Path, keep: Path, n: int) -> Path:
    target = keep / f"case-{n}"
    shutil.copytree(case, target, dirs_exist_ok=True)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--inputs", type=int, default=None, help="Inputs in all (formats take turns).")
    ap.add_argument("--minutes", type=float, default=None, help="Stop after this long (default: 5 without --inputs).")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--timeout-s", type=float, default=20.0, help="Time limit per input (a hang past it).")
    ap.add_argument("--workdir", type=Path, default=None, help="Scratch folder (default: a new temporary one).")
    ap.add_argument("--keep", type=Path, default=None, help="Copy the first input of each traceback and each hang here.")
    a = ap.parse_args(argv)
    formats = tuple(f for f in a.formats.split(",") if f)
    unknown = set(formats) - set(FORMATS)
    if unknown:
        ap.error(f"unknown formats {sorted(unknown)}; known: {', '.join(FORMATS)}")
    minutes = a.minutes if a.minutes is not None or a.inputs is not None else 5.0
    if a.keep is not None:
        a.keep.mkdir(parents=True, exist_ok=True)
    res = run_batch(a.seed, a.inputs, minutes, formats, a.timeout_s, a.workdir, a.keep)
    print(json.dumps(res.to_dict(), indent=1))
    return 1 if res.total("traceback") or res.total("hang") else 0


if __name__ == "__main__":
    sys.exit(main())
