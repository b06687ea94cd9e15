"""The consumer group of a run: read_committed members of one group, committing what they consumed.

Each member (`member-1`, ...) lives through incarnations, one client node each
(`member-1.1`, `member-1.2`, ...): an incarnation subscribes to the workload's topic, polls,
commits its positions every `group_commit_interval` seconds and when partitions are revoked
(a rebalance), and after a life drawn from the member's own stream either leaves cleanly (a
last commit, LeaveGroup) or crashes (its process gone: no commit, no LeaveGroup, connections
closed; the coordinator removes it when its session times out). Every start, leave and crash
is a rebalance. The assignor (eager `range` or `cooperative-sticky`, KIP-429) is drawn from
the seed. An offsets poller asks the coordinator for the committed offsets (OffsetFetch,
`require_stable`) every second.

Everything goes to the `History`: what each member was given (`consumed`), each commit and
its outcome, each committed-offsets answer, and which broker answered each group request
(JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch: `h.group_requests`, and the
broker of each commit and committed-offsets answer, which the checker's anomaly lines name);
the checker (checker.py, `check_group`) holds them against the final log.
"""

from __future__ import annotations

import asyncio
import functools
import random
from typing import TYPE_CHECKING, Any

from odradek.client.aio import AIOConsumer
from odradek.client.consumer.subscription import TopicPartition

if TYPE_CHECKING:
    from odradek.testing.sim.workload import Workload

GROUP = "g"


def group_config(w: Workload, name: str, **extra: Any) -> dict[str, Any]:
    from odradek.testing.sim.workload import client_config

    return client_config(
        w.cluster,
        name,
        group_id=GROUP,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=500,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        max_poll_interval_ms=30000,
        **extra,
    )


# the group requests whose answering broker is recorded, by API key (client/consumer/group.py)
GROUP_APIS = {8: "OffsetCommit", 9: "OffsetFetch", 11: "JoinGroup", 12: "Heartbeat", 14: "SyncGroup"}


def _first_error(resp: Any) -> int:
    code = int(getattr(resp, "error_code", 0) or 0)
    if code:
        return code
    for t in getattr(resp, "topics", None) or ():
        for p in getattr(t, "partitions", None) or ():
            if int(getattr(p, "error_code", 0) or 0):
                return int(p.error_code)
    return 0


class GroupRequests:
    """Records, for one client, which broker answered each of its group requests (wraps its
    cluster's `send`): `last[api]`, the broker that last answered `api` without error."""

    def __init__(self, c: AIOConsumer, h: Any, who: str) -> None:
        self.h = h
        self.who = who
        self.last: dict[str, int] = {}
        self._send = c.cluster.send
        c.cluster.send = self.send  # type: ignore[method-assign]

    async def send(self, node_id: int, api_key: int, data: Any, **kwargs: Any) -> Any:
        resp = await self._send(node_id, api_key, data, **kwargs)
        api = GROUP_APIS.get(api_key)
        if api is not None:
            error = _first_error(resp)
            self.h.group_request(self.who, api, node_id, error)
            if not error:
                self.last[api] = node_id
        return resp


class _Revoke:
    """The rebalance listener: commit the positions of what is taken away, first."""

    def __init__(self, member: Member, c: AIOConsumer) -> None:
        self.member = member
        self.c = c

    async def on_partitions_revoked(self, tps: list[TopicPartition]) -> None:
        await self.member.commit(self.c, {tp.partition for tp in tps})


