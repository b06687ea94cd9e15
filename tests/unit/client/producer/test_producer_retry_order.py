"""The idempotent producer's decisions about sequences, retries and epoch bumps, without a
broker: the real Sender, Accumulator and Sequences, driven by the answers a broker would give
(what a batch's attempt got is handed to `Sender._complete_batch` / `_succeed`, as `_produce`
does with a Produce response). What the broker does with the numbers is in
odradek/storage/producer_state.py: it appends only the next sequence, answers a batch among its
last five as a duplicate, and anything else OUT_OF_ORDER_SEQUENCE_NUMBER."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.client import errors as E
from odradek.client.cluster import Cluster
from odradek.client.config import PRODUCER, make_config
from odradek.client.producer.accumulator import Accumulator, ProducerBatch
from odradek.client.producer.sender import Sender
from odradek.client.producer.sequences import WINDOW

T = "t"
PID = 1000
LATER = 1e12  # a `now` past every retry backoff


class FakeConn:
    """A connection to a broker, as `Sender._produce` writes a request on it."""

    def __init__(self, node: int) -> None:
        self.node_id = node
        self.connected = True


class Connections(Cluster):
    """The client's Cluster with a connection open to every broker, but those `drop`ped (then
    none until `connect` opens a new one)."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.open: dict[int, FakeConn | None] = {}

    def open_connection(self, node_id: int):
        if node_id not in self.open:
            self.open[node_id] = FakeConn(node_id)
        return self.open[node_id]


class Harness:
    """A sender and its accumulator, with the partitions' leaders as the metadata shows them."""

    def __init__(self, transactional: bool = False, **config) -> None:
        cfg = make_config(PRODUCER, {"bootstrap.servers": "b1:9092", "batch.size": 16}, config)
        if transactional:
            cfg["transactional.id"] = "tid"
        self.acc = Accumulator(batch_size=16, linger_ms=0, buffer_memory=1 << 20, threaded=False)
        self.cluster = Connections(cfg)
        self.sender = Sender(self.cluster, self.acc, cfg, 0)
        self.sender.seqs.set_producer_id_and_epoch(PID, 0)
        self.sender._running = True
        self.leaders: dict[int, int] = {}
        self.n = 0

    @property
    def seqs(self):
        return self.sender.seqs

    def append(self, partition: int = 1) -> ProducerBatch:
        """A new batch of one record (200 bytes: one record to a batch)."""
        fut = self.acc.try_append(T, partition, 0, None, b"%04d" % self.n + b"x" * 196, None, 224)
        self.n += 1
        return fut._batch

    def leader_of(self, topic: str, partition: int) -> int:
        return self.leaders.get(partition, -1)

    def drain(self, node: int) -> list[ProducerBatch]:
        """What one Produce request to `node` would carry, prepared as `_send` does, and written
        on the node's open connection as `_produce` does (if it has none, the request waits for
        one)."""
        out = self.acc.drain(node, self.leader_of, 1 << 20, LATER, self.sender._sendable)
        conn = self.cluster.open_connection(node)
        for b in out:
            self.sender._prepare(b)
            b.conn = conn
        return out

    def drop(self, node: int) -> None:
        """The connection to `node` closes (what was written on it fails when its loss is handled)."""
        conn = self.cluster.open_connection(node)
        if conn is not None:
            conn.connected = False
        self.cluster.open[node] = None

    def connect(self, node: int) -> None:
        """A new connection to `node` opens."""
        self.cluster.open[node] = FakeConn(node)

    def send_new(self, node: int, partition: int = 1) -> ProducerBatch:
        """A new batch, drained at once to `node`."""
        b = self.append(partition)
        assert one(self.drain(node)) is b
        return b

    def ready_nodes(self) -> set[int]:
        return self.acc.ready(LATER, self.leader_of, lambda n: True, self.sender._sendable)[0]

    def timeout(self, b: ProducerBatch) -> None:
        """The request carrying `b` went unanswered (it timed out, the connection dropped)."""
        b.maybe_written = True
        self.sender._complete_batch(b, E.RequestTimedOutError("Produce timed out"), -1)

    def error(self, b: ProducerBatch, cls: type[E.KafkaError], log_start_offset: int = 0) -> None:
        self.sender._complete_batch(b, cls(f"{b.topic}-{b.partition}"), log_start_offset)

    def ack(self, b: ProducerBatch, offset: int) -> None:
        self.sender._succeed(b, offset, -1)

    def round(self) -> None:
        """The start of a sender round: unresolved sequences, the epoch bump, renumbering."""
        for _ in self.seqs.resolve():
            pass
        asyncio.run(self.sender._maybe_bump_epoch())

    def numbers(self, b: ProducerBatch) -> tuple[int, int]:
        return (b.producer_epoch, b.sequence)


