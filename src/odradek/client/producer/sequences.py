"""Sequence numbers of an idempotent or transactional producer, per partition: Java's
TxnPartitionMap and TxnPartitionEntry, and the part of its TransactionManager that decides about
sequences (KIP-98; KAFKA-5494's ordering of batches in flight; KIP-360's epoch bumps).

What the broker does with them: per producer id and partition it keeps the epoch, the last
sequence written and the last five batches (`NUM_BATCHES_TO_RETAIN`). It appends a batch only
if its sequence follows the last one (a new epoch starts at 0), answers a batch it holds among
those five as a duplicate (with the original offsets), and anything else with
OUT_OF_ORDER_SEQUENCE_NUMBER. So, as Java's producer:

- A batch is numbered when it is first drained (`assign`) and keeps its producer id, epoch and
  sequence until it completes: its earlier attempt may have been written, and the broker
  recognises the retry only under the same numbers. It is renumbered only when it is certain
  the broker never wrote it (after an epoch bump, below).
- A partition's batches numbered and not completed are its batches *in flight*, ordered by
  sequence (a batch waiting to be retried is still in flight). Retries go back into the queue in
  sequence order, and a batch that already has a sequence is sent only when it is the first in
  flight: once a partition retries, its batches go one at a time, in order (`sendable`).
- New batches wait while a partition still has batches in flight under an older epoch, while
  the fate of an earlier batch is unknown (an *unresolved* sequence: a batch that failed for
  good or expired after an attempt that went unanswered), and while its epoch bump is pending.
- OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that is not the next after the last acknowledged one
  is retried: an earlier batch is still on its way. For the next one, it is a real gap (the
  broker lost what it had acknowledged, or a batch before it failed): the idempotent producer
  bumps its epoch; a transactional one fails the batch and its transaction, whose abort bumps
  the epoch (producer/transactions.py). UNKNOWN_PRODUCER_ID (brokers before KIP-360) likewise.
- An epoch bump (`bump_epoch`) is the producer's: epoch + 1 (a new producer id once the epoch is
  exhausted). The partitions that asked for it restart their batches in flight at sequence 0
  under the new epoch; every other partition restarts at 0 with its next new batch, once its
  batches in flight under the old epoch have completed.

Some rules are stricter than Java's, each closing a way Java's producer can write a record twice
(the principle is KAFKA-5494's: a batch is renumbered only when the broker's answers prove it was
never written):
- At most five batches of a partition are in flight (`WINDOW`, the broker's memory). Java caps
  requests per connection at five, but after a leader change a partition can have five in flight
  to the old leader and more to the new one; a retry of a batch that was written then falls out
  of the broker's memory and is answered OUT_OF_ORDER_SEQUENCE_NUMBER instead of as a duplicate.
- A partition's batches are renumbered under the new epoch (`apply_rewrites`) only once every
  batch before the gap has completed and none of them is in a request awaiting its answer. Java
  renumbers them at the bump, including batches before the gap whose earlier attempt may have
  been written.
- A batch that failed for good after an attempt went unanswered (`maybe_written`) leaves its
  sequence unresolved, as an expired one does; Java bumps the epoch for it when retries were
  left (a failure past delivery.timeout.ms, for one), renumbering batches after it that may
  have been written too.
- A new batch is numbered and sent only while every batch in flight of its partition is in a
  request written on the broker's open connection, and then on that connection (pipelined
  behind them, which keeps their order). Java also sends it while earlier ones are in a request
  to the old leader, or waiting to be retried: the new leader, which has no state for the
  producer yet, takes any sequence (Kafka's ProducerAppendInfo accepts any sequence from a
  producer it does not know), so the later batch is written first and the earlier ones are
  refused OUT_OF_ORDER_SEQUENCE_NUMBER behind it (simulator seed 15122: a record written before
  one its producer had sent before it). A request still waiting for a connection does not count:
  when that connection fails, a request made meanwhile can open a new one and be written first,
  its elders retried behind it (seed 21287: a broker back from a power cut, without the
  producer's state, took the later batch).
- OUT_OF_ORDER_SEQUENCE_NUMBER for the next batch is a gap only if no earlier attempt of it went
  unanswered; otherwise it may come from a broker no longer leading (the client's metadata is
  behind), and the batch is retried instead.

Everything here runs on the client's event loop.
"""

