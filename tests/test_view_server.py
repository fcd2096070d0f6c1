"""``dnnprof view``'s server without a browser: it refuses every path outside its inputs, listens on loopback only,
caches an input by path, size and mtime, and a bad input is one error line."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="dnnprof view needs the 'view' extra (starlette, uvicorn)")

from test_view_browser import DDP, RUN, Server

CPU_MLP = Path(__file__).parent / "data" / "cpu_mlp_train" / "trace.json.gz"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("view-server")
    s = Server([RUN, DDP], tmp / "cache")
    yield s
    s.stop()


def test_server_refuses_paths_outside_its_inputs(server) -> None:
    import http.client

    for path in ("/static/../pyproject.toml", "/static/%2e%2e/%2e%2e/cli/main.py", "/static//etc/passwd",
                 "/etc/passwd", "/api/../../etc/passwd", "/api/0/..%2f..%2fsummary", "/api/9/overview",
                 "/static/core.js/../app.py", "/api/0/kernels/x", "/cache/summary.json"):
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        c.request("GET", path)
        r = c.getresponse()
        assert r.status == 404, path
        r.read()
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    c.request("GET", "/", headers={"Host": "attacker.example"})  # DNS rebinding: a foreign Host is refused
    assert c.getresponse().status == 400


def test_server_listens_on_loopback_only(server) -> None:
    assert server.sock.getsockname()[0] == "127.0.0.1"
    other = [a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
             if not a[4][0].startswith("127.")]
    for addr in other[:1]:
        with pytest.raises(OSError):
            socket.create_connection((addr, server.port), timeout=2)


def test_a_changed_trace_is_prepared_again(tmp_path: Path) -> None:
    from dnnprof.serve.inputs import prepared

    trace = tmp_path / "t.json.gz"
    shutil.copyfile(CPU_MLP, trace)
    first = prepared(trace, root=tmp_path / "cache")
    assert prepared(trace, root=tmp_path / "cache") == first  # cached
    os.utime(trace, ns=(1, 1))
    second = prepared(trace, root=tmp_path / "cache")
    assert second != first and (second / "view.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name not in ("t.json.gz", "cache")]  # nothing beside the input


def test_a_bad_input_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dnnprof.cli.main import main

    assert main(["view", str(tmp_path / "missing.json"), "--no-browser"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [e for e in err if "error" in e] == [err[-1]] and "missing.json: no such file or directory" in err[-1]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["view", str(bad), "--no-browser"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("dnnprof: error:") and "bad.json" in err[-1]


def test_the_perfetto_export_is_written_by_a_child_process_and_streamed(server, monkeypatch) -> None:
    """The server never loads a whole profile: with Profile.load failing in the server's process, the export still
    comes (from a child process), as a gzipped trace of every rank, and a second request gets the same file."""
    import gzip
    import json
    import urllib.request

    from dnnprof.model.profile import Profile

    def refuse(*a, **k):
        raise AssertionError("the server process loaded a whole profile")

    monkeypatch.setattr(Profile, "load", classmethod(refuse))
    with urllib.request.urlopen(server.url + "api/1/perfetto", timeout=300) as r:
        assert r.headers["Content-Type"] == "application/gzip"
        assert "attachment" in r.headers["Content-Disposition"]
        body = r.read()
    doc = json.loads(gzip.decompress(body))
    assert doc["otherData"]["ranks"] == [0, 1] and len(doc["traceEvents"]) > 1000
    from dnnprof.serve.perfetto_export import EXPORT_FILE

    (path,) = [inp.cache / EXPORT_FILE for inp in server.inputs[1:2]]
    mtime = path.stat().st_mtime_ns
    with urllib.request.urlopen(server.url + "api/1/perfetto", timeout=60) as r:
        assert r.read() == body
    assert path.stat().st_mtime_ns == mtime


def test_the_allocator_timeline_keeps_every_peak_when_bucketed(tmp_path: Path) -> None:
    """memory_events of a profile_memory trace: every event when few, else at most ``points`` per device with the
    highest total of each time bucket, so the peak the summary names is on the chart either way."""
    from dnnprof.serve.data import Store
    from dnnprof.serve.inputs import open_inputs

    store = Store(open_inputs([Path(__file__).parent / "data" / "cpu_mlp_memory" / "trace.json.gz"],
                              root=tmp_path / "cache"))
    q = store.queries(0)
    peak = q.summary["memory_events"]["devices"][0]["peak_total_allocated_bytes"]
    full = q.memory_timeline()
    (dev,) = full["devices"]
    assert full["events"] == 143 and len(dev["t_ms"]) == 143 and dev["label"] == "cpu" and dev["device"] is None
    assert max(dev["allocated_bytes"]) == peak and dev["t_ms"] == sorted(dev["t_ms"]) and dev["t_ms"][0] == 0
    (few,) = q.memory_timeline(points=20)["devices"]
    assert 10 <= len(few["t_ms"]) <= 20 and max(few["allocated_bytes"]) == peak
    assert [s["step"] for s in full["steps"]] == [2, 3, 4]
    assert store.answer("0/memory", {}) == full
    store.close()