def one(batches: list[ProducerBatch]) -> ProducerBatch:
    assert len(batches) == 1, batches
    return batches[0]


def test_retries_across_a_leader_change_go_one_at_a_time_in_sequence_order():
    """Seed 106 of the simulator: five batches in flight to a leader that loses power all time
    out. The oldest is retried to the old leader (the metadata has not moved yet); the later ones
    wait for it instead of going to the new leader, where they would be written after records
    that came later, and push the oldest out of the broker's memory of five batches."""
    h = Harness()
    h.leaders[1] = 2
    for offset in (0, 1):
        h.ack(h.send_new(2), offset)
    sent = [h.send_new(2) for _ in range(5)]
    assert [b.sequence for b in sent] == [2, 3, 4, 5, 6]
    for b in sent:
        h.timeout(b)
    later = h.append()
    b2 = one(h.drain(2))  # the metadata still shows the old leader
    assert b2 is sent[0]
    assert h.drain(2) == []  # the next retry waits for the oldest
    h.leaders[1] = 3
    assert h.drain(3) == [] and h.ready_nodes() == set()
    h.error(b2, E.NotLeaderOrFollowerError)
    assert one(h.drain(3)) is b2  # the new leader had it from the old one: a duplicate
    h.ack(b2, 2)
    for i, b in enumerate(sent[1:-1], start=3):
        assert one(h.drain(3)) is b and h.drain(3) == []
        h.ack(b, i)
    assert one(h.drain(3)) is sent[-1]
    assert one(h.drain(3)) is later and h.numbers(later) == (0, 7)  # new batches follow the last retry
    assert h.sender.epoch_bumps == 0 and not h.seqs.rewrite


def test_a_partition_has_at_most_five_batches_in_flight():
    """The broker remembers five batches per producer and partition: a sixth waits for the first
    to complete, or a retry of one it wrote could fall out of its memory."""
    h = Harness()
    h.leaders[1] = 2
    sent = [h.send_new(2) for _ in range(WINDOW)]
    sixth = h.append()
    assert h.drain(2) == [] and h.ready_nodes() == set()
    h.ack(sent[0], 0)
    assert one(h.drain(2)) is sixth and sixth.sequence == WINDOW


def test_a_new_batch_does_not_go_to_a_new_leader_before_those_in_a_request_to_the_old_one():
    """Seed 15122 of the simulator: batches in a request to a leader that lost power; the new
    leader has no state for the producer and takes any sequence (as Kafka's), so a new batch
    sent to it first would be written before them, and they refused OUT_OF_ORDER_SEQUENCE_NUMBER
    behind it. The new batch waits; the old ones are retried first, in order."""
    h = Harness()
    h.leaders[1] = 2
    old = [h.send_new(2) for _ in range(3)]
    new = h.append()
    h.leaders[1] = 3
    assert h.drain(3) == [] and h.ready_nodes() == set()
    for b in old:
        h.timeout(b)
    h.round()
    for i, b in enumerate(old[:-1]):
        assert one(h.drain(3)) is b and h.drain(3) == []  # retries: one at a time
        h.ack(b, i)
    assert one(h.drain(3)) is old[-1]
    assert one(h.drain(3)) is new and h.numbers(new) == (0, 3)  # pipelined behind it, to the same broker
    assert h.sender.epoch_bumps == 0


