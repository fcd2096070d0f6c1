"""``dnnprof view`` in a real headless Chromium (Playwright): every view loads without a console error on a GPU run
directory, a two-rank folder, a sweep and a diff; sorting and filtering change the rows; a hostile kernel name shows
literally; the self-contained ``analyze --html`` page works offline. Screenshots go to ``$DNNPROF_VIEW_SCREENSHOTS``
or a temporary folder (printed).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="dnnprof view needs the 'view' extra (starlette, uvicorn)")
playwright_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need the playwright package")

DATA = Path(__file__).parent / "data"
RUN = DATA / "run_gpt2_infer_h100"
DDP = DATA / "ddp_h100" / "straggler"
DDP_FORWARD = DATA / "ddp_runs_h100" / "forward"  # rank 1 sleeps 30 ms in its forward
MEMORY = DATA / "cpu_mlp_memory" / "trace.json.gz"  # profile_memory=True: 143 allocator events
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
HOSTILE = "<script>alert(1)</script>"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="no chromium here (apt-get install chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keep = os.environ.get("DNNPROF_VIEW_SCREENSHOTS")  # a folder that outlives the run (CI artifacts)
    d = Path(keep) if keep else tmp_path_factory.mktemp("view-screenshots")
    d.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {d}")
    return d


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _hostile_trace(tmp: Path) -> Path:
    """The GPT-2 run's trace with one kernel renamed to a script tag."""
    src = next((RUN / "trace").glob("*.json.gz"))
    doc = json.loads(gzip.open(src).read())
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = HOSTILE
            break
    out = tmp / "hostile.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def _hostile_memory_trace(tmp: Path) -> Path:
    """The memory-profiled MLP's trace with its matmul ops renamed to a script tag (they make its largest
    allocations, so the name reaches the Memory view)."""
    doc = json.loads(gzip.open(MEMORY).read())
    for e in doc["traceEvents"]:
        if e.get("name") == "aten::mm":
            e["name"] = HOSTILE
    out = tmp / "memory-hostile.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out


def _sweep(tmp: Path) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_sweep_report import make_sweep

    d = tmp / "sweep"
    d.mkdir()
    (d / "sweep.json").write_text(json.dumps(make_sweep()))
    return d


class Server:
    """The dashboard on a free port of 127.0.0.1, in a thread of this process."""

    def __init__(self, paths: list[Path], cache: Path) -> None:
        import uvicorn

        from dnnprof.serve.app import create_app
        from dnnprof.serve.inputs import open_inputs
        from dnnprof.serve.server import bind

        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self.inputs = open_inputs(paths, root=cache)
        app = create_app(self.inputs)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        for _ in range(100):
            if self.server.started:
                break
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()


def _recording(tmp: Path) -> Path:
    """A ``dnnprof monitor --record`` file of two GPUs: the measured H100 spin on GPU 0, a GEMM on GPU 1."""
    from dnnprof.model.gpu_samples import GpuFrame, SampleTable

    table = SampleTable()
    for k in range(20):
        for gpu, values in ((0, {"gpu_util_pct": 100.0, "sm_active_pct": 0.76, "sm_occupancy_pct": 0.01}),
                            (1, {"gpu_util_pct": 99.7, "sm_active_pct": 96.1, "tensor_active_pct": 93.2})):
            table.add(GpuFrame(gpu=gpu, t_s=0.5 * k, unix_time_s=1.8e9 + 0.5 * k, values=values))
    return table.write(tmp / "monitor.parquet")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("view")
    s = Server([RUN, DDP, _sweep(tmp), _hostile_trace(tmp), DDP_FORWARD, _hostile_memory_trace(tmp),
                _recording(tmp)], tmp / "cache")
    yield s
    s.stop()


