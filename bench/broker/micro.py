"""Per-request broker CPU, in process: the e2e workload's two requests without a network.

A broker is started in this process (temp dir, uvloop, no listener traffic); each step runs the
exact code a connection runs for one frame: framing and parsing (the protocol connection's
receive_data + next_event: header + body), the handler, the response framing. Requests are
the ones librdkafka 2.16 sends (Produce v10 with one 100-byte record, acks=1; Fetch v16 of one
partition, session-less) rebuilt from tests/unit/protocol/fixtures/confluent. The fetch is timed
under read_uncommitted, read_committed (isolation_level 1: the last stable offset and the
aborted-transaction lookup), and read_committed once the log holds an aborted transaction.

    .venv/bin/python bench/broker/micro.py [-n 20000] [--producer plain|idempotent|transactional]

--producer: the Produce requests' batches are plain (librdkafka's, the default), idempotent
(producer id and epoch, a new sequence each request), or transactional (the same, inside one
open transaction of a transactional id: the KIP-890 check finds it open after the first batch;
the read_committed fetches are not timed then, as the open transaction holds back what they see).

Prints microseconds per request for each step (best of 5 rounds); compare before/after a change.
This measures Python work only: syscalls (recv, send, sendfile, pwritev) and event-loop wake-ups
come on top (see docs/benchmarks.md for the socket-level figures).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from odradek.broker.config import BrokerConfig  # noqa: E402
from odradek.broker.connection import served_apis  # noqa: E402
from odradek.broker.connection_state import ConnectionState  # noqa: E402
from odradek.broker.registry import REGISTRY, RequestContext, load_handlers  # noqa: E402
from odradek.broker.server import Broker  # noqa: E402
from odradek.protocol import messages, records  # noqa: E402
from odradek.protocol.connection import ServerConnection  # noqa: E402
from odradek.protocol.framing import encode_frame  # noqa: E402
from odradek.protocol.headers import encode_request_header  # noqa: E402
from odradek.storage import AppendOrigin  # noqa: E402

SENTINEL = 0x0123456789ABCDEF
ROUNDS = 5  # each step is timed this many times; the best counts
FIX = ROOT / "tests" / "unit" / "protocol" / "fixtures" / "confluent"


def frame_for(api_key: int, version: int, req, corr: int = 1) -> bytes:
    """A whole request frame, size prefix included."""
    head = encode_request_header(api_key, version, corr, "rdkafka", messages.is_flexible(api_key, version))
    return encode_frame(head + messages.encode(req))


async def main(n: int, producer: str = "plain") -> dict[str, float]:
    load_handlers()
    tmp = tempfile.mkdtemp(prefix="odradek-micro-")
    cfg = BrokerConfig({"log.dirs": tmp, "listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": "1"})
    broker = Broker(cfg)
    services = await broker.start()
    # the broker warms its schema caches in a thread after starting: let it finish first
    await asyncio.gather(*(t for t in broker._tasks if t.get_coro().__name__ == "_warm_up"))
    conn = ConnectionState(1, "peer")
    try:
        info = await services.topics.create_topic("micro", [(services.node_id,)], {})
        batch = make_batch()
        proto = ServerConnection(served_apis(), cfg["socket.request.max.bytes"])

        def parse_frame(framed: bytes):
            proto.receive_data(framed)
            return proto.next_event()

        preq = parse_frame(encode_frame((FIX / "produce_v10.bin").read_bytes())).request
        preq = dataclasses.replace(
            preq,
            acks=1,
            topic_data=(
                dataclasses.replace(
                    preq.topic_data[0],
                    name="micro",
                    partition_data=(dataclasses.replace(preq.topic_data[0].partition_data[0], index=0, records=batch),),
                ),
            ),
        )
        pframes = [frame_for(0, 10, preq)]
        # an open transaction holds the last stable offset below the batches produced in it, so a
        # read_committed fetch would find nothing and wait its max_wait: timed for the others only
        reads_committed = producer != "transactional"
        # Produce requests the steps send: produce, and each fetch step produces the batch its fetch
        # finds, n requests a round
        produces_per_n = (4 if reads_committed else 2) * ROUNDS
        if producer != "plain":
            pid, epoch, txn_id = 4242, 0, None
            if producer == "transactional":
                txn_id = "micro-tx"
                txn = services.txn_coordinator
                await services.topics.ensure_internal_topic("__transaction_state", 50, 1, {"cleanup.policy": "compact"})
                await asyncio.sleep(0.2)  # the shards load
                err, pid, epoch = await txn.init_producer_id(txn_id, 60000)
                assert not err, err
                assert not await txn.add_partitions(txn_id, pid, epoch, [("micro", 0)])
            # every request carries the next sequences: built ahead, one per Produce request the steps send
            seqs = iter(range(1 << 30))
            pframes = [
                frame_for(
                    0,
                    10,
                    dataclasses.replace(
                        preq,
                        transactional_id=txn_id,
                        topic_data=(
                            dataclasses.replace(
                                preq.topic_data[0],
                                partition_data=(
                                    dataclasses.replace(
                                        preq.topic_data[0].partition_data[0],
                                        records=make_batch(pid, epoch, next(seqs), txn_id is not None),
                                    ),
                                ),
                            ),
                        ),
                    ),
                )
                for _ in range(n * produces_per_n)
            ]
        pframe_iter = iter(pframes * (1 if producer != "plain" else n * produces_per_n))
        pframe = pframes[0]
        freq = parse_frame(encode_frame((FIX / "fetch_v16.bin").read_bytes())).request
        ftopic = dataclasses.replace(
            freq.topics[0],
            topic_id=info.topic_id,
            partitions=(dataclasses.replace(freq.topics[0].partitions[0], partition=0, fetch_offset=SENTINEL),),
        )
        freq = dataclasses.replace(freq, topics=(ftopic,), max_wait=freq.max_wait, isolation_level=0)
        fframe = frame_for(1, 16, freq)
        at = fframe.index(SENTINEL.to_bytes(8, "big"))
        committed_frame = frame_for(1, 16, dataclasses.replace(freq, isolation_level=1))
        log_ = services.replica_manager.get_partition("micro", 0).log

        def fetch_frame_at(offset: int, template: bytes = fframe) -> bytes:
            return template[:at] + offset.to_bytes(8, "big") + template[at + 8 :]

        async def run_frame(frame, fetch_offset=None):
            event = parse_frame(frame)
            ctx = RequestContext(
                services, conn, event.api_key, event.api_version, event.correlation_id, event.client_id
            )
            handler = REGISTRY[event.api_key]
            resp = await handler.fn(ctx, event.request)
            body, size = handler.encode_response(event.api_version, resp)
            return proto.send_chunks(event, body, size)

        # produce enough so each fetch finds a batch at its offset
        steps = {}

        def timed(name, fn, rounds=ROUNDS):
            best = None
            for _ in range(rounds):
                t = time.perf_counter()
                fn()
                d = (time.perf_counter() - t) / n * 1e6
                best = d if best is None else min(best, d)
            steps[name] = best

        asyncio.get_running_loop()

        def parse_p():
            for _ in range(n):
                parse_frame(pframe)

        def parse_f():
            f = fetch_frame_at(0)
            for _ in range(n):
                parse_frame(f)

        timed("produce: frame+parse", parse_p)
        timed("fetch:   frame+parse", parse_f)

        async def produce_all():
            for _ in range(n):
                await run_frame(next(pframe_iter))

        async def fetch_all(template: bytes = fframe):  # the consumer's next fetch finds the batch just produced
            took = 0.0
            pc = time.perf_counter
            for _ in range(n):
                f = fetch_frame_at(log_.log_end_offset, template)
                await run_frame(next(pframe_iter))
                t = pc()
                await run_frame(f)
                took += pc() - t
            return took

        async def fetch_committed():
            return await fetch_all(committed_frame)

        def add_aborted_transaction():
            pid = 1 << 40
            log_.append(
                records.build_batch(
                    [records.Record(timestamp=int(time.time() * 1000), value=b"t")],
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=0,
                    is_transactional=True,
                )
            )
            marker = records.build_control_batch(
                records.CONTROL_ABORT, producer_id=pid, producer_epoch=0, timestamp=int(time.time() * 1000)
            )
            log_.append(marker, origin=AppendOrigin.COORDINATOR)
            log_.high_watermark = log_.log_end_offset

        producing_steps = [
            ("produce: parse+handle+encode", produce_all, None),
            ("fetch:   parse+handle+encode", fetch_all, None),
        ]
        if reads_committed:
            producing_steps += [
                ("fetch:   read_committed", fetch_committed, None),
                ("fetch:   read_committed, aborts", fetch_committed, add_aborted_transaction),
            ]
        assert len(producing_steps) * ROUNDS == produces_per_n
        for name, coro_fn, before in producing_steps:
            if before is not None:
                before()
            best = None
            for _ in range(ROUNDS):
                t = time.perf_counter()
                took = await coro_fn()
                d = (took if took is not None else time.perf_counter() - t) / n * 1e6
                best = d if best is None else min(best, d)
            steps[name] = best
        for k, v in steps.items():
            print(f"{k:32s} {v:7.1f} us")
        return steps
    finally:
        await broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def make_batch(producer_id: int = -1, epoch: int = -1, sequence: int = -1, transactional: bool = False) -> bytes:
    return records.build_batch(
        [records.Record(timestamp=int(time.time() * 1000), value=b"x" * 100)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--producer", choices=("plain", "idempotent", "transactional"), default="plain")
    a = ap.parse_args()
    import uvloop

    uvloop.run(main(a.n, a.producer))