def test_a_new_batch_does_not_go_behind_a_request_that_waits_for_a_connection():
    """Seed 21287 of the simulator: the leader lost power, and batches were in requests waiting
    for a connection to it. A new batch drained then waits for that connection only while its
    attempt is under way; when it fails first (a timeout), the new batch's request opens another
    one and is written first, its elders retried behind it. The leader, back from its power cut
    without the producer's state, took its sequence, and refused theirs as out of order until
    they expired. The new batch waits until they are written on an open connection."""
    h = Harness()
    h.leaders[1] = 2
    h.ack(h.send_new(2), 0)
    h.drop(2)
    waiting = h.send_new(2)
    assert waiting.in_request and waiting.conn is None  # waits for a connection to 2
    new = h.append()
    assert h.drain(2) == [] and h.ready_nodes() == set()
    h.error(waiting, E.KafkaConnectionError)  # the connection attempt timed out
    h.connect(2)
    assert one(h.drain(2)) is waiting and h.numbers(waiting) == (0, 1)
    assert one(h.drain(2)) is new and h.numbers(new) == (0, 2)  # pipelined behind it, on its connection
    assert h.sender.epoch_bumps == 0


def test_a_new_batch_does_not_go_on_a_new_connection_before_a_request_on_the_old_one():
    """A request written on a connection that closed, its failure not handled yet: a new batch of
    its partition would go on the next connection, possibly before the retry of the one the
    broker never got."""
    h = Harness()
    h.leaders[1] = 2
    first = h.send_new(2)
    h.drop(2)
    h.connect(2)
    new = h.append()
    assert h.drain(2) == [] and h.ready_nodes() == set()
    h.timeout(first)
    assert one(h.drain(2)) is first
    assert one(h.drain(2)) is new and h.numbers(new) == (0, 1)


def test_a_request_for_a_connection_that_closed_is_not_written_on_another():
    """`_send` pins a request to the connection open when its batches were drained (the one a new
    batch was pipelined on): if it closes before the request is written, the request fails
    unwritten and is retried; it does not open a new connection, where it could go before the
    requests that failed with the old one."""
    h = Harness()
    h.leaders[1] = 2
    h.append()

    async def no_new_connection(node_id: int):
        raise AssertionError(f"a new connection to {node_id}")

    async def main() -> list[ProducerBatch]:
        h.sender._loop = asyncio.get_running_loop()
        h.cluster.connection = no_new_connection
        batches = h.acc.drain(2, h.leader_of, 1 << 20, LATER, h.sender._sendable)
        h.sender._send(2, batches)
        h.drop(2)  # before the request's task runs
        await asyncio.gather(*h.sender._tasks)
        return batches

    b = one(asyncio.run(main()))
    assert not b.done and not b.in_request and not b.maybe_written and b.attempts == 1
    assert list(h.acc.deques[(T, 1)]) == [b]  # to be retried


def test_out_of_order_for_a_batch_that_is_not_the_next_is_retried_without_a_bump():
    """A batch pipelined behind an older one the broker refused (it stopped leading): the broker
    answers it OUT_OF_ORDER_SEQUENCE_NUMBER, and it is retried under its numbers after the older
    one lands on the new leader."""
    h = Harness()
    h.leaders[1] = 2
    first = h.send_new(2)
    second = h.send_new(2)
    h.error(first, E.NotLeaderOrFollowerError)
    h.error(second, E.OutOfOrderSequenceNumberError)
    h.round()
    assert h.sender.epoch_bumps == 0 and h.numbers(second) == (0, 1)
    h.leaders[1] = 3
    assert one(h.drain(3)) is first
    assert h.drain(3) == []  # not before the first
    h.ack(first, 0)
    assert one(h.drain(3)) is second and h.numbers(second) == (0, 1)


def test_out_of_order_for_the_next_batch_bumps_the_epoch_and_renumbers_what_follows():
    """The broker lacks sequences it acknowledged (a leader that lost them): the next batch and
    those after it restart at 0 under epoch + 1 (KIP-360), once none of them is in a request;
    the records acknowledged before stay as they are."""
    h = Harness()
    h.leaders[1] = 2
    h.ack(h.send_new(2), 0)
    nxt, after = h.send_new(2), h.send_new(2)
    new = h.append()
    h.error(nxt, E.OutOfOrderSequenceNumberError)
    h.round()
    assert h.sender.producer_epoch == 1 and h.sender.epoch_bumps == 1
    assert h.numbers(nxt) == (0, 1)  # `after` is still in a request
    assert h.drain(2) == []
    h.error(after, E.OutOfOrderSequenceNumberError)  # no bump for it: already asked
    h.round()
    assert h.sender.epoch_bumps == 1
    assert (h.numbers(nxt), h.numbers(after)) == ((1, 0), (1, 1)) and nxt.sequence_reset
    assert one(h.drain(2)) is nxt and h.drain(2) == []
    h.ack(nxt, 1)
    assert one(h.drain(2)) is after
    h.ack(after, 2)
    assert one(h.drain(2)) is new and h.numbers(new) == (1, 2)


