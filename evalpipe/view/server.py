"""The HTTP side of `evalpipe view`: a small JSON API and the page's static files.

The standard library's threading HTTP server, read only: GET and HEAD, nothing
else. Run ids are looked up among the folders of the outputs folder (a request
never names a path), static files come from a fixed list of package files, and
the Host header must name this server (`Hosts`: a page on another site cannot
reach it through DNS rebinding). Pages load only their own scripts
(Content-Security-Policy without inline scripts), and every JSON answer is built
with json.dumps; the page puts text into the document as text nodes.

Errors are answers, never tracebacks: 400 for a query the API cannot read, 404
for a run (or a file of it) that is not there, deleted while viewed included,
500 naming the file and field for a run whose files are damaged (and a warning in
the server's log), 500 naming the error for anything else.

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

import ipaddress
import json
import math
import socket
import threading
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from evalpipe.view.runs import Outputs
from evalpipe.view.shapes import DamagedRun

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


class Hosts:
    """Which Host headers name this server. DNS rebinding gives an attacker's page a
    name of the attacker's (evil.example) that resolves to this machine; the browser
    then sends that name as the Host, so a request is answered only when its Host is
    a name the server knows: localhost (and *.localhost), the name given to --host,
    any name added with --allow-host, and, when the server listens beyond loopback,
    this machine's own names (hostname, fully qualified name). An IP address can
    never be a rebound name, so any IP literal is accepted when the server listens
    beyond loopback (the machine's own addresses, and those a NAT or a container's
    port mapping put in front of it); on loopback, only loopback addresses. The port
    is not checked: a mapped port differs from the one bound, and a rebinding
    attack is told apart by its name."""

    def __init__(self, host: str, extra: tuple[str, ...] = ()):
        self.wide = not _loopback(host)
        self.names = {"localhost"} | {_name(h) for h in extra}
        if host and not _ip(host):
            self.names.add(_name(host))
        if self.wide:
            machine = socket.gethostname()
            self.names |= {_name(machine), _name(machine.split(".")[0]),
                           _name(socket.getfqdn())}

    def allows(self, header: str | None) -> bool:
        host = _host_of(header or "")
        if not host:
            return False
        address = _ip(host)
        if address is not None:
            return self.wide or address.is_loopback
        return host in self.names or host.endswith(".localhost")


def _host_of(header: str) -> str:
    """The host part of a Host header ("[::1]:8765" -> "::1"), lower case, no final dot;
    "" when it is not a host and optional port."""
    header = header.strip()
    if header.startswith("["):
        host, _, rest = header[1:].partition("]")
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return ""
    else:
        host, _, port = header.rpartition(":") if header.count(":") == 1 else (header, "", "")
        if port and not port.isdigit():
            return ""
    return _name(host)


def _name(host: str) -> str:
    return host.strip().lower().rstrip(".")


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _loopback(host: str) -> bool:
    """Whether every address `host` stands for is a loopback one (127.0.0.1, ::1,
    localhost); an address that cannot be resolved counts as beyond loopback."""
    address = _ip(host)
    if address is not None:
        return address.is_loopback
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(str(a[4][0]).split("%")[0]).is_loopback
                               for a in found)


def _family(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 address or a name that resolves only to one, else AF_INET."""
    address = _ip(host)
    if address is not None:
        return socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return socket.AF_INET
    families = {a[0] for a in found}
    return socket.AF_INET if socket.AF_INET in families or not families else socket.AF_INET6


class ViewServer(ThreadingHTTPServer):
    """Serves one outputs folder; `url` is where to point a browser. `log` gets one
    line per request; `warn` (stderr in the CLI) every run the server cannot show
    and every unexpected error."""

    daemon_threads = True

    def __init__(self, outputs: Outputs, host: str = "127.0.0.1", port: int = 0,
                 log: Callable[[str], None] | None = None,
                 warn: Callable[[str], None] | None = None,
                 allow_hosts: tuple[str, ...] = ()):
        self.address_family = _family(host)
        super().__init__((host, port), _Handler)
        self.outputs = outputs
        self.log = log
        if warn is not None:
            outputs.warn = warn
        self.warn = outputs.warn
        bound = self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound}/"
        self.hosts = Hosts(host, allow_hosts)

    def start(self) -> threading.Thread:
        """Serve from a daemon thread (tests); `serve_forever` blocks instead."""
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()
        return thread


class _BadRequest(Exception):
    """A query the API cannot read (400)."""


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
        if not self.server.hosts.allows(self.headers.get("Host")):
            self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unknown host\n", "text/plain", head)
            return
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            status, body, kind = self._route(parts, query)
        except _BadRequest as exc:
            status, body, kind = HTTPStatus.BAD_REQUEST, _json({"error": str(exc)}), "json"
        except (KeyError, FileNotFoundError):  # never there, or deleted while viewed
            status, body, kind = HTTPStatus.NOT_FOUND, _json({"error": _missing(parts)}), "json"
        except DamagedRun as exc:
            self.server.outputs.damaged(exc)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            body, kind = _json({"error": str(exc), "run": exc.run, "damaged": exc.problem}), \
                "json"
        except Exception as exc:  # noqa: BLE001 -- one bad run must not take the server down
            message = f"cannot show {'/'.join(parts) or '/'}: {type(exc).__name__}: {exc}"
            self.server.warn(f"error: {message}\n{traceback.format_exc()}")
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
                                             **outputs.listing()}), "json"
            case ["runs", run_id]:
                return HTTPStatus.OK, _json(outputs.get(run_id).summary()), "json"
            case ["runs", run_id, "samples"]:
                page = outputs.get(run_id).page(
                    cell=query.get("cell", ""), suite=query.get("suite", ""),
                    category=query.get("category", ""), result=query.get("result", ""),
                    text=query.get("q", ""), offset=max(0, _int(query, "offset", 0)),
                    limit=_int(query, "limit", 100))
                return HTTPStatus.OK, _json(page), "json"
            case ["runs", run_id, "samples", index]:
                if not index.isdigit():
                    raise KeyError(index)
                return HTTPStatus.OK, _json(outputs.get(run_id).sample(int(index))), "json"
            case ["runs", run_id, "plots", name] if name.endswith(".png"):
                return HTTPStatus.OK, outputs.get(run_id).plots()[name[:-4]], "image/png"
            case ["compare"]:
                if "a" not in query or "b" not in query:
                    raise _BadRequest("compare needs two runs: ?a=<run id>&b=<run id>")
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


def _int(query: dict[str, str], name: str, default: int) -> int:
    value = query.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise _BadRequest(f"{name}={value!r}: expected a whole number") from None


def _missing(parts: list[str]) -> str:
    """What a 404 says: a run that is not (or no longer) there, or a path not served."""
    if parts[:2] == ["api", "runs"] and len(parts) > 2:
        if len(parts) > 3:
            return (f"not found: {'/'.join(parts[3:])} of run {parts[2]!r} (the run, or "
                    "that file of it, is not there; deleted?)")
        return f"no run {parts[2]!r} in this outputs folder (deleted?)"
    return "not found"


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
