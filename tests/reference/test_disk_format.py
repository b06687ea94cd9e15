"""odradek's on-disk format is Kafka's: checked with Kafka's own tools and brokers.

* Kafka's DumpLogSegments (3.9 and 4.x) reads odradek's segments (several per partition; keyed,
  with headers, idempotent, every codec; a compacted topic after cleaning) and reports exactly
  the records that were produced, every batch valid; its index checks pass on every ``.index``
  and ``.timeindex``.
* A Kafka 3.9 data directory (ZooKeeper mode: several segments, a compacted and cleaned topic,
  committed group offsets), stopped cleanly, is opened by odradek (cluster/kafka_dir.py), which
  serves every record and committed offset Kafka served.
* The reverse: odradek's log directory, prepared by scripts/odradek-dir-to-kafka.py (meta.properties
  version 0, the topics in ZooKeeper with odradek's topic ids), is opened by Kafka 3.9, which
  serves the same records and committed offsets.

docs/storage.md ("Moving data between Kafka and odradek") says what each side needs.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from support.apache_kafka import SHORT_JVM, tool_command, unavailable_reason
from support.broker import REPO_ROOT

pytestmark = pytest.mark.reference

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# small segments and dense indexes, so every partition has several segments with index entries
SMALL = {"segment.bytes": "2048", "index.interval.bytes": "128"}
COMPACT = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "index.interval.bytes": "128",
}
TOPICS = {"plain": 3, "codecs": len(CODECS), "compact": 1}
GROUP_OFFSETS = {("plain", 0): 42, ("plain", 1): 7, ("compact", 0): 11}


def _need(line: str) -> None:
    reason = unavailable_reason(line)
    if reason:
        pytest.skip(reason)


# ----------------------------------------------------------------------------- a workload, on either broker


def small_configs(line: str) -> tuple[dict[str, str], dict[str, str]]:
    """SMALL and COMPACT as a Kafka line accepts them: 4.x refuses segment.bytes under 1 MiB
    (KIP-1030; 3.9 and odradek take 14 bytes and up), so there the compacted topic rolls by time only."""
    if line != "4":
        return SMALL, COMPACT
    return {**SMALL, "segment.bytes": "1048576"}, {**COMPACT, "segment.bytes": "1048576"}


def create_topics(bootstrap: str, line: str = "3.9") -> None:
    small, compact = small_configs(line)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic("plain", 3, 1, config=small), NewTopic("codecs", len(CODECS), 1, config=small)]
    new.append(NewTopic("compact", 1, 1, config=compact))
    for f in admin.create_topics(new).values():
        f.result(30)


def produce(bootstrap: str) -> dict[tuple[str, int, int], tuple]:
    """The workload; returns what was acknowledged: (topic, partition, offset) -> (key, value, headers, timestamp)."""
    acked: dict[tuple[str, int, int], tuple] = {}

    def delivered(headers):  # a delivery report carries no headers: the callback remembers them
        def on_delivery(err, msg):
            assert err is None, err
            ts = msg.timestamp()[1]
            acked[(msg.topic(), msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers, ts)

        return on_delivery

    base = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2}
    p = Producer({**base, "compression.type": "lz4"})
    for i in range(240):  # small flushes: many batches, several segments per partition
        hs = [("h", b"%d" % i)]
        p.produce("plain", f"v{i}-".encode() * 4, f"k{i}".encode(), i % 3, delivered(hs), headers=hs)
        if i % 8 == 7:
            p.flush(10)
    p.flush(10)
    for n, codec in enumerate(CODECS):
        p = Producer({**base, "compression.type": codec})
        for i in range(60):
            hs = [("codec", codec.encode()), ("i", b"%d" % i)]
            value = f"{codec}-{i}-{random.Random(i).randbytes(40).hex()}".encode()  # compresses little
            p.produce("codecs", value, f"{codec}{i}".encode(), n, delivered(hs), headers=hs)
            if i % 10 == 9:
                p.flush(10)
        p.flush(10)
    p = Producer({**base, "compression.type": "gzip"})
    for i in range(200):  # 10 keys, overwritten 20 times; segments roll every 100 ms
        p.produce("compact", f"c{i}".encode(), f"key{i % 10}".encode(), 0, delivered([]))
        if i % 10 == 9:
            p.flush(10)
            time.sleep(0.12)
    p.flush(10)
    assert len(acked) == 240 + 60 * len(CODECS) + 200
    return acked


_COORDINATOR_NOT_READY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def commit_group_offsets(bootstrap: str, timeout: float = 60) -> None:
    """Commit GROUP_OFFSETS for group g1, retrying while the group coordinator is still coming up
    (a new broker creates __consumer_offsets on the first FindCoordinator)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in GROUP_OFFSETS.items()], asynchronous=False)
                return
            except KafkaException as e:
                # librdkafka does not flag a failed commit's error as retriable: the coordinator's
                # own "not ready yet" codes are named here (Kafka 4 answers LOAD_IN_PROGRESS while
                # it loads __consumer_offsets).
                if not e.args[0].retriable() and e.args[0].code() not in _COORDINATOR_NOT_READY:
                    raise
                assert time.monotonic() < deadline, e
                time.sleep(0.5)
    finally:
        c.close()


