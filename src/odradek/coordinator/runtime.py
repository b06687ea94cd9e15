"""One runtime for every coordinator (Kafka's CoordinatorRuntime, coordinator-common).

A coordinator keeps its state in the partitions of its own topic (groups in
`__consumer_offsets`, transactions in `__transaction_state`): one *shard* of state per
partition this broker leads (a `Shard`: group/shard.py, txn/shard.py). The runtime does,
once for every coordinator, what each needs around its shards:

- **Leadership and epochs.** The broker calls `on_elected(topic, partition, leader_epoch)` and
  `on_resigned(...)` (the replica manager's leadership listener). An election creates a shard
  and loads it; one at an epoch no newer than the shard's is ignored (a repeat, or stale), as
  is a resignation of an epoch older than the shard's. A resignation unloads the shard
  (`Shard.on_unloaded`: whatever waits on it is answered NOT_COORDINATOR).
- **Loading to the log end.** A new shard replays its partition from the log start to the log
  end offset, not the high watermark (`CoordinatorPartitions`, partitions.py, says why). Data
  records go to `Shard.replay`, the COMMIT / ABORT markers of transactions to
  `Shard.replay_end_transaction`. Meanwhile requests get COORDINATOR_LOAD_IN_PROGRESS, and a
  transaction completed on the partition is kept and applied once loaded. A load that fails
  leaves the shard FAILED (NOT_COORDINATOR) until the next election, as in Kafka. Loads run
  one after another; only their log reads leave the event loop (a worker thread).
- **Reads of committed state.** A loaded shard holds what its log says to the end, and the
  tail past the high watermark may never be committed: the old leader appended it and died
  before every in-sync follower had it, and the next leader may be one of those followers
  (seed 12391 of the simulator: a coordinator answered OffsetFetch with offsets of that
  tail, then the next one, elected cleanly without it, with older ones). So a shard whose
  load replayed past the high watermark answers reads (`lookup_for_read`: OffsetFetch,
  DescribeGroups) COORDINATOR_LOAD_IN_PROGRESS, which clients retry, until the high
  watermark reaches the end it loaded to: then everything it shows is committed, as
  everything a write adds is shown only once committed (below). Writes go on meanwhile:
  their answers wait for their own commits, which come after the tail's. Kafka's new
  runtime reads at the last committed offset of its timeline state instead (the classic
  coordinator of Kafka 3.9, in ZooKeeper mode, serves what it loaded to the log end);
  waiting instead of answering older state also keeps a new leader whose high watermark
  lags what the old one committed from answering below what was answered before.
  The coordinator's `on_loaded` hook runs only then too (the transaction coordinator
  resumes the transactions it found ending), and the transaction coordinator, whose every
  operation reads state and may act on it, serves nothing before (`lookup_for_read`).
- **Commit-then-reply, pipelined.** An operation runs synchronously on a loaded shard and
  returns a `CoordinatorResult`: the records to append, the replies to send once they are
  committed, and an optional continuation run with the write's outcome (which may return
  another result). As in Kafka's runtime, the result's records are appended at once, as one
  batch (`CoordinatorPartitions.append_as_leader`): the log order of a partition is the
  order its operations ran. Its replies and continuation wait in the partition's queue of
  writes in flight (Kafka's DeferredEventQueue) until the high watermark passes the batch
  (`wait_for_commit`), so the writes of one partition wait for replication together, not
  one after another; they complete in log order (a write whose append was refused
  completes in its turn, with its error), and each at most `commit_timeout_ms` after its
  append (REQUEST_TIMED_OUT).
- **Answers that write nothing wait too.** A result with no records (a heartbeat, a
  SyncGroup or JoinGroup answered from the group as it is) may show state that earlier
  writes, or a loaded tail, put there and that is not committed yet. As in Kafka's runtime,
  it is answered at once only if the high watermark has reached the shard's last written
  offset (`ShardContext.last_written`: the loaded end, then each append's); otherwise it
  waits in the partition's queue behind that offset, with its own `commit_timeout_ms`. If
  that offset never commits in time (REQUEST_TIMED_OUT) or the shard is unloaded first
  (NOT_COORDINATOR), its replies are not sent: each waiting token gets the error (`run`'s
  `on_error` makes it the operation's answer). A continuation's result is the outcome of
  its own committed write and is answered at once.
- **Epoch validity.** A write carries the epoch of the shard it was computed on, which is
  the partition's leader epoch: one whose shard was unloaded or re-elected is not appended
  (NOT_COORDINATOR at once), nor is one the partition refuses at that leader epoch.
  Unloading a shard fails every write of its partition still waiting for its commit with
  NOT_COORDINATOR at once (Kafka's failAll), in log order, before the shard's own waiting
  requests (`Shard.on_unloaded`) are answered.
- **State of writes that never commit.** A shard applies an operation's effects when it
  computes it (a group's generation and members, a transaction's pending transition) or in
  the continuation once the write is committed (committed offsets, a transaction's
  completed transition), and writes computed later build on the earlier effects and are
  appended after them. An appended write that never commits is one whose leader lost the
  partition: the resignation (or the next election) unloads the shard, which drops all its
  state, applied or not, and fails its waiting writes with NOT_COORDINATOR; the partition's
  next leader (this broker too, when elected again) builds a new shard by replaying its own
  log. As writes are appended in the order their transitions ran, and a log loses only a
  suffix (a follower truncates to its new leader's log), what is replayed is always a
  prefix of those transitions, never a later one without an earlier. What is unchanged by
  pipelining, as in Kafka's classic coordinators: a write refused at append (a storage
  error, the ISR below min.insync.replicas), or timed out or failed after it (its records
  stay in the log and may commit later), is answered with its error by its continuation,
  which undoes what the shard knows how to undo (a static member's replacement, a pending
  transition, offsets not yet cached); anything else the shard holds may differ from the
  log until the partition is next loaded (Kafka's new runtime reverts to a snapshot of its
  timeline state instead).
- **Fencing.** A broker that may no longer lead what it believes it leads (its ZooKeeper
  session lost, or cut from ZooKeeper past the session timeout: broker/coordinator_fence.py)
  is told `fence(why)`: every shard is unloaded (what waits on it: NOT_COORDINATOR, so clients
  look for the coordinator again) and requests get NOT_COORDINATOR, while elections and
  resignations are still followed. `unfence()`, once the broker is registered and its
  metadata current again, elects a shard for each partition it leads by then, which loads
  from the log as any election does. Kafka's coordinators have no such fence: they resign
  only when the controller's (or KRaft's metadata log's) leadership change reaches them.
- **Timers.** A shard keeps keyed deadlines (`Timer`, sans-IO); the runtime arms one
  event-loop timer for the earliest of all loaded shards and submits what expires. Periodic
  checks (`every`) and background tasks (`spawn`) end with the runtime.

Everything runs on the broker's event loop. Coordinators are the runtime's users:
group/coordinator.py and txn/coordinator.py. What a shard implements and returns (`Shard`,
`CoordinatorResult`, `Timer`) is in shard_api.py, re-exported here.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from odradek.coordinator.codec import RecordFormatError, partition_for
from odradek.coordinator.partitions import CoordinatorPartitions
from odradek.coordinator.shard_api import CoordinatorResult, R, Settings, Shard, Timer
from odradek.protocol.errors import ErrorCode, KafkaError, error_class
from odradek.protocol.records import (
    CONTROL_COMMIT,
    Record,
    build_batch,
    decode_control_record,
    decode_records,
    iter_batches,
)

log = logging.getLogger(__name__)

LOAD_READ_BYTES = 1 << 20
NOT_COORDINATOR = int(ErrorCode.not_coordinator)

__all__ = ["CoordinatorResult", "CoordinatorRuntime", "Settings", "Shard", "ShardContext", "ShardState", "Timer"]

S = TypeVar("S", bound=Shard[Any])


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"


@dataclass(eq=False, slots=True)
class ShardContext(Generic[S]):
    """One shard as the runtime holds it: its partition, the leader epoch it was elected at
    (the coordinator epoch of Kafka's transaction markers), and its state."""

    partition: int
    epoch: int
    shard: S
    state: ShardState = ShardState.LOADING
    # transactions completed while loading: (producer id, commit), applied once loaded
    completed_while_loading: list[tuple[int, bool]] = field(default_factory=list)
    # the offset the load replayed to, and whether the high watermark has reached it (reads wait)
    loaded_end: int = 0
    tail_committed: bool = True
    # the offset after the last record the shard loaded or appended (Kafka's lastWrittenOffset):
    # answers that write nothing wait until the high watermark reaches it
    last_written: int = 0

    @property
    def serves_reads(self) -> bool:
        return self.state is ShardState.ACTIVE and self.tail_committed


# =========================================================================== runtime

# The partition refuses an append at the shard's epoch: the shard is not (or no longer) the leader's.
_OTHER_EPOCH = frozenset({int(ErrorCode.fenced_leader_epoch), int(ErrorCode.unknown_leader_epoch)})


@dataclass(eq=False, slots=True)
class _Write(Generic[R]):
    """A result appended to its partition (or refused: `error` set), whose replies and
    continuation wait for its commit (a deferred event of Kafka's DeferredEventQueue)."""

    epoch: int
    res: CoordinatorResult[R]
    last_offset: int = -1
    deadline: float = 0.0  # on the event loop's clock
    error: int | None = None  # None: appended, waiting for the high watermark
    # a result with no records, waiting for `last_offset` (the shard's last written) to commit:
    # its replies are sent only if it does (else each token gets the error)
    answers_only: bool = False


class CoordinatorRuntime(Generic[S, R]):
    """The shards of one coordinator over the partitions of `topic`: `await start()`, the
    leadership hooks, `lookup`, `submit` / `run` / `append`, `await stop()`."""

    def __init__(
        self,
        topic: str,
        num_partitions: int,
        partitions: CoordinatorPartitions,
        new_shard: Callable[[], S],
        serialize: Callable[[R], tuple[bytes, bytes | None]],
        *,
        commit_timeout_ms: int,
        clock: Callable[[], int] | None = None,
        on_loaded: Callable[[ShardContext[S]], None] | None = None,
    ) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self.partitions = partitions
        self.new_shard = new_shard
        self.serialize = serialize
        self.commit_timeout_ms = commit_timeout_ms
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._on_loaded = on_loaded
        self.active = False
        self.fenced: str | None = None  # why this broker does not act as coordinator now (`fence`)
        self._contexts: dict[int, ShardContext[S]] = {}
        self._led: dict[int, int] = {}  # partition -> leader epoch: what the broker leads, fenced or not
        # per partition, the writes appended (or refused) whose outcome is still to deliver, in
        # log order, and the task that delivers them as their commits become known
        self._in_flight: dict[int, collections.deque[_Write[R]]] = {}
        self._committers: dict[int, asyncio.Task] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._periodic: dict[int, asyncio.TimerHandle] = {}
        self._load_queue: collections.deque[ShardContext[S]] = collections.deque()
        self._load_task: asyncio.Task | None = None
        self._tasks: dict[asyncio.Task, None] = {}  # in the order started (stop cancels them so)

    # =================================================================== lifecycle
    async def start(self) -> None:
        self.active = True

    async def stop(self) -> None:
        """Ends timers, loads and background tasks, lets the writes in flight learn their
        commit (5 s at most; answered NOT_COORDINATOR, as the runtime has stopped), and
        unloads every shard (what still waits: NOT_COORDINATOR)."""
        self.active = False
        for handle in (self._timer, *self._periodic.values()):
            if handle is not None:
                handle.cancel()
        self._timer = self._timer_at = None
        self._periodic.clear()
        if self._load_task is not None and not self._load_task.done():
            self._load_task.cancel()
        self._load_queue.clear()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        committers = list(self._committers.values())
        if tasks or committers:
            await asyncio.wait([*tasks, *committers], timeout=5)
        for ctx in list(self._contexts.values()):
            self._unload(ctx)

    def every(self, interval_ms: int, fn: Callable[[], None]) -> None:
        """Call `fn` every `interval_ms` until the runtime stops (its errors are logged)."""
        key = len(self._periodic)

        def fire() -> None:
            if not self.active:
                return
            try:
                fn()
            except Exception:
                log.exception("periodic check of %s failed", self.topic)
            finally:
                arm()

        def arm() -> None:
            if self.active:
                self._periodic[key] = asyncio.get_running_loop().call_later(interval_ms / 1000, fire)

        arm()

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run a background task of the coordinator (cancelled when the runtime stops)."""
        task = asyncio.ensure_future(coro)
        self._tasks[task] = None
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("a background task of the %s coordinator failed", self.topic, exc_info=task.exception())

    # =================================================================== lookups
    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def error(self, partition: int) -> int:
        """COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, or 0 if
        the partition's shard serves."""
        if not self.active:
            return int(ErrorCode.coordinator_not_available)
        if self.fenced is not None:
            return NOT_COORDINATOR
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state is ShardState.FAILED:
            return NOT_COORDINATOR
        if ctx.state is ShardState.LOADING:
            return int(ErrorCode.coordinator_load_in_progress)
        return 0

    def lookup(self, key: str) -> tuple[int, ShardContext[S] | None]:
        """(0, the loaded shard of `key`'s partition) or (its error, None)."""
        partition = self.partition_for(key)
        err = self.error(partition)
        return (err, None) if err else (0, self._contexts[partition])

    def lookup_for_read(self, key: str) -> tuple[int, ShardContext[S] | None]:
        """As `lookup`, for a read of the shard's state: COORDINATOR_LOAD_IN_PROGRESS too while
        what it loaded is not all committed ("Reads of committed state")."""
        err, ctx = self.lookup(key)
        if ctx is not None and not ctx.tail_committed:
            return int(ErrorCode.coordinator_load_in_progress), None
        return err, ctx

    def context(self, partition: int) -> ShardContext[S] | None:
        """The partition's shard, whatever its state."""
        return self._contexts.get(partition)

    def contexts(self) -> list[ShardContext[S]]:
        """Every shard, loading ones too (a copy: safe to iterate while operations run)."""
        return list(self._contexts.values())

    def loaded_contexts(self) -> list[ShardContext[S]]:
        """The shards that serve."""
        return [ctx for ctx in self._contexts.values() if ctx.state is ShardState.ACTIVE]

    @property
    def loading(self) -> bool:
        return any(ctx.state is ShardState.LOADING for ctx in self._contexts.values())

    @property
    def shards(self) -> dict[int, S]:
        return {p: ctx.shard for p, ctx in self._contexts.items()}

    def epoch(self, partition: int) -> int | None:
        ctx = self._contexts.get(partition)
        return None if ctx is None else ctx.epoch

    async def wait_loaded(self) -> None:
        """Until no load is queued or running."""
        while self._load_task is not None and not self._load_task.done():
            await asyncio.shield(self._load_task)

    # =================================================================== leadership
    def on_elected(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != self.topic or not self.active:
            return
        if self._led.get(partition, -1) <= leader_epoch:
            self._led[partition] = leader_epoch
        if self.fenced is not None:
            log.info("%s-%d elected at epoch %d: not loaded while fenced", topic, partition, leader_epoch)
            return
        old = self._contexts.get(partition)
        if old is not None:
            if old.epoch >= leader_epoch:
                log.info(
                    "%s-%d elected at epoch %d: ignored, the shard is at epoch %d",
                    topic,
                    partition,
                    leader_epoch,
                    old.epoch,
                )
                return
            self._unload(old)
        ctx = ShardContext(partition, leader_epoch, self.new_shard())
        self._contexts[partition] = ctx
        try:
            empty = self.partitions.log_start_offset(topic, partition) >= self.partitions.log_end_offset(
                topic, partition
            )
        except KafkaError:
            empty = False
        if empty:  # nothing to replay (a new partition): serve at once
            self._activate(ctx)
            self._tail_committed(ctx)
            return
        self._load_queue.append(ctx)
        if self._load_task is None or self._load_task.done():
            self._load_task = asyncio.ensure_future(self._load_loop())

    def on_resigned(self, topic: str, partition: int, leader_epoch: int) -> None:
        if topic != self.topic:
            return
        led = self._led.get(partition)
        if led is not None and not 0 <= leader_epoch < led:
            del self._led[partition]
        ctx = self._contexts.get(partition)
        if ctx is None:
            return
        if 0 <= leader_epoch < ctx.epoch:
            log.info(
                "%s-%d resigned at epoch %d: ignored, the shard is at epoch %d",
                topic,
                partition,
                leader_epoch,
                ctx.epoch,
            )
            return
        self._unload(ctx)
        self._rearm()

    def fence(self, why: str) -> None:
        """Stop acting as coordinator: this broker may no longer lead the partitions it
        believes it leads. Every shard is unloaded (its waiting requests and writes answered
        NOT_COORDINATOR) and requests get NOT_COORDINATOR until `unfence`; elections and
        resignations are still followed meanwhile."""
        if self.fenced is not None:
            return
        self.fenced = why
        if self._contexts:
            log.warning("%s: no longer coordinator of %d partitions (%s)", self.topic, len(self._contexts), why)
        for ctx in list(self._contexts.values()):
            self._unload(ctx)
        self._load_queue.clear()
        self._rearm()

    def unfence(self) -> None:
        """Act as coordinator again (the broker is registered and its metadata current): a shard
        is elected, and loaded, for every partition the broker leads now."""
        if self.fenced is None:
            return
        log.info("%s: coordinator again of %d partitions (was fenced: %s)", self.topic, len(self._led), self.fenced)
        self.fenced = None
        for partition, epoch in sorted(self._led.items()):
            self.on_elected(self.topic, partition, epoch)

    def _unload(self, ctx: ShardContext[S]) -> None:
        if self._contexts.get(ctx.partition) is ctx:
            del self._contexts[ctx.partition]
            self._fail_in_flight(ctx.partition)
        self._deliver(ctx.shard.on_unloaded())
        log.info("unloaded %s-%d (epoch %d, %s)", self.topic, ctx.partition, ctx.epoch, ctx.state.value)

    def _activate(self, ctx: ShardContext[S]) -> None:
        for producer_id, commit in ctx.completed_while_loading:
            ctx.shard.replay_end_transaction(producer_id, commit)
        ctx.completed_while_loading.clear()
        ctx.shard.on_loaded(self.clock())
        ctx.state = ShardState.ACTIVE

    def _tail_committed(self, ctx: ShardContext[S]) -> None:
        """What the shard loaded is committed: it serves reads, and the coordinator's
        `on_loaded` hook runs (the transaction coordinator resumes the transactions it found
        ending: never from a record the next leader may not have)."""
        ctx.tail_committed = True
        if self._on_loaded is not None:
            self._on_loaded(ctx)

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> bool:
        """The producer's marker was appended to the partition and is committed. A shard still
        loading applies it once loaded (its load may have read the marker already: then there
        is nothing left to apply). False when no shard of the partition is here."""
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state is ShardState.FAILED:
            return False
        if ctx.state is ShardState.LOADING:
            ctx.completed_while_loading.append((producer_id, commit))
        else:
            ctx.shard.replay_end_transaction(producer_id, commit)
        return True

    # =================================================================== loading
    async def _load_loop(self) -> None:
        while self._load_queue:
            ctx = self._load_queue.popleft()
            if self._contexts.get(ctx.partition) is ctx:
                await self._load(ctx)
            await asyncio.sleep(0)
        self._rearm()

    async def _load(self, ctx: ShardContext[S]) -> None:
        topic, partition = self.topic, ctx.partition
        started = time.monotonic()
        count = 0
        offset = 0
        try:
            offset = self.partitions.log_start_offset(topic, partition)
            while True:
                data, end = await asyncio.to_thread(
                    self.partitions.read_log_bytes, topic, partition, offset, LOAD_READ_BYTES
                )
                if not data or self._contexts.get(partition) is not ctx:
                    break
                for h in iter_batches(data):
                    if h.is_control:
                        if h.next_offset > offset and h.producer_id >= 0:
                            marker = decode_control_record(data, h.position)
                            if marker is not None:
                                ctx.shard.replay_end_transaction(h.producer_id, marker[1] == CONTROL_COMMIT)
                    else:
                        pid = h.producer_id if h.is_transactional else -1
                        for rec in decode_records(data, h.position):
                            if rec.offset >= offset and rec.key is not None:
                                try:
                                    ctx.shard.replay(rec.offset, pid, rec.key, rec.value)
                                except RecordFormatError as e:
                                    log.warning("skipping an unreadable record of %s-%d: %s", topic, partition, e)
                                    continue
                                count += 1
                    offset = max(offset, h.next_offset)
                if offset >= end:
                    break
        except asyncio.CancelledError:
            raise
        except Exception:
            if self._contexts.get(partition) is ctx:
                log.exception(
                    "loading %s-%d failed at offset %d: not served until elected again", topic, partition, offset
                )
                ctx.state = ShardState.FAILED
            return
        if self._contexts.get(partition) is not ctx:
            return  # resigned or re-elected meanwhile
        ctx.loaded_end = ctx.last_written = offset
        self._activate(ctx)
        log.info(
            "loaded %d records of %s-%d (epoch %d) in %.0f ms",
            count,
            topic,
            partition,
            ctx.epoch,
            (time.monotonic() - started) * 1000,
        )
        self._watch_tail(ctx)

    def _watch_tail(self, ctx: ShardContext[S]) -> None:
        """Reads of a shard that loaded past the high watermark wait until it reaches the
        loaded end ("Reads of committed state")."""
        try:
            hw = self.partitions.high_watermark(self.topic, ctx.partition)
        except KafkaError:
            hw = -1
        if hw >= ctx.loaded_end:
            self._tail_committed(ctx)
            return
        ctx.tail_committed = False
        log.info(
            "%s-%d loaded to %d, above its high watermark %d: reads wait for it",
            self.topic,
            ctx.partition,
            ctx.loaded_end,
            hw,
        )
        self.spawn(self._await_tail(ctx))

    async def _await_tail(self, ctx: ShardContext[S]) -> None:
        last = ctx.loaded_end - 1
        while self._contexts.get(ctx.partition) is ctx:
            try:
                await self.partitions.wait_for_commit(self.topic, ctx.partition, last, self.commit_timeout_ms)
            except KafkaError as e:
                if e.code == ErrorCode.request_timed_out:
                    continue
                # NOT_ENOUGH_REPLICAS_AFTER_APPEND comes only once the high watermark passed it
                if e.code != ErrorCode.not_enough_replicas_after_append:
                    log.info("%s-%d: reads wait for the next election (%s)", self.topic, ctx.partition, e)
                    return
            if self._contexts.get(ctx.partition) is ctx:
                self._tail_committed(ctx)
                log.info("%s-%d: loaded end %d committed, reads served", self.topic, ctx.partition, ctx.loaded_end)
            return

    # =================================================================== writing
    def submit(self, ctx: ShardContext[S], res: CoordinatorResult[R]) -> None:
        """Append a result computed on `ctx`'s shard now; its replies and continuation follow
        its commit (commit-then-reply)."""
        self._submit(ctx.partition, ctx.epoch, res)

    async def run(
        self,
        ctx: ShardContext[S],
        op: Callable[[Any, int], CoordinatorResult[R]],
        on_error: Callable[[int], Any] | None = None,
    ) -> Any:
        """Run `op(token, now)` on the shard and wait for the answer to `token`. An answer
        computed on state that never committed is not sent: the token gets the error
        (NOT_COORDINATOR, REQUEST_TIMED_OUT), which `on_error(code)` turns into the answer
        (without it, the KafkaError is raised)."""
        fut = asyncio.get_running_loop().create_future()
        self._submit(ctx.partition, ctx.epoch, op(fut, self.clock()))
        try:
            return await fut
        except KafkaError as e:
            if on_error is None:
                raise
            return on_error(e.code)

    async def append(self, partition: int, epoch: int, records: list[R]) -> int:
        """Append `records` (one batch) now for a shard at `epoch`: 0 once committed, else the
        error (NOT_COORDINATOR: the shard moved)."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def then(error: int, now: int) -> None:
            if not fut.done():
                fut.set_result(error)

        self._submit(partition, epoch, CoordinatorResult(records, then=then))
        return await fut

    def _valid(self, partition: int, epoch: int) -> bool:
        ctx = self._contexts.get(partition)
        return self.active and ctx is not None and ctx.epoch == epoch

    def _submit(self, partition: int, epoch: int, res: CoordinatorResult[R], *, outcome: bool = False) -> None:
        """`outcome`: the result is a continuation's, its replies the outcome of a write whose
        commit is known (sent at once when it writes nothing)."""
        if not res.records:
            last = -1 if outcome else self._uncommitted_end(partition, epoch)
            if last < 0:
                self._written(partition, epoch, res, 0)
                return
            # Kafka's runtime: an operation that writes nothing answers once the shard's last
            # written offset is committed, so it never shows state the next leader may lack
            deadline = asyncio.get_running_loop().time() + self.commit_timeout_ms / 1000
            self._enqueue(partition, _Write(epoch, res, last, deadline, answers_only=True))
            return
        if not self._valid(partition, epoch):  # computed on a shard that is gone: not appended
            self._written(partition, epoch, res, NOT_COORDINATOR)
            return
        write = _Write(epoch, res)
        self._append(partition, write)
        self._enqueue(partition, write)

    def _uncommitted_end(self, partition: int, epoch: int) -> int:
        """The last offset the shard at `epoch` loaded or appended, if the high watermark is
        below it; else -1."""
        ctx = self._contexts.get(partition)
        if not self.active or ctx is None or ctx.epoch != epoch or ctx.state is not ShardState.ACTIVE:
            return -1
        try:
            hw = self.partitions.high_watermark(self.topic, partition)
        except KafkaError:
            hw = -1
        return ctx.last_written - 1 if hw < ctx.last_written else -1

    def _enqueue(self, partition: int, write: _Write[R]) -> None:
        in_flight = self._in_flight.get(partition)
        if in_flight is None:
            in_flight = self._in_flight[partition] = collections.deque()
        in_flight.append(write)
        if partition not in self._committers:
            self._committers[partition] = asyncio.ensure_future(self._commit_loop(partition, in_flight))
        self._rearm()

    def _append(self, partition: int, write: _Write[R]) -> None:
        """Append the write's records as one batch now; its error if refused."""
        res = write.res
        now = self.clock()
        try:
            records = []
            for i, record in enumerate(res.records):
                key, value = self.serialize(record)
                records.append(Record(i, now, key, value, ()))
            batch = build_batch(
                records,
                base_offset=0,
                producer_id=res.producer_id,
                producer_epoch=res.producer_epoch,
                base_sequence=0 if res.producer_id >= 0 else -1,
                is_transactional=res.producer_id >= 0,
            )
            res.base_offset, write.last_offset = self.partitions.append_as_leader(
                self.topic, partition, write.epoch, batch
            )
            ctx = self._contexts.get(partition)
            if ctx is not None and ctx.epoch == write.epoch:
                ctx.last_written = max(ctx.last_written, write.last_offset + 1)
        except KafkaError as e:
            log.warning("append to %s-%d failed: %s", self.topic, partition, e)
            write.error = NOT_COORDINATOR if e.code in _OTHER_EPOCH else e.code
            return
        except Exception:
            log.exception("append to %s-%d failed", self.topic, partition)
            write.error = int(ErrorCode.unknown_server_error)
            return
        write.deadline = asyncio.get_running_loop().time() + self.commit_timeout_ms / 1000

    async def _commit_loop(self, partition: int, in_flight: collections.deque[_Write[R]]) -> None:
        """Deliver the partition's writes in log order, each once its commit is known. (HW
        advances are monotonic: while the first waits, those after it cannot commit first.)"""
        try:
            while in_flight:
                write = in_flight[0]
                if write.error is None:
                    write.error = await self._wait_for_commit(partition, write)
                    if not in_flight or in_flight[0] is not write:
                        continue  # the shard was unloaded meanwhile, which answered it
                in_flight.popleft()
                self._finish(partition, write)
        finally:
            if self._committers.get(partition) is asyncio.current_task():
                del self._committers[partition]
                if self._in_flight.get(partition) is in_flight and not in_flight:
                    del self._in_flight[partition]

    async def _wait_for_commit(self, partition: int, write: _Write[R]) -> int:
        timeout_ms = max(0, int((write.deadline - asyncio.get_running_loop().time()) * 1000))
        try:
            await self.partitions.wait_for_commit(self.topic, partition, write.last_offset, timeout_ms)
        except KafkaError as e:
            if write.answers_only and e.code == ErrorCode.not_enough_replicas_after_append:
                return 0 if self._valid(partition, write.epoch) else NOT_COORDINATOR  # the HW passed it
            log.warning("write to %s-%d at %d not committed: %s", self.topic, partition, write.last_offset, e)
            return e.code
        except Exception:
            log.exception("write to %s-%d at %d failed", self.topic, partition, write.last_offset)
            return int(ErrorCode.unknown_server_error)
        return 0 if self._valid(partition, write.epoch) else NOT_COORDINATOR

    def _fail_in_flight(self, partition: int) -> None:
        """The partition's shard is gone: every write still waiting for its commit completes
        with NOT_COORDINATOR (one refused at append, with its own error), in log order."""
        committer = self._committers.pop(partition, None)
        if committer is not None:
            committer.cancel()
        in_flight = self._in_flight.pop(partition, None)
        while in_flight:
            write = in_flight.popleft()
            if write.error is None:
                write.error = NOT_COORDINATOR
            self._finish(partition, write)

    def _finish(self, partition: int, write: _Write[R]) -> None:
        """Deliver a write's outcome; the replies of an answer that waited for the shard's
        last written offset only if it committed (each token gets the error otherwise)."""
        error = int(write.error or 0)
        if write.answers_only and error:
            self._deliver_error(write.res.replies, error)
            write.res.replies = []
        self._written(partition, write.epoch, write.res, error)

    def _written(self, partition: int, epoch: int, res: CoordinatorResult[R], error: int) -> None:
        """Deliver a result's replies, then run its continuation with the write's outcome."""
        self._deliver(res.replies)
        if res.then is not None:
            try:
                more = res.then(error, self.clock())
            except Exception:
                log.exception("a continuation of a write to %s-%d failed", self.topic, partition)
                more = None
            if more is not None:
                self._submit(partition, epoch, more, outcome=True)
        self._rearm()

    @staticmethod
    def _deliver(replies: list[tuple[Any, Any]]) -> None:
        for token, value in replies:
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_result(value)

    @staticmethod
    def _deliver_error(replies: list[tuple[Any, Any]], code: int) -> None:
        for token, _value in replies:
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_exception(error_class(code)("the answer's state was not committed"))

    # =================================================================== timers
    def _rearm(self) -> None:
        if not self.active:
            return
        ats = [at for ctx in self.loaded_contexts() if (at := ctx.shard.next_deadline()) is not None]
        at = min(ats) if ats else None
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            delay = max(0.0, (at - self.clock()) / 1000)
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self.clock()
        for ctx in self.loaded_contexts():
            for res in ctx.shard.expire(now):
                self._submit(ctx.partition, ctx.epoch, res)
        self._rearm()
