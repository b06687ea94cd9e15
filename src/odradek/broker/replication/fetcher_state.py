"""A replica fetcher's decisions, sans-IO (Kafka's AbstractFetcherThread without its thread).

One `FetcherState` per fetcher (one leader broker, one fetcher index) keeps, per followed
partition, a `PartitionFetchState`: the leader epoch it follows, the offset and last epoch of
its last request, until when it waits after an error (`delayed_until_ms`) and why it is
parked (`parked`). Nothing here does I/O, awaits or reads a clock: the fetcher loop
(fetcher.py) passes the time in milliseconds and the local replicas (`ReplicaLog`: a
`Partition`), sends what `build_fetch` returns, and applies the `Action` each decision returns:

- **records** (`Append`): appended as they are (whole batches only: a response may end in a
  partial one), then the leader's high watermark and log start offset followed;
- a **diverging epoch** (KIP-320; `TruncateTo`): Kafka's rule: the end offset of our own
  copy of the leader's epoch, if we have that epoch, else of the largest epoch below it (and
  the next fetch says where our logs meet); never below by high watermark alone;
- **OFFSET_OUT_OF_RANGE** (`ListLeaderOffsets`): the fetcher asks the leader's log end and
  start offsets, then `on_leader_offsets`: above its end, truncate to it; below its start,
  start over empty at its start; in range (the leader refused for another reason): back off;
- **FENCED_LEADER_EPOCH** with the epoch we follow: the leader has a newer epoch than ours:
  `Park` until the metadata brings it (`add` with a new epoch unparks);
- **any other error code**, corrupt or invalid records, a failed ListOffsets: `Backoff`,
  this partition alone, for replica.fetch.backoff.ms;
- **an exception** while handling the partition: a storage error (its log directory is
  offline) or anything unexpected parks it, as Kafka marks it failed, until the metadata
  brings a new leader epoch; the fetcher's other partitions go on;
- a response for a request that is no longer current (the partition was removed, re-added at
  another epoch, truncated meanwhile): `Skip`.

A partition that got records moves to the end of the request order, so with more data than
a response holds every partition is first in turn (the first partition of a response gets
at least one batch even when larger than the limits).

**What changed, not everything** (issue 28): a fetcher of 667 partitions sends one Fetch per
append, and re-reading every replica's position for each cost ~0.5 ms. `fetching` holds the
partitions of the next Fetch, each as its request; `refresh` re-reads only the partitions
marked since (`_dirty`): added, removed, acted on (`done`, `truncated`), backed off or parked,
and the delayed ones whose time came (a heap, `_delayed`). What it changes in `fetching` it
also records in `_changes`, which the fetch session takes (`take_changes`) for an incremental
request; a full one takes every request (`requests`). What moves a replica's position outside
the fetcher (retention or DeleteRecords moving this replica's log start offset, its log
directory going offline, the partition no longer following) is seen by a sweep re-reading
every partition every `SWEEP_MS` (10 s), as every Fetch did before.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from odradek.protocol.errors import ErrorCode, InvalidRecordError
from odradek.protocol.records import HEADER_SIZE, LOG_OVERHEAD, CorruptRecordError

if TYPE_CHECKING:
    from odradek.broker.config import BrokerConfig

Key = tuple[str, int]

# how often `refresh` re-reads every partition's position (see the docstring): what it catches
# no leader reads today (a follower's log start offset) or fails the next append anyway (an
# offline log directory); at 1 s it was most of a follower's remaining fetch cost (issue 28)
SWEEP_MS = 10_000


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    fetch_max_bytes: int = 1048576  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10485760  # replica.fetch.response.max.bytes
    wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    fetchers_per_leader: int = 1  # num.replica.fetchers
    # request.timeout.ms (Kafka's fetcher's NetworkClient takes it too); a Fetch adds wait_max_ms
    request_timeout_ms: int = 30000

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> FetcherConfig:
        return cls(
            fetch_max_bytes=config["replica.fetch.max.bytes"],
            response_max_bytes=config["replica.fetch.response.max.bytes"],
            wait_max_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            backoff_ms=config["replica.fetch.backoff.ms"],
            fetchers_per_leader=config["num.replica.fetchers"],
            request_timeout_ms=config["request.timeout.ms"],
        )


class ReplicaLog(Protocol):
    """What the decisions read of the local replica (`Partition` provides it)."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def latest_epoch(self) -> int: ...

    @property
    def is_leader(self) -> bool: ...

    def fetch_position(self) -> tuple[int, int, int]: ...  # (log end offset, latest epoch, log start offset)

    def last_offset_for_leader_epoch(self, epoch: int) -> tuple[int, int]: ...


