"""``dnnprof view INPUT...``: the interactive dashboard in the browser (see docs/view.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from dnnprof.cli.errors import UserError


def view(
    inputs: list[Path] = typer.Argument(..., help="Run directories, saved profiles, traces (Kineto JSON, folders of "
                                                 "per-rank traces, nsys exports) or sweep directories; two runs "
                                                 "also get a Diff view.", show_default=False),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (only this machine by default)."),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="Port [default: a free one]."),
    no_browser: bool = typer.Option(False, "--no-browser", help="Print the address, do not open a browser."),
    rank: int | None = typer.Option(None, "--rank", help="Rank to show in a multi-GPU trace [default: the only "
                                                         "rank, else 0].", show_default=False),
) -> None:
    """Open a local web dashboard of runs, profiles, traces and sweeps (raw traces are ingested once and cached)."""
    try:
        from dnnprof.serve.server import serve
    except ImportError as e:
        raise UserError(f"dnnprof view needs the 'view' extra: pip install 'dnnprof[view]' ({e})") from None
    from dnnprof.serve.inputs import InputError

    try:
        serve(inputs, host=host, port=port, open_browser=not no_browser, rank=rank)
    except InputError as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None


def register(app: typer.Typer) -> None:
    app.command("view")(view)
