"""``dnnprof analyze --html FILE``: the dashboard's views as one self-contained file (data embedded, code and
libraries inlined, no network), for sharing and CI artifacts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from dnnprof.serve.data import Store, bundle
from dnnprof.serve.inputs import Input
from dnnprof.serve.page import page_html
from dnnprof.serve.prepare import write_cache


def view_html(analysis: Any, doc: dict[str, Any], source: Path, report_html: str | None = None) -> str:
    """The page of one analysed input (``runs.report.report_path``), with the printable report as a view."""
    from dnnprof.ingest.detect import kind_of

    tmp = Path(tempfile.mkdtemp(prefix="dnnprof-view-"))
    try:
        view = write_cache(analysis, doc, source, kind_of(source), tmp, tmp)
        store = Store([Input(label=source.name or str(source), kind="profile", cache=tmp, view=view)])
        data = bundle(store)
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return page_html(inline=True, data=data, report_html=report_html)
