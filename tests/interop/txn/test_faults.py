"""Exactly-once under kill -9: a consume-transform-produce loop (read_committed consumer, one
transaction per poll with the input offsets sent to it), with Apache Kafka's Java client
(tests/clients/java/TxnCli.java ``ctp``) and with odradek's client (tests/support/ctp_odradek.py),
copies an input topic to an output topic while its process, or the broker, is killed; then a
read_committed reader of the output is checked (tests/support/txn_checker.py): nothing lost,
nothing duplicated, no aborted record visible, no transaction torn, order kept per partition, and
the group's committed offsets at the input's end.

Both loops against odradek and Apache Kafka 4.4 (the reference; the odradek loop in
test_loop_killed only unless ODRADEK_TXN_FAULT_ALL=1, for CI's time). The cluster case (3 brokers:
kill the coordinator's broker, a partition leader) is in tests/cluster/test_transaction_faults.py.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import pytest
from support.txn_checker import Report
from support.txn_clients import unavailable_reason
from support.txn_pipeline import LOOP_CLIENTS, Pipeline, Stalled, skip_odradek_loop_on_kafka

pytestmark = pytest.mark.interop  # outcomes, not timings: beside the tier's other tests (tests/README.md)

BROKERS = [
    pytest.param("kafka4", id="kafka4", marks=pytest.mark.kafka_case),
    pytest.param("odradek", id="odradek"),
]
RECORDS = int(os.environ.get("ODRADEK_TXN_FAULT_RECORDS", "1200"))
ROUNDS = int(os.environ.get("ODRADEK_FAULT_ROUNDS", "3"))


@pytest.fixture(params=LOOP_CLIENTS, ids=[f"{c}-loop" for c in LOOP_CLIENTS])
def client(request) -> str:
    """The loop's client. Java is needed either way (Kafka 4.4, the pipeline's diagnosis)."""
    reason = unavailable_reason("java")
    if reason:
        pytest.skip(f"java: {reason}")
    return request.param


class Node:
    """One broker of either kind, to kill -9 and restart."""

    def __init__(self, kind: str, handle) -> None:
        self.kind = kind
        self.handle = handle

    @property
    def bootstrap(self) -> str:
        return self.handle.bootstrap

    def kill(self) -> None:
        (self.handle.nodes[0] if self.kind == "kafka4" else self.handle).kill()

    def restart(self) -> None:
        (self.handle.nodes[0] if self.kind == "kafka4" else self.handle).start(timeout=90)


@pytest.fixture(params=BROKERS)
def shared_bootstrap(request) -> str:
    if request.param == "kafka4":
        return request.getfixturevalue("kafka4").bootstrap
    return request.getfixturevalue("broker_factory")().bootstrap


@pytest.fixture(params=BROKERS)
def own_node(request) -> Node:
    skip_odradek_loop_on_kafka(request.getfixturevalue("client"), request.param)  # before Kafka starts
    if request.param == "kafka4":
        return Node("kafka4", request.getfixturevalue("kafka_factory")())
    return Node("odradek", request.getfixturevalue("broker_factory")())


#: what Kafka 4.4's transaction coordinator logs when it drops a transaction's markers because
#: the metadata it has names no leader endpoint for a partition (it assumes the topic deleted)
KAFKA_SKIPPED_MARKERS = "these partitions are likely deleted already and hence can be skipped"


def finish(pipe: Pipeline, excused: Callable[[Report], str | None] = lambda r: None) -> None:
    """Drain, check, and check the group's offsets reached the input's end. ``excused`` may
    return why the report's lost committed transactions are a known behaviour of the broker
    (every other anomaly still fails)."""
    pipe.drain(timeout=180)
    report = pipe.check()
    print(report)
    if report.lost_transactions and not (report.lost or report.duplicated or report.torn):
        why = excused(report)
        if why:
            print(f"lost committed transactions {report.lost_transactions} excused: {why}")
            report.lost_transactions = []
    assert report.ok, f"{report}\nloops: {pipe.describe()}"
    assert report.transactions.get("aborted", 0) >= 1, "no aborted transaction: the check of them proved nothing"
    assert pipe.committed_offsets() == pipe.input_ends(), pipe.describe()


def test_loop_killed(client, shared_bootstrap, tmp_path):
    """kill -9 of the loop's process, inside a transaction (records sent, offsets added, no
    commit asked) and at a random moment, ROUNDS times each; the next process with the same
    transactional.id fences the dead one and aborts what it left open."""
    rng = random.Random(int(os.environ.get("ODRADEK_FAULT_SEED", "0")) or None)
    pipe = Pipeline(shared_bootstrap, tmp_path, records=RECORDS, client=client)
    try:
        open_at_kill = []
        for _ in range(ROUNDS):
            loop = pipe.start_loop()
            assert loop.kill_in_transaction(rng.randint(1, 4), timeout=60), pipe.describe()
            open_at_kill.append(loop.killed_in)
            loop = pipe.start_loop()
            assert loop.wait_committed(rng.randint(1, 4), timeout=60), pipe.describe()
            time.sleep(rng.uniform(0, 0.3))
            loop.kill()
        last = pipe.drain(timeout=180)
        assert last.committed > 0, "the input was done before the faults ended: too few records"
        finish(pipe)
        # the kill lands in the pause between the sends and the commit; on a loaded machine the
        # commit may rarely win the race, but not every time
        outcomes = {t: pipe.transactions[t].outcome for t in open_at_kill}
        assert None in outcomes.values(), f"no kill landed inside a transaction: {outcomes}"
        # the checker's negative control on the same data: a read_uncommitted reader sees the
        # aborted transactions, which the checker must report (as aborted reads and duplicates)
        dirty = pipe.check(isolation="read_uncommitted")
        assert dirty.aborted_visible and dirty.duplicated and not dirty.lost, str(dirty)
    finally:
        pipe.stop()


def kafka_skipped_markers(node: Node, pipe: Pipeline) -> str | None:
    """Kafka 4.4, single node: while it restarts, its transaction coordinator can complete a
    PrepareCommit it loaded before the broker's metadata names the partitions' leader; it then
    logs KAFKA_SKIPPED_MARKERS, writes CompleteCommit without a marker, and the producer's next
    abort marker aborts the committed records with it (seen about 1 run in 8 here: the client
    saw commitTransaction() succeed; the group's offsets were rolled back too, so end to end the
    input was still copied exactly once). Excused only for Kafka and only with that log line
    for this transactional id; odradek gets no such excuse."""
    if node.kind != "kafka4":
        return None
    log = node.handle.nodes[0].log_path.read_text(errors="replace")
    for line in log.splitlines():
        if KAFKA_SKIPPED_MARKERS in line and pipe.transactional_id in line:
            return f"Kafka 4.4 skipped markers: {line.strip()[:400]}"
    return None


def test_broker_killed(client, own_node, tmp_path):
    """kill -9 of the (only) broker while the loop runs, ROUNDS - 1 times; the loop is restarted
    whenever the outage killed it (the client gives up on a transaction after its timeouts)."""
    rng = random.Random(int(os.environ.get("ODRADEK_FAULT_SEED", "0")) or None)
    pipe = Pipeline(own_node.bootstrap, tmp_path, records=RECORDS, client=client)
    try:
        loop = pipe.start_loop()
        for _ in range(max(1, ROUNDS - 1)):
            loop = pipe.run_until(loop, rng.randint(2, 5), timeout=90)
            own_node.kill()
            time.sleep(rng.uniform(0.2, 1.0))
            own_node.restart()
        loop.kill()
        finish(pipe, excused=lambda r: kafka_skipped_markers(own_node, pipe))
    except Stalled as e:
        # Kafka's skipped markers leave the group's transactional offsets pending for good when
        # the producer that wrote them never writes to that partition again: the next loop's
        # consumer gets UNSTABLE_OFFSET_COMMIT forever. The reference fails here; say so.
        why = kafka_skipped_markers(own_node, pipe)
        if why:
            pytest.xfail(f"the pipeline stalled after {why}")
        raise AssertionError(f"{e}\n{own_node.handle.log_tail(60)}") from None
    finally:
        pipe.stop()
