"""The consumer side of the classic group protocol ("consumer" protocol type).

FindCoordinator → JoinGroup → (leader: assign) → SyncGroup → Heartbeat until a rebalance
→ ... → LeaveGroup on close. Subscriptions and assignments use Kafka's ConsumerProtocol
encoding (kio's ConsumerProtocolSubscription v3 / Assignment v3), so Java consumers can be
members of the same group. Offsets: OffsetFetch on assignment, OffsetCommit (sync, async,
auto every ``auto.commit.interval.ms`` and before revocation).

Everything runs on the consumer's event loop: one background task keeps membership
(join, sync, heartbeat); rebalance listeners are called from it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Any

from .. import _wire
from .. import errors as E
from ..cluster import Cluster
from .assignors import MemberSubscription, make_assignors
from .fetcher import Fetcher
from .subscription import OffsetAndMetadata, SubscriptionState, TopicPartition

log = logging.getLogger(__name__)

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 11, 12, 13, 14

REJOIN_CODES = {22, 25, 27}  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS
COORDINATOR_CODES = {14, 15, 16}  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR


async def _call(listener, name: str, tps, fallback: str | None = None) -> None:
    fn = getattr(listener, name, None) if listener is not None else None
    if fn is None and fallback is not None:  # Java's default onPartitionsLost calls onPartitionsRevoked
        fn = getattr(listener, fallback, None) if listener is not None else None
    if fn is None:
        return
    try:
        r = fn(sorted(tps))
        if inspect.isawaitable(r):
            await r
    except Exception:
        log.exception("rebalance listener %s failed", name)


class GroupCoordinator:
    def __init__(self, cluster: Cluster, subs: SubscriptionState, fetcher: Fetcher, config: dict[str, Any]) -> None:
        self.cluster = cluster
        self.subs = subs
        self.fetcher = fetcher
        self.group_id: str = config["group.id"]
        self.instance_id = config.get("group.instance.id")
        self.session_timeout_ms = int(config["session.timeout.ms"])
        self.rebalance_timeout_ms = int(config["max.poll.interval.ms"])
        self.heartbeat_interval = int(config["heartbeat.interval.ms"]) / 1000
        self.auto_commit = bool(config["enable.auto.commit"])
        self.auto_commit_interval = int(config["auto.commit.interval.ms"]) / 1000
        self.reset_policy = config["auto.offset.reset"]
        self.backoff = int(config["retry.backoff.ms"]) / 1000
        self.assignors = make_assignors(config["partition.assignment.strategy"])
        self.cooperative = all(a.rebalance_protocol == "cooperative" for a in self.assignors)
        self.coordinator: int | None = None
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader = False
        self.need_rejoin = True
        # Java's MemberState.STABLE: joined and assigned; from a JoinGroup until its SyncGroup
        # completes the member is rebalancing, and commits (generationIfStable) are refused
        self.stable = False
        self.joined = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._running = False
        self._last_commit = time.monotonic()
        self._metadata_snapshot: dict[str, int] = {}
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._running = True
        self.cluster.add_listener(self._on_metadata)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self, leave: bool = True) -> None:
        self._running = False
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self.auto_commit and self.generation >= 0:
            try:
                await self.commit(self.positions(), timeout=5)
            except Exception as e:
                log.debug("final auto-commit failed: %r", e)
        if leave and self.member_id and self.coordinator is not None:
            try:
                conn = await self.cluster.connection(self.coordinator)
                # v3+ (batched members) only for static members: librdkafka's mock mishandles it
                version = conn.version(LEAVE_GROUP) if self.instance_id else min(conn.version(LEAVE_GROUP), 2)
                await conn.request(
                    LEAVE_GROUP,
                    {
                        "group_id": self.group_id,
                        "member_id": self.member_id,
                        "members": [{"member_id": self.member_id, "group_instance_id": self.instance_id}],
                    },
                    version=version,
                    timeout=5,
                )
            except Exception as e:
                log.debug("LeaveGroup failed: %r", e)
        self.member_id = ""
        self.generation = -1
        self.stable = False

    def positions(self) -> dict:
        return {
            tp: OffsetAndMetadata(st.position) for tp, st in self.subs.assignment.items() if st.position is not None
        }

    # ------------------------------------------------------------------ membership loop
    async def _run(self) -> None:
        next_hb = 0.0
        while self._running:
            try:
                if self.coordinator is None:
                    await self._find_coordinator()
                if self.need_rejoin:
                    await self._rejoin()
                    next_hb = time.monotonic() + self.heartbeat_interval
                now = time.monotonic()
                if now >= next_hb:
                    await self._heartbeat()
                    next_hb = time.monotonic() + self.heartbeat_interval
                if self.auto_commit and now - self._last_commit >= self.auto_commit_interval:
                    self._last_commit = now
                    try:
                        await self.commit(self.positions())
                    except E.KafkaError as e:
                        log.debug("auto-commit failed: %r", e)
                await asyncio.sleep(min(max(0.0, next_hb - time.monotonic()), 0.1))
            except asyncio.CancelledError:
                raise
            except E.KafkaError as e:
                log.debug("group %s: %r", self.group_id, e)
                if isinstance(e, E.KafkaConnectionError) or getattr(e, "code", None) in COORDINATOR_CODES:
                    self.coordinator = None
                await asyncio.sleep(self.backoff)
            except Exception:
                log.exception("group %s membership loop error", self.group_id)
                await asyncio.sleep(self.backoff)

    async def _find_coordinator(self) -> None:
        self.coordinator = await self.cluster.find_coordinator(self.group_id, 0)

    def _on_metadata(self, md) -> None:
        """Rejoin when the partition count of a subscribed topic changed or a pattern matches new topics."""
        if not self.subs.subscribed or self.generation < 0:
            return
        snap = {
            t: len(ti.partitions)
            for t, ti in md.topics.items()
            if self.subs.matches(t) and not ti.error and not (ti.is_internal and self.subs.pattern)
        }
        if self.subs.pattern is None:
            snap = {t: n for t, n in snap.items() if t in self.subs.topics}
        if snap != self._metadata_snapshot and self._metadata_snapshot is not None and self.generation >= 0:
            if set(snap) - set(self._metadata_snapshot) or any(
                self._metadata_snapshot.get(t) != n for t, n in snap.items()
            ):
                self.need_rejoin = True

    def _subscribed_topics(self) -> list[str]:
        if self.subs.pattern is not None:
            return sorted(
                t for t, ti in self.cluster.metadata.topics.items() if self.subs.matches(t) and not ti.is_internal
            )
        return sorted(self.subs.topics)

    async def _rejoin(self) -> None:
        subs = self.subs
        if subs.pattern is not None:
            self.cluster.all_topics = True
            await self.cluster.refresh()
        else:
            self.cluster.add_topics(subs.topics)
            await self.cluster.refresh()
        topics = self._subscribed_topics()
        owned = sorted(subs.assignment)
        if owned and self.generation < 0:
            # Java's onJoinPrepare: the group dropped this member (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            # its partitions may already be another member's; they are lost, not revoked (nothing
            # committed for them), and the member joins owning none
            await _call(subs.listener, "on_partitions_lost", owned, fallback="on_partitions_revoked")
            subs.assign_from_subscription([])
            owned = []
        if not self.cooperative and owned:
            # eager: give everything up before joining
            if self.auto_commit:
                try:
                    await self.commit(self.positions())
                except E.KafkaError as e:
                    log.debug("commit before rebalance failed: %r", e)
            await _call(subs.listener, "on_partitions_revoked", owned)
            subs.assign_from_subscription([])
            owned = []
        protocols = []
        for a in self.assignors:
            by_topic: dict[str, list[int]] = {}
            for tp in owned:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            meta = _wire.encode_consumer_protocol(
                "subscription",
                3,
                {
                    "topics": topics,
                    "user_data": a.user_data(owned, self.generation),
                    "owned_partitions": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
                    "generation_id": self.generation,
                    "rack_id": None,
                },
            )
            protocols.append({"name": a.name, "metadata": meta})
        self.stable = False
        join = {
            "group_id": self.group_id,
            "session_timeout": self.session_timeout_ms,
            "rebalance_timeout": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocols": protocols,
            "reason": None,
        }
        timeout = self.rebalance_timeout_ms / 1000 + 5
        resp = await self.cluster.send(self.coordinator, JOIN_GROUP, join, timeout=timeout)
        code = int(resp.error_code)
        if code == 79:  # MEMBER_ID_REQUIRED (KIP-394): retry with the id given
            self.member_id = resp.member_id
            join["member_id"] = self.member_id
            resp = await self.cluster.send(self.coordinator, JOIN_GROUP, join, timeout=timeout)
            code = int(resp.error_code)
        if code:
            if code == 25:  # UNKNOWN_MEMBER_ID
                self.member_id = ""
            raise E.error_class(code)(f"JoinGroup {self.group_id}")
        self.member_id = resp.member_id
        self.generation = int(resp.generation_id)
        self.protocol = resp.protocol_name
        self.leader = resp.leader == resp.member_id
        assignments = []
        if self.leader:
            assignments = self._assign(resp.members)
        sresp = await self.cluster.send(
            self.coordinator,
            SYNC_GROUP,
            {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
                "protocol_type": "consumer",
                "protocol_name": self.protocol,
                "assignments": assignments,
            },
            timeout=timeout,
        )
        code = int(sresp.error_code)
        if code:
            if code == 25:
                self.member_id = ""
            raise E.error_class(code)(f"SyncGroup {self.group_id}")
        assigned = []
        if sresp.assignment:
            a = _wire.decode_consumer_protocol("assignment", sresp.assignment)
            for tp in a.assigned_partitions:
                assigned.extend(TopicPartition(tp.topic, int(p)) for p in tp.partitions)
        self._metadata_snapshot = {
            t: len(self.cluster.metadata.topics[t].partitions) for t in topics if t in self.cluster.metadata.topics
        }
        self.need_rejoin = False
        self.stable = True
        await self._apply_assignment(assigned)

    def _assign(self, members) -> list[dict]:
        assignor = next((a for a in self.assignors if a.name == self.protocol), None)
        if assignor is None:
            raise E.InconsistentGroupProtocolError(f"group chose unknown assignor {self.protocol}")
        subs: dict[str, MemberSubscription] = {}
        for m in members:
            s = _wire.decode_consumer_protocol("subscription", m.metadata)
            owned = [(tp.topic, int(p)) for tp in (getattr(s, "owned_partitions", None) or ()) for p in tp.partitions]
            gen = int(getattr(s, "generation_id", -1))
            subs[m.member_id] = MemberSubscription(
                m.member_id, list(s.topics), owned, gen, s.user_data, getattr(m, "group_instance_id", None)
            )
        all_topics = sorted({t for s in subs.values() for t in s.topics})
        md = self.cluster.metadata
        missing = [t for t in all_topics if t not in md.topics]
        if missing:
            self.cluster.add_topics(missing)
            self.cluster.request_update()
        partitions = {t: len(md.topics[t].partitions) for t in all_topics if t in md.topics and md.topics[t].partitions}
        result = assignor.assign(partitions, subs)
        out = []
        for member_id, tps in result.items():
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(tps):
                by_topic.setdefault(t, []).append(p)
            raw = _wire.encode_consumer_protocol(
                "assignment",
                3,
                {
                    "assigned_partitions": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                    "user_data": None,
                },
            )
            out.append({"member_id": member_id, "assignment": raw})
        return out

    async def _apply_assignment(self, assigned: list[TopicPartition]) -> None:
        subs = self.subs
        old = set(subs.assignment)
        new = set(assigned)
        revoked = old - new
        added = new - old
        if revoked:
            if self.auto_commit:
                try:
                    await self.commit({tp: o for tp, o in self.positions().items() if tp in revoked})
                except E.KafkaError as e:
                    log.debug("commit before revocation failed: %r", e)
            await _call(subs.listener, "on_partitions_revoked", revoked)
        subs.assign_from_subscription(sorted(new))
        if added:
            await self._init_positions(added)
        await _call(subs.listener, "on_partitions_assigned", added)
        if revoked and self.cooperative:
            self.need_rejoin = True  # KIP-429: rejoin so revoked partitions can move
        self.fetcher.wakeup()
        self.joined.set()

    async def _init_positions(self, tps) -> None:
        committed = await self.fetch_committed(tps)
        for tp in tps:
            st = self.subs.assignment.get(tp)
            if st is None or st.position is not None:
                continue
            c = committed.get(tp)
            if c is not None and c.offset >= 0:
                st.seek(c.offset)
            elif self.reset_policy in ("earliest", "latest"):
                st.reset_to = self.reset_policy
            else:
                st.error = E.NoOffsetForPartitionError(f"{tp.topic}-{tp.partition}: no committed offset")

    async def _heartbeat(self) -> None:
        if self.generation < 0 or self.coordinator is None:
            return
        resp = await self.cluster.send(
            self.coordinator,
            HEARTBEAT,
            {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
            },
        )
        code = int(resp.error_code)
        if code in REJOIN_CODES:
            if code == 25:
                self.member_id = ""
                self.generation = -1
            self.need_rejoin = True
        elif code in COORDINATOR_CODES:
            self.coordinator = None
        elif code:
            raise E.error_class(code)(f"Heartbeat {self.group_id}")

    # ------------------------------------------------------------------ offsets
    async def _coordinator_node(self) -> int:
        if self.coordinator is None:
            await self._find_coordinator()
        return self.coordinator

    async def commit(self, offsets: dict, timeout: float | None = None) -> None:
        offsets = {
            TopicPartition(*tp): (o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o)))
            for tp, o in offsets.items()
        }
        if not offsets:
            return
        topics: dict[str, list] = {}
        for tp, om in offsets.items():
            topics.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": om.offset,
                    "committed_leader_epoch": om.leader_epoch,
                    "committed_metadata": om.metadata or "",
                }
            )
        if self.subs.subscribed and self.generation < 0:
            # As Java's consumer (generationIfStable): a subscribed member out of the group
            # (told UNKNOWN_MEMBER_ID, or not joined yet) sends nothing. Committed with no
            # generation, as a standalone commit, its old positions would be accepted by an
            # empty group and take the group's offsets back (the simulator's commit-backwards).
            self.need_rejoin = True
            raise E.CommitFailedError("commit failed: this consumer is not part of an active group; it rejoins at poll")
        if self.subs.subscribed and not self.stable:
            # Java's generationIfStable: mid-rebalance the generation just joined is not this
            # member's assignment yet; its old positions committed under it could undo the
            # commits of a partition's new owner
            raise E.RebalanceInProgressError(
                "commit failed: the consumer is in the middle of a rebalance; commit again after it completes (poll)"
            )
        gen = self.generation if self.subs.subscribed else -1
        member = self.member_id if self.subs.subscribed else ""

        async def attempt():
            node = await self._coordinator_node()
            try:
                resp = await self.cluster.send(
                    node,
                    OFFSET_COMMIT,
                    {
                        "group_id": self.group_id,
                        "generation_id_or_member_epoch": gen,
                        "member_id": member,
                        "group_instance_id": self.instance_id,
                        "retention_time": -1,
                        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    },
                )
            except E.KafkaConnectionError:
                self.coordinator = None
                raise
            for t in resp.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code in COORDINATOR_CODES:
                        self.coordinator = None
                    if code in REJOIN_CODES:
                        self.need_rejoin = True
                        if code != 27 and self.generation == gen:
                            # Java's resetGenerationOnResponseError: out of the group, the partitions
                            # are lost at the next join (their positions are not committed later)
                            self.generation = -1
                        raise E.CommitFailedError(f"commit failed: the group rebalanced ({E.error_class(code).name})")
                    if code:
                        raise E.error_class(code)(f"OffsetCommit {t.name}-{p.partition_index}")

        async with self._lock:
            await self.cluster.retrying(attempt, timeout=timeout, what="OffsetCommit")

    async def fetch_committed(self, tps, timeout: float | None = None) -> dict:
        tps = [TopicPartition(*tp) for tp in tps]
        if not tps:
            return {}
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)

        async def attempt():
            node = await self._coordinator_node()
            try:
                resp = await self.cluster.send(
                    node,
                    OFFSET_FETCH,
                    {
                        "group_id": self.group_id,
                        # as Java's consumer (KIP-447): offsets a transaction has pending are not
                        # answered; UNSTABLE_OFFSET_COMMIT (retriable) until it ends
                        "require_stable": True,
                        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                    },
                )
            except E.KafkaConnectionError:
                self.coordinator = None
                raise
            code = int(getattr(resp, "error_code", 0))
            if code:
                if code in COORDINATOR_CODES:
                    self.coordinator = None
                raise E.error_class(code)(f"OffsetFetch {self.group_id}")
            out = {}
            for t in resp.topics:
                for p in t.partitions:
                    pcode = int(p.error_code)
                    if pcode:
                        raise E.error_class(pcode)(f"OffsetFetch {t.name}-{p.partition_index}")
                    off = int(p.committed_offset)
                    out[TopicPartition(t.name, int(p.partition_index))] = (
                        OffsetAndMetadata(off, p.metadata or "", int(getattr(p, "committed_leader_epoch", -1)))
                        if off >= 0
                        else None
                    )
            return out

        return await self.cluster.retrying(attempt, timeout=timeout, what="OffsetFetch")
