"""The clients of a run: odradek's own producer and consumer, each a node of the simulation.

- idempotent producers, acks=all, each record to a partition it draws (the first one sends
  records without keys: a compacted topic refuses them, and a follower re-checking them would
  stall);
- transactional producers: 1-4 records over the partitions, then commit or abort; a failure
  the client cannot resolve leaves the transaction's outcome "unknown" and the producer is
  replaced (its successor's InitProducerId ends the transaction one way or the other);
- readers, read_committed and read_uncommitted, assigned every partition from the beginning;
- ListOffsets(latest) pollers;
- a consumer group of read_committed members that commit what they consumed, come and go
  (leave, crash) and rebalance, and a poller of its committed offsets (groups.py).
Everything they do goes to the `History`.
"""

from __future__ import annotations

import asyncio
import functools
import random
from dataclasses import dataclass
from typing import Any

from odradek.client.aio import AIOConsumer, AIOProducer
from odradek.client.consumer.subscription import TopicPartition
from odradek.testing.sim.cluster import SimCluster
from odradek.testing.sim.history import History, Produced


@dataclass(frozen=True)
class WorkloadSpec:
    topic: str = "t"
    partitions: int = 3
    idempotent_producers: int = 2
    rate: float = 10.0  # records/s per idempotent producer
    txn_producers: int = 1
    txn_interval: float = 0.6  # s between transactions
    txn_records: tuple[int, int] = (1, 4)
    commit_ratio: float = 0.7
    readers: tuple[bool | None, ...] = (True, False)  # read_committed? (None: drawn from the seed)
    pollers: int = 1
    poll_interval: float = 0.4
    segment_bytes: int | None = None  # the topic's segment.bytes (small: segments roll under the faults)
    group_members: int = 0  # members of the consumer group (groups.py); 0: no group
    group_commit_interval: float = 1.0  # s between a member's commits
    member_life: float = 8.0  # mean s an incarnation of a member lives
    member_crash: float = 0.3  # how often an incarnation ends in a crash (else it leaves)


def client_config(cluster: SimCluster, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "client.id": name,
        "request.timeout.ms": 10000,
        "socket.connection.setup.timeout.ms": 5000,
        "retry.backoff.ms": 100,
        "metadata.max.age.ms": 10000,
        **{k.replace("_", "."): v for k, v in extra.items()},
    }


