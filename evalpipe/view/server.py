"""The HTTP side of `evalpipe view`: a small JSON API and the page's static files.

The standard library's threading HTTP server, read only: GET and HEAD, nothing
else. Run ids are looked up among the folders of the outputs folder (a request
never names a path), static files come from a fixed list of package files, and
the Host header must name this server (a page on another site cannot reach it
through DNS rebinding). Pages load only their own scripts (Content-Security-Policy
without inline scripts), and every JSON answer is built with json.dumps; the page
puts text into the document as text nodes.

    GET /                                  the page (index.html)
    GET /static/<file>                     its CSS and JS (the report's transcript renderer too)
    GET /api/runs                          every run: facts and headline scores
    GET /api/runs/<id>                     one run: facts, notes, tables, filters, plot names
    GET /api/runs/<id>/samples?cell=&suite=&category=&result=&q=&offset=&limit=
                                           one page of the sample browser (server-side filter)
    GET /api/runs/<id>/samples/<index>     one transcript and its prompt blocks
    GET /api/runs/<id>/plots/<name>.png    a plot
    GET /api/compare?a=<id>&b=<id>         the paired comparison of b against a
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from evalpipe.errors import EvalpipeError, InputError
from evalpipe.view.runs import Outputs

# name -> (package, file, content type)
STATIC = {
    "index.html": ("evalpipe.view", "index.html", "text/html; charset=utf-8"),
    "view.js": ("evalpipe.view", "view.js", "text/javascript; charset=utf-8"),
    "view.css": ("evalpipe.view", "view.css", "text/css; charset=utf-8"),
    "report.css": ("evalpipe._report", "report.css", "text/css; charset=utf-8"),
    "transcript.js": ("evalpipe._report", "transcript.js", "text/javascript; charset=utf-8"),
}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _static(name: str) -> bytes:
    package, file, _ = STATIC[name]
    folder = "static" if package == "evalpipe.view" else "assets"
    return (resources.files(package) / folder / file).read_bytes()


class ViewServer(ThreadingHTTPServer):
    """Serves one outputs folder; `url` is where to point a browser."""

    daemon_threads = True

    def __init__(self, outputs: Outputs, host: str = "127.0.0.1", port: int = 0,
                 log: Callable[[str], None] | None = None):
        super().__init__((host, port), _Handler)
        self.outputs = outputs
        self.log = log
        bound = self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound}/"
        # names a browser may use for this server in its Host header
        self.hosts = {f"{h}:{bound}" for h in (shown, "127.0.0.1", "localhost", "[::1]")}

    def start(self) -> threading.Thread:
        """Serve from a daemon thread (tests); `serve_forever` blocks instead."""
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()
        return thread


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "evalpipe-view"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log is not None:
            self.server.log(f"{self.address_string()} {format % args}")

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        if self.headers.get("Host") not in self.server.hosts:
            self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unknown host\n", "text/plain", head)
            return
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            status, body, kind = self._route(parts, query)
        except KeyError:
            status, body, kind = HTTPStatus.NOT_FOUND, _json({"error": "not found"}), "json"
        except (InputError, ValueError) as exc:
            status, body, kind = HTTPStatus.BAD_REQUEST, _json({"error": str(exc)}), "json"
        except EvalpipeError as exc:
            status, body, kind = HTTPStatus.INTERNAL_SERVER_ERROR, _json({"error": str(exc)}), \
                "json"
        except Exception as exc:  # noqa: BLE001 -- one bad run must not take the server down
            message = f"internal error: {type(exc).__name__}: {exc}"
            if self.server.log is not None:
                self.server.log(message)
            status, body, kind = HTTPStatus.INTERNAL_SERVER_ERROR, _json({"error": message}), \
                "json"
        content_type = "application/json; charset=utf-8" if kind == "json" else kind
        self._send(status, body, content_type, head)

    def _route(self, parts: list[str], query: dict[str, str]) -> tuple[int, bytes, str]:
        outputs = self.server.outputs
        if not parts:
            return HTTPStatus.OK, _static("index.html"), STATIC["index.html"][2]
        if parts == ["favicon.ico"]:
            return HTTPStatus.NO_CONTENT, b"", "image/x-icon"
        if parts[0] == "static" and len(parts) == 2:
            return HTTPStatus.OK, _static(parts[1]), STATIC[parts[1]][2]
        if parts[0] != "api":
            raise KeyError(parts[0])
        match parts[1:]:
            case ["runs"]:
                return HTTPStatus.OK, _json({"root": str(outputs.root),
                                             "runs": outputs.listing()}), "json"
            case ["runs", run_id]:
                return HTTPStatus.OK, _json(outputs.get(run_id).summary()), "json"
            case ["runs", run_id, "samples"]:
                page = outputs.get(run_id).page(
                    cell=query.get("cell", ""), suite=query.get("suite", ""),
                    category=query.get("category", ""), result=query.get("result", ""),
                    text=query.get("q", ""), offset=max(0, int(query.get("offset", 0))),
                    limit=int(query.get("limit", 100)))
                return HTTPStatus.OK, _json(page), "json"
            case ["runs", run_id, "samples", index]:
                return HTTPStatus.OK, _json(outputs.get(run_id).sample(int(index))), "json"
            case ["runs", run_id, "plots", name] if name.endswith(".png"):
                return HTTPStatus.OK, outputs.get(run_id).plots()[name[:-4]], "image/png"
            case ["compare"]:
                return HTTPStatus.OK, _json(outputs.compare(query["a"], query["b"])), "json"
        raise KeyError("/".join(parts))

    def _send(self, status: int, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", CSP)
        self.end_headers()
        if not head:
            self.wfile.write(body)


def _json(data: Any) -> bytes:
    """JSON the browser can parse: NaN and infinities (which JSON lacks) become null."""
    try:
        text = json.dumps(data, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(data), ensure_ascii=False, default=str)
    return text.encode("utf-8")


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data