class Member:
    def __init__(self, w: Workload, name: str, assignor: str) -> None:
        self.w = w
        self.h = w.h
        self.name = name  # of the incarnation running now
        self.assignor = assignor
        self.requests: GroupRequests | None = None

    async def commit(self, c: AIOConsumer, only: set[int] | None = None) -> None:
        g = c.group
        if g is None:
            return
        offsets = {tp.partition: om.offset for tp, om in g.positions().items() if only is None or tp.partition in only}
        if not offsets:
            return
        rec = self.h.commit_sent(self.name, offsets)
        topic = self.w.spec.topic
        if self.requests is not None:
            self.requests.last.pop("OffsetCommit", None)
        try:
            await c.commit({TopicPartition(topic, p): o for p, o in offsets.items()}, timeout=10)
        except Exception as e:  # noqa: BLE001 - a failed commit is history, not an error of the run
            self.h.commit_done(rec, e)
        else:
            broker = self.requests.last.get("OffsetCommit", -1) if self.requests is not None else -1
            self.h.commit_done(rec, None, broker)

    async def life(self, seconds: float, crash: bool) -> None:
        """One incarnation: until `seconds` pass (or, if it crashes, until it is killed)."""
        w = self.w
        loop = w.cluster.loop
        c = AIOConsumer(config=group_config(w, self.name, partition_assignment_strategy=self.assignor))
        self.requests = GroupRequests(c, self.h, self.name)
        await c.start()
        c.subscribe([w.spec.topic], listener=_Revoke(self, c))
        end = loop.elapsed + seconds
        next_commit = loop.elapsed + w.spec.group_commit_interval
        try:
            while not w.stopping and (crash or loop.elapsed < end):
                try:
                    records = await c.poll(0.5)
                except Exception as e:  # noqa: BLE001 - shows in the history
                    self.h.event(self.name, f"poll failed: {e!r}")
                    await asyncio.sleep(1)
                    continue
                for r in records:
                    self.h.consumed(self.name, r.partition, r.offset, r.value.decode() if r.value is not None else "")
                if loop.elapsed >= next_commit:
                    next_commit = loop.elapsed + w.spec.group_commit_interval
                    await self.commit(c)
            await self.commit(c)
        finally:
            try:
                await asyncio.wait_for(c.close(autocommit=False), 10)
            except Exception:  # noqa: BLE001 - leaving is best effort
                pass


async def member(w: Workload, name: str) -> None:
    """A member across its incarnations (runs as the supervisor node `name`)."""
    rng = w._rng(name)
    spec = w.spec
    assignor = random.Random(f"workload-{w.seed}-assignor").choice(["range", "cooperative-sticky"])
    cluster = w.cluster
    k = 0
    while not w.stopping:
        k += 1
        life = rng.expovariate(1 / spec.member_life)
        crash = rng.random() < spec.member_crash
        incarnation = f"{name}.{k}"
        node = cluster.client_node(incarnation)
        m = Member(w, incarnation, assignor)
        w.h.event(name, f"{incarnation} starts ({assignor})")
        task = cluster.spawn(node, w._guard(incarnation, functools.partial(_life, m, life, crash)))
        if not crash:
            await asyncio.wait([task])
            continue
        done, _ = await asyncio.wait([task], timeout=life)
        if done:
            continue
        if w.stopping:
            await asyncio.wait([task], timeout=30)
            continue
        w.h.event(name, f"{incarnation} crashes")
        cluster.loop.kill(node)
        cluster.net.kill(node)
        await asyncio.sleep(rng.uniform(0.1, 2.0))


async def _life(m: Member, life: float, crash: bool, _name: str) -> None:
    await m.life(life, crash)


async def offsets_poller(w: Workload, name: str) -> None:
    """OffsetFetch of the group's committed offsets, every second or so."""
    rng = w._rng(name)
    c = AIOConsumer(config=group_config(w, name))
    requests = GroupRequests(c, w.h, name)
    await c.start()
    tps = [TopicPartition(w.spec.topic, p) for p in range(w.spec.partitions)]
    try:
        while not w.stopping:
            await asyncio.sleep(rng.uniform(0.5, 1.5))
            sent = w.cluster.loop.elapsed
            requests.last.pop("OffsetFetch", None)
            try:
                answer = await c.committed(tps, timeout=5)
            except Exception:  # noqa: BLE001 - no answer is not an answer
                continue
            offsets = {tp.partition: om.offset for tp, om in answer.items() if om is not None}
            w.h.committed_answer(name, sent, offsets, requests.last.get("OffsetFetch", -1))
    finally:
        await c.close(autocommit=False)


async def final_committed(w_cluster: Any, h: Any, topic: str, partitions: int) -> None:
    """The group's committed offsets once everything is healed (an answer named `final`)."""
    from odradek.testing.sim.workload import client_config

    c = AIOConsumer(config=client_config(w_cluster, "final-group", group_id=GROUP, enable_auto_commit=False))
    requests = GroupRequests(c, h, "final")
    await c.start()
    try:
        sent = w_cluster.loop.elapsed
        answer = await c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        offsets = {tp.partition: om.offset for tp, om in answer.items() if om is not None}
        h.committed_answer("final", sent, offsets, requests.last.get("OffsetFetch", -1))
    finally:
        await c.close(autocommit=False)