def committed(bootstrap: str) -> dict[tuple[str, int], int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1", "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(t, p) for t, p in GROUP_OFFSETS], timeout=30)
    finally:
        c.close()
    return {(tp.topic, tp.partition): tp.offset for tp in got}


def consume_all(bootstrap: str, topics: dict[str, int], timeout: float = 60) -> dict[tuple[str, int, int], tuple]:
    """Every record of ``topics`` ({name: partitions}) from the beginning to the end offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    try:
        tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
        ends = {(tp.topic, tp.partition): c.get_watermark_offsets(tp, timeout=30)[1] for tp in tps}
        c.assign([TopicPartition(t, p, 0) for t, p in ends])  # offset 0: earliest, as on the wire
        got: dict[tuple[str, int, int], tuple] = {}
        pos = dict.fromkeys(ends, -1)
        deadline = time.monotonic() + timeout
        while any(pos[k] + 1 < ends[k] for k in ends):
            assert time.monotonic() < deadline, f"consumed up to {pos}, ends {ends}"
            for m in c.consume(500, 1.0):
                assert m.error() is None, m.error()
                got[(m.topic(), m.partition(), m.offset())] = (m.key(), m.value(), m.headers() or [], m.timestamp()[1])
                pos[(m.topic(), m.partition())] = m.offset()
        return got
    finally:
        c.close()


def wait_served(bootstrap: str, timeout: float = 60) -> None:
    """Until the broker's metadata has a leader for every partition of TOPICS (a broker that just
    started learns its partitions a moment after it listens)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=10).topics
        led = {t: sum(p.leader >= 0 for p in md[t].partitions.values()) if t in md else 0 for t in TOPICS}
        if led == TOPICS:
            return
        assert time.monotonic() < deadline, f"partitions with a leader: {led}"
        time.sleep(0.2)


def set_config(name: str, value: str) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def delete_config(name: str) -> ConfigEntry:
    return ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)


