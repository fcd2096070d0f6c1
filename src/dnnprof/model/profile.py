"""The canonical profile: typed columnar tables, device info and run metadata; save/load; invariants."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dnnprof.model.device import DeviceInfo
from dnnprof.model.mapped_columns import release_pages, release_pages_of
from dnnprof.model.outputs import OutputError, check_parent, replace_dir, temp_dir_beside
from dnnprof.model.schema import TABLES, empty_table

#: Written into every saved profile; bump on an incompatible schema change.
PROFILE_FORMAT = "dnnprof.profile/1"
_META_FILE = "profile.json"
#: Ids :meth:`Profile.name_tests` reads at once.
_ID_BLOCK = 1 << 20
_INDEX_LOCK = threading.Lock()  # a profile's string index is built once though the analysis's threads all ask


class ProfileError(ValueError):
    """A profile is malformed or cannot be read."""


Table = dict[str, np.ndarray]


@dataclass
class Profile:
    """A whole capture: one or several ranks, their GPUs, and every table in ``schema.TABLES``.

    ``strings`` holds every name once; ``*_id`` columns index it. Use :meth:`name` / :meth:`names` to decode.
    """

    tables: dict[str, Table] = field(default_factory=dict)
    strings: list[str] = field(default_factory=list)
    devices: list[DeviceInfo] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in TABLES:
            self.tables.setdefault(name, empty_table(name))
        self._string_index: dict[str, int] | None = None

    # --- strings -------------------------------------------------------------------------------------------
    def intern(self, s: str) -> int:
        """Id of ``s`` in ``strings``, adding it when new (one thread at a time interns; any may look up)."""
        index = self._index()
        i = index.get(s)
        if i is None:
            i = len(self.strings)
            self.strings.append(s)
            index[s] = i
        return i

    def _index(self) -> dict[str, int]:
        """The strings' ids by string, built on first use (once, whichever threads ask)."""
        index = self._string_index
        if index is None:
            with _INDEX_LOCK:
                if self._string_index is None:
                    self._string_index = {v: i for i, v in enumerate(self.strings)}
                index = self._string_index
        return index

    def name(self, string_id: int) -> str:
        return self.strings[string_id] if string_id >= 0 else ""

    def names(self, ids: np.ndarray) -> np.ndarray:
        """Decode an id column into an object array of str ("" for -1)."""
        lut = np.asarray([*self.strings, ""], dtype=object)  # one snapshot: another thread may intern meanwhile
        ids = np.asarray(ids)
        return lut[np.where(ids < 0, len(lut) - 1, ids)]

    def names_where(self, ids: np.ndarray, test: Callable[[str], object]) -> np.ndarray:
        """``test(name)`` of each id's name ("" for -1) as a bool column, called once per distinct id.

        For string tests on name columns: a fixed-width copy of the names (``astype(str)`` and ``np.char``) is
        as wide as the longest name in every row, which one name of megabytes makes gigabytes.
        """
        return self.name_tests(ids)(test)

    def name_tests(self, ids: np.ndarray) -> Callable[[Callable[[str], object]], np.ndarray]:
        """``names_where(ids, test)`` for many tests of one id column: the distinct ids are found once. Ids outside
        the strings read as -1 (""); a column of valid ids is indexed as it is, without a copy."""
        ids, present, n = self._present(ids)
        strings = self.strings

        def where(test: Callable[[str], object]) -> np.ndarray:
            hit = np.zeros(n + 1, dtype=bool)  # hit[n], read by id -1: the test of ""
            hit[present] = [bool(test(strings[i] if i < n else "")) for i in present]
            out = np.empty(ids.size, dtype=bool)
            for a in range(0, ids.size, _ID_BLOCK):  # a big trace's mapped id column: a block's pages at a time
                out[a:a + _ID_BLOCK] = hit[ids[a:a + _ID_BLOCK]]
                release_pages_of(ids)
            return out

        return where

    def distinct_names(self, ids: np.ndarray) -> list[str]:
        """The distinct names of an id column, in id order ("" last, for -1 or an id outside the strings)."""
        _, present, n = self._present(ids)
        strings = self.strings
        return [strings[i] if i < n else "" for i in present]

    def _present(self, ids: np.ndarray) -> tuple[np.ndarray, list[int], int]:
        """The id column with ids outside the strings as -1, its distinct ids in order (-1 as ``n``), and ``n``:
        the number of strings they were read against (another thread may intern meanwhile). Marked in a table of
        the strings' size: no sort and no copy of a column of tens of millions of ids."""
        n = len(self.strings)
        ids = np.asarray(ids)
        seen = np.zeros(n + 1, dtype=bool)
        for a in range(0, ids.size, _ID_BLOCK):  # a big trace's mapped id column: a block's pages at a time
            block = ids[a:a + _ID_BLOCK]
            if int(block.min()) < -1 or int(block.max()) >= n:
                ids = np.where((ids >= 0) & (ids < n), ids, -1)  # rare: ids outside the strings, read as -1
                seen[ids] = True
                break
            seen[block] = True  # -1 marks seen[n]: ""
            release_pages_of(ids)
        return ids, np.flatnonzero(seen).tolist(), n

    def string_id(self, s: str) -> int:
        """Id of ``s`` or -1 when the profile never mentions it."""
        return self._index().get(s, -1)

    # --- tables --------------------------------------------------------------------------------------------
    def __getitem__(self, table: str) -> Table:
        return self.tables[table]

    def rows(self, table: str) -> int:
        t = self.tables[table]
        first = next(iter(t.values()))
        return int(first.shape[0])

    @property
    def ranks(self) -> list[int]:
        seen: set[int] = set()
        for t in self.tables.values():
            if "rank" in t and t["rank"].size:
                lo, hi = int(t["rank"].min()), int(t["rank"].max())  # one rank: no sort of a big table's column
                seen.update([lo] if lo == hi else np.unique(t["rank"]).tolist())
        return sorted(seen) or [0]

    def device(self, device_id: int = 0, rank: int = 0) -> DeviceInfo | None:
        for d in self.devices:
            if d.id == device_id and d.rank == rank:
                return d
        return None

    @property
    def has_gpu_activity(self) -> bool:
        return any(self.rows(t) > 0 for t in ("kernels", "memcpy", "memset"))

    # --- invariants ----------------------------------------------------------------------------------------
    def self_check(self) -> list[str]:
        """Every broken invariant as a sentence; an empty list means the profile is consistent."""
        problems: list[str] = []
        n_strings = len(self.strings)
        sizes = {name: self.rows(name) for name in self.tables}
        for name, cols in TABLES.items():
            t = self.tables[name]
            expected = {c.name for c in cols}
            if set(t) != expected:
                problems.append(f"{name}: columns {sorted(set(t) ^ expected)} differ from the schema")
                continue
            lengths = {c: int(v.shape[0]) for c, v in t.items()}
            if len(set(lengths.values())) > 1:
                problems.append(f"{name}: columns have different lengths {lengths}")
                continue
            for c in cols:
                arr = t[c.name]
                if arr.dtype != np.dtype(c.dtype):
                    problems.append(f"{name}.{c.name}: dtype {arr.dtype}, schema says {c.dtype}")
                is_string_id = c.name.endswith("_id") and c.name not in {"external_id", "fwd_thread_id", "graph_id"}
                if is_string_id and arr.size and (arr.max() >= n_strings or arr.min() < -1):
                    problems.append(f"{name}.{c.name}: string ids outside [-1, {n_strings})")
                if c.name == "dur_ns" and arr.size and arr.min() < 0:
                    problems.append(f"{name}: {int((arr < 0).sum())} rows with negative duration")
                release_pages()  # a big trace's mapped columns: one column's pages at a time
            for link, target in (("launch_row", "runtime"), ("op_row", "ops"), ("parent_row", "ops"),
                                 ("fwd_row", "ops"), ("kernel_row", "kernels")):
                if link in t and t[link].size:
                    v = t[link]
                    if v.max() >= sizes[target] or v.min() < -1:
                        problems.append(f"{name}.{link}: row indexes outside {target}")
                    release_pages()
            ordered = {"kernels": "start_ns", "memcpy": "start_ns", "memset": "start_ns", "ops": "start_ns",
                       "runtime": "start_ns", "memory_events": "ts_ns"}.get(name)
            if ordered and not in_order(t[ordered]):
                problems.append(f"{name}: rows are not ordered by {ordered}")
            release_pages()
        steps = self.tables["steps"]
        if steps["number"].size:
            for name in ("kernels", "memcpy", "memset", "ops", "runtime", "memory_events"):
                unknown = np.setdiff1d(_distinct(self.tables[name]["step"]), np.append(steps["number"], -1))
                if unknown.size:
                    problems.append(f"{name}: step numbers {unknown[:5].tolist()} are not in `steps`")
                release_pages()
        return problems

    # --- persistence ---------------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str], force: bool = False) -> Path:
        """Write the profile as a folder of Parquet files.

        The folder is written complete beside ``directory`` and then put in its place (see
        :func:`dnnprof.model.outputs.replace_dir`): a crash leaves the earlier profile or the new one, never half
        of one. ``directory`` may be new, an empty folder, or a profile saved earlier (replaced); anything else is
        refused (see :func:`check_save_target`; ``force`` also replaces a profile of another dnnprof version).

        Raises:
            OutputError: ``directory`` is a file or a folder that holds what dnnprof did not write, or the
                profile could not be written (a full disk): the message names the folder and the system's reason.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        from dnnprof.model.table_files import write_table

        target = check_save_target(directory, force=force)
        tmp = temp_dir_beside(target)
        try:
            for name, t in self.tables.items():
                write_table(t, tmp / f"{name}.parquet")  # a slice of rows at a time
            pq.write_table(pa.table({"id": pa.array(np.arange(len(self.strings), dtype=np.int32)),
                                     "value": pa.array(self.strings, type=pa.string())}),
                           tmp / "strings.parquet", compression="zstd")
            doc = {"format": PROFILE_FORMAT, "meta": self.meta, "devices": [d.to_dict() for d in self.devices]}
            (tmp / _META_FILE).write_text(json.dumps(doc, indent=1, default=str))
            check_save_target(target, force=force)  # again: the folder may have changed while the tables were written
            replace_dir(tmp, target)
        except OSError as e:  # a full disk, a quota, a file system gone read-only: one line naming the folder
            shutil.rmtree(tmp, ignore_errors=True)
            raise OutputError(f"{target}: cannot save the profile ({e.strerror or e}); nothing half-written "
                              "was left there") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return target

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Profile:
        """Read a directory written by :meth:`save` (a big profile's tables into mapped columns, a row group at a
        time: see :mod:`dnnprof.model.table_files`)."""
        d = Path(directory)
        meta_path = d / _META_FILE
        if not meta_path.is_file():
            aside = sorted(d.parent.glob(f".{d.name}.old-*")) if not d.exists() else []
            if aside:
                raise ProfileError(f"{d}: no such folder; an interrupted save left the earlier profile in {aside[-1]} "
                                   f"(rename it to {d.name})")
            raise ProfileError(f"{d}: not a dnnprof profile (no {_META_FILE})")
        from dnnprof.model import load_checks as check

        try:
            doc = json.loads(meta_path.read_bytes())
        except json.JSONDecodeError as e:
            raise ProfileError(f"{meta_path}: invalid JSON ({e.msg} at line {e.lineno})") from None
        except UnicodeDecodeError:
            raise ProfileError(f"{meta_path}: invalid JSON (not UTF-8 text)") from None
        except RecursionError:
            raise ProfileError(f"{meta_path}: invalid JSON (nested too deeply)") from None
        except OSError as e:
            raise ProfileError(f"{meta_path}: cannot read ({e.strerror})") from None
        problem = check.document_problem(doc)
        if problem:
            raise ProfileError(f"{meta_path}: {problem}")
        if doc.get("format") != PROFILE_FORMAT:
            raise ProfileError(f"{d}: profile format {str(doc.get('format'))[:60]!r}, this dnnprof reads "
                               f"{PROFILE_FORMAT}")
        from dnnprof.model.table_files import mapped_read, read_table, read_whole

        tables: dict[str, Table] = {}
        missing: list[str] = []
        paths = {name: d / f"{name}.parquet" for name in TABLES}
        mapped = mapped_read(p for p in paths.values() if p.is_file())
        for name, path in paths.items():
            if not path.is_file():
                tables[name] = empty_table(name)
                missing.append(name)
                continue
            tables[name] = read_table(name, path, ProfileError, mapped)
        if not (d / "strings.parquet").is_file():
            raise ProfileError(f"{d}: not a complete dnnprof profile (no strings.parquet)")
        st = read_whole(d / "strings.parquet", ProfileError)
        if "value" not in st.column_names:
            raise ProfileError(f"{d / 'strings.parquet'}: no column value")
        problem = check.strings_problem(st.column("value"))
        if problem:
            raise ProfileError(f"{d / 'strings.parquet'}: {problem}")
        strings = st.column("value").to_pylist()
        problem = check.link_problem(tables, len(strings), d, missing) or check.code_problem(tables, d)
        if problem:
            raise ProfileError(problem)
        devices = [DeviceInfo.from_dict(x) for x in doc.get("devices", [])]
        meta = check.meta_without_nulls(doc.get("meta", {}))
        if missing:  # a profile saved by an older dnnprof lacks newer tables; a deleted file shows here too
            source = meta.setdefault("source", {"path": str(d), "format": "dnnprof-profile"})
            source.setdefault("notes", []).append(f"tables missing from the saved profile (read as empty): "
                                                   f"{', '.join(missing)}")
        return cls(tables=tables, strings=strings, devices=devices, meta=meta)

    def query(self, sql: str, directory: str | os.PathLike[str] | None = None) -> Any:
        """Run SQL over the tables with DuckDB (embedded, no server); returns a DuckDB relation.

        Each table is a view of the same name with its ``*_id`` columns also decoded as ``*`` text columns
        (``name_id`` → ``name``), so ``SELECT name, sum(dur_ns) FROM kernels GROUP BY 1`` works.
        """
        import duckdb
        import pyarrow as pa

        con = duckdb.connect()
        con.register("strings", pa.table({"id": np.arange(len(self.strings), dtype=np.int32),
                                          "value": pa.array(self.strings, type=pa.string())}))
        for name, t in self.tables.items():
            con.register(f"_{name}", pa.table(dict(t)))
            joins, cols = [], ["t.*"]
            ids = (c for c in t if c.endswith("_id") and c not in {"external_id", "fwd_thread_id", "graph_id"})
            for i, c in enumerate(ids):
                joins.append(f"LEFT JOIN strings s{i} ON s{i}.id = t.{c}")
                cols.append(f"s{i}.value AS {c[:-3]}")
            con.execute(f"CREATE VIEW {name} AS SELECT {', '.join(cols)} FROM _{name} t {' '.join(joins)}")
        return con.sql(sql)


def _owned_by_profile(entry: Path) -> bool:
    """A file :meth:`Profile.save` writes (its metadata or a table); anything else in the folder is someone's."""
    return entry.is_file() and not entry.is_symlink() and (entry.name == _META_FILE or entry.suffix == ".parquet")


