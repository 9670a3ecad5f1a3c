"""A local HTTP server that answers every GET with the JSON a test chooses from the request path: a registry that
refuses, GitHub's OIDC token endpoint. It serves on 127.0.0.1 only and stops with the ``with`` block."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[str], tuple[int, Any]]
"""The request's path -> the status and the JSON document to answer with."""


@contextmanager
def json_server(answer: Answer) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a server answering each GET with ``answer(path)``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status, document = answer(self.path)
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
