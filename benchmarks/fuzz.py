"""Fuzz ``dnnprof analyze`` (and ``diff``) with mutated real inputs: no input may end in a traceback or a hang.

Usage:
    python benchmarks/fuzz.py [--seed 1] [--inputs 2000 | --minutes 5] [--formats kineto,ncu,profile,rundir,summary]
                              [--workers 1] [--timeout-s 20] [--workdir DIR] [--keep DIR]
                              [--checkpoint FILE [--checkpoint-s 60]] [--memory-mb 4096]
    python benchmarks/fuzz.py --seed S --replay N [--formats …] [--keep DIR]   # input N of seed S, again

Each input is a real one (the repository's test traces, Nsight Compute CSVs, a saved profile, recorded run
directories, a summary JSON; the foreign traces of ``../shared/foreign`` when present) with a few seeded
mutations (``fuzz_inputs.py``): hostile values put in place of fields (integers beyond int64, inf, markup, terminal
escapes, invalid UTF-8, wrong types, deep nesting, long strings), fields and files deleted, rows shortened, bytes
flipped, files truncated, gzip corrupted, Parquet columns rewritten as text or nulls. Input ``N`` of seed ``S`` is
of format ``formats[N % len(formats)]`` and made from its own generator (``case_rng``), so it is the same whatever
the number of workers and can be made again alone (``--replay``). ``dnnprof analyze`` runs on it in the worker's
process with a time limit (SIGALRM); a worker that does not answer within the limit plus a grace is killed.
Each input ends as one of:

* success: exit 0;
* clean error: exit 2 with one line on stderr (``dnnprof: error: …``);
* other exit: any other exit code or a multi-line error (listed, not a failure by itself);
* traceback: an exception escaped ``main`` (a failure; the first input of each distinct place is kept);
* hang: the time limit passed (a failure, kept);
* crash: the worker died on it (a signal, the kernel's out-of-memory killer; a failure, kept).

An input the command under test changed (a file of it written, removed, or a file left beside it other than the
``--json`` output asked for, say a temporary one) is a failure too (``input_changed``), as is a seed folder
changed through a hard link.
Prints a JSON summary (inputs, outcomes and inputs per second per format, distinct tracebacks) and exits 1 on any
failure. ``--checkpoint`` writes the same summary to a file every ``--checkpoint-s`` while it runs. ``run_batch``
is the same for tests (``tests/test_fuzz.py``; ``workers=0`` runs in the calling process).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing as mp
import os
import queue
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_inputs import FORMATS, MAKERS, Seeds  # the sibling module, found through the path above

#: A worker silent this long past its input's time limit is killed (the limit did not fire: a hang in C code).
GRACE_S = 30.0
FAILURES = ("traceback", "hang", "crash")


@dataclass
class Outcome:
    """Counts of one batch."""

    inputs: Counter[str] = field(default_factory=Counter)  # per format
    results: dict[str, Counter[str]] = field(default_factory=dict)  # format → outcome → count
    busy_s: Counter[str] = field(default_factory=Counter)  # format → worker seconds spent on its inputs
    tracebacks: dict[str, dict[str, Any]] = field(default_factory=dict)  # place → {count, example, error}
    hangs: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    input_changed: list[str] = field(default_factory=list)  # files of an input the command wrote, removed or added
    other: list[str] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 0
    stopped: bool = False  # ended by Ctrl-C or SIGTERM before its inputs or minutes

    def add(self, fmt: str, kind: str, busy_s: float = 0.0) -> None:
        self.inputs[fmt] += 1
        self.results.setdefault(fmt, Counter())[kind] += 1
        self.busy_s[fmt] += busy_s

    def total(self, kind: str) -> int:
        return sum(c[kind] for c in self.results.values())

    def failures(self) -> int:
        return sum(self.total(k) for k in FAILURES) + len(self.input_changed)

    def to_dict(self) -> dict[str, Any]:
        n = sum(self.inputs.values())
        return {"inputs": n, "per_format": {f: dict(c) for f, c in self.results.items()},
                "success": self.total("success"), "clean_error": self.total("clean_error"),
                "other_exit": self.total("other_exit"), "traceback": self.total("traceback"),
                "hang": self.total("hang"), "crash": self.total("crash"),
                "distinct_tracebacks": self.tracebacks, "hangs": self.hangs[:20], "crashes": self.crashes[:20],
                "input_changed": self.input_changed[:20], "other_examples": self.other[:20],
                "seconds": round(self.seconds, 1), "workers": self.workers, "stopped": self.stopped,
                "inputs_per_s": round(n / self.seconds, 2) if self.seconds else None,
                # one worker's rate on each format alone: inputs / the worker seconds they took
                "inputs_per_worker_s": {f: round(self.inputs[f] / s, 2) for f, s in self.busy_s.items() if s}}


class Stopped(Exception):
    """SIGTERM reached the batch: it ends early, counting what was done."""


def _stop(_signum: int, _frame: Any) -> None:
    raise Stopped


class _Timeout(BaseException):
    """The per-input time limit passed (BaseException: the code under test must not swallow it)."""


def case_rng(seed: int, n: int) -> random.Random:
    """The generator of input ``n`` of seed ``seed``: independent of the inputs before it."""
    return random.Random(f"dnnprof-fuzz:{seed}:{n}")


def make_case(seed: int, n: int, formats: tuple[str, ...], seeds: Seeds, case: Path) -> tuple[str, list[str]]:
    """Write input ``n`` into the empty folder ``case``: (its format, the dnnprof arguments)."""
    fmt = formats[n % len(formats)]
    return fmt, MAKERS[fmt](case_rng(seed, n), seeds, case)


# --- running one input ----------------------------------------------------------------------------------------
def _place(exc: BaseException) -> str:
    """Where an exception came from: its type and the innermost dnnprof frame (the traceback's signature)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "dnnprof" in f.filename] or frames
    f = ours[-1] if ours else None
    where = f"{Path(f.filename).name}:{f.lineno} {f.name}" if f else "?"
    return f"{type(exc).__name__} at {where}"


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout


def _build_cli_once() -> None:
    """Build the click command of ``dnnprof``'s typer app once per process instead of once per call (typer
    rebuilds it from the function signatures on every call: ~30 ms, more than many inputs take). ``main`` still
    runs whole for every input; only the construction is shared."""
    import typer.main

    build = typer.main.get_command
    if getattr(build, "_fuzz_memo", False):
        return
    built: list[tuple[Any, Any]] = []

    def get_command(app: Any) -> Any:
        for known, cmd in built:
            if known is app:
                return cmd
        cmd = build(app)
        built.append((app, cmd))
        return cmd

    get_command._fuzz_memo = True  # type: ignore[attr-defined]
    typer.main.get_command = get_command


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


def _one(seed: int, n: int, formats: tuple[str, ...], seeds: Seeds, work: Path, timeout_s: float,
         keep: Path | None) -> dict[str, Any]:
    """Make and run input ``n``; the message a worker sends about it."""
    t0 = time.monotonic()
    case = work / "case"
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    fmt, args = make_case(seed, n, formats, seeds, case)
    before = _stamps(case)
    kind, detail = run_one(args, timeout_s)
    after = _stamps(case)
    after.pop("out.json", None)  # the one output asked for
    changed = [f"{case.name}/{name}: {'removed' if name not in after else 'left behind' if name not in before else 'changed'}"
               for name in sorted(before.keys() | after.keys()) if before.get(name) != after.get(name)]
    if fmt in ("profile", "rundir"):
        changed += [f"seed {p}: changed" for p in seeds.check_pristine()]
    kept = str(_keep(case, keep, seed, n)) if keep is not None and kind in FAILURES else None
    shutil.rmtree(case, ignore_errors=True)
    return {"n": n, "format": fmt, "kind": kind, "detail": detail, "busy_s": time.monotonic() - t0,
            "kept": kept, "input_changed": changed}


def _stamps(case: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under ``case``: (inode, size, modification time): what the command under test may not change."""
    out = {}
    for p in case.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file():
                st = p.stat()
                out[str(p.relative_to(case))] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def _keep(case: Path, keep: Path, seed: int, n: int) -> Path:
    target = keep / f"seed{seed}-input{n}"
    if not target.exists():
        shutil.copytree(case, target)
    return target


def _record(result: Outcome, seed: int, msg: dict[str, Any]) -> None:
    fmt, kind, detail, n = msg["format"], msg["kind"], msg["detail"], msg["n"]
    result.add(fmt, kind, msg["busy_s"])
    where = msg["kept"] or f"--seed {seed} --replay {n}"
    if kind == "traceback":
        place, _, trace = detail.partition("\n")
        entry = result.tracebacks.setdefault(place, {"count": 0, "format": fmt, "example": where,
                                                     "trace": trace[-1500:]})
        entry["count"] += 1
    elif kind in ("hang", "crash"):
        (result.hangs if kind == "hang" else result.crashes).append(f"{where}: {detail}"[:500])
    elif kind == "other_exit":
        result.other.append(detail)
    if msg["input_changed"]:  # one entry per input
        result.input_changed.append(f"{where}: " + "; ".join(msg["input_changed"])[:500])


# --- workers --------------------------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL to this process when its parent dies (no worker outlives a killed run)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _limit_memory(memory_mb: int | None) -> None:
    """Cap this process's address space: an input that makes dnnprof allocate without bound ends in a MemoryError
    (a traceback, kept) instead of the kernel's out-of-memory killer choosing among everyone's processes."""
    if memory_mb:
        import resource

        # On top of what the process holds already: a worker forked from a big parent (a test run's pytest holds
        # several GB of address space) would otherwise be over its cap from the start, and even the queue's feeder
        # thread could not get its stack (it then never starts, and the worker hangs).
        with open("/proc/self/statm") as f:
            held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = held + memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _worker(w: int, seed: int, first: int, step: int, stop: int | None, deadline: float | None,
            formats: tuple[str, ...], timeout_s: float, work: Path, keep: Path | None, out: Any,
            memory_mb: int | None = None) -> None:
    """Inputs ``first, first+step, …`` until ``stop`` or ``deadline``; 'start' and 'done' messages on ``out``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    out.put(("ready", w, first, time.monotonic()))  # the queue's feeder thread starts before the cap
    _limit_memory(memory_mb)
    _build_cli_once()
    seeds = Seeds(work)
    n = first
    while (stop is None or n < stop) and (deadline is None or time.time() < deadline):
        out.put(("start", w, n, time.monotonic()))
        out.put(("done", w, _one(seed, n, formats, seeds, work, timeout_s, keep)))
        n += step
    out.put(("exit", w, n, 0.0))


def _run_workers(seed: int, inputs: int | None, deadline: float | None, formats: tuple[str, ...], timeout_s: float,
                 work: Path, keep: Path | None, workers: int, result: Outcome, checkpoint: Callable[[], None],
                 memory_mb: int | None) -> None:
    ctx = mp.get_context("fork")
    msgs: Any = ctx.Queue()
    procs: dict[int, Any] = {}
    current: dict[int, tuple[int, float]] = {}  # worker → (input, monotonic start)

    def start(w: int, first: int) -> None:
        (work / f"w{w}").mkdir(parents=True, exist_ok=True)
        p = ctx.Process(target=_worker, args=(w, seed, first, workers, inputs, deadline, formats, timeout_s,
                                              work / f"w{w}", keep, msgs, memory_mb))  # not daemonic: analyze may start a pool
        p.start()
        procs[w] = p

    def lost(w: int, kind: str, detail: str) -> None:
        """Worker ``w`` died or was killed on its current input: count it, keep it, go on after it."""
        n, _ = current.pop(w)
        case = work / f"w{w}" / "case"
        kept = str(_keep(case, keep, seed, n)) if keep is not None and case.exists() else None
        _record(result, seed, {"n": n, "format": formats[n % len(formats)], "kind": kind, "detail": detail,
                               "busy_s": 0.0, "kept": kept, "input_changed": []})
        start(w, n + workers)

    try:
        for w in range(workers):
            start(w, w)
        while procs:
            try:
                tag, w, *rest = msgs.get(timeout=1.0)
            except queue.Empty:
                tag = ""
            if tag == "start":
                current[w] = (rest[0], rest[1])
            elif tag == "done":
                current.pop(w, None)
                _record(result, seed, rest[0])
            elif tag == "exit" and w in procs:
                procs.pop(w).join()
            now = time.monotonic()
            for v, p in list(procs.items()):
                if v in current and now - current[v][1] > timeout_s + GRACE_S:
                    p.kill()
                    p.join()
                    lost(v, "hang", f"no answer {timeout_s + GRACE_S:.0f} s after the input started; killed")
                elif not p.is_alive() and msgs.empty():  # died, or exited and its last message was lost
                    p.join()
                    if v in current:
                        lost(v, "crash", f"worker died (exit code {p.exitcode})")
                    else:
                        procs.pop(v)
            checkpoint()
    finally:
        for p in procs.values():
            p.kill()
            p.join()


def run_batch(seed: int, inputs: int | None = None, minutes: float | None = None,
              formats: tuple[str, ...] = FORMATS, timeout_s: float = 20.0, workdir: Path | None = None,
              keep: Path | None = None, workers: int = 0, checkpoint: Path | None = None,
              checkpoint_s: float = 60.0, memory_mb: int | None = None) -> Outcome:
    """Run mutated inputs ``0, 1, …`` until ``inputs`` inputs or ``minutes`` have passed: in this process
    (``workers=0``) or in that many worker processes, each with its address space capped at ``memory_mb``."""
    result = Outcome(workers=workers)
    start = time.monotonic()
    deadline = time.time() + minutes * 60 if minutes is not None else None
    own = workdir is None
    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(prefix="dnnprof-fuzz-", dir=shm if os.access(shm, os.W_OK) else None)) if own \
        else workdir
    last = [time.monotonic()]

    def save_checkpoint(force: bool = False) -> None:
        if checkpoint is None or not (force or time.monotonic() - last[0] >= checkpoint_s):
            return
        last[0] = time.monotonic()
        result.seconds = last[0] - start
        doc = {"seed": seed, "formats": list(formats), "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "running": not force, **result.to_dict()}
        tmp = checkpoint.with_name(checkpoint.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, checkpoint)

    try:
        if workers:
            _run_workers(seed, inputs, deadline, formats, timeout_s, work, keep, workers, result, save_checkpoint,
                         memory_mb)
        else:
            _build_cli_once()
            seeds = Seeds(work)
            n = 0
            while (inputs is None or n < inputs) and (deadline is None or time.time() < deadline):
                _record(result, seed, _one(seed, n, formats, seeds, work, timeout_s, keep))
                save_checkpoint()
                n += 1
    except (KeyboardInterrupt, Stopped):  # Ctrl-C or SIGTERM: the inputs done so far are the result
        result.stopped = True
    finally:
        result.seconds = time.monotonic() - start
        save_checkpoint(force=True)
        if own:
            shutil.rmtree(work, ignore_errors=True)
    return result


def replay(seed: int, n: int, formats: tuple[str, ...], timeout_s: float, keep: Path | None) -> int:
    """Make input ``n`` again (into ``keep`` when given), run it, print its outcome and detail."""
    work = Path(tempfile.mkdtemp(prefix="dnnprof-fuzz-replay-"))
    try:
        seeds = Seeds(work)
        case = (keep / f"seed{seed}-input{n}") if keep is not None else work / "case"
        shutil.rmtree(case, ignore_errors=True)
        case.mkdir(parents=True)
        fmt, args = make_case(seed, n, formats, seeds, case)
        kind, detail = run_one(args, timeout_s)
        print(json.dumps({"input": n, "format": fmt, "args": args, "outcome": kind}))
        print(detail)
        return 1 if kind in FAILURES else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--inputs", type=int, default=None, help="Inputs in all (formats take turns).")
    ap.add_argument("--minutes", type=float, default=None, help="Stop after this long (default: 5 without --inputs).")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--workers", type=int, default=1, help="Worker processes (0: in this process, no watchdog).")
    ap.add_argument("--timeout-s", type=float, default=20.0, help="Time limit per input (a hang past it).")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="Scratch folder (default: a new temporary one, on /dev/shm where there is one).")
    ap.add_argument("--keep", type=Path, default=None, help="Copy each input that failed here.")
    ap.add_argument("--checkpoint", type=Path, default=None, help="Write the JSON summary here while running.")
    ap.add_argument("--checkpoint-s", type=float, default=60.0, help="Seconds between checkpoints.")
    ap.add_argument("--memory-mb", type=int, default=4096,
                    help="Address-space cap of each worker (0: none); past it an input ends in a MemoryError.")
    ap.add_argument("--replay", type=int, default=None, metavar="N", help="Make and run input N of --seed only.")
    a = ap.parse_args(argv)
    formats = tuple(f for f in a.formats.split(",") if f)
    unknown = set(formats) - set(FORMATS)
    if unknown or not formats:
        ap.error(f"unknown formats {sorted(unknown)}; known: {', '.join(FORMATS)}")
    if a.workers < 0:
        ap.error("--workers must be 0 or more")
    if a.keep is not None:
        a.keep.mkdir(parents=True, exist_ok=True)
    if a.replay is not None:
        return replay(a.seed, a.replay, formats, a.timeout_s, a.keep)
    minutes = a.minutes if a.minutes is not None or a.inputs is not None else 5.0
    import dnnprof.cli.main  # noqa: F401 - imported once before the workers fork

    signal.signal(signal.SIGTERM, _stop)

    res = run_batch(a.seed, a.inputs, minutes, formats, a.timeout_s, a.workdir, a.keep, a.workers, a.checkpoint,
                    a.checkpoint_s, a.memory_mb or None)
    print(json.dumps(res.to_dict(), indent=1))
    return 1 if res.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
