"""Transactions with the clients people use (issue #15): Java, confluent-kafka, kafka-python,
aiokafka and kafkajs, against Apache Kafka 4.4 (the reference) and odradek.

Each client's transactional producer (tests/support/txn_clients.py) runs a script; consumers of
the same client (tests/support/clients.py, with ``isolation=``) read the result:

* commit, abort, commit across 3 partitions: a read_committed consumer reads exactly the
  committed records, in order per partition; a read_uncommitted one reads every data record, no
  control record, at the offsets a marker after each transaction leaves (0,1 | 3,4 | 6,7).
* zombie: a second producer with the same transactional.id fences the first; the first's open
  transaction is aborted and its next step fails with a fencing error; the second commits.
* timeout: a transaction left open past its transaction.timeout.ms is aborted by the coordinator
  (its records stay invisible to read_committed, the last stable offset moves on so a later
  transaction of another producer is readable) and the producer's commit fails.

How a read_committed read proves that aborted records are invisible without waiting for a
timeout: every test writes its aborted records before its committed ones in each partition, and
reads exactly as many records as were committed; a consumer delivering a partition in offset
order that showed an aborted record would deliver it before that partition's committed records,
so the set it returns would not be the committed set.

kafka-python 3.0.12 has transactions (KIP-98 producer and isolation_level); every client here
has every feature tested, so nothing is skipped for a client.
"""

from __future__ import annotations

import time
import uuid

import pytest
from support import apache_kafka
from support.clients import make_client
from support.txn_clients import CLIENTS, FENCED, run_script, unavailable_reason

pytestmark = pytest.mark.interop

#: the coordinator looks for timed-out transactions this often (Kafka's default is 10 s)
ABORT_SCAN_MS = 500
#: settings both brokers get for the timeout test
FAST_ABORT = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": ABORT_SCAN_MS}
PARTITIONS = 3
BROKERS = [
    # the Kafka cases on one xdist worker (--dist loadgroup): each worker starts its own Kafka 4.4
    # (session-scoped `kafka4`, and this module's `kafka4_fast_abort`), 35-50 s of a loaded
    # machine each, and the interop tier's 4 workers started 7 of them in the run of 2026-11-28
    pytest.param("kafka4", id="kafka4", marks=pytest.mark.xdist_group("kafka4")),
    pytest.param("odradek", id="odradek"),
]
FAST_ABORT_BROKERS = [
    pytest.param("kafka4", id="kafka4", marks=pytest.mark.xdist_group("kafka4_fast_abort")),
    pytest.param("odradek", id="odradek"),
]


@pytest.fixture(params=CLIENTS)
def txn_client(request) -> str:
    reason = unavailable_reason(request.param)
    if reason:
        pytest.skip(f"{request.param}: {reason}")
    return request.param


@pytest.fixture(params=BROKERS)
def bootstrap(request) -> str:
    if request.param == "kafka4":
        k = request.getfixturevalue("kafka4").bootstrap
        wait_coordinators(k)
        return k
    return request.getfixturevalue("broker_factory")().bootstrap


@pytest.fixture(scope="module")
def kafka4_fast_abort(tmp_path_factory):
    """Kafka 4.4 whose coordinator scans for timed-out transactions every ABORT_SCAN_MS."""
    reason = apache_kafka.unavailable_reason("4")
    if reason:
        pytest.skip(reason)
    k = apache_kafka.ApacheKafka(tmp_path_factory.mktemp("kafka4fastabort"), line="4", overrides=FAST_ABORT)
    k.start()
    wait_coordinators(k.bootstrap)
    yield k
    k.kill()  # as the session's Kafkas (tests/conftest.py): nothing is asserted after


@pytest.fixture(params=FAST_ABORT_BROKERS)
def fast_abort_bootstrap(request) -> str:
    if request.param == "kafka4":
        return request.getfixturevalue("kafka4_fast_abort").bootstrap
    return request.getfixturevalue("broker_factory")(overrides=FAST_ABORT).bootstrap


_warm: set[str] = set()  # the Kafka brokers whose coordinators answered already


def wait_coordinators(bootstrap: str, timeout: float = 60) -> None:
    """Until both coordinators answer on a fresh Kafka (once per broker): it creates
    __consumer_offsets and __transaction_state (50 partitions each) on their first
    FindCoordinator, which on a loaded machine outlasts kafkajs's retries ("Failed to find group
    coordinator" from init in one CI run)."""
    if bootstrap in _warm:
        return
    from confluent_kafka import Producer

    wait_group_coordinator(bootstrap, timeout)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"odradek-warm-up-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(timeout)
    _warm.add(bootstrap)