@dataclass(slots=True)
class PartitionFetchState:
    topic: str
    partition: int
    topic_id: uuid.UUID | None
    leader_epoch: int  # the leader epoch followed (sent as current_leader_epoch)
    fetch_offset: int = -1  # of the last request (the log end offset then)
    last_fetched_epoch: int = -1
    delayed_until_ms: int = 0
    parked: str | None = None  # why it waits for new metadata; None: fetching
    last_error: str | None = None
    # the last request built for it: the same object again while nothing in it changed (a fetch
    # session compares each partition with what it last sent; idle ones are most of them)
    request: PartitionRequest | None = None

    def ready(self, now_ms: int) -> bool:
        return self.parked is None and self.delayed_until_ms <= now_ms


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """One partition of a Fetch request, as sent."""

    topic: str
    partition: int
    topic_id: uuid.UUID | None
    fetch_offset: int
    leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class PartitionData:
    """One partition of a Fetch response, as the endpoint read it."""

    error_code: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | None = None
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)


@dataclass(frozen=True, slots=True)
class Append:
    records: bytes | memoryview
    leader_hw: int
    leader_log_start: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class ListLeaderOffsets:
    """Ask the leader's log end and start offsets, then call `FetcherState.on_leader_offsets`."""


@dataclass(frozen=True, slots=True)
class Backoff:
    until_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class Park:
    reason: str


@dataclass(frozen=True, slots=True)
class Skip:
    reason: str


Action = Append | TruncateTo | TruncateFullyAndStartAt | ListLeaderOffsets | Backoff | Park | Skip

# error codes a leader answers in the ordinary course of a leadership change: no warning
EXPECTED_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.replica_not_available,
    }
)


def complete_batches(records: bytes | memoryview) -> int:
    """How many leading bytes are whole batches (a response may end in a partial one)."""
    mv = records if isinstance(records, memoryview) else memoryview(records)
    n = len(mv)
    pos = 0
    while n - pos >= LOG_OVERHEAD:
        size = int.from_bytes(mv[pos + 8 : pos + 12], "big", signed=True)
        if size < HEADER_SIZE - LOG_OVERHEAD or pos + LOG_OVERHEAD + size > n:
            break
        pos += LOG_OVERHEAD + size
    return pos