def test_out_of_order_for_a_next_batch_that_may_have_been_written_is_retried():
    """The next batch went unanswered once (its first attempt may be in the new leader's log), and
    its retry reached a broker that no longer leads without knowing it and lacks the last records
    acknowledged: its OUT_OF_ORDER_SEQUENCE_NUMBER proves no gap. No bump (renumbered, it would
    be written twice); the retry that reaches the leader is answered as a duplicate."""
    h = Harness()
    h.leaders[1] = 3
    h.ack(h.send_new(3), 0)
    nxt = h.send_new(3)
    h.timeout(nxt)
    h.leaders[1] = 2  # metadata from a broker that is behind
    assert one(h.drain(2)) is nxt
    h.error(nxt, E.OutOfOrderSequenceNumberError)
    h.round()
    assert h.sender.epoch_bumps == 0 and h.numbers(nxt) == (0, 1)
    h.leaders[1] = 3
    assert one(h.drain(3)) is nxt
    h.ack(nxt, 1)
    assert not h.seqs.partitions[(T, 1)].in_flight


def test_a_batch_refused_for_good_renumbers_only_the_batches_after_it():
    """A batch the broker refused (MESSAGE_TOO_LARGE) never took its sequences: the batches after
    it restart at 0 under a new epoch. A batch before it, still unanswered, may have been
    written: it keeps its numbers, and the renumbering waits for it."""
    h = Harness()
    h.leaders[1] = 2
    before, refused, after = h.send_new(2), h.send_new(2), h.send_new(2)
    h.error(refused, E.MessageTooLargeError)
    assert refused.done and isinstance(refused.error, E.MessageTooLargeError)
    h.error(after, E.OutOfOrderSequenceNumberError)
    h.round()
    assert h.sender.producer_epoch == 1
    assert h.numbers(after) == (0, 2) and h.drain(2) == []
    h.timeout(before)
    h.round()
    assert h.numbers(after) == (0, 2)
    assert one(h.drain(2)) is before and h.numbers(before) == (0, 0)
    h.ack(before, 0)
    h.round()
    assert h.numbers(after) == (1, 0)
    assert one(h.drain(2)) is after


def test_a_batch_that_may_have_been_written_leaves_its_partition_unresolved():
    """A batch that failed for good after an unanswered attempt may be in the log: no bump, and
    no new batch, until the batches in flight tell. The next one acknowledged: it was written."""
    h = Harness(delivery_timeout_ms=1000, request_timeout_ms=500, linger_ms=0)
    h.leaders[1] = 2
    lost, nxt = h.send_new(2), h.send_new(2)
    new = h.append()
    h.timeout(lost)
    assert one(h.drain(2)) is lost
    lost.created -= 10  # past delivery.timeout.ms now
    h.error(lost, E.MessageTooLargeError)
    assert lost.done and h.seqs.unresolved == {(T, 1): 1}
    h.round()
    assert h.sender.epoch_bumps == 0 and h.drain(2) == []
    h.ack(nxt, 1)
    h.round()
    assert not h.seqs.unresolved and h.sender.epoch_bumps == 0
    assert one(h.drain(2)) is new and h.numbers(new) == (0, 2)