from __future__ import annotations

import bisect
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .accumulator import ProducerBatch

log = logging.getLogger(__name__)

TP = tuple[str, int]

OUT_OF_ORDER_SEQUENCE = 45
UNKNOWN_PRODUCER_ID = 59
WINDOW = 5  # batches the broker remembers per producer and partition (Kafka's NUM_BATCHES_TO_RETAIN)
MAX_EPOCH = 32767
NO_LAST_ACKED = -1


def _order(b: ProducerBatch) -> tuple[int, int, int]:
    return (b.producer_id, b.producer_epoch, b.sequence)


def _add(sequence: int, n: int) -> int:
    """Sequences wrap to 0 after 2**31 - 1, as Kafka's DefaultRecordBatch.incrementSequence."""
    return (sequence + n) & 0x7FFFFFFF


class PartitionSequences:
    """One partition's sequences (Java's TxnPartitionEntry)."""

    __slots__ = (
        "producer_id",
        "producer_epoch",
        "next_sequence",
        "last_acked_sequence",
        "last_acked_offset",
        "in_flight",
    )

    def __init__(self) -> None:
        # the producer id and epoch the partition's sequences belong to
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence = 0
        self.last_acked_sequence = NO_LAST_ACKED  # the last sequence of the last batch acknowledged
        self.last_acked_offset = -1
        self.in_flight: list[ProducerBatch] = []  # numbered, not completed, by sequence

    def add(self, b: ProducerBatch) -> None:
        bisect.insort(self.in_flight, b, key=_order)

    def remove(self, b: ProducerBatch) -> None:
        for i, x in enumerate(self.in_flight):
            if x is b:
                del self.in_flight[i]
                return

    def start_at_beginning(self, producer_id: int, producer_epoch: int) -> None:
        """Number the batches in flight from 0 under (producer_id, producer_epoch)."""
        seq = 0
        for b in self.in_flight:
            b.reset_producer_state(producer_id, producer_epoch, seq)
            seq = _add(seq, b.builder.count)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = seq
        self.last_acked_sequence = NO_LAST_ACKED