def _open(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(url)
    return page, errors, dialogs


def _visit_all(page, errors: list[str], shots: Path, tag: str) -> list[str]:
    page.wait_for_selector("#tabs button")
    ids = page.eval_on_selector_all("#tabs button", "bs => bs.map(b => b.dataset.id)")
    for vid in ids:
        page.click(f'#tabs button[data-id="{vid}"]')
        page.wait_for_function("id => document.body.dataset.view === id", arg=vid, timeout=15_000)
        page.screenshot(path=str(shots / f"{tag}-{vid}.png"), full_page=True)
        assert not errors, f"{tag}/{vid}: {errors}"
    return ids


def _pick(page, label: str) -> None:
    page.select_option("#input-pick", label=label)
    page.wait_for_timeout(300)


def test_every_view_of_a_gpu_run_loads_without_errors(browser, server, shots) -> None:
    page, errors, _ = _open(browser, server.url)
    ids = _visit_all(page, errors, shots, "run")
    assert {"overview", "kernels", "layers", "ops", "timeline", "memory", "counters", "findings", "diff"} <= set(ids)
    page.click('#tabs button[data-id="layers"]')
    page.wait_for_selector(".tree .row")
    assert page.locator(".tree .row").count() > 5
    page.close()


def test_every_view_of_a_two_rank_folder_and_a_sweep(browser, server, shots) -> None:
    page, errors, _ = _open(browser, server.url)
    page.wait_for_selector("#tabs button")
    _pick(page, "straggler")
    assert "ranks" in _visit_all(page, errors, shots, "ddp")
    _pick(page, "sweep (sweep)")
    ids = _visit_all(page, errors, shots, "sweep")
    assert "sweep" in ids and "kernels" not in ids
    page.click('#tabs button[data-id="sweep"]')
    page.wait_for_selector("#view-sweep .chart")
    assert page.locator("#view-sweep .chart").count() >= 3
    page.close()


def test_a_monitor_recording_shows_its_gpu_counters(browser, server, shots) -> None:
    page, errors, _ = _open(browser, server.url)
    page.wait_for_selector("#tabs button")
    _pick(page, "monitor.parquet")
    ids = _visit_all(page, errors, shots, "recording")
    assert "counters" in ids and "kernels" not in ids and "overview" not in ids
    page.click('#tabs button[data-id="counters"]')
    page.wait_for_selector("#view-counters .chart")
    text = page.inner_text("#view-counters")
    assert "Over the whole recording" in text and "sm_active_pct (GPU 0)" in text and "tensor_active_pct (GPU 1)" in text
    page.close()


def _kernel_names(page) -> list[str]:
    return page.eval_on_selector_all("#kernel-table tbody tr td:first-child", "tds => tds.map(t => t.textContent)")


def _wait_kernels(page, before: str) -> None:
    page.wait_for_function("n => (document.body.dataset.kernels || '0') !== n", arg=before, timeout=10_000)


def test_kernel_table_sorts_and_filters(browser, server) -> None:
    page, errors, _ = _open(browser, server.url + "#kernels")
    page.wait_for_selector("#kernel-table tbody tr")
    first = _kernel_names(page)
    n = page.evaluate("document.body.dataset.kernels")
    page.click('#kernel-table th[data-key="calls"]')
    _wait_kernels(page, n)
    by_calls = _kernel_names(page)
    assert by_calls != first
    n = page.evaluate("document.body.dataset.kernels")
    page.fill("#kernel-search", "cutlass")
    _wait_kernels(page, n)
    filtered = _kernel_names(page)
    assert filtered and all("cutlass" in x.lower() for x in filtered) and len(filtered) < len(by_calls)
    title = page.get_attribute("#kernel-table tbody tr td:first-child", "title")
    assert title == filtered[0]  # the full name on hover
    assert not errors
    page.close()


def test_a_hostile_kernel_name_shows_literally(browser, server, shots) -> None:
    page, errors, dialogs = _open(browser, server.url)
    page.wait_for_selector("#tabs button")
    _pick(page, "hostile.json.gz")
    page.click('#tabs button[data-id="kernels"]')
    page.fill("#kernel-search", "alert")
    page.wait_for_function("() => [...document.querySelectorAll('#kernel-table td')].some(t => t.textContent === "
                           + json.dumps(HOSTILE) + ")", timeout=10_000)
    page.screenshot(path=str(shots / "hostile-kernels.png"))
    for vid in ("overview", "layers", "timeline", "findings"):
        page.click(f'#tabs button[data-id="{vid}"]')
        page.wait_for_function("id => document.body.dataset.view === id", arg=vid)
    assert not dialogs and not errors
    assert page.evaluate("document.querySelectorAll('main script').length") == 0
    page.close()


def test_ranks_view_shows_each_gpu_and_the_critical_path(browser, server, shots) -> None:
    page, errors, _ = _open(browser, server.url)
    page.wait_for_selector("#tabs button")
    _pick(page, "forward")
    page.click('#tabs button[data-id="ranks"]')
    page.wait_for_selector("#cp-verdict")
    verdict = page.text_content("#cp-verdict")
    assert verdict.startswith("Rank 1 was the last to arrive in 3 of 3 steps, late in forward"), verdict
    panels = page.eval_on_selector_all(".rank-panel", "ps => ps.map(p => [p.dataset.rank, p.classList.contains('late'),"
                                       " p.querySelector('h2').textContent])")
    assert [(r, late) for r, late, _ in panels] == [("0", False), ("1", True)]
    assert all("H100" in title for _, _, title in panels)
    steps = page.eval_on_selector_all("#cp-steps tbody tr", "rs => rs.map(r => [...r.children].map(c => c.textContent))")
    assert [s[:3] for s in steps] == [["4", "1", "forward"], ["5", "1", "forward"], ["6", "1", "forward"]]
    assert "overlapped" in page.text_content('.rank-panel[data-rank="0"] .rank-comm')
    page.screenshot(path=str(shots / "ranks-forward.png"), full_page=True)
    assert not errors
    page.close()


def test_memory_view_draws_the_allocator_timeline(browser, server, shots) -> None:
    page, errors, dialogs = _open(browser, server.url)
    page.wait_for_selector("#tabs button")
    _pick(page, "memory-hostile.json.gz")
    page.click('#tabs button[data-id="memory"]')
    page.wait_for_selector(".memory-timeline canvas")
    assert page.get_attribute(".memory-timeline", "data-device") == "cpu"
    # uPlot drew the series: its legend names it and the canvas is not blank
    assert "allocated" in page.text_content(".memory-timeline .u-legend")
    drawn = page.evaluate("""() => { const c = document.querySelector('.memory-timeline canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; }""")
    assert drawn > 1000
    ops = page.eval_on_selector_all("#largest-allocations tbody td:nth-child(4)", "ts => ts.map(t => t.textContent)")
    assert HOSTILE in ops  # a trace's op name, shown literally
    page.screenshot(path=str(shots / "memory-timeline.png"), full_page=True)
    assert not errors and not dialogs
    assert page.evaluate("document.querySelectorAll('main script').length") == 0
    page.close()


def test_diff_picker_changes_the_compared_pair(browser, server, shots) -> None:
    page, errors, _ = _open(browser, server.url + "#diff")
    page.wait_for_selector("#diff-pair")
    assert page.text_content("#diff-pair") == "base = run_gpt2_infer_h100, new = straggler"
    page.select_option("#diff-new", label="forward")
    page.wait_for_function("() => document.body.dataset.diff !== '0-1'")
    assert page.text_content("#diff-pair") == "base = run_gpt2_infer_h100, new = forward"
    page.select_option("#diff-base", label="hostile.json.gz")
    page.wait_for_function("() => document.getElementById('diff-pair').textContent.startsWith('base = hostile')")
    assert page.text_content("#diff-pair") == "base = hostile.json.gz, new = forward"
    page.screenshot(path=str(shots / "diff-picker.png"), full_page=True)
    page.click('#tabs button[data-id="overview"]')  # the pair is kept across views
    page.wait_for_function("() => document.body.dataset.view === 'overview'")
    page.click('#tabs button[data-id="diff"]')
    page.wait_for_function("() => document.body.dataset.view === 'diff'")
    assert page.input_value("#diff-base") == "3" and page.input_value("#diff-new") == "4"
    assert not errors
    page.close()


def test_self_contained_html_works_offline(browser, tmp_path, shots) -> None:
    from dnnprof.cli.main import main

    out = tmp_path / "view.html"
    assert main(["analyze", str(RUN), "--html", str(out), "--quiet"]) == 0
    text = out.read_text()
    assert "http://" not in text.split("<body>")[0] and "Content-Security-Policy" in text
    page, errors, _ = _open(browser, out.as_uri())
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    ids = _visit_all(page, errors, shots, "file")
    assert {"overview", "kernels", "layers", "timeline", "findings", "report"} <= set(ids)
    page.click('#tabs button[data-id="kernels"]')
    page.wait_for_selector("#kernel-table tbody tr")
    first = _kernel_names(page)
    n = page.evaluate("document.body.dataset.kernels")
    page.click('#kernel-table th[data-key="calls"]')
    _wait_kernels(page, n)
    assert _kernel_names(page) != first
    assert not errors and not [r for r in requests if not r.startswith(("file:", "data:", "about:"))]
    page.close()
