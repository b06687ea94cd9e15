"""A follower's requests to its leader: Fetch and ListOffsets (Kafka's RemoteLeaderEndPoint).

The I/O half of a replica fetcher: turns `fetcher_state`'s requests into wire requests on a
connection from the `ConnectionProvider` (channel.py) and the answers back into
`PartitionData` by partition. Fetch is v15 when the leader serves it and every partition has
a topic id (topics by id, and `replica_state` with this broker's epoch, which the leader
checks and records for KIP-903), else v12 (topics by name, `replica_id`); either way with
`last_fetched_epoch` (KIP-320), and in a fetch session (KIP-227, fetch_session_handler.py): after
the first, a request names only the partitions whose position changed, and an answer only the
partitions with news; a partition it does not name has nothing new. ListOffsets asks as a
replica (`replica_id`), so the latest offset is the leader's log end. A failed request raises
(the connection is dropped, the next one opens a new one, and a new session); a partition
the leader refuses in ListOffsets raises `LeaderOffsetError` with its code.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from odradek.broker.replication.channel import ConnectionProvider, HeldConnection
from odradek.broker.replication.fetch_session_handler import SESSION_ERRORS, FetchSessionHandler, SessionFetch
from odradek.broker.replication.fetcher_state import FetcherConfig, FetcherState, Key, PartitionData, PartitionRequest
from odradek.cluster.metadata import BrokerInfo
from odradek.protocol.errors import ErrorCode, KafkaError
from odradek.protocol.fetch_codec import FetchRequestPartition, encode_replica_fetch_request

FETCH, LIST_OFFSETS = 1, 2
FETCH_VERSION = 15  # topic ids (v13), replica_state with the broker epoch (v15)
FETCH_BY_NAME = 12  # the last version naming topics; diverging epochs (KIP-320)
LATEST, EARLIEST = -1, -2


class LeaderOffsetError(KafkaError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class RemoteLeaderEndpoint:
    def __init__(
        self,
        node_id: int,
        leader: BrokerInfo,
        connect: ConnectionProvider,
        purpose: str,
        config: FetcherConfig,
        broker_epoch: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.leader = leader
        self.config = config
        self.broker_epoch = broker_epoch  # this broker's, sent with Fetch v15
        self._channel = HeldConnection(connect, purpose)
        self.session = FetchSessionHandler()

    def moved(self, leader: BrokerInfo) -> None:
        """The leader broker is now reached at another endpoint."""
        self.leader = leader
        self._channel.drop()
        self.session.handle_error()

    def close(self) -> None:
        self._channel.drop()

    async def fetch(self, state: FetcherState) -> dict[Key, PartitionData]:
        """Fetch the partitions `state` fetches now (`refresh`ed: an incremental request takes
        its changes, a full one every request): what the answer says of each it names, whose
        request is the session's (`session.partitions`). Raises when the request fails or the
        leader refuses it (not for the session's own errors: then nothing is answered, and the
        next request, a full one, goes at once)."""
        conn = await self._channel.get(self.leader)
        session = self.session
        try:
            served = conn.api_versions.get(FETCH, (0, FETCH_BY_NAME))[1]
            by_id = served >= 13 and not state.without_id
            version = min(served, FETCH_VERSION if by_id else FETCH_BY_NAME)
            sent = session.build(version, state.take_changes(), state.requests)
            resp = await conn.request(
                FETCH,
                self._fetch_request(sent, version),
                version=version,
                timeout=(self.config.request_timeout_ms + self.config.wait_max_ms) / 1000,
            )
        except BaseException:
            self._channel.drop()
            session.handle_error()
            raise
        names = session.topic_names
        out: dict[Key, PartitionData] = {}
        for t in resp.responses:
            name = names.get(t.topic_id) if version >= 13 else t.topic
            if name is None:
                continue
            for p in t.partitions:
                out[(name, int(p.partition_index))] = PartitionData(
                    int(p.error_code), int(p.high_watermark), int(p.log_start_offset), p.records, p.diverging_epoch
                )
        error = int(resp.error_code)
        usable = session.handle_response(error, int(getattr(resp, "session_id", 0)), out)
        if error and error not in SESSION_ERRORS:
            raise KafkaError(f"Fetch from broker {self.leader.node_id}: {ErrorCode(error).name}")
        return out if usable else {}

    def _fetch_request(self, sent: SessionFetch, version: int) -> bytes:
        """The request body, written by hand (fetch_codec: the bytes kio would write)."""
        topics: dict[str, tuple[uuid.UUID | None, list[FetchRequestPartition]]] = {}
        for p in sent.to_send:
            t = topics.get(p.topic)
            if t is None:
                t = topics[p.topic] = (p.topic_id, [])
            t[1].append(
                (p.partition, p.leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset, p.max_bytes)
            )
        forgotten: dict[tuple[str, uuid.UUID | None], list[int]] = {}
        for p in sent.forgotten:
            forgotten.setdefault((p.topic, p.topic_id), []).append(p.partition)
        config = self.config
        return encode_replica_fetch_request(
            version,
            replica_id=self.node_id,
            replica_epoch=self.broker_epoch() if version >= 15 else -1,
            max_wait_ms=config.wait_max_ms,
            min_bytes=config.min_bytes,
            max_bytes=config.response_max_bytes,
            session_id=sent.session_id,
            session_epoch=sent.epoch,
            topics=[(name, tid, parts) for name, (tid, parts) in topics.items()],
            forgotten=[(name, tid, parts) for (name, tid), parts in forgotten.items()],
        )

    async def list_offset(self, req: PartitionRequest, timestamp: int) -> int:
        """The leader's offset for `timestamp` (LATEST: its log end; EARLIEST: its log start)."""
        conn = await self._channel.get(self.leader)
        data = {
            "replica_id": self.node_id,
            "isolation_level": 0,
            "topics": [
                {
                    "name": req.topic,
                    "partitions": [
                        {
                            "partition_index": req.partition,
                            "current_leader_epoch": req.leader_epoch,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
        }
        try:
            resp = await conn.request(LIST_OFFSETS, data, timeout=self.config.request_timeout_ms / 1000)
        except BaseException:
            self._channel.drop()
            raise
        p = resp.topics[0].partitions[0]
        code = int(p.error_code)
        if code:
            raise LeaderOffsetError(
                code,
                f"ListOffsets {req.topic}-{req.partition} from broker {self.leader.node_id}: {ErrorCode(code).name}",
            )
        return int(p.offset)