class Sequences:
    """The producer's id and epoch and every partition's sequences."""

    def __init__(self, transactional: bool) -> None:
        self.transactional = transactional
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: dict[TP, PartitionSequences] = {}
        # partition -> the sequence after the last batch whose fate is unknown (it expired while
        # being retried): no new batch until the batches in flight tell whether it was written
        self.unresolved: dict[TP, int] = {}
        # partition -> the first sequence of its gap: its batches in flight from there restart at
        # 0 under the new epoch once those before have completed (an ordered dict: applied in
        # the order asked, the same every run)
        self.rewrite: dict[TP, int] = {}
        self.epoch_bump_required = False
        self.epoch_bumps = 0

    def entry(self, tp: TP) -> PartitionSequences:
        e = self.partitions.get(tp)
        if e is None:
            e = self.partitions[tp] = PartitionSequences()
        return e

    # ------------------------------------------------------------------ producer id and epoch
    def set_producer_id_and_epoch(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch

    def reset(self) -> None:
        """Forget every partition's sequences (a transactional producer's new epoch, once every
        batch has completed: Java's resetSequenceNumbers)."""
        self.partitions.clear()
        self.unresolved.clear()
        self.rewrite.clear()
        self.epoch_bump_required = False

    def _stale(self, e: PartitionSequences) -> bool:
        return (e.producer_id, e.producer_epoch) != (self.producer_id, self.producer_epoch)

    def request_epoch_bump(self, tp: TP, gap: int) -> None:
        """The partition lacks sequences from `gap` on that no retry will bring (Java's
        requestEpochBumpForPartition)."""
        self.epoch_bump_required = True
        prev = self.rewrite.get(tp)
        self.rewrite[tp] = gap if prev is None else min(prev, gap)

    def bump_epoch(self) -> bool:
        """The idempotent producer's epoch + 1; False when the epoch is exhausted and a new
        producer id is needed (InitProducerId, then `set_producer_id_and_epoch`)."""
        self.epoch_bump_required = False
        self.epoch_bumps += 1
        if self.producer_epoch >= MAX_EPOCH:
            self.producer_id = self.producer_epoch = -1
            return False
        self.producer_epoch += 1
        return True

    def apply_rewrites(self) -> list[TP]:
        """Renumber, from 0 under the current epoch, the batches in flight of each partition that
        asked for a bump and is ready: every batch before its gap has completed and none of
        its batches is in a request (so none of those renumbered can have been written under
        its old numbers). Returns the partitions renumbered."""
        done = []
        if self.producer_id < 0:
            return done
        for tp, gap in list(self.rewrite.items()):
            e = self.entry(tp)
            # (every batch in flight of a partition has the partition's producer id and epoch)
            if any(b.in_request or b.sequence < gap for b in e.in_flight):
                continue
            e.start_at_beginning(self.producer_id, self.producer_epoch)
            del self.rewrite[tp]
            self.unresolved.pop(tp, None)
            done.append(tp)
        return done

    # ------------------------------------------------------------------ draining
    def sendable(self, b: ProducerBatch, node: int, conn: object | None) -> bool:
        """Whether `b`, the first batch of its partition's queue, may be drained now to `node`,
        whose open connection is `conn` (None if it has none: the request will wait for one)
        (Java's RecordAccumulator.shouldStopDrainBatchesForPartition, with the window, the
        pending rewrite and the one-connection rule)."""
        if self.producer_id < 0:
            return False  # a new producer id is on its way
        tp = (b.topic, b.partition)
        e = self.partitions.get(tp)
        if e is None:
            return True
        if b.sequence < 0:
            if e.in_flight and self._stale(e):
                return False  # sequence 0 of the new epoch could overtake the old epoch's batches
            if tp in self.unresolved or tp in self.rewrite:
                return False
            if e.in_flight and (conn is None or any(x.conn is not conn or not x.in_request for x in e.in_flight)):
                # it could reach a leader before them: only pipelined behind them, on the connection
                # their requests were written on (`conn` is `node`'s)
                return False
            return len(e.in_flight) < WINDOW
        gap = self.rewrite.get(tp)
        if gap is not None and b.sequence >= gap:
            return False  # renumbered first
        return not e.in_flight or e.in_flight[0] is b  # a retry: only the partition's first in flight

    def assign(self, b: ProducerBatch) -> None:
        """Number a batch drained for the first time."""
        tp = (b.topic, b.partition)
        e = self.entry(tp)
        if self._stale(e) and not e.in_flight:
            # the old epoch's batches have completed: start over at 0 (Java's maybeUpdateProducerIdAndEpoch)
            e.start_at_beginning(self.producer_id, self.producer_epoch)
        b.set_producer_state(self.producer_id, self.producer_epoch, e.next_sequence)
        e.next_sequence = _add(e.next_sequence, b.builder.count)
        e.add(b)

    # ------------------------------------------------------------------ answers
    def completed(self, b: ProducerBatch, base_offset: int) -> None:
        """Acknowledged (Java's handleCompletedBatch)."""
        e = self.partitions.get((b.topic, b.partition))
        if e is None or b.sequence < 0:
            return
        if b.last_sequence > e.last_acked_sequence:
            e.last_acked_sequence = b.last_sequence
        if base_offset >= 0:
            e.last_acked_offset = max(e.last_acked_offset, base_offset + b.builder.count - 1)
        e.remove(b)

    def failed(self, b: ProducerBatch, code: int, refused: bool) -> None:
        """Failed for good, or expired (Java's handleFailedBatch and markSequenceUnresolved).
        `refused`: the broker refused it at every attempt, so it never took these sequences and
        the partition's later batches cannot be written after them: the idempotent producer
        bumps the epoch and renumbers them (so does OUT_OF_ORDER_SEQUENCE_NUMBER or
        UNKNOWN_PRODUCER_ID, the broker's word that a gap is there). Otherwise (it expired, or
        an attempt went unanswered) it may have been written: its partition's sequence is
        unresolved until the batches in flight tell. A transactional producer's failed
        batch fails its transaction, whose abort bumps the epoch (producer/transactions.py)."""
        tp = (b.topic, b.partition)
        e = self.partitions.get(tp)
        if e is None or b.sequence < 0:
            return
        e.remove(b)
        if self.transactional:
            if code == UNKNOWN_PRODUCER_ID:  # the broker has no sequences for us there any more
                self.partitions.pop(tp, None)
                self.unresolved.pop(tp, None)
            return
        if refused or code in (OUT_OF_ORDER_SEQUENCE, UNKNOWN_PRODUCER_ID):
            self.request_epoch_bump(tp, b.sequence)
        else:
            nxt = _add(b.last_sequence, 1)
            self.unresolved[tp] = max(self.unresolved.get(tp, nxt), nxt)

    def _is_next(self, tp: TP, sequence: int) -> bool:
        e = self.partitions.get(tp)
        return sequence - (e.last_acked_sequence if e is not None else NO_LAST_ACKED) == 1

    def can_retry(self, b: ProducerBatch, code: int, log_start_offset: int) -> bool | None:
        """For OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID, whether to retry `b`
        (asking for an epoch bump where it is a real gap), as Java's TransactionManager.canRetry;
        None for other errors (their own retriable flag decides)."""
        tp = (b.topic, b.partition)
        if code == UNKNOWN_PRODUCER_ID:
            if log_start_offset == -1 or b.sequence_reset:
                return True
            if self.transactional:
                return False  # the transaction fails; its abort bumps the epoch
            self.request_epoch_bump(tp, b.sequence)
            return True
        if code == OUT_OF_ORDER_SEQUENCE:
            unresolved = self.unresolved.get(tp)
            if unresolved is None and (b.sequence_reset or not self._is_next(tp, b.sequence)):
                return True  # an earlier batch is still on its way
            if unresolved is None and b.maybe_written:
                # the answer of a broker that lacks what was acknowledged before it: one no longer
                # leading that does not know it yet, while an earlier attempt may be in the
                # leader's log; retried until the leader answers, or it expires (then resolve())
                return True
            if self.transactional:
                return False
            if unresolved is None or b.sequence == unresolved:
                self.request_epoch_bump(tp, b.sequence)
            return True
        return None

    def resolve(self) -> list[TP]:
        """Settle unresolved partitions with nothing in flight any more (Java's
        maybeResolveSequences): the last batch acknowledged is the last numbered (what expired
        was written, or later batches were), or there is a gap: the idempotent producer bumps
        the epoch. Returns the partitions with a gap."""
        gaps = []
        for tp in list(self.unresolved):
            e = self.entry(tp)
            if e.in_flight:
                continue
            del self.unresolved[tp]
            if not self._is_next(tp, e.next_sequence):
                gaps.append(tp)
                if not self.transactional:
                    log.info(
                        "%s-%d: no batch in flight, last acknowledged sequence %d, next %d: bumping the epoch",
                        tp[0],
                        tp[1],
                        e.last_acked_sequence,
                        e.next_sequence,
                    )
                    self.request_epoch_bump(tp, e.next_sequence)
        return gaps
