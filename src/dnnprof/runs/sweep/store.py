"""The sweep directory: an append-only log of finished trials and ``sweep.json`` rebuilt from it after each one.

``trials.jsonl`` gets one line per finished trial, flushed and fsynced before the next trial starts, so a killed
sweep loses at most the trial that was running. ``sweep.json`` is rewritten through a temporary file and a rename
after every trial: a reader never sees half a document. Re-running a sweep with the same ``--out`` reads the log
and skips every trial it already holds.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

from dnnprof.model.outputs import write_bytes_atomic
from dnnprof.runs.sweep.spec import SweepSpec, SweepSpecError

SCHEMA = "dnnprof.sweep/1"
SWEEP_FILE = "sweep.json"
LOG_FILE = "trials.jsonl"
TRIALS_DIR = "trials"


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clean(x: Any) -> Any:
    """NaN/inf → null (JSON has neither)."""
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write JSON through a temporary file in the same folder, fsync it, and rename it over ``path``."""
    write_bytes_atomic(path, (json.dumps(_clean(doc), indent=1) + "\n").encode(), option="--out")


class SweepStore:
    """Finished trials of one sweep directory.

    Args:
        out: the sweep directory (created when missing).
        spec: the sweep being run; a directory written by a sweep with another ``identity()`` is refused.
    """

    def __init__(self, out: Path, spec: SweepSpec) -> None:
        self.out = Path(out)
        self.spec = spec
        self.records: dict[str, dict[str, Any]] = {}
        self.created_at = utc_now()
        self.resumed = False

    def open(self) -> None:
        """Create the directory, or load what an earlier run of the same sweep finished.

        A folder that holds other things and no sweep (no ``sweep.json``, no ``trials.jsonl``) is refused: trials
        are never mixed into someone's folder, nor ``trials/`` in it cleared. A new sweep writes ``sweep.json``
        (status ``running``) at once, so the folder is recognised as a sweep even before its first trial ends.

        Raises:
            SweepSpecError: ``out`` is a file, holds files but no sweep, or holds a sweep of another
                target/device/limit/step count.
        """
        if self.out.exists() and not self.out.is_dir():
            raise SweepSpecError(f"{self.out}: --out exists and is not a directory")
        old = self.out / SWEEP_FILE
        if self.out.is_dir() and not old.is_file() and not (self.out / LOG_FILE).is_file():
            found = sorted(p.name for p in self.out.iterdir())
            if found:  # not a sweep to resume: never mix trials into (or delete from) someone's folder
                shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
                raise SweepSpecError(f"{self.out}: --out is a folder that holds no sweep to resume but other files "
                                     f"({shown}); use a new or empty folder")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / TRIALS_DIR).mkdir(exist_ok=True)
        except OSError as e:
            raise SweepSpecError(f"{self.out}: cannot create the sweep directory ({e.strerror})") from None
        if old.is_file():
            try:
                doc = json.loads(old.read_text())
            except ValueError as e:
                raise SweepSpecError(f"{old}: not a readable sweep.json ({e}); use another --out") from None
            if doc.get("schema") != SCHEMA:
                raise SweepSpecError(f"{old}: not a {SCHEMA} document; use another --out")
            theirs, ours = doc.get("identity") or {}, self.spec.identity()
            diff = sorted(k for k in ours if theirs.get(k) != ours[k])
            if diff:
                raise SweepSpecError(
                    f"{self.out}: holds a sweep with other {', '.join(diff)} "
                    f"({', '.join(f'{k}={theirs.get(k)!r}' for k in diff)}); resume it with the same options or "
                    "use another --out")
            self.created_at = doc.get("created_at") or self.created_at
        for rec in self._read_log():
            self.records[rec["id"]] = rec
        self.resumed = bool(self.records)
        if not old.is_file():  # mark the folder as a sweep from the start, so a re-run resumes it
            self.write(status="running", max_batch=[], elapsed_s=0.0, trials_run=0, messages=[])

    def _read_log(self) -> list[dict[str, Any]]:
        path = self.out / LOG_FILE
        if not path.is_file():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill: that trial runs again
            if isinstance(rec, dict) and "id" in rec:
                out.append(rec)
        return out

    def cached(self, trial_id: str) -> dict[str, Any] | None:
        """The finished record of a trial, or None."""
        return self.records.get(trial_id)

    def trial_dir(self, trial_id: str) -> Path:
        """An empty folder for a trial (what an interrupted attempt left is removed)."""
        path = self.out / TRIALS_DIR / trial_id
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def append(self, record: dict[str, Any]) -> None:
        """Log a finished trial durably."""
        with open(self.out / LOG_FILE, "a") as f:
            f.write(json.dumps(_clean(record)) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records[record["id"]] = record

    def write(self, *, status: str, max_batch: list[dict[str, Any]], elapsed_s: float, trials_run: int,
              messages: list[str]) -> dict[str, Any]:
        """Rebuild and write ``sweep.json``; return the document."""
        points = list(self.records.values())
        device = next((p["device"] for p in points if p.get("device") and p["status"] == "ok"),
                      next((p["device"] for p in points if p.get("device")), None))
        t = self.spec.target
        dev = {"kind": self.spec.device, **(device or {}), "requested": self.spec.device}
        dev["kind"] = (device or {}).get("kind", self.spec.device)
        doc = {
            "schema": SCHEMA,
            "workload": t.name,
            "target": {"kind": t.kind, "name": t.name, "argv": list(t.argv)},
            "device": dev,
            "default_batch_size": t.default_batch_size,
            "status": status,
            "created_at": self.created_at,
            "updated_at": utc_now(),
            "elapsed_s": round(elapsed_s, 3),
            "trials_run": trials_run,
            "trials_total": len(points),
            "config": self.spec.config_json(),
            "identity": self.spec.identity(),
            "messages": messages,
            "points": points,
            "max_batch_size": max_batch,
        }
        write_json_atomic(self.out / SWEEP_FILE, doc)
        return doc
