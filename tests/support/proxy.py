"""A TCP proxy on loopback whose link a test can cut and heal (a network partition).

`cut()` stops forwarding in both directions and holds new connections without forwarding:
what is in flight stays in flight and peers see a silent link (their requests time out),
as with dropped packets, not a reset. `heal()` resumes forwarding everything held.
"""

from __future__ import annotations

import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", port))
        self.server.listen(64)
        self.server.setblocking(False)
        self.port = self.server.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._peer: dict[socket.socket, socket.socket] = {}
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"proxy-{self.port}")

    def start(self) -> TcpProxy:
        self._sel.register(self.server, selectors.EVENT_READ)
        self._thread.start()
        return self

    def cut(self) -> None:
        self._cut.set()

    def heal(self) -> None:
        self._cut.clear()

    @property
    def is_cut(self) -> bool:
        return self._cut.is_set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in list(self._peer):
            s.close()
        self.server.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(0.05):
                sock = key.fileobj
                if sock is self.server:
                    self._accept()
                elif not self._cut.is_set():
                    self._forward(sock)  # type: ignore[arg-type]
            if self._cut.is_set():
                # hold everything: stop watching reads until healed (data waits in the kernel)
                self._stop.wait(0.05)

    def _accept(self) -> None:
        try:
            client, _ = self.server.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._peer[client], self._peer[upstream] = upstream, client
        self._sel.register(client, selectors.EVENT_READ)
        self._sel.register(upstream, selectors.EVENT_READ)

    def _forward(self, sock: socket.socket) -> None:
        other = self._peer.get(sock)
        if other is None:
            return
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(sock)
            return
        try:
            other.setblocking(True)
            other.sendall(data)
            other.setblocking(False)
        except OSError:
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        other = self._peer.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self._peer.pop(s, None)
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()
