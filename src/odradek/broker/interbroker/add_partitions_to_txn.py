"""A partition leader's KIP-890 verification request to a transaction coordinator (Kafka's
AddPartitionsToTxnManager).

AddPartitionsToTxn v4 with `verify_only`, sent on the channels' `txn-verification`
connection to the broker that leads the transactional id's `__transaction_state` partition:
are these partitions in the producer's ongoing transaction? The answer is one error code per
partition (0: yes). A coordinator that cannot be reached (or answers for the whole request)
gives every partition the same code: NETWORK_EXCEPTION, or the top-level error.
broker/txn_verification.py decides what to verify and how Produce answers a refusal.

Verification has a connection of its own: it runs on the producer's path, and must not wait
behind markers (which wait for the in-sync replicas) on the `txn-markers` connection. Unlike
Kafka's manager, requests are not batched per coordinator across Produce requests: each
Produce that needs a verification sends one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from odradek.broker.interbroker.channels import NodeChannels, Purpose
from odradek.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("odradek.broker.txn_verification")

ADD_PARTITIONS_TO_TXN = 24
VERIFY_VERSION = 4  # the first version brokers send (batched by transaction, verify_only)


class AddPartitionsToTxnManager:
    def __init__(self, channels: NodeChannels) -> None:
        self.channels = channels

    async def verify(
        self, coordinator: int, transactional_id: str, producer_id: int, epoch: int, tps: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """The coordinator's error code for each partition (0: in the ongoing transaction)."""
        by_topic: dict[str, list[int]] = {}
        for topic, p in tps:
            by_topic.setdefault(topic, []).append(p)
        request = {
            "transactions": [
                {
                    "transactional_id": transactional_id,
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "verify_only": True,
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                }
            ]
        }
        try:
            resp = await self.channels.request(
                coordinator, Purpose.TXN_VERIFICATION, ADD_PARTITIONS_TO_TXN, request, version=VERIFY_VERSION
            )
        except (KafkaError, OSError) as e:  # the coordinator's broker is unreachable: the producer retries
            log.info("verifying %s with broker %d failed: %s", transactional_id, coordinator, e)
            return dict.fromkeys(tps, int(ErrorCode.network_exception))
        if resp.error_code:
            return dict.fromkeys(tps, int(resp.error_code))
        out: dict[tuple[str, int], int] = {}
        for result in resp.results_by_transaction:
            for t in result.topic_results:
                for pr in t.results_by_partition:
                    out[(t.name, pr.partition_index)] = int(pr.partition_error_code)
        return out