class Workload:
    def __init__(self, cluster: SimCluster, history: History, spec: WorkloadSpec, seed: int) -> None:
        self.cluster = cluster
        self.h = history
        self.spec = spec
        self.seed = seed
        self.stopping = False
        self.tasks: list[asyncio.Task[None]] = []

    def _rng(self, name: str) -> random.Random:
        return random.Random(f"workload-{self.seed}-{name}")

    def start(self) -> None:
        s = self.spec
        actors: list[tuple[str, Any]] = []
        for i in range(s.idempotent_producers):
            actors.append((f"producer-{i + 1}", functools.partial(self._idempotent, keyed=i > 0)))
        for i in range(s.txn_producers):
            actors.append((f"txn-{i + 1}", self._transactional))
        for i, drawn in enumerate(s.readers):
            committed = drawn if drawn is not None else self._rng(f"reader-{i}").random() < 0.5
            actors.append((f"{'rc' if committed else 'ru'}-reader-{i + 1}", functools.partial(self._reader, committed)))
        for i in range(s.pollers):
            actors.append((f"poller-{i + 1}", self._poller))
        if s.group_members:
            from odradek.testing.sim import groups

            for i in range(s.group_members):
                actors.append((f"member-{i + 1}", functools.partial(groups.member, self)))
            actors.append(("offsets-poller", functools.partial(groups.offsets_poller, self)))
        for name, fn in actors:
            self.tasks.append(self.cluster.spawn(self.cluster.client_node(name), self._guard(name, fn)))

    async def stop(self, timeout: float) -> None:
        """Producers stop sending and wait for what they sent; readers stop."""
        self.stopping = True
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=timeout)

    async def _guard(self, name: str, fn: Any) -> None:
        try:
            await fn(name)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a client bug, or the workload's: it shows in the history
            self.h.event(name, f"stopped by {e!r}")

    def _acked(self, rec: Produced, metadata: Any, error: BaseException | None) -> None:
        self.h.done(rec, metadata.offset if metadata is not None else None, error)

    # ------------------------------------------------------------------ producers
    async def _start_producer(self, name: str, **extra: Any) -> AIOProducer | None:
        p = AIOProducer(
            client_config(
                self.cluster,
                name,
                acks="all",
                enable_idempotence=True,
                linger_ms=5,
                delivery_timeout_ms=60000,
                max_block_ms=20000,
                **extra,
            )
        )
        try:
            await p.start()
            return p
        except Exception as e:
            self.h.event(name, f"producer start failed: {e!r}")
            await self._close(p)
            await asyncio.sleep(1)
            return None

    async def _close(self, p: AIOProducer) -> None:
        try:
            await p.close(5)
        except Exception:  # noqa: BLE001 - closing one that failed
            pass

    async def _idempotent(self, name: str, *, keyed: bool) -> None:
        rng = self._rng(name)
        spec = self.spec
        p = None
        while p is None and not self.stopping:
            p = await self._start_producer(name)
        if p is None:
            return
        seq = 0
        while not self.stopping:
            await asyncio.sleep(rng.expovariate(spec.rate))
            if self.stopping:
                break
            partition = rng.randrange(spec.partitions)
            value = f"{name}:{seq}"
            rec = self.h.sent(name, seq, partition, value)
            seq += 1
            try:
                fut = await p.send(
                    spec.topic, value.encode(), key=value.encode() if keyed else None, partition=partition
                )
            except Exception as e:
                self.h.done(rec, None, e)
                continue
            fut.add_callback(functools.partial(self._acked, rec))
        try:
            await p.flush(60)
        except Exception as e:
            self.h.event(name, f"flush failed: {e!r}")
        await self._close(p)

    async def _transactional(self, name: str) -> None:
        rng = self._rng(name)
        spec = self.spec
        p: AIOProducer | None = None
        number = 0
        while not self.stopping:
            if p is None:
                p = await self._start_producer(name, transactional_id=name, transaction_timeout_ms=15000)
                if p is None:
                    continue
                try:
                    await p.init_transactions(20)
                except Exception as e:
                    self.h.event(name, f"init_transactions failed: {e!r}")
                    await self._close(p)
                    p = None
                    await asyncio.sleep(1)
                    continue
            await asyncio.sleep(rng.expovariate(1 / spec.txn_interval))
            if self.stopping:
                break
            txn = self.h.begin(name, number)
            number += 1
            try:
                p.begin_transaction()
                for i in range(rng.randint(*spec.txn_records)):
                    partition = rng.randrange(spec.partitions)
                    value = f"{name}:{txn.number}:{i}"
                    rec = self.h.sent(name, i, partition, value, txn)
                    fut = await p.send(spec.topic, value.encode(), key=value.encode(), partition=partition)
                    fut.add_callback(functools.partial(self._acked, rec))
                if rng.random() < spec.commit_ratio:
                    txn.commit_tried = True
                    await p.commit_transaction(20)
                    self.h.outcome(txn, "committed")
                else:
                    await p.abort_transaction(20)
                    self.h.outcome(txn, "aborted")
            except Exception as e:
                if not txn.commit_tried:
                    try:
                        await p.abort_transaction(10)
                        self.h.outcome(txn, "aborted", f"after {type(e).__name__}")
                        continue
                    except Exception:  # noqa: BLE001 - then its successor ends it
                        pass
                self.h.outcome(txn, "unknown", f"{type(e).__name__}: a new producer ends it")
                await self._close(p)
                p = None
        if p is not None:
            await self._close(p)

    # ------------------------------------------------------------------ readers
    def _consumer(self, name: str, committed: bool) -> AIOConsumer:
        return AIOConsumer(
            config=client_config(
                self.cluster,
                name,
                isolation_level="read_committed" if committed else "read_uncommitted",
                auto_offset_reset="earliest",
                fetch_max_wait_ms=500,
            )
        )

    async def _reader(self, committed: bool, name: str) -> None:
        c = self._consumer(name, committed)
        await c.start()
        c.assign([TopicPartition(self.spec.topic, p) for p in range(self.spec.partitions)])
        while not self.stopping:
            try:
                records = await c.poll(0.5)
            except Exception as e:
                self.h.event(name, f"poll failed: {e!r}")
                await asyncio.sleep(1)
                continue
            for r in records:
                self.h.read(name, committed, r.partition, r.offset, r.value.decode() if r.value is not None else "")
        await c.close()

    async def _poller(self, name: str) -> None:
        rng = self._rng(name)
        c = self._consumer(name, False)
        await c.start()
        while not self.stopping:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * self.spec.poll_interval)
            partition = rng.randrange(self.spec.partitions)
            tp = TopicPartition(self.spec.topic, partition)
            sent = self.cluster.loop.elapsed
            try:
                answer = await c.fetcher.list_offsets({tp: -1}, 5, partial=True)
            except Exception:  # noqa: BLE001 - no answer is not an answer
                continue
            if tp in answer:
                self.h.end_offset(name, partition, sent, answer[tp][0])
        await c.close()