def check_save_target(directory: str | os.PathLike[str], force: bool = False) -> Path:
    """The folder :meth:`Profile.save` may write ``directory`` to, or :class:`OutputError` saying why not.

    Accepted: a new path (missing parent folders are created), an empty folder, or a dnnprof profile of this
    format holding only what ``save`` writes (``profile.json`` and ``*.parquet``), which is replaced. With
    ``force``, also such a folder whose ``profile.json`` is of another dnnprof version or unreadable. Never, even
    with ``force``: a file (a profile is a folder), or a folder holding anything else (a user's files, a run
    directory): dnnprof deletes only what it wrote. A symbolic link to a folder is followed.
    """
    target = Path(directory)
    if target.is_symlink() and not target.exists():
        raise OutputError(f"{target}: is a broken symbolic link; give a new folder name or fix the link")
    if target.is_symlink() and target.is_dir():
        target = target.resolve()
    if target.exists() and not target.is_dir():
        raise OutputError(f"{target}: is a file; a profile is saved as a folder: give a new folder name (a file is "
                          "never replaced, even with --force)")
    check_parent(target)
    if not target.exists():
        return target
    entries = sorted(target.iterdir())
    if not entries:
        return target
    foreign = [e.name for e in entries if not _owned_by_profile(e)]
    meta = target / _META_FILE
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        what = f"a dnnprof profile but also holds {shown}, which dnnprof did not write" if meta.is_file() \
            else f"not empty and not a dnnprof profile (it holds {shown})"
        raise OutputError(f"{target}: folder is {what}; save into a new or empty folder (dnnprof replaces only a "
                          "profile it saved, even with --force)")
    try:
        fmt = json.loads(meta.read_text()).get("format") if meta.is_file() else None
    except (OSError, ValueError, AttributeError):
        fmt = None
    if fmt == PROFILE_FORMAT or force:
        return target
    found = f"a {fmt} profile (another dnnprof version)" if isinstance(fmt, str) and fmt.startswith("dnnprof.") \
        else "Parquet files without a readable dnnprof profile.json"
    raise OutputError(f"{target}: holds {found}; save into a new or empty folder, or add --force to replace it")


def concat_tables(parts: Iterable[Table]) -> Table:
    """Row-wise concatenation of tables with the same columns."""
    parts = list(parts)
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def in_order(column: np.ndarray) -> bool:
    """Whether the column never decreases, a block of rows at a time (a big trace's columns are tens of millions
    of rows: no difference of every row at once; a mapped column's pages are given back after each block)."""
    for a in range(0, column.size - 1, _CHECK_ROWS):
        block = column[a:a + _CHECK_ROWS + 1]  # one row of overlap: the step between blocks is checked too
        ok = not bool((block[1:] < block[:-1]).any())
        release_pages_of(column)
        if not ok:
            return False
    return True


def _distinct(column: np.ndarray) -> np.ndarray:
    """``np.unique(column)``, a block of rows at a time."""
    parts = [np.unique(column[a:a + _CHECK_ROWS]) for a in range(0, column.size, _CHECK_ROWS)]
    return np.unique(np.concatenate(parts)) if parts else np.unique(column)


#: Rows a consistency check reads at once.
_CHECK_ROWS = 1 << 20