class FetcherState:
    def __init__(self, config: FetcherConfig) -> None:
        self.config = config
        self.partitions: dict[Key, PartitionFetchState] = {}  # in request order
        self.fetching: dict[Key, PartitionRequest] = {}  # the next Fetch's partitions, as built
        self.without_id = 0  # how many of `fetching` have no topic id (a Fetch by name, then)
        self._dirty: set[Key] = set()  # to re-read at the next `refresh`
        self._delayed: list[tuple[int, Key]] = []  # heap of (delayed_until_ms, key); stale ones skipped
        self._changes: dict[Key, PartitionRequest | None] = {}  # since `take_changes`; None: left
        self._next_sweep_ms = 0

    # ------------------------------------------------------------ membership
    def add(self, topic: str, partition: int, topic_id: uuid.UUID | None, leader_epoch: int) -> bool:
        """Follow a partition at `leader_epoch`. The same partition at the same epoch keeps its
        state (delayed, parked); a new epoch starts afresh. True when the state is new."""
        key = (topic, partition)
        st = self.partitions.get(key)
        if st is not None and st.leader_epoch == leader_epoch and st.topic_id == topic_id:
            return False
        self.partitions[key] = PartitionFetchState(topic, partition, topic_id, leader_epoch)
        self._dirty.add(key)
        return True

    def remove(self, key: Key) -> None:
        if self.partitions.pop(key, None) is not None:
            self._dirty.add(key)

    def mark(self, key: Key) -> None:
        """`key`'s position may have moved: re-read it at the next `refresh`."""
        self._dirty.add(key)

    def next_ready_ms(self, now_ms: int) -> int | None:
        """When the first partition delayed past `now_ms` (not parked) is ready again; None if
        none waits."""
        delayed = self._delayed
        while delayed:
            until, key = delayed[0]
            st = self.partitions.get(key)
            if st is None or st.parked is not None or st.delayed_until_ms != until:
                heapq.heappop(delayed)  # removed, parked or delayed again since: not this entry's
            elif until <= now_ms:  # ready already: the next `refresh` takes it
                heapq.heappop(delayed)
                self._dirty.add(key)
            else:
                return until
        return None

    # ------------------------------------------------------------ requests
    def build_fetch(self, now_ms: int, replicas: Mapping[Key, ReplicaLog]) -> list[PartitionRequest]:
        """The partitions of the next Fetch: every one neither delayed nor parked, each from its
        replica's log end offset with its latest epoch (KIP-320's last fetched epoch), in
        request order."""
        self.refresh(now_ms, replicas)
        return self.requests()

    def requests(self) -> list[PartitionRequest]:
        """Every partition of the next Fetch (a full request), in request order."""
        fetching = self.fetching
        if len(fetching) == len(self.partitions):
            return [fetching[key] for key in self.partitions]
        return [r for key in self.partitions if (r := fetching.get(key)) is not None]

    def take_changes(self) -> dict[Key, PartitionRequest | None]:
        """What `refresh` changed in `fetching` since the last call: a partition's new request,
        or None for one no longer fetched."""
        changes, self._changes = self._changes, {}
        return changes

    def refresh(self, now_ms: int, replicas: Mapping[Key, ReplicaLog]) -> bool:
        """Bring `fetching` up to date: re-read the partitions marked since, the delayed ones
        now ready, and every one each `SWEEP_MS`. True when there is anything to fetch."""
        dirty = self._dirty
        if now_ms >= self._next_sweep_ms:
            self._next_sweep_ms = now_ms + SWEEP_MS
            dirty.update(self.partitions)  # (`fetching` is within: `remove` marks what it drops)
        delayed = self._delayed
        while delayed and delayed[0][0] <= now_ms:
            dirty.add(heapq.heappop(delayed)[1])
        if dirty:
            self._dirty = set()
            for key in dirty:
                self._refresh_one(key, now_ms, replicas)
        return bool(self.fetching)

    def _refresh_one(self, key: Key, now_ms: int, replicas: Mapping[Key, ReplicaLog]) -> None:
        st = self.partitions.get(key)
        replica = replicas.get(key)
        r = None
        if st is not None and replica is not None and st.ready(now_ms) and not replica.is_leader:
            try:
                st.fetch_offset, st.last_fetched_epoch, log_start = replica.fetch_position()
            except Exception as e:  # its log directory went offline
                self.on_exception(key, e, now_ms)
            else:
                r = st.request
                if (
                    r is None
                    or r.fetch_offset != st.fetch_offset
                    or r.last_fetched_epoch != st.last_fetched_epoch
                    or r.log_start_offset != log_start
                    or r.leader_epoch != st.leader_epoch
                    or r.topic_id is not st.topic_id  # (a new id is a new PartitionFetchState)
                ):
                    r = st.request = PartitionRequest(
                        st.topic,
                        st.partition,
                        st.topic_id,
                        st.fetch_offset,
                        st.leader_epoch,
                        st.last_fetched_epoch,
                        log_start,
                        self.config.fetch_max_bytes,
                    )
        old = self.fetching.get(key)
        if r is old:
            return
        if old is not None and not _has_id(old):
            self.without_id -= 1
        if r is None:
            del self.fetching[key]
        else:
            self.fetching[key] = r
            if not _has_id(r):
                self.without_id += 1
        self._changes[key] = r

    # ------------------------------------------------------------ responses
    def on_partition(self, req: PartitionRequest, data: PartitionData, replica: ReplicaLog, now_ms: int) -> Action:
        """What to do with one partition of a Fetch response to `req`."""
        stale = self._stale(req, replica)
        if stale is not None:
            return stale
        code = data.error_code
        if code == ErrorCode.none:
            if data.diverging_epoch is not None:
                return self._diverging(req, replica, *data.diverging_epoch, now_ms)
            records = data.records
            if records is not None and len(records):
                records = records[: complete_batches(records)]
            return Append(records or b"", data.high_watermark, data.log_start_offset)
        if code == ErrorCode.offset_out_of_range:
            return ListLeaderOffsets()
        if code == ErrorCode.fenced_leader_epoch:
            return self._park(
                req.key, f"leader {ErrorCode(code).name}: it has a newer leader epoch than {req.leader_epoch}"
            )
        return self._backoff(req.key, now_ms, _name(code))

    def on_leader_offsets(
        self, req: PartitionRequest, leader_end: int, leader_start: int, replica: ReplicaLog, now_ms: int
    ) -> Action:
        """OFFSET_OUT_OF_RANGE, once the leader's log end and start offsets are known (Kafka's
        fetchOffsetAndTruncate)."""
        stale = self._stale(req, replica)
        if stale is not None:
            return stale
        leo = replica.log_end_offset
        if 0 <= leader_end < leo:
            return TruncateTo(leader_end, f"fetch offset {leo} is past the leader's log end {leader_end}")
        if leader_start > leo:
            return TruncateFullyAndStartAt(
                leader_start, f"fetch offset {leo} is below the leader's log start {leader_start}"
            )
        return self._backoff(
            req.key, now_ms, f"out of range at {leo}, within the leader's [{leader_start}, {leader_end}]"
        )

    def on_leader_offsets_error(self, req: PartitionRequest, code: int, now_ms: int) -> Action:
        """The leader refused ListOffsets while handling OFFSET_OUT_OF_RANGE."""
        if code == ErrorCode.fenced_leader_epoch and self._current(req):
            return self._park(req.key, f"ListOffsets: {_name(code)}")
        return self._backoff(req.key, now_ms, f"ListOffsets: {_name(code)}")

    def on_leader_offsets_failed(self, req: PartitionRequest, reason: str, now_ms: int) -> Action:
        """No answer to ListOffsets (connection lost, timeout)."""
        return self._backoff(req.key, now_ms, f"ListOffsets: {reason}")

    def on_exception(self, key: Key, exc: BaseException, now_ms: int) -> Backoff | Park:
        """An exception while handling one partition: that partition alone waits."""
        if isinstance(exc, (CorruptRecordError, InvalidRecordError)):
            # Kafka: go on; a transient state of the leader's log (a truncation, a partial
            # write) is fixed by a later fetch
            return self._backoff(key, now_ms, f"invalid records: {exc}")
        return self._park(key, f"{type(exc).__name__}: {exc}")

    def on_fetch_failed(self, reqs: list[PartitionRequest], now_ms: int, reason: str) -> None:
        """The whole request failed (connection lost, timeout, a top-level error)."""
        for req in reqs:
            if self._current(req):
                self._backoff(req.key, now_ms, reason)

    def truncated(self, req: PartitionRequest, replica: ReplicaLog, now_ms: int) -> Backoff | None:
        """A truncation was applied: fetch on at once, unless it changed nothing (the same log
        end and latest epoch as the request: asking again would get the same answer), then
        back off rather than spin."""
        if (replica.log_end_offset, replica.latest_epoch) == (req.fetch_offset, req.last_fetched_epoch):
            return self._backoff(req.key, now_ms, f"truncating at {req.fetch_offset} changed nothing")
        self.done(req, replica, appended=False)
        return None

    def done(self, req: PartitionRequest, replica: ReplicaLog, *, appended: bool) -> None:
        """An action was applied: fetch on from where the replica is now; one that got
        records goes to the end of the request order."""
        st = self.partitions.get(req.key)
        if st is None or st.leader_epoch != req.leader_epoch:
            return
        st.fetch_offset = replica.log_end_offset
        st.last_fetched_epoch = replica.latest_epoch
        st.last_error = None
        self._dirty.add(req.key)
        if appended:
            self.partitions[req.key] = self.partitions.pop(req.key)

    # ------------------------------------------------------------ helpers
    def _current(self, req: PartitionRequest) -> bool:
        st = self.partitions.get(req.key)
        return st is not None and st.leader_epoch == req.leader_epoch and st.parked is None

    def _stale(self, req: PartitionRequest, replica: ReplicaLog) -> Skip | None:
        st = self.partitions.get(req.key)
        if st is None or st.leader_epoch != req.leader_epoch or st.parked is not None:
            return Skip("no longer fetched at that epoch")
        if st.fetch_offset != req.fetch_offset or replica.log_end_offset != req.fetch_offset:
            return Skip("the log moved since the request")
        return None

    def _diverging(self, req: PartitionRequest, replica: ReplicaLog, epoch: int, end: int, now_ms: int) -> Action:
        """Kafka's getOffsetTruncationState for a leader's (epoch, end offset)."""
        leo = replica.log_end_offset
        if end < 0:
            return self._backoff(req.key, now_ms, "the leader answered an undefined diverging epoch")
        if epoch < 0:
            return TruncateTo(min(end, leo), f"diverging at {end} (no epoch)")
        ours_epoch, ours_end = replica.last_offset_for_leader_epoch(epoch)
        if ours_epoch < 0 or ours_end < 0:  # we track no epoch that old: the leader's offset
            return TruncateTo(min(end, leo), f"diverging at epoch {epoch} end {end}, below our epochs")
        if ours_epoch != epoch:  # we never had its epoch: to the end of ours below it, then ask again
            return TruncateTo(min(ours_end, leo), f"diverging at epoch {epoch} end {end}; ours ends {ours_end}")
        return TruncateTo(min(ours_end, end, leo), f"diverging at epoch {epoch} end {end}")

    def _backoff(self, key: Key, now_ms: int, reason: str) -> Backoff:
        until = now_ms + self.config.backoff_ms
        st = self.partitions.get(key)
        if st is not None:
            if until > st.delayed_until_ms:
                st.delayed_until_ms = until
                heapq.heappush(self._delayed, (until, key))
            st.last_error = reason
            self._dirty.add(key)
        return Backoff(until, reason)

    def _park(self, key: Key, reason: str) -> Park:
        st = self.partitions.get(key)
        if st is not None:
            st.parked = st.last_error = reason
            self._dirty.add(key)
        return Park(reason)


def _has_id(r: PartitionRequest) -> bool:
    # (`.int`, not `!= ZERO_UUID`: uuid.UUID's __eq__ is Python)
    return r.topic_id is not None and bool(r.topic_id.int)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"
