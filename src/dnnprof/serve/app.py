"""The ``dnnprof view`` web app (Starlette): the page, its bundled assets and JSON endpoints over the inputs.

What it serves is fixed when it starts: the asset files bundled in the package (looked up by name in a table built
at start, never opened from a request's path) and answers computed from the inputs given on the command line
(picked by their number). Anything else is a 404. Every response carries a Content-Security-Policy that allows
scripts and styles from the app itself only, so a string in a trace can never run as code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dnnprof.serve import data
from dnnprof.serve.inputs import Input
from dnnprof.serve.page import ASSETS, asset_bytes, page_html
from dnnprof.serve.perfetto_export import ExportError

CSP = ("default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
       "form-action 'none'; img-src 'self' data:")
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8"}


def create_app(inputs: list[Input], allowed_hosts: list[str] | None = None) -> Any:
    """The ASGI app over ``inputs``. ``allowed_hosts``: Host header values accepted (DNS-rebinding guard)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    store = data.Store(inputs)
    static = {name: asset_bytes(name) for name in ASSETS}  # every asset read once; requests only look names up
    index = page_html(inline=False).encode()

    def not_found() -> Response:
        return PlainTextResponse("not found", status_code=404)

    async def home(request: Request) -> Response:
        return Response(index, media_type="text/html; charset=utf-8")

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        body = static.get(name)
        if body is None:
            return not_found()
        return Response(body, media_type=_TYPES.get(name[name.rfind("."):], "application/octet-stream"))

    def api(request: Request) -> Response:
        what = request.path_params["what"]
        try:
            answer = store.answer(what, dict(request.query_params))
        except data.NotFound:
            return not_found()
        except data.BadRequest as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        except ExportError as e:
            return JSONResponse({"error": str(e)}, status_code=500)
        if isinstance(answer, Path):  # the Perfetto export: a file of the cache, streamed from disk
            return FileResponse(answer, media_type="application/gzip", filename="dnnprof-trace.json.gz")
        return JSONResponse(answer, headers={"Cache-Control": "no-store"})

    async def headers(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cross-Origin-Resource-Policy"] = "same-origin"
        return response

    from starlette.middleware.base import BaseHTTPMiddleware

    app = Starlette(routes=[Route("/", home), Route("/static/{name:path}", asset),
                            Route("/api/{what:path}", api)],
                    middleware=[Middleware(BaseHTTPMiddleware, dispatch=headers),
                                Middleware(TrustedHostMiddleware,
                                           allowed_hosts=allowed_hosts or ["127.0.0.1", "localhost"])])
    return app
