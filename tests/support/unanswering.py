"""A real TCP server that accepts connections and never answers them (``silent``), or answers a status line and
then one byte every half second forever (``trickle``): what no per-read socket timeout ends."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def unanswering_server(mode: str) -> Iterator[int]:
    """Its port, while the ``with`` lasts; every connection is closed after."""
    listener = socket.create_server(("127.0.0.1", 0))
    connections: list[socket.socket] = []
    stop = threading.Event()

    def trickle(connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            connection.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(0.5):
                connection.sendall(b"X")

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                connections.append(connection)
                if mode == "trickle":
                    threading.Thread(target=trickle, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        time.sleep(0.1)
        for connection in connections:
            connection.close()
