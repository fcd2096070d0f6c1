"""Shared test helpers: real trace fixtures and derived variants (format drift) written to tmp_path."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
GPT2 = DATA / "gpt2_bf16_train_h200" / "trace.json.gz"
DEEPSPEECH = DATA / "deepspeech_train_h200" / "trace.json.gz"
CPU_MLP = DATA / "cpu_mlp_train" / "trace.json.gz"


def load_raw(path: Path) -> dict[str, Any]:
    return json.loads(gzip.open(path).read())


def step_kernels_profile(path: Path, step: int) -> Any:
    """A profile with only a kernels table: one recorded step's launches as ``benchmarks/gpu/ncu_gpt2_counters.py``
    writes them (``columns``/``rows``/``names``; ``.json`` or ``.json.gz``), all in ``step`` of rank 0."""
    import numpy as np

    from dnnprof.model.profile import Profile
    from dnnprof.model.schema import empty_table

    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    rows = np.asarray(doc["rows"], dtype=np.int64)
    p = Profile()
    ids = np.asarray([p.intern(n) for n in doc["names"]], dtype=np.int32)
    t = empty_table("kernels", len(rows))
    for j, col in enumerate(doc["columns"]):
        t[col if col != "name" else "name_id"] = ids[rows[:, j]] if col == "name" else rows[:, j].astype(t[col].dtype)
    order = np.argsort(t["start_ns"], kind="stable")
    p.tables["kernels"] = {c: v[order] for c, v in t.items()}
    p.tables["kernels"]["step"][:] = step
    p.tables["kernels"]["rank"][:] = 0
    return p


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def variant(tmp_path: Path) -> Callable[..., Path]:
    """Write a modified copy of a fixture trace: variant(src, edit, name, gz=True) -> path."""

    def make(src: Path, edit: Callable[[dict[str, Any]], None], name: str = "trace.json", gz: bool = False) -> Path:
        doc = load_raw(src)
        edit(doc)
        out = tmp_path / (name + (".gz" if gz else ""))
        data = json.dumps(doc).encode()
        out.write_bytes(gzip.compress(data) if gz else data)
        return out

    return make


@pytest.fixture(autouse=True, scope="session")
def _rank_cache_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Folders of ranks are cached under $DNNPROF_CACHE_DIR or $XDG_CACHE_HOME (runs/rank_map.py): never the user's cache in tests."""
    import os

    old = {k: os.environ.pop(k, None) for k in ("XDG_CACHE_HOME", "DNNPROF_CACHE_DIR")}
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Iterator[None]:
    """Each test leaves the process's signal handlers as it found them: a collector finalized in this process
    ignores SIGINT while it flushes, and an ignored SIGINT is inherited by every subprocess a later test starts
    (a monitor or a script that then never sees Ctrl-C)."""
    import signal

    names = ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2")
    saved = {n: signal.getsignal(getattr(signal, n)) for n in names}
    yield
    for n, h in saved.items():
        if signal.getsignal(getattr(signal, n)) is not h and h is not None:
            signal.signal(getattr(signal, n), h)
