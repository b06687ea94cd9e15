"""Prometheus metrics (`metrics.listener`): scrape a real broker before and after producing and
consuming with confluent-kafka, and check each family moves as docs/metrics.md says."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from support.broker import free_port

pytestmark = pytest.mark.interop

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("prometheus_client")

from support.prometheus import scrape, val, wait_for  # noqa: E402


@pytest.fixture
def mbroker(broker_factory):
    port = free_port()
    b = broker_factory({"metrics.listener": f"127.0.0.1:{port}", "num.partitions": 2})
    b.metrics_port = port
    return b


def test_metrics_move_with_traffic(mbroker):
    port = mbroker.metrics_port
    topic = f"m-{uuid.uuid4().hex[:8]}"
    before = scrape(port)
    # the families that exist from the start
    assert val(before, "odradek_purgatory_size", purgatory="fetch") == 0
    assert ("odradek_connections", ()) in before
    dirs = [dict(k[1])["dir"] for k in before if k[0] == "odradek_log_dir_partitions"]
    assert dirs, "no log dir gauges"
    assert all(val(before, "odradek_log_dir_offline", dir=d) == 0 for d in dirs)

    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
    n, size = 500, 50
    p = Producer({"bootstrap.servers": mbroker.bootstrap, "acks": "1", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"x" * size, key=str(i).encode())
    assert p.flush(15) == 0

    # request counters move once the response is sent (as Kafka's request metrics do), so a
    # scrape right after the client got its answer may not show them yet: wait for them too
    produce_before = val(before, "odradek_requests_total", api="produce")
    after_produce = wait_for(
        port,
        lambda m: (
            val(m, "odradek_topic_records_in_total", topic=topic) >= n
            and val(m, "odradek_requests_total", api="produce") > produce_before
            and val(m, "odradek_requests_total", api="create_topics") >= 1
        ),
    )
    assert val(after_produce, "odradek_topic_records_in_total", topic=topic) == n
    assert val(after_produce, "odradek_topic_bytes_in_total", topic=topic) >= n * size
    assert val(after_produce, "odradek_requests_total", api="produce") > val(
        before, "odradek_requests_total", api="produce"
    )
    assert val(after_produce, "odradek_request_latency_seconds_count", api="produce") >= 1
    assert val(after_produce, "odradek_request_latency_seconds_sum", api="produce") > 0
    assert val(after_produce, "odradek_requests_total", api="metadata") >= 1
    assert val(after_produce, "odradek_requests_total", api="create_topics") >= 1
    assert val(after_produce, "odradek_connections_accepted_total") > val(before, "odradek_connections_accepted_total")
    # log dir gauges: two more partitions, and their bytes
    assert (
        sum(val(after_produce, "odradek_log_dir_partitions", dir=d) for d in dirs)
        >= sum(val(before, "odradek_log_dir_partitions", dir=d) for d in dirs) + 2
    )
    assert sum(val(after_produce, "odradek_log_dir_segments", dir=d) for d in dirs) >= 2
    assert (
        sum(val(after_produce, "odradek_log_dir_bytes", dir=d) for d in dirs)
        >= sum(val(before, "odradek_log_dir_bytes", dir=d) for d in dirs) + n * size
    )

    # consume everything in a group; while it is open: a Stable group with a member, connections
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = Consumer(
        {
            "bootstrap.servers": mbroker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "fetch.wait.max.ms": 2000,
        }
    )
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        for msg in c.consume(500, 1.0):
            if msg.error() is None:
                got += 1
    assert got == n
    during = wait_for(
        port,
        lambda m: (
            val(m, "odradek_groups", state="Stable") >= 1 and val(m, "odradek_purgatory_size", purgatory="fetch") >= 1
        ),
    )
    assert val(during, "odradek_topic_bytes_out_total", topic=topic) >= n * size
    assert val(during, "odradek_topic_records_out_total", topic=topic) >= n
    assert val(during, "odradek_requests_total", api="fetch") >= 1
    assert val(during, "odradek_request_latency_seconds_count", api="fetch") >= 1
    for api in ("find_coordinator", "join_group", "sync_group"):
        assert val(during, "odradek_requests_total", api=api) >= 1, api
    assert val(during, "odradek_groups", state="Stable") >= 1
    assert val(during, "odradek_group_members") >= 1
    assert val(during, "odradek_connections") >= 1
    # an idle consumer's Fetch waits in the purgatory (fetch.wait.max.ms=2000 on a caught-up log)
    assert val(during, "odradek_purgatory_size", purgatory="fetch") >= 1
    # histogram buckets are cumulative and end at +Inf == count
    cnt = val(during, "odradek_request_latency_seconds_count", api="fetch")
    assert val(during, "odradek_request_latency_seconds_bucket", api="fetch", le="+Inf") == cnt

    c.close()  # LeaveGroup: the group becomes Empty
    after = wait_for(
        port,
        lambda m: (
            val(m, "odradek_groups", state="Stable") == 0
            and val(m, "odradek_group_members") == 0
            and val(m, "odradek_requests_total", api="leave_group") >= 1
        ),
    )
    assert val(after, "odradek_groups", state="Stable") == 0
    assert val(after, "odradek_groups", state="Empty") >= 1
    assert val(after, "odradek_group_members") == 0
    assert val(after, "odradek_requests_total", api="leave_group") >= 1


def test_connections_gauge_counts_open_sockets(mbroker):
    import socket

    port = mbroker.metrics_port
    # Connections of earlier tests in this module may still be closing, so compare with
    # the counts seen while our three sockets are open, not with a baseline taken before.
    base = scrape(port)
    socks = [socket.create_connection((mbroker.host, mbroker.port)) for _ in range(3)]
    try:
        # Wait on both: a connection of the readiness probe accepted late also moves the
        # accepted counter, so the counter alone can be ahead of our third accept.
        m = wait_for(
            port,
            lambda m: (
                val(m, "odradek_connections_accepted_total") >= val(base, "odradek_connections_accepted_total") + 3
                and val(m, "odradek_connections") >= 3
            ),
        )
        assert val(m, "odradek_connections_accepted_total") >= val(base, "odradek_connections_accepted_total") + 3
        peak = val(m, "odradek_connections")
        assert peak >= 3
    finally:
        for s in socks:
            s.close()
    m = wait_for(port, lambda m: val(m, "odradek_connections") <= peak - 3)
    assert val(m, "odradek_connections") <= peak - 3


def test_scrape_is_safe_under_load(mbroker):
    """Scraping concurrently with produce traffic never fails (gauges are computed in the scrape thread)."""
    from confluent_kafka import Producer

    port = mbroker.metrics_port
    stop = threading.Event()
    errors: list[BaseException] = []

    def scraper():
        while not stop.is_set():
            try:
                scrape(port)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return

    th = threading.Thread(target=scraper)
    th.start()
    try:
        p = Producer({"bootstrap.servers": mbroker.bootstrap, "linger.ms": 1})
        for t in range(5):
            for _i in range(200):
                p.produce(f"load-{t}", b"v" * 20)
            p.flush(15)
    finally:
        stop.set()
        th.join(10)
    assert not errors, errors
    m = scrape(port)
    assert sum(val(m, "odradek_topic_records_in_total", topic=f"load-{t}") for t in range(5)) == 1000


def test_records_out_counted_from_offsets(mbroker):
    """records out = next offset after the last batch returned - first batch's base offset,
    both where the read stops before the end of the segment file and where it reaches it."""
    import socket
    import struct

    from odradek.broker.registry import make
    from odradek.protocol import messages, records
    from odradek.protocol.headers import encode_request_header

    size = struct.Struct(">i")

    def req(api_key, version, corr, /, **fields):
        body = encode_request_header(api_key, version, corr, "t", messages.is_flexible(api_key, version))
        body += messages.encode(make(messages.request_class(api_key, version), **fields))
        return size.pack(len(body)) + body

    def nested(api_key, version, name, /, **fields):
        return make(getattr(messages.module_of(messages.request_class(api_key, version)), name), **fields)

    def frame(s):
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + size.unpack_from(buf)[0]:
            chunk = s.recv(65536)
            assert chunk
            buf += chunk
        return buf[4:]

    port = mbroker.metrics_port
    topic = f"ro-{uuid.uuid4().hex[:8]}"
    batches = [records.build_batch([records.Record(timestamp=1, value=b"v" * 10) for _ in range(k)]) for k in (3, 2, 1)]
    with socket.create_connection((mbroker.host, mbroker.port), timeout=15) as s:
        s.sendall(
            req(
                19,
                7,
                1,
                topics=(
                    nested(
                        19,
                        7,
                        "CreatableTopic",
                        name=topic,
                        num_partitions=1,
                        replication_factor=1,
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=10000,
                validate_only=False,
            )
        )
        frame(s)
        for i, b in enumerate(batches):
            pd = nested(0, 9, "PartitionProduceData", index=0, records=b)
            s.sendall(
                req(
                    0,
                    9,
                    10 + i,
                    transactional_id=None,
                    acks=1,
                    timeout=10000,
                    topic_data=(nested(0, 9, "TopicProduceData", name=topic, partition_data=(pd,)),),
                )
            )
            frame(s)

        def fetch(corr, offset, max_bytes):
            fp = nested(
                1,
                12,
                "FetchPartition",
                partition=0,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=max_bytes,
            )
            s.sendall(
                req(
                    1,
                    12,
                    corr,
                    replica_id=-1,
                    max_wait=0,
                    min_bytes=0,
                    max_bytes=1 << 20,
                    isolation_level=0,
                    session_id=0,
                    session_epoch=-1,
                    topics=(nested(1, 12, "FetchTopic", topic=topic, partitions=(fp,)),),
                    forgotten_topics_data=(),
                    rack_id="",
                )
            )
            return messages.decode_response(1, 12, frame(s), 5).responses[0].partitions[0].records

        got = fetch(
            20, 0, len(batches[0]) + len(batches[1])
        )  # the first two batches: 5 records, more follow in the file
        assert len(got) == len(batches[0]) + len(batches[1])
        m = scrape(port)
        assert val(m, "odradek_topic_records_out_total", topic=topic) == 5
        assert val(m, "odradek_topic_bytes_out_total", topic=topic) == len(got)
        got = fetch(21, 4, 1 << 20)  # from inside the second batch: it and the last one, to the end of the file
        assert len(got) == len(batches[1]) + len(batches[2])
        m = scrape(port)
        assert val(m, "odradek_topic_records_out_total", topic=topic) == 5 + 3  # offsets 3..5
