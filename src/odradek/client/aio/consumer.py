"""AIOConsumer: the asyncio consumer (group-managed `subscribe` or manual `assign`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .. import errors as E
from .._records import ConsumerRecord
from ..cluster import Cluster
from ..config import CONSUMER, make_config
from ..consumer.fetcher import EARLIEST, LATEST, Fetcher
from ..consumer.group import GroupCoordinator
from ..consumer.subscription import ConsumerGroupMetadata, OffsetAndMetadata, SubscriptionState, TopicPartition


class AIOConsumer:
    """``c = AIOConsumer({"bootstrap.servers": ..., "group.id": "g"}); await c.start();
    c.subscribe(["t"]); records = await c.poll(1.0)`` or ``async for r in c``."""

    def __init__(self, *topics: str, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if topics and isinstance(topics[0], dict) and config is None:
            config, topics = topics[0], topics[1:]
        self.config = cfg = make_config(CONSUMER, config, kwargs)
        if cfg["auto.offset.reset"] not in ("earliest", "latest", "none"):
            raise ValueError("auto.offset.reset must be earliest, latest or none")
        if cfg["group.id"] is None:
            cfg["enable.auto.commit"] = False
        self.cluster = Cluster(cfg)
        self.subs = SubscriptionState()
        self.fetcher = Fetcher(self.cluster, self.subs, cfg)
        self.group: GroupCoordinator | None = None
        if cfg["group.id"] is not None:
            self.group = GroupCoordinator(self.cluster, self.subs, self.fetcher, cfg)
        self.max_poll_records = int(cfg["max.poll.records"])
        self._kdes = cfg["key.deserializer"]
        self._vdes = cfg["value.deserializer"]
        self._started = False
        self._group_started = False
        self._closed = False
        self._initial_topics = list(topics)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> AIOConsumer:
        await self.cluster.start()
        await self.fetcher.start()
        self._started = True
        if self._initial_topics:
            self.subscribe(self._initial_topics)
        elif self.subs.subscribed:
            self._start_group()
        return self

    def _start_group(self) -> None:
        if not self._group_started:
            self._group_started = True
            asyncio.get_running_loop().create_task(self.group.start())

    async def __aenter__(self) -> AIOConsumer:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self, autocommit: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        await self.fetcher.stop()
        if self.group is not None and self._group_started:
            if not autocommit:
                self.group.auto_commit = False
            await self.group.close()
        await self.cluster.close()

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topics=None, pattern=None, listener=None, *, exclude=None) -> None:
        """Topics by name, or by regex `pattern` (a whitelist) with an optional `exclude` regex
        (a blacklist). Needs ``group.id``; `listener` may define on_partitions_revoked /
        on_partitions_assigned (plain or async functions of a list of TopicPartition)."""
        if self.group is None:
            raise E.IllegalStateError("subscribe() needs group.id; use assign() without a group")
        if isinstance(topics, str):
            topics = [topics]
        if topics is None and pattern is None:
            raise ValueError("subscribe() needs topics or pattern")
        self.subs.subscribe(topics, pattern, exclude, listener)
        if topics:
            self.cluster.add_topics(topics)
        self.group.need_rejoin = True
        if self._started:
            self._start_group()

    def subscription(self) -> set[str]:
        return set(self.subs.topics)

    def unsubscribe(self) -> None:
        self.subs.unsubscribe()
        if self.group is not None:
            self.group.need_rejoin = True

    def assign(self, partitions) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        self.subs.assign_manual(tps)
        self.cluster.add_topics({tp.topic for tp in tps})
        self.cluster.request_update()
        self._init_manual(tps)
        self.fetcher.wakeup()

    def _init_manual(self, tps) -> None:
        async def init():
            need = [
                tp
                for tp in tps
                if self.subs.assignment.get(tp) is not None
                and self.subs.assignment[tp].position is None
                and self.subs.assignment[tp].reset_to is None
            ]
            committed = {}
            if self.group is not None and need:
                try:
                    committed = await self.group.fetch_committed(need)
                except E.KafkaError:
                    committed = {}
            policy = self.config["auto.offset.reset"]
            for tp in need:
                st = self.subs.assignment.get(tp)
                if st is None or st.position is not None or st.reset_to is not None:
                    continue
                c = committed.get(tp)
                if c is not None:
                    st.seek(c.offset)
                elif policy == "none":
                    st.error = E.NoOffsetForPartitionError(f"{tp.topic}-{tp.partition}: no committed offset")
                else:
                    st.reset_to = policy
            self.fetcher.wakeup()

        self._pending_init = asyncio.get_running_loop().create_task(init())

    def assignment(self) -> set[TopicPartition]:
        return set(self.subs.assignment)

    # ------------------------------------------------------------------ positions
    def seek(self, partition, offset: int) -> None:
        self.subs.state(partition).seek(int(offset))
        self.fetcher.wakeup()

    def seek_to_beginning(self, *partitions) -> None:
        for tp in partitions or list(self.subs.assignment):
            st = self.subs.state(tp)
            st.reset_to = "earliest"
            st.clear_buffer()
        self.fetcher.wakeup()

    def seek_to_end(self, *partitions) -> None:
        for tp in partitions or list(self.subs.assignment):
            st = self.subs.state(tp)
            st.reset_to = "latest"
            st.clear_buffer()
        self.fetcher.wakeup()

    async def position(self, partition, timeout: float = 30) -> int:
        st = self.subs.state(partition)
        deadline = time.monotonic() + timeout
        while st.position is None or st.reset_to is not None:
            if st.error is not None:
                raise st.error
            if time.monotonic() > deadline:
                raise E.KafkaTimeoutError(f"position of {partition} unknown after {timeout}s")
            self.fetcher.wakeup()
            await asyncio.sleep(0.01)
        return st.position

    async def committed(self, partitions, timeout: float | None = None) -> dict:
        if self.group is None:
            raise E.IllegalStateError("committed() needs group.id")
        single = isinstance(partitions, tuple) and len(partitions) == 2 and isinstance(partitions[1], int)
        tps = [partitions] if single else list(partitions)
        res = await self.group.fetch_committed(tps, timeout)
        if single:
            return res.get(TopicPartition(*partitions))
        return res

    async def beginning_offsets(self, partitions, timeout: float | None = None) -> dict:
        r = await self.fetcher.list_offsets({TopicPartition(*tp): EARLIEST for tp in partitions}, timeout)
        return {tp: off for tp, (off, _ts) in r.items()}

    async def end_offsets(self, partitions, timeout: float | None = None) -> dict:
        r = await self.fetcher.list_offsets({TopicPartition(*tp): LATEST for tp in partitions}, timeout)
        return {tp: off for tp, (off, _ts) in r.items()}

    async def offsets_for_times(self, timestamps: dict, timeout: float | None = None) -> dict:
        return await self.fetcher.offsets_for_times(timestamps, timeout)

    async def partitions_for_topic(self, topic: str) -> set[int]:
        parts = await self.cluster.wait_for_topic(topic, 30)
        return set(parts)

    async def topics(self) -> set[str]:
        resp = await self.cluster.metadata_request(None)
        return {t.name for t in resp.topics if t.name}

    def pause(self, *partitions) -> None:
        for tp in partitions:
            self.subs.state(tp).paused = True

    def resume(self, *partitions) -> None:
        for tp in partitions:
            self.subs.state(tp).paused = False
        self.fetcher.wakeup()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self.subs.assignment.items() if st.paused}

    # ------------------------------------------------------------------ commits
    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group, generation and member id, for a transactional producer's
        `send_offsets_to_transaction` (the coordinator refuses offsets of a past generation)."""
        if self.group is None:
            raise E.IllegalStateError("group_metadata() needs group.id")
        g = self.group
        return ConsumerGroupMetadata(g.group_id, g.generation, g.member_id, g.instance_id)

    async def commit(self, offsets: dict | None = None, timeout: float | None = None) -> None:
        """Commit `offsets` ({tp: offset or OffsetAndMetadata}) or every current position."""
        if self.group is None:
            raise E.IllegalStateError("commit() needs group.id")
        if offsets is None:
            offsets = self.group.positions()
        await self.group.commit(offsets, timeout)

    def commit_async(self, offsets: dict | None = None, callback=None) -> asyncio.Task:
        async def run():
            try:
                await self.commit(offsets)
            except Exception as e:
                if callback is not None:
                    callback(offsets, e)
                    return
                raise
            if callback is not None:
                callback(offsets, None)

        return asyncio.get_running_loop().create_task(run())

    # ------------------------------------------------------------------ polling
    def _check_pollable(self, columnar: bool) -> None:
        if self._closed:
            raise E.IllegalStateError("consumer closed")
        if not self.subs.assignment and not self.subs.subscribed:
            raise E.IllegalStateError("not subscribed to any topic or assigned any partition")
        self.fetcher.set_columnar(columnar)

    async def _wait_for_data(self, take, timeout: float) -> list:
        """`take()` until it returns something or `timeout` seconds pass, waking the fetcher."""
        deadline = time.monotonic() + timeout
        ready = self.fetcher.data_ready
        while True:
            got = take()
            if got:
                return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            ready.clear()
            if self.fetcher.has_buffered():
                continue
            self.fetcher.wakeup()
            try:
                await asyncio.wait_for(ready.wait(), remaining)
            except TimeoutError:
                pass

    def poll_buffered(self, max_records: int | None = None) -> list[ConsumerRecord]:
        """What `poll` returns at once: buffered records (maybe none), without waiting."""
        self._check_pollable(False)
        recs = self.fetcher.take(max_records or self.max_poll_records)
        return self._deserialize(recs) if recs else recs

    async def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to `max_records` (max.poll.records) records, waiting up to `timeout` seconds for some."""
        recs = self.poll_buffered(max_records)
        if recs:
            return recs
        max_records = max_records or self.max_poll_records
        recs = await self._wait_for_data(lambda: self.fetcher.take(max_records), timeout)
        return self._deserialize(recs) if recs else recs

    async def poll_columns(self, timeout: float = 1.0) -> list:
        """Like `poll`, but records come as `RecordColumns` (column buffers for Arrow, no
        Python object per record, headers not kept), one per fetched partition response.
        Deserializers are not applied. Switching between `poll` and `poll_columns` drops
        what was buffered (it is fetched again)."""
        self._check_pollable(True)
        return await self._wait_for_data(self.fetcher.take_columns, timeout)

    async def getone(self, timeout: float | None = None) -> ConsumerRecord:
        while True:
            recs = await self.poll(timeout if timeout is not None else 3600, max_records=1)
            if recs:
                return recs[0]
            if timeout is not None:
                raise E.KafkaTimeoutError("no record")

    def _deserialize(self, recs):
        kd, vd = self._kdes, self._vdes
        if kd is None and vd is None:
            return recs
        return [
            r._replace(
                key=kd(r.key) if kd and r.key is not None else r.key,
                value=vd(r.value) if vd and r.value is not None else r.value,
            )
            for r in recs
        ]

    def __aiter__(self):
        return self._iter()

    async def _iter(self):
        while not self._closed:
            for r in await self.poll(1.0):
                yield r

    # convenience for callers that prefer committing what they processed
    @staticmethod
    def offset_after(record: ConsumerRecord) -> OffsetAndMetadata:
        return OffsetAndMetadata(record.offset + 1)
