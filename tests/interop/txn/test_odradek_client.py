"""Transactions with odradek's client: the transactional producer (blocking and asyncio), the
read_committed consumer, offsets sent in a transaction, zombie fencing, and the admin
client's and CLI's transaction commands.

Each test runs once per broker (`txn_broker`): Apache Kafka 4.4 (the session's ``kafka4``)
and odradek. Until odradek's transaction coordinator serves these APIs the odradek run is
skipped with the reason (ODRADEK_TXN_GAP; removed when it lands).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from click.testing import CliRunner

from odradek.client import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from odradek.client import errors as E
from odradek.client.aio import AIOConsumer, AIOProducer
from odradek.client.aio.admin_txn import AbortTransactionSpec


# Kafka's cases on the xdist worker of tests/interop/txn/test_clients.py's (one Kafka 4.4 start)
@pytest.fixture(params=[pytest.param("kafka4", marks=pytest.mark.xdist_group("kafka4")), "odradek"])
def txn_broker(request) -> str:
    """The bootstrap of a broker that serves transactions."""
    if request.param == "odradek":
        return request.getfixturevalue("odradek_broker").bootstrap
    return request.getfixturevalue("kafka4").bootstrap


def new_topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topic(name, partitions, 1)
    return name


def settled_ends(bootstrap: str, c: Consumer, tps: list[TopicPartition], timeout: float) -> dict:
    """The ends `c` reads to, once no transaction is open on the partitions: a commit or abort
    returns before its markers are written (on Kafka as on odradek), and until they are the
    last stable offset (a read_committed consumer's end) is still below the high watermark."""
    deadline = time.monotonic() + timeout
    with Consumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted") as hw:
        while True:
            ends, high = c.end_offsets(tps), hw.end_offsets(tps)
            if ends == high:
                return ends
            assert time.monotonic() < deadline, (
                f"an open transaction: last stable offsets {ends}, high watermarks {high}"
            )
            time.sleep(0.1)


def read_all(bootstrap: str, topic: str, partitions: int, level: str, timeout: float = 30) -> dict[int, list]:
    """Every record a consumer at `level` returns, per partition, read until its positions
    reach the partitions' ends (the last stable offset under read_committed)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap, isolation_level=level, auto_offset_reset="earliest") as c:
        c.assign(tps)
        ends = settled_ends(bootstrap, c, tps, timeout)
        out: dict[int, list] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"positions {[c.position(tp) for tp in tps]} never reached {ends}"
            for r in c.poll(0.5):
                out[r.partition].append(r)
        for r in c.poll(0.2):  # nothing past the end
            out[r.partition].append(r)
        assert {tp: c.position(tp) for tp in tps} == ends  # positions end past the markers
    return out


def values(recs) -> list[bytes]:
    return [r.value for r in recs]


def send_round(p, topic: str, tag: str, partitions: int = 3, per_partition: int = 2) -> list:
    return [
        p.send(topic, f"{tag}-{p_}-{i}".encode(), partition=p_)
        for i in range(per_partition)
        for p_ in range(partitions)
    ]


def expected(tags: list[str], partitions: int = 3, per_partition: int = 2) -> dict[int, list[bytes]]:
    return {p: [f"{t}-{p}-{i}".encode() for t in tags for i in range(per_partition)] for p in range(partitions)}


def check_commit_abort_commit(bootstrap: str, topic: str) -> None:
    committed = read_all(bootstrap, topic, 3, "read_committed")
    assert {p: values(r) for p, r in committed.items()} == expected(["c1", "c2"])
    everything = read_all(bootstrap, topic, 3, "read_uncommitted")
    assert {p: values(r) for p, r in everything.items()} == expected(["c1", "a", "c2"])
    for p, recs in everything.items():
        # 2 records, a marker, 2, a marker, 2, a marker: the markers' offsets are never returned
        assert [r.offset for r in recs] == [0, 1, 3, 4, 6, 7], p
        assert [r.offset for r in committed[p]] == [0, 1, 6, 7], p


# --------------------------------------------------------------------------- producer and consumer


def test_commit_abort_commit_blocking(txn_broker):
    topic = new_topic(txn_broker)
    with Producer(bootstrap_servers=txn_broker, transactional_id=f"tid-{topic}") as p:
        p.init_transactions()
        p.begin_transaction()
        send_round(p, topic, "c1")
        p.commit_transaction()
        p.begin_transaction()
        futs = send_round(p, topic, "a")
        p.flush()  # sent and acknowledged: the abort marker is what hides them
        assert all(f.get(10).offset >= 0 for f in futs)
        p.abort_transaction()
        p.begin_transaction()
        send_round(p, topic, "c2")
        p.commit_transaction()
    check_commit_abort_commit(txn_broker, topic)


def test_commit_abort_commit_asyncio(txn_broker):
    topic = new_topic(txn_broker)

    async def run():
        async with AIOProducer(bootstrap_servers=txn_broker, transactional_id=f"tid-{topic}") as p:
            await p.init_transactions()
            for tag, commit in (("c1", True), ("a", False), ("c2", True)):
                p.begin_transaction()
                futs = [
                    await p.send(topic, f"{tag}-{part}-{i}".encode(), partition=part)
                    for i in range(2)
                    for part in range(3)
                ]
                await p.flush()
                assert all(f.done() and f.result().offset >= 0 for f in futs)
                await (p.commit_transaction() if commit else p.abort_transaction())
        tps = [TopicPartition(topic, i) for i in range(3)]
        async with AIOConsumer(
            bootstrap_servers=txn_broker, isolation_level="read_committed", auto_offset_reset="earliest"
        ) as c:
            c.assign(tps)
            got: list = []
            deadline = time.monotonic() + 30
            while len(got) < 12 and time.monotonic() < deadline:
                got += await c.poll(0.5)
            return {p: [r.value for r in got if r.partition == p] for p in range(3)}

    assert asyncio.run(run()) == expected(["c1", "c2"])
    check_commit_abort_commit(txn_broker, topic)


def test_abort_drops_the_records_not_sent_yet(txn_broker):
    topic = new_topic(txn_broker, 1)
    with Producer(
        bootstrap_servers=txn_broker, transactional_id=f"tid-{topic}", linger_ms=600_000, batch_size=1 << 20
    ) as p:
        p.init_transactions()
        p.begin_transaction()
        futs = [p.send(topic, b"never", partition=0) for _ in range(5)]
        p.abort_transaction()
        for f in futs:
            with pytest.raises(E.TransactionAbortedError):
                f.get(10)
        p.begin_transaction()
        p.send(topic, b"kept", partition=0)
        p.commit_transaction()
    assert values(read_all(txn_broker, topic, 1, "read_uncommitted")[0]) == [b"kept"]
    assert values(read_all(txn_broker, topic, 1, "read_committed")[0]) == [b"kept"]


def test_a_zombie_is_fenced(txn_broker):
    """A second producer with the same transactional.id fences the first: its open transaction
    is aborted, and everything it tries afterwards fails with ProducerFencedError."""
    topic = new_topic(txn_broker, 1)
    tid = f"tid-{topic}"
    zombie = Producer(bootstrap_servers=txn_broker, transactional_id=tid)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, b"zombie", partition=0).get(10)
        with Producer(bootstrap_servers=txn_broker, transactional_id=tid) as p:
            p.init_transactions()  # aborts the zombie's transaction, bumps the epoch
            with pytest.raises(E.ProducerFencedError):
                zombie.commit_transaction()
            with pytest.raises(E.ProducerFencedError):
                zombie.send(topic, b"again", partition=0)
            with pytest.raises(E.ProducerFencedError):
                zombie.abort_transaction()
            p.begin_transaction()
            p.send(topic, b"new", partition=0)
            p.commit_transaction()
    finally:
        zombie.close()
    assert values(read_all(txn_broker, topic, 1, "read_committed")[0]) == [b"new"]
    assert values(read_all(txn_broker, topic, 1, "read_uncommitted")[0]) == [b"zombie", b"new"]


def test_send_offsets_to_transaction(txn_broker):
    """Consume-transform-produce: the group's offsets commit with the transaction, or not at all
    when it aborts; offsets from a past generation are refused (KIP-447) and leave the
    transaction abortable."""
    src, dst = new_topic(txn_broker, 1), new_topic(txn_broker, 1)
    group = f"g-{src}"
    with Producer(bootstrap_servers=txn_broker, transactional_id=f"tid-{src}") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(6):
            p.send(src, f"in-{i}".encode(), partition=0)
        p.commit_transaction()
        with Consumer(
            src,
            bootstrap_servers=txn_broker,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        ) as c:
            got: list = []
            deadline = time.monotonic() + 30
            while len(got) < 6 and time.monotonic() < deadline:
                got += c.poll(0.5)
            assert values(got) == [f"in-{i}".encode() for i in range(6)]
            gm = c.group_metadata()
            assert gm.group_id == group and gm.generation_id >= 1 and gm.member_id
            tp = TopicPartition(src, 0)

            p.begin_transaction()
            for r in got[:3]:
                p.send(dst, r.value.upper(), partition=0)
            p.send_offsets_to_transaction({tp: OffsetAndMetadata(got[2].offset + 1, "m")}, gm)
            p.commit_transaction()
            assert c.committed([tp])[tp].offset == got[2].offset + 1

            p.begin_transaction()
            p.send(dst, b"ABORTED", partition=0)
            p.send_offsets_to_transaction({tp: got[5].offset + 1}, gm)
            p.abort_transaction()
            assert c.committed([tp])[tp].offset == got[2].offset + 1

            # KIP-447: while a transaction holds offsets for the partition, the consumer's
            # OffsetFetch (require_stable) gets UNSTABLE_OFFSET_COMMIT until it ends
            p.begin_transaction()
            p.send_offsets_to_transaction({tp: got[4].offset + 1}, gm)
            with pytest.raises(E.UnstableOffsetCommitError):
                c.committed([tp], timeout=1)
            p.abort_transaction()
            assert c.committed([tp])[tp].offset == got[2].offset + 1

            p.begin_transaction()
            stale = gm._replace(generation_id=gm.generation_id + 5)
            with pytest.raises(E.CommitFailedError):
                p.send_offsets_to_transaction({tp: got[5].offset + 1}, stale)
            with pytest.raises(E.KafkaError, match="abort_transaction"):
                p.commit_transaction()
            p.abort_transaction()

            p.begin_transaction()
            p.send_offsets_to_transaction({tp: got[5].offset + 1}, gm)
            p.commit_transaction()
            assert c.committed([tp])[tp].offset == got[5].offset + 1
    assert values(read_all(txn_broker, dst, 1, "read_committed")[0]) == [b"IN-0", b"IN-1", b"IN-2"]


def test_misuse_is_refused(txn_broker):
    with pytest.raises(ValueError, match="enable.idempotence"):
        Producer(bootstrap_servers=txn_broker, transactional_id="x", enable_idempotence=False)
    with pytest.raises(ValueError, match="isolation.level"):
        Consumer(bootstrap_servers=txn_broker, isolation_level="read_something")
    topic = new_topic(txn_broker, 1)
    with Producer(bootstrap_servers=txn_broker) as plain:
        with pytest.raises(E.IllegalStateError, match="transactional.id"):
            plain.init_transactions()
    with Producer(bootstrap_servers=txn_broker, transactional_id=f"tid-{topic}") as p:
        with pytest.raises(E.IllegalStateError, match="init_transactions"):
            p.send(topic, b"x")
        with pytest.raises(E.IllegalStateError, match="init_transactions"):
            p.begin_transaction()
        p.init_transactions()
        with pytest.raises(E.IllegalStateError, match="begin_transaction"):
            p.send(topic, b"x")
        with pytest.raises(E.IllegalStateError):
            p.commit_transaction()
        with pytest.raises(E.IllegalStateError):
            p.init_transactions()
        p.begin_transaction()
        with pytest.raises(E.IllegalStateError):
            p.begin_transaction()
        p.commit_transaction()  # an empty transaction: nothing to end at the coordinator
        p.begin_transaction()
        p.send(topic, b"open at close", partition=0)
    # close aborted the open transaction (as Java's producer does) instead of leaving it to time out
    assert values(read_all(txn_broker, topic, 1, "read_committed", timeout=20)[0]) == []


# --------------------------------------------------------------------------- admin and CLI


def cli(bootstrap: str, *args: str, ok: bool = True):
    from odradek.cli.main import main

    argv = ["transactions", args[0], "--bootstrap-server", bootstrap, *args[1:]]
    res = CliRunner().invoke(main, argv, catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, f"odradek {' '.join(argv)} -> {res.exit_code}\n{res.output}"
    return res


def test_admin_describes_and_aborts_a_hanging_transaction(txn_broker):
    topic = new_topic(txn_broker, 1)
    tid = f"tid-{topic}"
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=txn_broker, transactional_id=tid) as p, Admin(bootstrap_servers=txn_broker) as a:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"open", partition=0).get(10)

        listed = {t.transactional_id: t for t in a.list_transactions()}
        assert listed[tid].state == "Ongoing"
        assert [t.transactional_id for t in a.list_transactions(states=["Ongoing"]) if t.transactional_id == tid]
        assert not [t for t in a.list_transactions(states=["CompleteAbort"]) if t.transactional_id == tid]
        d = a.describe_transactions([tid])[tid]
        assert (d.state, d.producer_id, d.topic_partitions) == ("Ongoing", listed[tid].producer_id, [tp])
        assert d.transaction_timeout_ms == 60000 and d.transaction_start_time_ms > 0
        producers = a.describe_producers([tp])[tp]
        assert [(s.producer_id, s.current_transaction_start_offset) for s in producers] == [(d.producer_id, 0)]

        out = cli(txn_broker, "list").output
        assert tid in out and "Ongoing" in out
        out = cli(txn_broker, "describe", "--transactional-id", tid).output
        assert "Ongoing" in out and f"{topic}-0" in out
        out = cli(txn_broker, "describe-producers", "--topic", topic, "--partition", "0").output
        assert str(d.producer_id) in out

        # the partition's open transaction holds the last stable offset at 0: a read_committed
        # consumer sees nothing until it ends
        with Consumer(bootstrap_servers=txn_broker, isolation_level="read_committed") as c:
            assert c.end_offsets([tp])[tp] == 0
        res = cli(txn_broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "7", ok=False)
        assert res.exit_code != 0 and "no open transaction" in res.output
        cli(txn_broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
        assert a.describe_producers([tp])[tp][0].current_transaction_start_offset == -1
        with Consumer(bootstrap_servers=txn_broker, isolation_level="read_committed") as c:
            assert c.end_offsets([tp])[tp] == 2  # the record and the ABORT marker
        assert values(read_all(txn_broker, topic, 1, "read_committed")[0]) == []
        p.abort_transaction()


def test_admin_abort_with_an_explicit_spec(txn_broker):
    topic = new_topic(txn_broker, 1)
    tp = TopicPartition(topic, 0)
    with (
        Producer(bootstrap_servers=txn_broker, transactional_id=f"tid-{topic}") as p,
        Admin(bootstrap_servers=txn_broker) as a,
    ):
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"open", partition=0).get(10)
        s = a.describe_producers([tp])[tp][0]
        a.abort_transaction(AbortTransactionSpec(tp, s.producer_id, s.producer_epoch, s.coordinator_epoch))
        assert a.describe_producers([tp])[tp][0].current_transaction_start_offset == -1
        p.abort_transaction()
    assert values(read_all(txn_broker, topic, 1, "read_committed")[0]) == []


def test_a_failed_record_makes_the_transaction_abortable(txn_broker):
    """A batch the broker refuses (larger than the topic's max.message.bytes) fails the
    transaction: commit is refused until abort, and the next transaction works."""
    from odradek.client import NewTopic

    topic = f"txn-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=txn_broker) as a:
        a.create_topics([NewTopic(topic, 1, 1, {"max.message.bytes": "1000"})])
    with Producer(bootstrap_servers=txn_broker, transactional_id=f"tid-{topic}") as p:
        p.init_transactions()
        p.begin_transaction()
        ok = p.send(topic, b"small", partition=0)
        ok.get(10)
        big = p.send(topic, b"x" * 5000, partition=0)
        with pytest.raises(E.KafkaError):
            big.get(10)
        with pytest.raises(E.KafkaError, match="abort_transaction"):
            p.send(topic, b"refused", partition=0)
        with pytest.raises(E.KafkaError, match="abort_transaction"):
            p.commit_transaction()
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, b"after", partition=0)
        p.commit_transaction()
    assert values(read_all(txn_broker, topic, 1, "read_committed")[0]) == [b"after"]


def test_an_abort_that_needs_a_new_epoch_bumps_it(txn_broker):
    """KIP-360: after an error that leaves the sequences unknown (UNKNOWN_PRODUCER_ID, a gap),
    the abort ends with InitProducerId carrying the current producer id and epoch; the
    coordinator answers epoch + 1 and the next transaction's sequences start at 0."""
    topic = new_topic(txn_broker, 1)
    with Producer(bootstrap_servers=txn_broker, transactional_id=f"tid-{topic}") as p:
        p.init_transactions()
        sender = p._core.sender
        pid, epoch = sender.producer_id, sender.producer_epoch
        p.begin_transaction()
        p.send(topic, b"a", partition=0).get(10)
        p._core.txn.epoch_bump_required = True  # what UNKNOWN_PRODUCER_ID or a sequence gap sets
        p.abort_transaction()
        assert (sender.producer_id, sender.producer_epoch) == (pid, epoch + 1)
        p.begin_transaction()
        p.send(topic, b"b", partition=0)
        p.commit_transaction()
    assert values(read_all(txn_broker, topic, 1, "read_committed")[0]) == [b"b"]


def test_consume_transform_produce_asyncio(txn_broker):
    """The asyncio API end to end: a read_committed group consumer, a transactional producer
    committing outputs and the group's offsets together; a zombie with the same id is fenced."""
    src, dst = new_topic(txn_broker, 2), new_topic(txn_broker, 2)
    group, tid = f"g-{src}", f"tid-{src}"

    async def run():
        async with AIOProducer(bootstrap_servers=txn_broker, transactional_id=f"in-{tid}") as p:
            await p.init_transactions()
            p.begin_transaction()
            for i in range(8):
                await p.send(src, f"{i}".encode(), partition=i % 2)
            await p.commit_transaction()
        async with (
            AIOProducer(bootstrap_servers=txn_broker, transactional_id=tid) as p,
            AIOConsumer(
                src,
                bootstrap_servers=txn_broker,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed",
            ) as c,
        ):
            await p.init_transactions()
            got: list = []
            deadline = time.monotonic() + 30
            while len(got) < 8 and time.monotonic() < deadline:
                got += await c.poll(0.5)
            p.begin_transaction()
            for r in got:
                await p.send(dst, r.value * 2, partition=r.partition)
            offsets = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in got}
            await p.send_offsets_to_transaction(offsets, c.group_metadata())
            await p.commit_transaction()
            committed = await c.committed(list(offsets))
            assert {tp: om.offset for tp, om in committed.items()} == offsets

            p.begin_transaction()
            await p.send(dst, b"zombie", partition=0)
            await p.flush()
            async with AIOProducer(bootstrap_servers=txn_broker, transactional_id=tid) as newer:
                await newer.init_transactions()
                with pytest.raises(E.ProducerFencedError):
                    await p.commit_transaction()
            return sorted(r.value for r in got)

    assert asyncio.run(run()) == [f"{i}".encode() for i in range(8)]
    out = read_all(txn_broker, dst, 2, "read_committed")
    assert sorted(v for recs in out.values() for v in values(recs)) == sorted(f"{i}".encode() * 2 for i in range(8))


def test_many_transactions_commit_exactly_their_records(txn_broker):
    """Thirty transactions of a few hundred records each over three partitions, committed or
    aborted at random (aborted ones sometimes before their records were sent): read_committed
    returns exactly the committed records, in order, with no sequence error along the way."""
    import random

    rng = random.Random(15)
    topic = new_topic(txn_broker)
    want: dict[int, list[bytes]] = {p: [] for p in range(3)}
    with Producer(bootstrap_servers=txn_broker, transactional_id=f"tid-{topic}", linger_ms=20) as p:
        p.init_transactions()
        for t in range(30):
            p.begin_transaction()
            sent: dict[int, list[bytes]] = {q: [] for q in range(3)}
            for i in range(rng.randrange(1, 300)):
                v = f"{t}-{i}".encode()
                q = rng.randrange(3)
                p.send(topic, v, partition=q)
                sent[q].append(v)
            if rng.random() < 0.6:
                p.commit_transaction()
                for q in range(3):
                    want[q] += sent[q]
            else:
                if rng.random() < 0.5:
                    p.flush()
                p.abort_transaction()
    got = read_all(txn_broker, topic, 3, "read_committed", timeout=60)
    assert {q: values(r) for q, r in got.items()} == want
    # the columnar path (poll_columns, what the Spark reader uses) filters the same records
    tps = [TopicPartition(topic, q) for q in range(3)]
    with Consumer(bootstrap_servers=txn_broker, isolation_level="read_committed", auto_offset_reset="earliest") as c:
        c.assign(tps)
        offsets = {q: [] for q in range(3)}
        deadline = time.monotonic() + 30
        while sum(map(len, offsets.values())) < sum(map(len, want.values())) and time.monotonic() < deadline:
            for cols in c.poll_columns(0.5):
                offsets[cols.partition] += list(cols.offset_list())
    assert offsets == {q: [r.offset for r in got[q]] for q in range(3)}
