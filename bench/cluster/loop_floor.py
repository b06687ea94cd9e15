"""The floor under a leader's CPU per replicated request (issue 28): the same message pattern
with no Kafka logic.

    .venv/bin/python bench/cluster/loop_floor.py [--rounds 5000] [--rate 1000] [--repeats 2]

A uvloop server process and three clients (blocking sockets, one process): per round the
"producer" sends a 150 B request; the server answers the two "followers"' parked requests
(150 B each); each follower sends its next request at once; when both came, the server
answers the producer and parks the followers' requests: 3 requests received and 3 answers
sent per round, as a leader does for one single-record acks=all Produce at replication factor 3
(the Produce and one long-polled Fetch from each follower). CPU is the server process's
utime+stime per round, for three shapes of server:

* proto: asyncio.Protocol callbacks (uvloop's own transport);
* reader: `loop.add_reader` and `recv_into`, each frame handled in the readiness callback
  (the broker's receiving, and the followers' fast path, broker/follower_fetch.py);
* readertask: the same, and each frame handed to a per-connection task awaiting a future (the
  broker's generic request processor).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import threading
import time
from collections.abc import Callable

MSG = b"x" * 146
FRAME = struct.pack(">i", len(MSG)) + MSG
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Replication:
    """The leader's part, without the leader: answer the parked polls when the request comes,
    answer the request when both polls came back."""

    def __init__(self) -> None:
        self.parked: list[Callable[[bytes], object]] = []
        self.producer: Callable[[bytes], object] | None = None
        self.polls = 0
        self.waiting = False

    def on_frame(self, kind: bytes, send: Callable[[bytes], object]) -> None:
        if kind == b"P":
            self.producer, self.polls, self.waiting = send, 0, True
            parked, self.parked = self.parked, []
            for s in parked:
                s(FRAME)
            return
        self.parked.append(send)
        if self.waiting:
            self.polls += 1
            if self.polls == 2 and self.producer is not None:
                self.waiting = False
                self.producer(FRAME)


def serve(mode: str, port: int) -> None:
    import uvloop

    rep = Replication()

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.buf = b""
            self.send = transport.write  # type: ignore[attr-defined]

        def data_received(self, data: bytes) -> None:
            b = self.buf + data
            while len(b) >= 4:
                (n,) = struct.unpack_from(">i", b)
                if len(b) < 4 + n:
                    break
                rep.on_frame(b[4:5], self.send)
                b = b[4 + n :]
            self.buf = b

    async def by_protocol() -> None:
        await asyncio.get_running_loop().create_server(Proto, "127.0.0.1", port)
        await asyncio.Event().wait()

    async def by_reader(task: bool) -> None:
        loop = asyncio.get_running_loop()
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", port))
        ls.listen()
        ls.setblocking(False)
        while True:
            s, _ = await loop.sock_accept(ls)
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            Conn(loop, s, task)

    class Conn:
        def __init__(self, loop: asyncio.AbstractEventLoop, s: socket.socket, task: bool) -> None:
            self.loop, self.s, self.task = loop, s, task
            self.buf = bytearray(65536)
            self.view = memoryview(self.buf)
            self.have = 0
            self.frames: list[bytes] = []
            self.waiter: asyncio.Future | None = None
            loop.add_reader(s.fileno(), self.readable)
            if task:
                loop.create_task(self.process())

        def send(self, data: bytes) -> None:
            self.s.send(data)

        def readable(self) -> None:
            n = self.s.recv_into(self.view[self.have :])
            if not n:
                self.loop.remove_reader(self.s.fileno())
                return
            self.have += n
            pos = 0
            while self.have - pos >= 4:
                (k,) = struct.unpack_from(">i", self.buf, pos)
                if self.have - pos < 4 + k:
                    break
                frame = bytes(self.buf[pos + 4 : pos + 4 + k])
                pos += 4 + k
                if self.task:
                    self.frames.append(frame)
                else:
                    rep.on_frame(frame[:1], self.send)
            if pos:
                self.buf[: self.have - pos] = self.buf[pos : self.have]
                self.have -= pos
            if self.frames and self.waiter is not None:
                w, self.waiter = self.waiter, None
                w.set_result(None)

        async def process(self) -> None:
            while True:
                if not self.frames:
                    self.waiter = self.loop.create_future()
                    await self.waiter
                    continue
                frame = self.frames.pop(0)
                rep.on_frame(frame[:1], self.send)

    if mode == "proto":
        uvloop.run(by_protocol())
    else:
        uvloop.run(by_reader(mode == "readertask"))


def recv_frame(s: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        head += s.recv(4 - len(head))
    (n,) = struct.unpack(">i", head)
    data = b""
    while len(data) < n:
        data += s.recv(n - len(data))
    return data


def cpu(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def one_run(mode: str, rounds: int, rate: float, port: int) -> tuple[float, float]:
    """(user, system) ms of the server's CPU per round."""
    pid = os.fork()
    if pid == 0:
        try:
            serve(mode, port)
        finally:
            os._exit(0)
    try:
        time.sleep(1)
        socks = []
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(s)
        producer, *followers = socks
        poll = struct.pack(">i", len(MSG)) + b"F" + MSG[1:]
        request = struct.pack(">i", len(MSG)) + b"P" + MSG[1:]

        def follow(s: socket.socket) -> None:
            s.sendall(poll)
            while True:
                try:
                    recv_frame(s)
                    s.sendall(poll)
                except OSError:
                    return

        for f in followers:
            threading.Thread(target=follow, args=(f,), daemon=True).start()
        time.sleep(0.3)
        for n, measured in ((1000, False), (rounds, True)):
            before = cpu(pid)
            started = time.monotonic()
            for i in range(n):
                delay = started + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                producer.sendall(request)
                recv_frame(producer)
            if measured:
                after = cpu(pid)
                return tuple(1000 * (a - b) / rounds for a, b in zip(after, before, strict=True))  # type: ignore[return-value]
        raise AssertionError("unreachable")
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--port", type=int, default=39511)
    a = ap.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    port = a.port
    for r in range(a.repeats):
        for mode in ("proto", "reader", "readertask"):
            port += 1
            user, system = one_run(mode, a.rounds, a.rate, port)
            line = f"run {r + 1} {mode:10s}: {user + system:.3f} ms/round (user {user:.3f}, system {system:.3f})"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