def test_out_of_order_right_after_an_unresolved_batch_bumps_the_epoch():
    """The batch after one whose fate was unknown is refused as out of order: the unknown one was
    not written, the gap is real."""
    h = Harness()
    h.leaders[1] = 2
    lost, nxt, third = h.send_new(2), h.send_new(2), h.send_new(2)
    h.timeout(lost)
    lost.created -= 1e6
    for b in h.acc.expired(time.monotonic(), h.sender.delivery_timeout):
        h.sender._fail(b, E.KafkaTimeoutError("expired"))
    assert lost.done and h.seqs.unresolved == {(T, 1): 1}
    h.error(third, E.OutOfOrderSequenceNumberError)  # not the one after the gap: no bump
    assert h.seqs.epoch_bump_required is False
    h.error(nxt, E.OutOfOrderSequenceNumberError)
    assert h.seqs.epoch_bump_required
    h.round()
    assert (h.numbers(nxt), h.numbers(third)) == ((1, 0), (1, 1)) and not h.seqs.unresolved


def test_expired_batches_and_nothing_in_flight_bump_the_epoch():
    """Every batch sent expired unanswered: with nothing left in flight, whether the broker has
    them is unknown, and the partition goes on under a new epoch from sequence 0."""
    h = Harness()
    h.leaders[1] = 2
    lost = h.send_new(2)
    h.timeout(lost)
    new = h.append()
    lost.created -= 1e6
    for b in h.acc.expired(time.monotonic(), h.sender.delivery_timeout):
        h.sender._fail(b, E.KafkaTimeoutError("expired"))
    assert h.drain(2) == []
    h.round()
    assert h.sender.producer_epoch == 1
    assert one(h.drain(2)) is new and h.numbers(new) == (1, 0)


def test_other_partitions_start_over_once_their_old_epoch_batches_completed():
    """After a bump for partition 1, partition 0 sends no new batch while one of the old epoch
    is in flight (sequence 0 of the new epoch would overtake it); then it starts at 0 (KAFKA-12152)."""
    h = Harness()
    h.leaders.update({0: 2, 1: 2})
    h.append(0), h.append(1)
    old = h.drain(2)
    assert {b.partition for b in old} == {0, 1}
    p0, p1 = sorted(old, key=lambda b: b.partition)
    h.error(p1, E.OutOfOrderSequenceNumberError)
    h.round()
    assert h.sender.producer_epoch == 1 and h.numbers(p1) == (1, 0)
    new0 = h.append(0)
    assert [b.partition for b in h.drain(2)] == [1]
    h.ack(p0, 0)
    assert one(h.drain(2)) is new0 and h.numbers(new0) == (1, 0)


def test_an_exhausted_epoch_asks_for_a_new_producer_id_before_sending():
    h = Harness()
    h.seqs.set_producer_id_and_epoch(PID, 32767)
    h.leaders[1] = 2
    b = h.send_new(2)
    h.error(b, E.OutOfOrderSequenceNumberError)
    assert h.seqs.bump_epoch() is False
    assert h.sender.producer_id == -1 and h.drain(2) == []


def test_answers_out_of_order_go_back_in_sequence_order():
    """Java's insertInSequenceOrder: a retried batch goes before the queued batches with higher
    sequences, whichever answer came first."""
    h = Harness()
    h.leaders[1] = 2
    sent = [h.send_new(2) for _ in range(3)]
    new = h.append()
    for b in (sent[2], sent[0], sent[1]):
        h.timeout(b)
    assert list(h.acc.deques[(T, 1)]) == [*sent, new]


def test_a_transactional_producer_fails_the_next_batch_refused_as_out_of_order():
    """A gap in a transaction fails the batch (and the transaction, whose abort bumps the epoch):
    no local bump."""
    h = Harness(transactional=True)
    h.leaders[1] = 2

    class Txn:
        failed: list = []

        def send_allowed(self, topic, partition):
            return True

        def batch_failed(self, b, err):
            self.failed.append(err)

    h.sender.txn = Txn()
    b = h.send_new(2)
    h.error(b, E.OutOfOrderSequenceNumberError)
    assert b.done and isinstance(b.error, E.OutOfOrderSequenceNumberError)
    assert not h.seqs.epoch_bump_required and h.sender.producer_epoch == 0


@pytest.mark.parametrize("code_cls", [E.NotLeaderOrFollowerError, E.RequestTimedOutError])
def test_retriable_errors_keep_the_numbers(code_cls):
    h = Harness()
    h.leaders[1] = 2
    b = h.send_new(2)
    h.error(b, code_cls)
    assert not b.done and one(h.drain(2)) is b and h.numbers(b) == (0, 0) and b.attempts == 2
