"""The transactional producer's side of a transaction (Java's TransactionManager).

A producer with ``transactional.id`` talks to the transaction coordinator of that id
(FindCoordinator key type 1): `init_transactions` gets the producer id and epoch
(InitProducerId with the id; an older instance with the same id is fenced), each
transaction registers the partitions it writes (AddPartitionsToTxn, before the
partition's first batch of the transaction is sent) and the consumer groups whose offsets
it commits (AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator), and ends
with EndTxn (commit after every record is acknowledged; abort after the records not yet
sent are dropped). The coordinator then writes the COMMIT or ABORT markers.

The protocol is Kafka's "transaction version 1" (the client adds partitions itself: Produce
up to v11, AddPartitionsToTxn up to v3, EndTxn up to v4), which every broker since 0.11
serves.

States, as Java's: UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION ->
COMMITTING / ABORTING -> READY. An error that ends only the current transaction (a batch
that failed, a commit of offsets the group refused...) moves to ABORTABLE_ERROR: sends and
commits are refused until `abort_transaction`. PRODUCER_FENCED or INVALID_PRODUCER_EPOCH
(another instance took the transactional id) and other fatal errors move to FATAL_ERROR:
only `close` is left. UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING and
OUT_OF_ORDER_SEQUENCE_NUMBER are abortable and the abort ends with InitProducerId carrying
the current producer id and epoch, which bumps the epoch (KIP-360), so sequences start over.

Every call runs on the client's event loop; `maybe_add_partition` (a send) may come from any
thread and only touches `new_partitions` under `lock`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from .. import errors as E
from ..consumer.subscription import ConsumerGroupMetadata, OffsetAndMetadata

if TYPE_CHECKING:
    from ..cluster import Cluster
    from .accumulator import Accumulator
    from .sender import Sender

log = logging.getLogger(__name__)

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
GROUP_KEY, TRANSACTION_KEY = 0, 1

COORDINATOR_MOVED = frozenset({15, 16})  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
FENCED = frozenset({47, 90})  # INVALID_PRODUCER_EPOCH (older coordinators), PRODUCER_FENCED
NEEDS_NEW_EPOCH = frozenset({45, 49, 59})  # OUT_OF_ORDER_SEQUENCE, INVALID_PRODUCER_ID_MAPPING, UNKNOWN_PRODUCER_ID
INVALID_PRODUCER_ID_MAPPING = 49
REQUEST_TIMED_OUT = 7


class State(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing_transaction"
    ABORTING = "aborting_transaction"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


def _fenced(what: str) -> E.ProducerFencedError:
    return E.ProducerFencedError(
        f"{what}: there is a newer producer with the same transactional.id, or this producer's "
        "transaction timed out and was aborted by the coordinator"
    )


class TransactionManager:
    def __init__(self, transactional_id: str, timeout_ms: int, cluster: Cluster, sender: Sender, acc: Accumulator):
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.cluster = cluster
        self.sender = sender
        self.acc = acc
        self.backoff = cluster.retry_backoff
        self.lock = threading.Lock()
        self.state = State.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.partitions: set[tuple[str, int]] = set()  # in the transaction: their batches may go out
        self.new_partitions: set[tuple[str, int]] = set()  # to add before their batches go out
        self.adding: asyncio.Task | None = None
        self.started = False  # a partition or a group was added: EndTxn is needed
        self.epoch_bump_required = False
        self.coordinator = -1
        self._coord_lock: asyncio.Lock | None = None  # one coordinator request at a time, in order

    # ------------------------------------------------------------------ state
    def _fatal(self, err: BaseException) -> BaseException:
        self.state = State.FATAL_ERROR
        self.last_error = err
        log.error("transactional producer %r: fatal error %r", self.transactional_id, err)
        return err

    def _abortable(self, err: BaseException, new_epoch: bool = False) -> BaseException:
        if new_epoch:
            self.epoch_bump_required = True
        if self.state in (State.ABORTING, State.FATAL_ERROR):
            return err
        self.state = State.ABORTABLE_ERROR
        self.last_error = err
        log.info("transactional producer %r: abortable error %r", self.transactional_id, err)
        return err

    def _raise_if_error(self, op: str) -> None:
        err = self.last_error
        if self.state is State.FATAL_ERROR:
            if isinstance(err, E.ProducerFencedError):
                raise _fenced(f"cannot {op}")
            raise E.IllegalStateError(f"cannot {op}: the producer hit a fatal error ({err!r}); close it") from err
        if self.state is State.ABORTABLE_ERROR:
            raise E.KafkaError(
                f"cannot {op}: the transaction failed ({err!r}); call abort_transaction() first"
            ) from err

    def _require(self, op: str, *states: State) -> None:
        self._raise_if_error(op)
        if self.state not in states:
            hint = " (call init_transactions() first)" if self.state is State.UNINITIALIZED else ""
            raise E.IllegalStateError(f"cannot {op} in state {self.state.value}{hint}")

    # ------------------------------------------------------------------ sends (any thread)
    def maybe_add_partition(self, tp: tuple[str, int]) -> None:
        """A send to `tp`: refused outside a transaction; a new partition is added before its
        first batch goes out (AddPartitionsToTxn, started by the sender)."""
        if self.state is not State.IN_TRANSACTION:
            self._raise_if_error("send")
            if self.state is State.UNINITIALIZED or self.state is State.INITIALIZING:
                raise E.IllegalStateError("cannot send before init_transactions() completed")
            raise E.IllegalStateError(
                f"cannot send in state {self.state.value}: a transactional producer sends only inside "
                "begin_transaction() ... commit_transaction()/abort_transaction()"
            )
        if tp in self.partitions or tp in self.new_partitions:
            return
        with self.lock:
            self.new_partitions.add(tp)
        self.sender.wakeup()

    def send_allowed(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.partitions and self.state is not State.FATAL_ERROR

    def on_sender_round(self) -> None:
        """Called by the sender before each round (on the loop): fail what may not be sent
        any more, and start adding new partitions."""
        state = self.state
        if state in (State.ABORTABLE_ERROR, State.ABORTING, State.FATAL_ERROR):
            self.abort_undrained()
        elif self.new_partitions and self.adding is None and state in (State.IN_TRANSACTION, State.COMMITTING):
            self.adding = asyncio.get_running_loop().create_task(self._add_partitions())

    def abort_undrained(self) -> None:
        """Fail the batches not sent yet (an aborted or failed transaction)."""
        if not self.acc.has_undrained():
            return
        if self.state is State.ABORTING:
            err: BaseException = E.TransactionAbortedError("the transaction was aborted before this record was sent")
        else:
            err = E.KafkaError(f"the transaction failed before this record was sent: {self.last_error!r}")
        for b in self.acc.abort_all(err):
            if b.sequence >= 0:
                # sent before and retried: whether the broker has its sequences is unknown,
                # so the next transaction starts them over under a new epoch
                self.epoch_bump_required = True
            self.sender._fail(b, err)

    def batch_failed(self, b, err: BaseException) -> None:
        """A batch of the transaction failed for good (from the sender)."""
        if isinstance(err, E.TransactionAbortedError) or self.state is State.FATAL_ERROR:
            return
        code = getattr(err, "code", -1)
        if code in FENCED:
            self._fatal(_fenced("produce"))
            return
        if code in NEEDS_NEW_EPOCH:
            self._abortable(err, new_epoch=True)
            return
        if b.sequence >= 0:
            # a batch that was sent failed: the partition's sequences have a gap, or the batch
            # may have been written; the abort starts them over under a new epoch (as Java's
            # producer, which bumps the epoch after any abortable error when the broker can)
            self.epoch_bump_required = True
        self._abortable(err)

    def sequence_gap(self, partitions: list[tuple[str, int]]) -> None:
        """Batches that expired after being sent left a gap the batches in flight did not close
        (from the sender, Java's maybeResolveSequences): the transaction fails and its abort
        bumps the epoch."""
        names = ", ".join(f"{t}-{p}" for t, p in partitions)
        self._abortable(
            E.KafkaError(
                f"{names}: the client has no acknowledgment for records it sent and can no longer retry them; "
                "it is safe to abort the transaction and continue"
            ),
            new_epoch=True,
        )

    # ------------------------------------------------------------------ coordinator requests
    async def _to_coordinator(self, api_key: int, data: dict, error_of, *, deadline: float, what: str):
        """Send to the transaction coordinator until it answers with an error that is not
        "ask elsewhere" or "retry": returns (code, response)."""
        if self._coord_lock is None:
            self._coord_lock = asyncio.Lock()
        async with self._coord_lock:
            delay = self.backoff
            while True:
                code, resp = -1, None
                try:
                    if self.coordinator < 0:
                        self.coordinator = await self.cluster.find_coordinator(self.transactional_id, TRANSACTION_KEY)
                    conn = await self.cluster.connection(self.coordinator)
                    resp = await conn.request(api_key, data)
                    code = error_of(resp)
                except E.KafkaError as e:
                    if not e.retriable:
                        raise
                    log.debug("%s: %r, retrying", what, e)
                    self.coordinator = -1
                else:
                    if code in COORDINATOR_MOVED:
                        self.coordinator = -1
                    elif not (code and E.error_class(code).retriable):
                        return code, resp
                    log.debug("%s: %s, retrying", what, E.error_class(code).name)
                if time.monotonic() + delay > deadline:
                    raise E.KafkaTimeoutError(f"{what} did not complete before max.block.ms")
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.cluster.retry_backoff_max)

    async def init_transactions(self, timeout: float) -> None:
        if self.state is not State.UNINITIALIZED:
            self._raise_if_error("init_transactions")
            if self.state is State.INITIALIZING:
                pass  # a timed-out call repeated: continue
            else:
                raise E.IllegalStateError(f"init_transactions() was already called (state {self.state.value})")
        self.state = State.INITIALIZING
        await self._init_producer_id(time.monotonic() + timeout, bump=False)

    async def _init_producer_id(self, deadline: float, bump: bool) -> None:
        s = self.sender
        data = {
            "transactional_id": self.transactional_id,
            "transaction_timeout": self.timeout_ms,
            "producer_id": s.producer_id if bump else -1,
            "producer_epoch": s.producer_epoch if bump else -1,
        }
        code, resp = await self._to_coordinator(
            INIT_PRODUCER_ID, data, lambda r: int(r.error_code), deadline=deadline, what="InitProducerId"
        )
        if code in FENCED:
            raise self._fatal(_fenced("init_transactions"))
        if code:
            raise self._fatal(E.error_class(code)(f"InitProducerId for transactional.id {self.transactional_id!r}"))
        s.seqs.set_producer_id_and_epoch(int(resp.producer_id), int(resp.producer_epoch))
        s.seqs.reset()  # every batch has completed: the sequences start over
        self.epoch_bump_required = False
        self.state = State.READY
        self.last_error = None

    def begin_transaction(self) -> None:
        self._require("begin_transaction", State.READY)
        self.state = State.IN_TRANSACTION

    async def _add_partitions(self) -> None:
        try:
            with self.lock:
                adding = sorted(self.new_partitions)
            if not adding:
                return
            topics: dict[str, list[int]] = {}
            for t, p in adding:
                topics.setdefault(t, []).append(p)
            s = self.sender
            data = {
                "v3_and_below_transactional_id": self.transactional_id,
                "v3_and_below_producer_id": s.producer_id,
                "v3_and_below_producer_epoch": s.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }

            def error_of(resp) -> int:  # the first partition error that decides (Java's order)
                codes = [
                    int(p.partition_error_code)
                    for t in resp.results_by_topic_v3_and_below
                    for p in t.results_by_partition
                ]
                for c in codes:
                    if c in COORDINATOR_MOVED or (c and E.error_class(c).retriable):
                        return c
                return next((c for c in codes if c and c != 55), next((c for c in codes if c), 0))  # 55: not attempted

            deadline = time.monotonic() + self.sender.delivery_timeout
            try:
                code, _resp = await self._to_coordinator(
                    ADD_PARTITIONS_TO_TXN, data, error_of, deadline=deadline, what="AddPartitionsToTxn"
                )
            except E.KafkaError as e:
                self._abortable(e)
                return
            with self.lock:
                self.new_partitions.difference_update(adding)
            if code in FENCED:
                self._fatal(_fenced("AddPartitionsToTxn"))
            elif code in (48, 53):  # INVALID_TXN_STATE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                self._fatal(E.error_class(code)(f"AddPartitionsToTxn {adding}"))
            elif code in NEEDS_NEW_EPOCH:
                self._abortable(E.error_class(code)(f"AddPartitionsToTxn {adding}"), new_epoch=True)
            elif code:
                self._abortable(E.error_class(code)(f"could not add {adding} to the transaction"))
            else:
                self.partitions.update(adding)
                self.started = True
        finally:
            self.adding = None
            self.sender.wakeup()

    async def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any, timeout: float) -> None:
        self._require("send_offsets_to_transaction", State.IN_TRANSACTION)
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        gm: ConsumerGroupMetadata = group_metadata
        deadline = time.monotonic() + timeout
        s = self.sender
        code, _ = await self._to_coordinator(
            ADD_OFFSETS_TO_TXN,
            {
                "transactional_id": self.transactional_id,
                "producer_id": s.producer_id,
                "producer_epoch": s.producer_epoch,
                "group_id": gm.group_id,
            },
            lambda r: int(r.error_code),
            deadline=deadline,
            what="AddOffsetsToTxn",
        )
        if code:
            raise self._txn_error(code, f"AddOffsetsToTxn for group {gm.group_id!r}")
        self.started = True
        await self._txn_offset_commit(offsets, gm, deadline)

    def _txn_error(self, code: int, what: str) -> BaseException:
        if code in FENCED:
            return self._fatal(_fenced(what))
        cls = E.error_class(code)
        if code in (48, 53):
            return self._fatal(cls(what))
        if code in NEEDS_NEW_EPOCH:
            return self._abortable(cls(what), new_epoch=True)
        if code in (25, 22):  # UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION
            return self._abortable(E.CommitFailedError(f"{what}: the consumer group's generation ended ({cls.name})"))
        if code in (30, 82, 120):  # GROUP_AUTHORIZATION_FAILED, FENCED_INSTANCE_ID, TRANSACTION_ABORTABLE
            return self._abortable(cls(what))
        return self._fatal(cls(what))

    async def _txn_offset_commit(self, offsets: dict, gm: ConsumerGroupMetadata, deadline: float) -> None:
        pending: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            pending[(tp[0], int(tp[1]))] = om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
        s = self.sender
        node = -1
        delay = self.backoff
        while pending:
            topics: dict[str, list] = {}
            for (t, p), om in pending.items():
                topics.setdefault(t, []).append(
                    {
                        "partition_index": p,
                        "committed_offset": om.offset,
                        "committed_leader_epoch": om.leader_epoch,
                        "committed_metadata": om.metadata,
                    }
                )
            data = {
                "transactional_id": self.transactional_id,
                "group_id": gm.group_id,
                "producer_id": s.producer_id,
                "producer_epoch": s.producer_epoch,
                "generation_id": gm.generation_id,
                "member_id": gm.member_id,
                "group_instance_id": gm.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            try:
                if node < 0:
                    node = await self.cluster.find_coordinator(gm.group_id, GROUP_KEY)
                resp = await self.cluster.send(node, TXN_OFFSET_COMMIT, data)
            except E.KafkaError as e:
                if not e.retriable:
                    raise self._abortable(e) from None
                node = -1
            else:
                for t in resp.topics:
                    for p in t.partitions:
                        code = int(p.error_code)
                        tp = (t.name, int(p.partition_index))
                        if not code:
                            pending.pop(tp, None)
                        elif code in COORDINATOR_MOVED or code == REQUEST_TIMED_OUT:
                            node = -1
                        elif not E.error_class(code).retriable:
                            raise self._txn_error(code, f"TxnOffsetCommit {t.name}-{tp[1]} for group {gm.group_id!r}")
            if pending:
                if time.monotonic() + delay > deadline:
                    raise E.KafkaTimeoutError("TxnOffsetCommit did not complete before max.block.ms")
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.cluster.retry_backoff_max)

    async def commit_transaction(self, flush, timeout: float) -> None:
        self._require("commit_transaction", State.IN_TRANSACTION, State.COMMITTING)
        deadline = time.monotonic() + timeout
        self.state = State.COMMITTING
        await flush(max(0.0, deadline - time.monotonic()))
        await self._partitions_added(deadline)
        if self.state is not State.COMMITTING:  # a batch or an add failed meanwhile
            self._raise_if_error("commit_transaction")
        await self._end_txn(True, deadline)

    async def abort_transaction(self, wait_incomplete, timeout: float) -> None:
        if self.state is State.FATAL_ERROR:
            self._raise_if_error("abort_transaction")
        if self.state not in (State.IN_TRANSACTION, State.ABORTABLE_ERROR, State.ABORTING):
            raise E.IllegalStateError(f"cannot abort_transaction in state {self.state.value}")
        deadline = time.monotonic() + timeout
        self.state = State.ABORTING
        with self.lock:
            self.new_partitions.clear()
        self.abort_undrained()
        await wait_incomplete(max(0.0, deadline - time.monotonic()))  # the batches in flight
        await self._partitions_added(deadline)
        if isinstance(self.last_error, E.InvalidProducerIdMappingError):
            # the coordinator would not take EndTxn with this producer id: straight to a new one
            self._complete()
            await self._init_producer_id(deadline, bump=True)
            return
        await self._end_txn(False, deadline)
        if self.epoch_bump_required:
            await self._init_producer_id(deadline, bump=True)

    async def _partitions_added(self, deadline: float) -> None:
        while self.adding is not None:
            if time.monotonic() > deadline:
                raise E.KafkaTimeoutError("AddPartitionsToTxn did not complete in time")
            await asyncio.wait({self.adding}, timeout=max(0.0, deadline - time.monotonic()))

    async def _end_txn(self, commit: bool, deadline: float) -> None:
        if not self.started:  # nothing was added: the coordinator has no transaction to end
            self._complete()
            return
        s = self.sender
        code, _ = await self._to_coordinator(
            END_TXN,
            {
                "transactional_id": self.transactional_id,
                "producer_id": s.producer_id,
                "producer_epoch": s.producer_epoch,
                "committed": commit,
            },
            lambda r: int(r.error_code),
            deadline=deadline,
            what="EndTxn",
        )
        if code:
            raise self._txn_error(code, f"EndTxn({'commit' if commit else 'abort'})")
        self._complete()

    def _complete(self) -> None:
        with self.lock:
            self.new_partitions.clear()  # a send whose append failed leaves its partition here
        self.partitions.clear()
        self.started = False
        self.state = State.READY
        self.last_error = None
