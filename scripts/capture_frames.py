#!/usr/bin/env python
"""Capture request frames from every real client, as fixtures for tests/unit/protocol.

Starts an odradek broker and a recording TCP proxy in front of it (the broker
advertises the proxy, so clients never leave it), then drives each client adapter
of tests/support/clients.py through the proxy: create a topic, produce keyed
records with headers (plus one compressed batch where the client can), consume
(assigned, then with a group), and look up offsets by time.

Every request frame (the bytes after the 4-byte size) is attributed to a client by
the client id in its header (see CLIENT_IDS; frames with any other client id, e.g.
kcat's topic creation through librdkafka's AdminClient, are ignored) and the first
frame of each (client, api_key, api_version) is written to
tests/unit/protocol/fixtures/<client>/<api_name>_v<version>.bin. Frames over 64 KiB are
skipped, never truncated.

Run by hand (not in CI), from the repo root, after scripts/install-test-deps.sh:

    .venv/bin/python scripts/capture_frames.py [--clients java,confluent,...] [--keep]

Without --keep the fixture folder of each driven client is emptied first, so a rerun
replaces the old capture.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))
sys.path.insert(0, str(REPO_ROOT / "src"))

from support.broker import BrokerProcess, free_port  # noqa: E402
from support.clients import CLIENTS, Rec, make_client, unavailable_reason  # noqa: E402

from odradek.protocol.messages import api_name  # noqa: E402

FIXTURES = REPO_ROOT / "tests" / "unit" / "protocol" / "fixtures"
MAX_FRAME = 64 * 1024

# The client id each adapter sends (tests/support/clients.py, KafkaCli.java, kafkajs_cli.js;
# kcat keeps librdkafka's default).
CLIENT_IDS = {
    "java": "odradek-java-cli",
    "confluent": "odradek-test-confluent",
    "kcat": "rdkafka",
    "kafka_python": "odradek-test-kafka-python",
    "aiokafka": "odradek-test-aiokafka",
    "kafkajs": "odradek-kafkajs-cli",
}
BY_ID = {v: k for k, v in CLIENT_IDS.items()}

# A codec each client can send (None: the adapter has none).
COMPRESSION = {
    "java": "zstd",
    "confluent": "lz4",
    "kcat": "snappy",
    "kafka_python": "gzip",
    "aiokafka": "gzip",
    "kafkajs": "gzip",
}


def client_id_of(frame: bytes) -> str | None:
    if len(frame) < 10:
        return None
    (n,) = struct.unpack_from(">h", frame, 8)
    if n < 0 or 10 + n > len(frame):
        return None
    return frame[10 : 10 + n].decode("utf-8", "replace")


class RecordingProxy:
    """A loopback TCP proxy that records every client->broker request frame."""

    def __init__(self, upstream: tuple[str, int], port: int):
        self.upstream = upstream
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(128)
        self.port = port
        self.frames: list[bytes] = []
        self.lock = threading.Lock()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream)
            except OSError:
                down.close()
                continue
            threading.Thread(target=self._pump, args=(down, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        buf = bytearray()
        try:
            while True:
                data = src.recv(262144)
                if not data:
                    break
                if record:
                    buf += data
                    while len(buf) >= 4:
                        size = int.from_bytes(buf[:4], "big", signed=True)
                        if size < 0 or len(buf) < 4 + size:
                            break
                        with self.lock:
                            self.frames.append(bytes(buf[4 : 4 + size]))
                        del buf[: 4 + size]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped = True
        self.listener.close()


def drive(name: str, bootstrap: str) -> list[str]:
    """Run one client through the usual operations; returns what failed (not fatal)."""
    c = make_client(name, bootstrap)
    topic = f"cap-{name}-{uuid.uuid4().hex[:6]}"
    failures: list[str] = []

    def step(what, fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a client's failure must not stop the capture
            failures.append(f"{what}: {type(e).__name__}: {e}")
            print(f"  {name}: {what} failed: {e}", file=sys.stderr)
            return None

    step("create_topic", lambda: c.create_topic(topic, 2))
    # The compressed batch goes first, so the Produce fixture (the first frame of its
    # version) holds a compressed batch of keyed records with headers.
    codec = COMPRESSION.get(name)
    if codec:
        zipped = [Rec(f"key-z{i}".encode(), b"compressible " * 20, [("codec", codec.encode())]) for i in range(4)]
        step(f"produce {codec}", lambda: c.produce(topic, zipped, compression=codec))
    recs = [Rec(f"key-{i}".encode(), f"value-{i}".encode(), [("h1", b"v1"), ("h2", f"{i}".encode())]) for i in range(6)]
    step("produce", lambda: c.produce(topic, recs))
    step("list_topics", lambda: c.list_topics())
    step("consume (assigned)", lambda: c.consume(topic, expected=10, timeout=20))
    step("consume (group)", lambda: c.consume(topic, expected=10, timeout=30, group=f"cap-group-{name}"))
    step("offsets_for_times", lambda: c.offsets_for_times(topic, 0))
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated adapter names")
    ap.add_argument("--keep", action="store_true", help="keep fixtures already present")
    args = ap.parse_args()
    names = [n for n in args.clients.split(",") if n]

    proxy_port = free_port()
    with tempfile.TemporaryDirectory(prefix="odradek-capture-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker", {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
        proxy = RecordingProxy(("127.0.0.1", broker.port), proxy_port)
        broker.start()
        bootstrap = f"127.0.0.1:{proxy_port}"
        report = {}
        try:
            for name in names:
                reason = unavailable_reason(name)
                if reason:
                    print(f"{name}: skipped ({reason})", file=sys.stderr)
                    continue
                print(f"{name}: driving through {bootstrap}", file=sys.stderr)
                t0 = time.monotonic()
                try:
                    report[name] = drive(name, bootstrap)
                except Exception:  # noqa: BLE001
                    traceback.print_exc()
                    report[name] = ["crashed"]
                print(f"{name}: done in {time.monotonic() - t0:.1f}s", file=sys.stderr)
            time.sleep(1.0)  # let the last frames through the proxy
        finally:
            proxy.close()
            broker.stop()

    with proxy.lock:
        frames = list(proxy.frames)
    seen: dict[tuple[str, int, int], bytes] = {}
    skipped = 0
    for f in frames:
        client = BY_ID.get(client_id_of(f) or "")
        if client is None or client not in names:
            continue
        key, version = struct.unpack_from(">hh", f, 0)
        if len(f) > MAX_FRAME:
            skipped += 1
            continue
        seen.setdefault((client, key, version), f)

    for name in names:
        if name not in report:
            continue
        d = FIXTURES / name
        d.mkdir(parents=True, exist_ok=True)
        if not args.keep:
            for old in d.glob("*.bin"):
                old.unlink()
    for (client, key, version), f in sorted(seen.items()):
        (FIXTURES / client / f"{api_name(key)}_v{version}.bin").write_bytes(f)

    print(f"{len(frames)} frames seen, {skipped} over {MAX_FRAME} bytes skipped", file=sys.stderr)
    for name in names:
        got = sorted(f"{api_name(k)} v{v}" for (c, k, v) in seen if c == name)
        print(f"{name}: {len(got)} fixtures: {', '.join(got)}", file=sys.stderr)
        for fail in report.get(name, []):
            print(f"  failure: {fail}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
