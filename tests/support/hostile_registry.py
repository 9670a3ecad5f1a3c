"""A hostile OCI registry for the tests: an in-process HTTP server in front of the real one (docker-registry) that
passes every request through, except those a test has told it to answer itself, with whatever a hostile or broken
registry could send: JSON nested 100k deep, an endless body, ``Content-Length: abc``, a ``Link: rel="next"`` that
never ends or leads back, a token service that answers nonsense.

    with hostile_registry(registry) as hostile:
        hostile.answer("GET", r"/tags/list", Answer(body=b"[" * 100_000))
        run_cli("ls", "digits", "--store", hostile.uri(repository))

It speaks HTTP/1.0 (one request per connection; a body without Content-Length ends when the connection closes),
on 127.0.0.1, in daemon threads. An endless body is sent until the client hangs up (at most :data:`ENDLESS_CAP`);
:attr:`HostileRegistry.sent` counts the body bytes each route got out, so a test can tell a bounded reader from one
that read on.
"""

from __future__ import annotations

import contextlib
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.registry import Registry

ENDLESS_CAP = 3 << 30
"""Bytes an endless body sends at most, so a client that never stops still ends the test."""
CHUNK = 64 << 10


def nested(depth: int = 100_000) -> bytes:
    """JSON arrays nested ``depth`` deep: valid JSON that Python's parser cannot take (it recurses)."""
    return b"[" * depth + b"]" * depth


def endless(unit: bytes = b" ") -> Callable[[], Iterator[bytes]]:
    """A body that never ends (``unit`` repeated)."""
    block = (unit * (CHUNK // len(unit) + 1))[:CHUNK]

    def body() -> Iterator[bytes]:
        while True:
            yield block

    return body


@dataclass
class Answer:
    """What the hostile registry sends for a request it intercepts."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | Callable[[], Iterator[bytes]] = b""
    """Bytes (sent with their Content-Length unless ``headers`` sets one), or a generator of chunks (sent until
    it ends or the client hangs up, without a Content-Length)."""


Route = Callable[["Request"], Answer | None]
"""Given the request, an Answer, or None to pass it through to the real registry."""


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    base: str
    """``http://127.0.0.1:PORT`` of the hostile registry (for Link and realm URLs that lead back to it)."""


class HostileRegistry:
    def __init__(self, upstream: Registry | Upstream, keep_host: bool = False) -> None:
        self.upstream = upstream
        self.keep_host = keep_host
        """Forward the client's Host header as sent: an S3 request's signature covers it."""
        self.routes: list[tuple[str, re.Pattern[str], Route]] = []
        self.requests: list[Request] = []
        self.sent: dict[str, int] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def uri(self, repository: str) -> str:
        return f"oci+http://{self.host}/{repository}"

    def answer(self, method: str, pattern: str, answer: Answer | Route) -> None:
        """Answer requests of ``method`` whose path (with query) matches ``pattern`` (``re.search``) with ``answer``
        (or what the route makes of the request); the latest matching route wins."""
        route = answer if callable(answer) else (lambda request, fixed=answer: fixed)
        self.routes.insert(0, (method, re.compile(pattern), route))

    def reset(self) -> None:
        self.routes.clear()
        self.requests.clear()
        self.sent.clear()

    def route_for(self, request: Request) -> tuple[str, Answer] | None:
        for method, pattern, route in self.routes:
            if method == request.method and pattern.search(request.path):
                found = route(request)
                if found is not None:
                    return pattern.pattern, found
        return None


def _handler(registry: HostileRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _serve(self) -> None:
            request = Request(self.command, self.path, dict(self.headers), f"http://{registry.host}")
            registry.requests.append(request)
            length = int(self.headers.get("Content-Length") or 0)
            payload = self.rfile.read(length) if length else None
            routed = registry.route_for(request)
            if routed is None:
                self._forward(payload)
                return
            name, answer = routed
            self.send_response(answer.status)
            if isinstance(answer.body, bytes) and not any(k.lower() == "content-length" for k in answer.headers):
                self.send_header("Content-Length", str(len(answer.body)))
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command == "HEAD":
                return
            chunks = [answer.body] if isinstance(answer.body, bytes) else answer.body()
            sent = 0
            with contextlib.suppress(OSError):  # the client hung up: what a bounded reader does
                for chunk in chunks:
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    registry.sent[name] = registry.sent.get(name, 0) + len(chunk)
                    if sent >= ENDLESS_CAP:
                        break

        def _forward(self, payload: bytes | None) -> None:
            url = f"http://{registry.upstream.host}{self.path}"
            dropped = ("connection",) if registry.keep_host else ("host", "connection")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
            forwarded = urllib.request.Request(url, data=payload, headers=headers, method=self.command)
            try:
                response = urllib.request.urlopen(forwarded, timeout=30)
            except urllib.error.HTTPError as refused:
                response = refused
            with response:
                body = response.read()
                self.send_response(response.status)
                for key, value in response.headers.items():
                    if key.lower() in ("content-length", "connection", "transfer-encoding"):
                        continue
                    if key.lower() == "location":
                        value = value.replace(registry.upstream.host, registry.host)
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    with contextlib.suppress(OSError):
                        self.wfile.write(body)

        do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _serve

    return Handler


@dataclass
class Upstream:
    """Any HTTP server to stand in front of (``host`` is ``127.0.0.1:PORT``), such as the tests' S3 server."""

    host: str


@contextlib.contextmanager
def hostile_registry(upstream: Registry | Upstream, keep_host: bool = False) -> Iterator[HostileRegistry]:
    """A hostile registry (or, with ``keep_host``, any hostile HTTP server: S3) in front of ``upstream`` for the
    block."""
    registry = HostileRegistry(upstream, keep_host)
    registry.thread.start()
    try:
        yield registry
    finally:
        registry.server.shutdown()
        registry.server.server_close()
