"""The exactly-once streaming sink (``exactlyOnce=true``, spark/txn_sink.py): one transaction per
write task and micro-batch, a replayed batch not written again, a zombie holder of a task's
transactional id fenced; and the refusals where it is not supported.

The broker is Apache Kafka 4.4 and odradek (odradek's case waits for its transaction support);
the sink needs the odradek client's transactional producer, and the broker tests skip without it.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer as CKProducer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.spark.options import OptionError, parse_sink_options
from odradek.spark.txn_sink import check_exactly_once, transactional_id

pytestmark = pytest.mark.spark

BS = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}


# ---------------------------------------------------------------------- refusals (no broker)
def test_exactly_once_is_refused_for_batch_writes():
    opts = parse_sink_options({**BS, "exactlyOnce": "true"})
    with pytest.raises(OptionError, match="only to streaming"):
        check_exactly_once(opts, streaming=False)


def test_a_transactional_id_of_ones_own_is_refused():
    with pytest.raises(OptionError, match="kafka.transactional.id"):
        parse_sink_options({**BS, "kafka.transactional.id": "mine"})


def test_exactly_once_bad_value_is_refused():
    with pytest.raises(OptionError, match="exactlyOnce"):
        parse_sink_options({**BS, "exactlyOnce": "sure"})


def test_exactly_once_is_accepted_for_streaming_writes():
    check_exactly_once(parse_sink_options({**BS, "exactlyOnce": "true"}), streaming=True)


# ---------------------------------------------------------------------- against a broker
@pytest.fixture(
    scope="module",
    params=["kafka4", "odradek"],
)
def txn_bootstrap(request):
    if request.param == "kafka4":
        return request.getfixturevalue("kafka4").bootstrap
    return request.getfixturevalue("spark_broker").bootstrap


def _topics(bootstrap: str, *names: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        f.result(30)


def _produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = CKProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, f"v{i}".encode(), f"k{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0


def _committed_values(spark, bootstrap: str, topic: str) -> list[str]:
    df = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    return sorted(bytes(r.value).decode() for r in df.select("value").collect())


def _copy(spark, bootstrap: str, src: str, dst: str, ckpt):
    q = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "90")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(240)
    assert q.exception() is None
    return q


def _forget_last_commit(ckpt) -> int:
    """A crash after the sink committed the last batch, before Spark logged it: Spark replays it."""
    last = max(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()
    for crc in (ckpt / "commits").glob(f".{last}.crc"):
        crc.unlink()
    return last


def test_each_record_copied_once_across_a_replayed_batch(spark, txn_bootstrap, tmp_path):
    src, dst = f"eos-in-{uuid.uuid4().hex[:8]}", f"eos-out-{uuid.uuid4().hex[:8]}"
    _topics(txn_bootstrap, src, dst)
    _produce(txn_bootstrap, src, 0, 300)
    ckpt = tmp_path / "ckpt"
    _copy(spark, txn_bootstrap, src, dst, ckpt)
    want = sorted(f"v{i}" for i in range(300))
    assert _committed_values(spark, txn_bootstrap, dst) == want
    _forget_last_commit(ckpt)
    _copy(spark, txn_bootstrap, src, dst, ckpt)  # the replayed batch is found committed
    assert _committed_values(spark, txn_bootstrap, dst) == want
    _produce(txn_bootstrap, src, 300, 60)
    _copy(spark, txn_bootstrap, src, dst, ckpt)
    assert _committed_values(spark, txn_bootstrap, dst) == sorted(f"v{i}" for i in range(360))


def test_a_zombie_holding_a_tasks_transactional_id_is_fenced(spark, txn_bootstrap, tmp_path):
    """A leftover producer of the query's transactional id (a task of a run that died) has an
    open transaction with records: the next batch's task fences it, its records stay invisible
    to read_committed, and it cannot commit any more."""
    from confluent_kafka import KafkaException

    src, dst = f"eos-in-{uuid.uuid4().hex[:8]}", f"eos-out-{uuid.uuid4().hex[:8]}"
    _topics(txn_bootstrap, src, dst)
    _produce(txn_bootstrap, src, 0, 30)
    ckpt = tmp_path / "ckpt"
    q = _copy(spark, txn_bootstrap, src, dst, ckpt)
    zombies = []
    for part in range(3):
        z = CKProducer({"bootstrap.servers": txn_bootstrap, "transactional.id": transactional_id(str(q.id), part)})
        z.init_transactions(30)
        z.begin_transaction()
        z.produce(dst, b"zombie", partition=part)
        z.flush(30)
        zombies.append(z)
    _produce(txn_bootstrap, src, 30, 30)
    _copy(spark, txn_bootstrap, src, dst, ckpt)
    assert _committed_values(spark, txn_bootstrap, dst) == sorted(f"v{i}" for i in range(60))
    fenced = 0
    for z in zombies:
        try:
            z.commit_transaction(30)
        except KafkaException:
            fenced += 1
    assert fenced >= 1  # at least the partitions the second run's tasks used
    assert "zombie" not in _committed_values(spark, txn_bootstrap, dst)