def wait_group_coordinator(bootstrap: str, timeout: float = 30) -> None:
    """Until a group coordinator answers: a fresh Kafka creates __consumer_offsets on the first
    FindCoordinator and answers COORDINATOR_NOT_AVAILABLE meanwhile, more than kafkajs's consumer
    retries (the read_committed reads below join a group with kafkajs)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "odradek-warm-up", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                c.committed([TopicPartition("odradek-warm-up", 0)], timeout=5)
                return
            except Exception:  # noqa: BLE001 - not there yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def new_topic(bootstrap: str, prefix: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, PARTITIONS, 1)], operation_timeout=15).values():
        f.result(20)
    wait_served(bootstrap, name)
    return name


def wait_served(bootstrap: str, topic: str, timeout: float = 20) -> None:
    """Until every partition's leader answers ListOffsets: Kafka's metadata can name a leader a
    moment before its replica manager has the partition (a produce then gets
    UNKNOWN_TOPIC_OR_PARTITION, which kafkajs's transactional send does not retry)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "odradek-served", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        for p in range(PARTITIONS):
            while True:
                try:
                    c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                    break
                except Exception:  # noqa: BLE001 - not served yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
    finally:
        c.close()


def sends(p: str, prefix: str, n: int) -> list[dict]:
    """n records <prefix>-0 .. <prefix>-(n-1), record i to partition i % PARTITIONS."""
    return [{"op": "send", "p": p, "partition": i % PARTITIONS, "value": f"{prefix}-{i}".encode()} for i in range(n)]


def values_of(ops: list[dict]) -> list[bytes]:
    return [op["value"] for op in ops if op["op"] == "send"]


def by_partition(values: list[bytes]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i, v in enumerate(values):
        out[i % PARTITIONS].append(v)
    return out


def read(client: str, bootstrap: str, topic: str, isolation: str, expected: int):
    return make_client(client, bootstrap, isolation=isolation).consume(topic, expected=expected, timeout=30)


def assert_steps_ok(steps, what: str) -> None:
    bad = [f"#{i} {s}" for i, s in enumerate(steps) if not s.ok]
    assert not bad, f"{what}: failed steps: {bad}"


def assert_committed_read(recs, committed: list[bytes], what: str) -> None:
    """``recs`` are exactly ``committed`` (a list of values in write order, record i in partition
    i % PARTITIONS), in order within each partition."""
    got = {p: [r.value for r in recs if r.partition == p] for p in range(PARTITIONS)}
    assert got == by_partition(committed), f"{what}: read_committed saw {got}"


def test_commit_abort_commit(txn_client, bootstrap):
    topic = new_topic(bootstrap, f"txn-cac-{txn_client}")
    first, aborted, second = sends("a", "c1", 6), sends("a", "ab", 6), sends("a", "c3", 6)
    ops = [
        {"op": "init", "p": "a", "transactional_id": f"tx-cac-{uuid.uuid4().hex[:8]}"},
        {"op": "begin", "p": "a"},
        *first,
        {"op": "commit", "p": "a"},
        {"op": "begin", "p": "a"},
        *aborted,
        {"op": "flush", "p": "a"},  # the aborted records are in the log before the abort
        {"op": "abort", "p": "a"},
        {"op": "begin", "p": "a"},
        *second,
        {"op": "commit", "p": "a"},
        {"op": "close", "p": "a"},
    ]
    assert_steps_ok(run_script(txn_client, bootstrap, topic, ops), txn_client)
    committed = values_of(first) + values_of(second)

    recs = read(txn_client, bootstrap, topic, "read_committed", len(committed))
    assert_committed_read(recs, committed, txn_client)

    everything = values_of(first) + values_of(aborted) + values_of(second)
    recs = read(txn_client, bootstrap, topic, "read_uncommitted", len(everything))
    got = {p: [(r.offset, r.value) for r in recs if r.partition == p] for p in range(PARTITIONS)}
    # two records per transaction and partition, then that transaction's marker (a control
    # record: it takes an offset and is never handed to the application)
    want = {p: list(zip([0, 1, 3, 4, 6, 7], vs, strict=True)) for p, vs in by_partition(everything).items()}
    assert got == want, f"{txn_client}: read_uncommitted saw {got}"


def test_zombie_is_fenced(txn_client, bootstrap):
    topic = new_topic(bootstrap, f"txn-zombie-{txn_client}")
    tid = f"tx-zombie-{uuid.uuid4().hex[:8]}"
    old, late, new = sends("old", "old", 3), sends("old", "late", 3), sends("new", "new", 3)
    ops = [
        {"op": "init", "p": "old", "transactional_id": tid},
        {"op": "begin", "p": "old"},
        *old,
        {"op": "flush", "p": "old"},
        {"op": "init", "p": "new", "transactional_id": tid},  # fences "old", aborts its transaction
        *late,
        {"op": "flush", "p": "old"},
        {"op": "commit", "p": "old"},
        # The zombie is closed before the new producer begins: a client that answers
        # INVALID_PRODUCER_EPOCH with a KIP-360 epoch bump (kafka-python 3.x does, in the
        # background) sends InitProducerId with its old producer id; if that lands while the new
        # producer's transaction is open, the coordinator aborts it and fences the new producer:
        # Kafka 4.4 answers that bump CONCURRENT_TRANSACTIONS and the new producer's EndTxn
        # PRODUCER_FENCED, as odradek does (checked with raw requests on both).
        {"op": "close", "p": "old"},
        {"op": "begin", "p": "new"},
        *new,
        {"op": "commit", "p": "new"},
    ]
    steps = run_script(txn_client, bootstrap, topic, ops)
    i_new = 3 + len(old)  # init, begin, the sends, flush: then the second producer's init
    assert_steps_ok(steps[:i_new], f"{txn_client}: the first producer before the second started")
    assert steps[i_new].ok, f"{txn_client}: the second producer's init: {steps[i_new]}"
    zombie = steps[i_new + 1 : i_new + 3 + len(late)]
    assert not zombie[-1].ok, f"{txn_client}: the fenced producer committed: {[str(s) for s in zombie]}"
    errors = {s.error for s in zombie if not s.ok}
    assert errors & FENCED, f"{txn_client}: the zombie failed, but not as fenced: {[str(s) for s in zombie]}"
    assert_steps_ok(steps[i_new + 4 + len(late) :], f"{txn_client}: the second producer")

    recs = read(txn_client, bootstrap, topic, "read_committed", len(new))
    assert_committed_read(recs, values_of(new), txn_client)


def test_timed_out_transaction_is_aborted(txn_client, fast_abort_bootstrap):
    bootstrap = fast_abort_bootstrap
    topic = new_topic(bootstrap, f"txn-timeout-{txn_client}")
    timeout_ms = 2000
    stalled, later = sends("slow", "stalled", 3), sends("next", "later", 3)
    ops = [
        {"op": "init", "p": "slow", "transactional_id": f"tx-slow-{uuid.uuid4().hex[:8]}"},
        {"op": "begin", "p": "slow"},
        *stalled,
        {"op": "flush", "p": "slow"},
        # past its timeout, and past the coordinator's next scan for timed-out transactions
        {"op": "sleep", "ms": timeout_ms + 3 * ABORT_SCAN_MS + 1500},
        {"op": "commit", "p": "slow"},
        # another transactional id: the same one would abort the stalled transaction itself
        {"op": "init", "p": "next", "transactional_id": f"tx-next-{uuid.uuid4().hex[:8]}"},
        {"op": "begin", "p": "next"},
        *later,
        {"op": "commit", "p": "next"},
    ]
    steps = run_script(txn_client, bootstrap, topic, ops, transaction_timeout_ms=timeout_ms)
    assert_steps_ok(steps[: 3 + len(stalled)], f"{txn_client}: the stalled transaction's start")
    commit = steps[4 + len(stalled)]
    assert not commit.ok, f"{txn_client}: a transaction the coordinator timed out was committed"
    # the coordinator's abort bumps the epoch: each client reports it as it reports fencing
    assert commit.error in FENCED, f"{txn_client}: the commit failed, but not as fenced: {commit}"
    assert_steps_ok(steps[5 + len(stalled) :], f"{txn_client}: the next producer")

    recs = read(txn_client, bootstrap, topic, "read_committed", len(later))
    assert_committed_read(recs, values_of(later), txn_client)
