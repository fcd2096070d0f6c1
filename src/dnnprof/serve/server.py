"""Start the dashboard: prepare the inputs, bind a socket (127.0.0.1, a free port by default), open the browser."""

from __future__ import annotations

import socket
import sys
import threading
import webbrowser
from pathlib import Path

from dnnprof.serve.app import create_app
from dnnprof.serve.inputs import open_inputs


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: the system picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def serve(paths: list[Path], host: str = "127.0.0.1", port: int = 0, open_browser: bool = True,
          rank: int | None = None) -> None:
    """Serve ``paths`` until interrupted. Prints the address on stdout once it listens."""
    import uvicorn

    print(f"dnnprof view: preparing {len(paths)} input(s) …", file=sys.stderr, flush=True)
    inputs = open_inputs(paths, rank=rank)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"
    hosts = [host, "127.0.0.1", "localhost"] if host not in ("0.0.0.0", "::") else ["*"]
    app = create_app(inputs, allowed_hosts=hosts)
    print(f"dnnprof view: {url}  (Ctrl-C to stop)", flush=True)
    if open_browser:
        threading.Timer(0.3, webbrowser.open, args=(url,)).start()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
