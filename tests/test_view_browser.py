"""``dnnprof view`` in a real headless Chromium (Playwright): every view loads without a console error on a GPU run
directory, a two-rank folder, a sweep and a diff; sorting and filtering change the rows; a hostile kernel name shows
literally; the self-contained ``analyze --html`` page works offline. Screenshots go to a temporary folder (printed).
"""

from __future__ import annotations

import gzip
import json
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
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
HOSTILE = "<script>alert(1)</script>"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="no chromium here (apt-get install chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("view-screenshots")
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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("view")
    s = Server([RUN, DDP, _sweep(tmp), _hostile_trace(tmp)], tmp / "cache")
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
