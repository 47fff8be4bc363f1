"""A TCP gate in front of one loopback server (tests): forwards bytes both ways, and can hold what
clients send (a request in flight, as from a paused process: it reaches the server once released)
or cut every connection and refuse new ones (a server restarting: connection refused, then back).

`TcpGate(host, port)` listens on a free loopback port (`port`); `hold()` / `release()`, `cut()` /
`restore()`, `held_bytes()` (how much is waiting), `close()`. It does not parse what it forwards.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpGate:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()  # not held
        self._refusing = False
        self._held = 0
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="tcpgate-accept", daemon=True).start()

    # -- switches ----------------------------------------------------------------------------

    def hold(self) -> None:
        """Keep what clients send from now on until `release()`."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def held_bytes(self) -> int:
        with self._lock:
            return self._held

    def cut(self) -> None:
        """Close every connection and refuse new ones until `restore()`."""
        with self._lock:
            self._refusing = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def restore(self) -> None:
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        self._closed = True
        self.release()
        self.cut()
        self._listener.close()

    # -- forwarding --------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if from_client and not self._open.is_set():
                    with self._lock:
                        self._held += len(data)
                    self._open.wait()
                    with self._lock:
                        self._held -= len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
