"""The admin client's transaction methods (Java's Admin.listTransactions, describeTransactions,
describeProducers, abortTransaction; the calls behind kafka-transactions.sh).

* `list_transactions` asks every broker (each is the coordinator of some transactional ids);
* `describe_transactions` asks each id's coordinator (FindCoordinator key type 1);
* `describe_producers` asks each partition's leader for the producers it keeps state of,
  with the first offset of each one's open transaction;
* `abort_transaction` writes an ABORT marker to one partition with WriteTxnMarkers, as a
  coordinator would: the way to end a hanging transaction (one the partition holds open but
  its coordinator no longer knows), which otherwise holds the partition's last stable offset
  and so every read_committed consumer back. The producer id, epoch and coordinator epoch
  come from `describe_producers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import _wire
from .. import errors as E
from ..cluster import Cluster
from ..consumer.subscription import TopicPartition

WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 61, 65, 66
TRANSACTION_KEY = 1


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, ...
    coordinator_id: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1 when no transaction is open
    topic_partitions: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int  # -1 when the producer has no open transaction here


@dataclass(frozen=True)
class AbortTransactionSpec:
    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


class TransactionAdmin:
    """Mixed into AIOAdmin."""

    cluster: Cluster
    timeout_ms: int

    async def list_transactions(
        self, states: list[str] | None = None, producer_ids: list[int] | None = None, duration_ms: int = -1
    ) -> list[TransactionListing]:
        """Every broker's transactions, filtered by state names, producer ids and (KIP-994) the
        minimum time they have been open, as the broker filters them."""
        await self.cluster.refresh()
        out: list[TransactionListing] = []
        for node in sorted(self.cluster.metadata.brokers):
            conn = await self.cluster.connection(node)
            data = {
                "state_filters": list(states or ()),
                "producer_id_filters": list(producer_ids or ()),
                "duration_filter": duration_ms,
            }
            if duration_ms >= 0 and conn.version(LIST_TRANSACTIONS) < 1:
                raise E.UnsupportedVersionError(f"broker {node}: ListTransactions v1 (duration filter) not supported")
            resp = await self.cluster.retrying(lambda conn=conn, data=data: conn.request(LIST_TRANSACTIONS, data))
            code = int(resp.error_code)
            if code:
                raise E.error_class(code)(f"ListTransactions on broker {node}")
            for t in resp.transaction_states:
                out.append(TransactionListing(t.transactional_id, int(t.producer_id), t.transaction_state, node))
        return sorted(out, key=lambda t: t.transactional_id)

    async def describe_transactions(self, transactional_ids: list[str]) -> dict[str, TransactionDescription]:
        out: dict[str, TransactionDescription] = {}
        for tid in transactional_ids:

            async def attempt(tid=tid):
                node = await self.cluster.find_coordinator(tid, TRANSACTION_KEY)
                resp = await self.cluster.send(node, DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})
                s = resp.transaction_states[0]
                code = int(s.error_code)
                if code:
                    raise E.error_class(code)(f"DescribeTransactions {tid!r}")
                return node, s

            node, s = await self.cluster.retrying(attempt, what="DescribeTransactions")
            out[tid] = TransactionDescription(
                tid,
                node,
                s.transaction_state,
                int(s.producer_id),
                int(s.producer_epoch),
                _wire.ms(s.transaction_timeout),
                _wire.ms(s.transaction_start_time),
                sorted(TopicPartition(t.topic, int(p)) for t in s.topics for p in t.partitions),
            )
        return out

    async def _leaders(self, partitions) -> dict[int, list[TopicPartition]]:
        tps = [TopicPartition(tp[0], int(tp[1])) for tp in partitions]
        self.cluster.add_topics({tp.topic for tp in tps})
        await self.cluster.refresh()
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            leader = self.cluster.leader_for(tp.topic, tp.partition)
            if leader < 0:
                if self.cluster.partitions_for(tp.topic) is None:
                    raise E.UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition}")
                raise E.LeaderNotAvailableError(f"no leader for {tp.topic}-{tp.partition}")
            by_node.setdefault(leader, []).append(tp)
        return by_node

    async def describe_producers(self, partitions) -> dict[TopicPartition, list[ProducerState]]:
        """{tp: the producers its leader keeps state of} for each (topic, partition)."""
        out: dict[TopicPartition, list[ProducerState]] = {}
        for node, tps in (await self._leaders(partitions)).items():
            by: dict[str, list[int]] = {}
            for tp in tps:
                by.setdefault(tp.topic, []).append(tp.partition)
            resp = await self.cluster.send(
                node,
                DESCRIBE_PRODUCERS,
                {"topics": [{"name": t, "partition_indexes": ps} for t, ps in by.items()]},
            )
            for t in resp.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code:
                        raise E.error_class(code)(p.error_message or f"DescribeProducers {t.name}-{p.partition_index}")
                    out[TopicPartition(t.name, int(p.partition_index))] = [
                        ProducerState(
                            int(s.producer_id),
                            int(s.producer_epoch),
                            int(s.last_sequence),
                            int(s.last_timestamp),
                            int(s.coordinator_epoch),
                            int(s.current_txn_start_offset),
                        )
                        for s in p.active_producers
                    ]
        return out

    async def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        """Write an ABORT marker for `spec.producer_id`'s open transaction on one partition
        (WriteTxnMarkers to its leader)."""
        tp = TopicPartition(spec.topic_partition[0], int(spec.topic_partition[1]))
        node = next(iter(await self._leaders([tp])))
        resp = await self.cluster.send(
            node,
            WRITE_TXN_MARKERS,
            {
                "markers": [
                    {
                        "producer_id": spec.producer_id,
                        "producer_epoch": spec.producer_epoch,
                        "transaction_result": False,
                        "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
                        "coordinator_epoch": spec.coordinator_epoch,
                    }
                ]
            },
        )
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code:
                        raise E.error_class(code)(f"abort of producer {spec.producer_id}'s transaction on {tp}")