def topic_ids(bootstrap: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_topics(TopicCollection([*TOPICS, "__consumer_offsets"]))
    return {t: str(f.result(30).topic_id) for t, f in described.items()}


def wait_cleaned(bootstrap: str, produced: int, timeout: float = 60) -> None:
    """Until the compacted topic serves fewer records than were produced (the cleaner ran)."""
    deadline = time.monotonic() + timeout
    while len(consume_all(bootstrap, {"compact": 1})) >= produced:
        assert time.monotonic() < deadline, "the cleaner did not run"
        time.sleep(0.5)


def check_compacted(served: dict, acked: dict) -> None:
    """A cleaned compacted topic: each record is the one produced at its offset, the newest of
    every key is there, and fewer records than produced."""
    mine = {k: v for k, v in served.items() if k[0] == "compact"}
    produced = {k: v for k, v in acked.items() if k[0] == "compact"}
    assert mine and len(mine) < len(produced)
    for off, rec in mine.items():
        assert rec[:2] == produced[off][:2], off
    newest = {}
    for off in sorted(produced):
        newest[produced[off][0]] = off
    assert set(newest.values()) <= set(mine)


# ----------------------------------------------------------------------------- DumpLogSegments


_BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* isvalid: (\w+)")
_RECORD = re.compile(
    r"^\| offset: (\d+) (?:CreateTime|LogAppendTime): (-?\d+) keySize: (-?\d+) valueSize: (-?\d+) .*?"
    r"headerKeys: \[(.*?)\](?: key: (.*?))? payload: (.*)$"
)


def dump(line: str, *args: str) -> str:
    cmd = tool_command(line, "DumpLogSegments", *args, jvm=SHORT_JVM)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, f"DumpLogSegments exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    assert "Exception" not in p.stderr, p.stderr[-3000:]
    return p.stdout + p.stderr  # the index checks report some findings on stderr


def parse_records(out: str, topic: str, partition: int) -> dict[tuple[str, int, int], tuple]:
    """Records from ``--deep-iteration --print-data-log`` output: offset -> (key, value, header keys,
    timestamp); every batch must be valid and hold as many records as it says."""
    got: dict[tuple[str, int, int], tuple] = {}
    batch_count = expected = 0
    for ln in out.splitlines():
        if m := _BATCH.match(ln):
            assert m[4] == "true", ln
            assert batch_count == expected, f"batch before {ln!r} held {batch_count} records, not {expected}"
            batch_count, expected = 0, int(m[3])
        elif m := _RECORD.match(ln):
            batch_count += 1
            hkeys = [h.strip() for h in m[5].split(",") if h.strip()]
            key = m[6].encode() if m[6] is not None else None
            got[(topic, partition, int(m[1]))] = (key, m[7].encode(), hkeys, int(m[2]))
    assert batch_count == expected
    return got


@pytest.mark.parametrize("line", ["3.9", "4"])
def test_dump_log_segments_reads_odradeks_segments_and_indexes(broker_factory, line):
    _need(line)
    b = broker_factory(overrides={"log.cleaner.backoff.ms": "200"})
    create_topics(b.bootstrap)
    acked = produce(b.bootstrap)
    wait_cleaned(b.bootstrap, 200)
    b.stop()  # a clean stop: active segments' indexes trimmed, as Kafka leaves them
    data = b.log_dirs
    dumped: dict[tuple[str, int, int], tuple] = {}
    for topic, parts in (("plain", 3), ("codecs", len(CODECS)), ("compact", 1)):
        for p in range(parts):
            logs = sorted((data / f"{topic}-{p}").glob("*.log"))
            if topic != "compact":
                assert len(logs) >= 2, f"{topic}-{p}: one segment only, the test wants several"
            out = dump(line, "--deep-iteration", "--print-data-log", "--files", ",".join(map(str, logs)))
            dumped |= parse_records(out, topic, p)
    expected = {k: (v[0], v[1], [h for h, _ in v[2]], v[3]) for k, v in acked.items()}
    assert {k: v for k, v in dumped.items() if k[0] != "compact"} == {
        k: v for k, v in expected.items() if k[0] != "compact"
    }
    check_compacted(dumped, expected)

    indexes = sorted(data.glob("*-*/*.index")) + sorted(data.glob("*-*/*.timeindex"))
    non_empty = [f for f in indexes if f.stat().st_size > 0]
    assert len(non_empty) > 10, "the indexes should have entries (index.interval.bytes is small)"
    files = ",".join(str(f) for f in indexes)
    verify = dump(line, "--verify-index-only", "--files", files)
    sanity = dump(line, "--index-sanity-check", "--files", files)
    for bad in ("mismatch", "out of order", "not found", "smaller than", "failed", "corrupt", "error"):
        assert bad not in verify.lower(), verify[-3000:]
        assert bad not in sanity.lower(), sanity[-3000:]
    for f in non_empty:
        assert f"{f} passed sanity check" in sanity, sanity[-3000:]


# ----------------------------------------------------------------------------- Kafka 3.9's directory -> odradek


def test_kafka_39_data_directory_is_served_by_odradek(kafka_factory, broker_factory, tmp_path):
    _need("3.9")
    k = kafka_factory(line="3.9", zookeeper=True, overrides={"log.cleaner.backoff.ms": "200"})
    create_topics(k.bootstrap)
    acked = produce(k.bootstrap)
    wait_cleaned(k.bootstrap, 200)
    commit_group_offsets(k.bootstrap)
    kafka_served = consume_all(k.bootstrap, TOPICS)
    kafka_committed = committed(k.bootstrap)
    assert kafka_committed == GROUP_OFFSETS
    kafka_ids = topic_ids(k.bootstrap)
    k.stop()
    node = k.nodes[0]
    assert "Kafka version: 3.9" in node.log_path.read_text(errors="replace")
    assert (node.data_dir / "meta.properties").read_text().count("version=0") == 1  # ZooKeeper mode's format

    copy = tmp_path / "copy"
    shutil.copytree(node.data_dir, copy)
    b = broker_factory(overrides={"log.dirs": str(copy), "node.id": str(node.node_id)})
    assert "topics from the partition directories" in b.log_path.read_text()
    assert consume_all(b.bootstrap, TOPICS) == kafka_served
    assert topic_ids(b.bootstrap) == kafka_ids
    check_compacted(kafka_served, acked)
    assert committed(b.bootstrap) == GROUP_OFFSETS
    # the group resumes where Kafka left it
    conf = {"bootstrap.servers": b.bootstrap, "group.id": "g1", "enable.auto.commit": False}
    c = Consumer({**conf, "auto.offset.reset": "earliest"})
    c.subscribe(["plain"])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while len(first) < 3 and time.monotonic() < deadline:
        for m in c.consume(100, 1.0):
            assert m.error() is None, m.error()
            first.setdefault(m.partition(), m.offset())
    c.close()
    assert first == {0: 42, 1: 7, 2: 0}

    # adopted once: later starts read odradek-metadata.json, with Kafka's topic ids
    b.stop()
    b2 = broker_factory(overrides={"log.dirs": str(copy), "node.id": str(node.node_id)})
    assert "topics from the partition directories" not in b2.log_path.read_text()
    assert consume_all(b2.bootstrap, TOPICS) == kafka_served


@pytest.mark.parametrize("line", ["3.9", "4"])
def test_kraft_directory_brings_its_topic_configs(kafka_factory, broker_factory, tmp_path, line):
    """A KRaft-mode directory (Kafka 3.9, and 4.x, KRaft only) holds Kafka's metadata log: odradek
    reads the per-topic configs from it (cluster/kafka_metadata_log.py), including a config changed
    and one deleted after creation, and leaves out a deleted topic; records and group offsets are
    served as Kafka served them."""
    _need(line)
    k = kafka_factory(line=line, overrides={"log.cleaner.backoff.ms": "200"})
    create_topics(k.bootstrap, line)
    admin = AdminClient({"bootstrap.servers": k.bootstrap})
    for f in admin.create_topics([NewTopic("gone", 1, 1, config={"retention.ms": "1000"})]).values():
        f.result(30)
    changes = [
        ConfigResource("topic", "plain", incremental_configs=[set_config("retention.ms", "123456789")]),
        ConfigResource("topic", "codecs", incremental_configs=[delete_config("index.interval.bytes")]),
    ]
    for f in admin.incremental_alter_configs(changes).values():
        f.result(30)
    for f in admin.delete_topics(["gone"]).values():
        f.result(30)
    acked = produce(k.bootstrap)
    wait_cleaned(k.bootstrap, 200)
    commit_group_offsets(k.bootstrap)
    assert committed(k.bootstrap) == GROUP_OFFSETS
    kafka_served = consume_all(k.bootstrap, TOPICS)
    kafka_ids = topic_ids(k.bootstrap)
    k.stop()
    node = k.nodes[0]
    assert (node.data_dir / "__cluster_metadata-0").is_dir()

    copy = tmp_path / "copy"
    shutil.copytree(node.data_dir, copy)
    b = broker_factory(overrides={"log.dirs": str(copy), "node.id": str(node.node_id)})
    assert "per-topic configs read from Kafka's metadata log" in b.log_path.read_text()
    assert consume_all(b.bootstrap, TOPICS) == kafka_served
    check_compacted(kafka_served, acked)
    assert committed(b.bootstrap) == GROUP_OFFSETS
    assert topic_ids(b.bootstrap) == kafka_ids
    got = topic_overrides(b.bootstrap, [*TOPICS, "__consumer_offsets"])
    small, compact = small_configs(line)
    assert got["compact"] == compact
    assert got["plain"] == {**small, "retention.ms": "123456789"}
    assert got["codecs"] == {"segment.bytes": small["segment.bytes"]}
    assert got["__consumer_offsets"]["cleanup.policy"] == "compact"
    assert "gone" not in AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics


def topic_overrides(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's per-topic configs (DescribeConfigs entries whose source is the topic)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = {}
    for res, f in admin.describe_configs([ConfigResource("topic", t) for t in topics]).items():
        entries = f.result(30).values()
        out[res.name] = {e.name: e.value for e in entries if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    return out


def test_odradek_refuses_a_kafka_directory_of_another_node(broker_factory, tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "meta.properties").write_text("version=0\nbroker.id=7\ncluster.id=abc\n")
    b = broker_factory(overrides={"log.dirs": str(d), "node.id": "1"}, start=False)
    with pytest.raises(Exception, match="exited"):
        b.start(timeout=20)
    assert "belongs to node 7" in b.log_path.read_text()
    (d / "meta.properties").write_text("version=2\nnode.id=1\ncluster.id=abc\n")
    with pytest.raises(Exception, match="exited"):
        b.start(timeout=20)
    assert "meta.properties version 2 is not one odradek can open" in b.log_path.read_text()
    # partitions of one topic naming two topic ids: not one topic odradek could serve
    (d / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=abc\n")
    for p, tid in ((0, "AAAAAAAAAAAAAAAAAAAAAQ"), (1, "AAAAAAAAAAAAAAAAAAAAAg")):
        (d / f"t-{p}").mkdir()
        (d / f"t-{p}" / "partition.metadata").write_text(f"version: 0\ntopic_id: {tid}")
    with pytest.raises(Exception, match="exited"):
        b.start(timeout=20)
    assert "the partitions of topic 't' name different topic ids" in b.log_path.read_text()
    assert "Traceback" not in b.log_path.read_text()


# ----------------------------------------------------------------------------- odradek's directory -> Kafka 3.9


def test_odradek_data_directory_is_served_by_kafka_39(broker_factory, kafka_factory, tmp_path):
    _need("3.9")
    b = broker_factory(overrides={"log.cleaner.backoff.ms": "200"})
    create_topics(b.bootstrap)
    acked = produce(b.bootstrap)
    wait_cleaned(b.bootstrap, 200)
    commit_group_offsets(b.bootstrap)
    odradek_served = consume_all(b.bootstrap, TOPICS)
    assert committed(b.bootstrap) == GROUP_OFFSETS
    odradek_ids = topic_ids(b.bootstrap)
    b.stop()
    assert {k: v for k, v in odradek_served.items() if k[0] != "compact"} == {
        k: v for k, v in acked.items() if k[0] != "compact"
    }

    copy = tmp_path / "for-kafka"
    shutil.copytree(b.log_dirs, copy)
    k = kafka_factory(line="3.9", zookeeper=True, start=False, overrides={"log.dirs": str(copy)})
    node_id = int(dict(ln.split("=", 1) for ln in (copy / "meta.properties").read_text().split())["node.id"])
    assert node_id == k.nodes[0].node_id  # Kafka's broker.id must be odradek's node.id
    k.zookeeper.start()
    script = REPO_ROOT / "scripts" / "odradek-dir-to-kafka.py"
    prep = [sys.executable, str(script), "--log-dir", str(copy), "--zookeeper", k.zookeeper.connect]
    out = subprocess.run(prep, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (copy / "meta.properties").read_text().startswith("version=0\n")
    k.start()
    wait_served(k.bootstrap)
    log_text = k.nodes[0].log_path.read_text(errors="replace")
    assert "clean shutdown file was found" in log_text  # odradek's empty marker is Kafka's clean shutdown
    assert consume_all(k.bootstrap, TOPICS) == odradek_served
    check_compacted(odradek_served, acked)
    assert committed(k.bootstrap) == GROUP_OFFSETS
    # Kafka serves them under odradek's topic ids
    assert topic_ids(k.bootstrap) == odradek_ids
