"""read_committed against read_uncommitted Fetch, in process, per request.

A broker is started in this process (as micro.py); two topics get 2,000 batches of one
100-byte record each over several segments: ``plain`` (no transactions) and ``txn`` (a
transaction of one producer every 20 batches, every other one aborted: 50 ``.txnindex``
entries). Librdkafka's Fetch v16 (one partition, session-less) is then run through the
handler and codec at offsets spread over each log, the isolation levels interleaved request
by request, so contention from other processes hits both alike; each request is timed on its
own and the lower decile and median are printed per (topic, isolation).

    .venv/bin/python bench/broker/read_committed.py [-n 20000] [--partition-max-bytes 1048576]

(``--partition-max-bytes 1000``: small reads of about five batches, as a caught-up consumer's.)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from micro import FIX, SENTINEL, frame_for  # noqa: E402

from odradek.broker.config import BrokerConfig  # noqa: E402
from odradek.broker.connection import served_apis  # noqa: E402
from odradek.broker.connection_state import ConnectionState  # noqa: E402
from odradek.broker.registry import REGISTRY, RequestContext, load_handlers  # noqa: E402
from odradek.broker.server import Broker  # noqa: E402
from odradek.protocol import records  # noqa: E402
from odradek.protocol.connection import ServerConnection  # noqa: E402
from odradek.protocol.framing import encode_frame  # noqa: E402
from odradek.storage import AppendOrigin, LogConfig  # noqa: E402

BATCHES = 2000


def fill(log_, transactional: bool) -> None:
    now = int(time.time() * 1000)
    pid, seq = 1 << 40, 0
    for i in range(BATCHES):
        in_txn = transactional and i % 20 in (5, 6)
        rec = [records.Record(timestamp=now, value=b"x" * 100)]
        if in_txn:
            log_.append(
                records.build_batch(rec, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
            )
            seq += 1
            if i % 20 == 6:
                ctype = records.CONTROL_ABORT if (i // 20) % 2 else records.CONTROL_COMMIT
                m = records.build_control_batch(ctype, producer_id=pid, producer_epoch=0, timestamp=now)
                log_.append(m, origin=AppendOrigin.COORDINATOR)
        else:
            log_.append(records.build_batch(rec))
    log_.high_watermark = log_.log_end_offset


async def main(n: int, partition_max_bytes: int) -> None:
    load_handlers()
    tmp = tempfile.mkdtemp(prefix="odradek-rc-")
    cfg = BrokerConfig({"log.dirs": tmp, "listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": "1"})
    broker = Broker(cfg)
    services = await broker.start()
    await asyncio.gather(*(t for t in broker._tasks if t.get_coro().__name__ == "_warm_up"))
    conn = ConnectionState(1, "peer")
    proto = ServerConnection(served_apis(), cfg["socket.request.max.bytes"])

    def parse_frame(framed: bytes):
        proto.receive_data(framed)
        return proto.next_event()

    try:
        frames = {}
        for name in ("plain", "txn"):
            info = await services.topics.create_topic(name, [(services.node_id,)], {"segment.bytes": "40000"})
            lg = services.replica_manager.get_partition(name, 0).log
            lg.update_config(LogConfig(segment_bytes=40000))
            fill(lg, name == "txn")
            freq = parse_frame(encode_frame((FIX / "fetch_v16.bin").read_bytes())).request
            ftopic = dataclasses.replace(
                freq.topics[0],
                topic_id=info.topic_id,
                partitions=(
                    dataclasses.replace(
                        freq.topics[0].partitions[0],
                        partition=0,
                        fetch_offset=SENTINEL,
                        partition_max_bytes=partition_max_bytes,
                    ),
                ),
            )
            for iso in (0, 1):
                f = frame_for(1, 16, dataclasses.replace(freq, topics=(ftopic,), isolation_level=iso))
                frames[(name, iso)] = (f, f.index(SENTINEL.to_bytes(8, "big")), lg)
            print(
                f"{name}: {lg.segment_count} segments, log end {lg.log_end_offset}, "
                f"{sum(len(s.txn_index.entries) for s in lg.segments)} aborted transactions indexed"
            )

        async def run(frame: bytes) -> int:
            t = time.perf_counter_ns()
            event = parse_frame(frame)
            ctx = RequestContext(
                services, conn, event.api_key, event.api_version, event.correlation_id, event.client_id
            )
            handler = REGISTRY[event.api_key]
            resp = await handler.fn(ctx, event.request)
            body, size = handler.encode_response(event.api_version, resp)
            proto.send_chunks(event, body, size)
            return time.perf_counter_ns() - t

        samples: dict[tuple[str, int], list[int]] = {k: [] for k in frames}
        rnd = random.Random(1)
        keys = list(frames)
        for _ in range(n):
            rnd.shuffle(keys)
            for key in keys:
                frame, at, lg = frames[key]
                offset = rnd.randrange(lg.last_stable_offset - 1)
                samples[key].append(await run(frame[:at] + offset.to_bytes(8, "big") + frame[at + 8 :]))
        for (name, iso), s in sorted(samples.items()):
            s.sort()
            label = "read_committed" if iso else "read_uncommitted"
            print(
                f"{name:6s} {label:17s} p10 {s[len(s) // 10] / 1000:6.1f} us   "
                f"median {statistics.median(s) / 1000:6.1f} us"
            )
    finally:
        await broker.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--partition-max-bytes", type=int, default=1 << 20)
    a = ap.parse_args()
    import uvloop

    uvloop.run(main(a.n, a.partition_max_bytes))
