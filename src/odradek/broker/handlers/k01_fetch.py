"""Fetch (key 1), v4-18.

Reads each requested partition from its fetch offset up to what the reader may see (the
high watermark; under read_committed the last stable offset; a follower replica, named by
`replica_id`: the log end), within the partition's and the response's byte limits, whole
batches only; the first partition with data returns at least one batch even if larger
than the limits, so consumers always progress. A current leader epoch (v9+) other than
the partition's is fenced (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH). When fewer than
`min_bytes` are visible and `max_wait_ms` > 0, the request waits in the fetch purgatory,
woken when a partition's high watermark advances (not on append) or by the timeout (no
polling). Record bytes go to the socket with sendfile (see protocol/fetch_codec.py, the
codec of every version). Under read_committed (isolation_level 1) each partition read
answers its aborted transactions overlapping the batches returned (producer id, first
offset; an empty list when none, null under read_uncommitted and with an error, as Kafka);
every answer carries the last stable offset. Fetch sessions (KIP-227) are in broker/fetch_session.py (in
an incremental one a partition that returned records moves to the end of the session's order, as
Kafka's); v13+ name topics by id. Errors per partition: OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION,
UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, the fencing errors;
TOPIC_AUTHORIZATION_FAILED without READ on the topic (a follower: without CLUSTER_ACTION on the
cluster, for every partition), as Kafka's KafkaApis.

A follower's fetch (`replica_id`, from v15 in `replica_state` with its broker epoch) reads
through `Partition.fetch_records`: a diverging epoch (KIP-320) answers at once instead of
records; a replica that is not one of the partition's gets UNKNOWN_LEADER_EPOCH (with a
leader epoch) or NOT_LEADER_OR_FOLLOWER, a broker epoch older than the one known for it
NOT_LEADER_OR_FOLLOWER; its position counts only once the read succeeded. Followers' fetches
wait for appends (their own purgatory), not for the high watermark their fetches move.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from odradek.broker.fetch_session import FINAL_EPOCH, CachedPartition, PartitionRead, read_partitions
from odradek.broker.partition import Isolation
from odradek.broker.quotas.manager import user_of
from odradek.broker.registry import RequestContext, VersionCodec, handles, ms
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.constants import ZERO_UUID
from odradek.protocol.fetch_codec import TopicResult, encode_fetch_response


@dataclass(slots=True)
class FetchResponse:
    topics: list[TopicResult] = field(default_factory=list)
    error_code: int = 0
    session_id: int = 0
    throttle_ms: int = 0  # a client quota's (broker/quotas/)


def _encode(version: int, r: FetchResponse) -> tuple[list[Any], int]:
    return encode_fetch_response(
        version, r.topics, throttle_ms=r.throttle_ms, error_code=r.error_code, session_id=r.session_id
    )


@handles(1, 4, 18, codecs={range(4, 19): VersionCodec(encode=_encode)})
async def handle(ctx: RequestContext, req) -> object:
    s = ctx.services
    v = ctx.api_version
    snap = s.snapshot
    replica_state = getattr(req, "replica_state", None)
    replica_id = replica_state.replica_id if replica_state is not None else getattr(req, "replica_id", -1)
    replica_epoch = replica_state.replica_epoch if replica_state is not None else -1  # v15+: a broker epoch
    isolation = Isolation.TXN_COMMITTED if getattr(req, "isolation_level", 0) == 1 else Isolation.HIGH_WATERMARK

    # a partition's key: v13+ name topics by id (keyed by the id's integer, see CachedPartition),
    # older versions by name (unknown names fail in the read)
    requested: list[tuple[object, int, CachedPartition]] = []  # (topic key, partition, cached state)
    for t in req.topics:
        topic_id = t.topic_id if v >= 13 else None
        key = topic_id.int if topic_id is not None else t.topic
        for p in t.partitions:
            epoch = getattr(p, "current_leader_epoch", -1)
            cp = CachedPartition(p.fetch_offset, p.partition_max_bytes, epoch, getattr(p, "last_fetched_epoch", -1))
            cp.topic_id = topic_id
            requested.append((key, p.partition, cp))
    forgotten = [
        (ft.topic_id.int if v >= 13 else ft.topic, part)
        for ft in getattr(req, "forgotten_topics_data", ()) or ()
        for part in ft.partitions
    ]
    session, incremental, error = s.fetch_sessions.resolve(
        getattr(req, "session_id", 0),
        getattr(req, "session_epoch", FINAL_EPOCH),
        requested,
        forgotten,
        sessions_allowed=v >= 7,
    )
    if error:
        return FetchResponse(error_code=error)
    pairs = session.partitions.items() if session is not None else (((k, p), cp) for k, p, cp in requested)

    def named(key, cp: CachedPartition) -> str | None:
        if cp.topic_id is not None:
            info = snap.topic_by_id(cp.topic_id)
            cp.name = info.name if info else None
        else:
            cp.name = key
        cp.named_in = snap
        return cp.name

    # in a session each partition's topic name is looked up once per metadata snapshot
    targets = [(key, cp.name if cp.named_in is snap else named(key, cp), part, cp) for (key, part), cp in pairs]

    # READ on each topic; a follower's fetch: CLUSTER_ACTION on the cluster, for every partition
    denied: set[str] = set()
    if s.acls is not None:
        names = {name for _k, name, _p, _cp in targets if name is not None}
        if replica_id >= 0:
            denied = set() if ctx.authorized(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) else names
        else:
            denied = names - ctx.authorized_names(AclOperation.READ, ResourceType.TOPIC, names)

    max_bytes = getattr(req, "max_bytes", 0x7FFFFFFF)
    max_bytes = min(max_bytes if max_bytes > 0 else 0x7FFFFFFF, s.config["fetch.max.bytes"])
    min_bytes = req.min_bytes
    # a follower's fetch has no client quota, nor is it charged to the request quota (Kafka
    # answers it exempt from throttling); a consumer's is charged here, below
    quotas = s.client_quotas() if replica_id < 0 else None
    if quotas is None:
        ctx.connection.request_cpu = None
    elif not (quotas.fetch.enabled or quotas.request.enabled):
        quotas = None
    user, client_id = user_of(ctx.connection.principal), ctx.client_id or ""
    if quotas is not None and quotas.fetch.enabled:
        window_max = quotas.fetch.max_value_in_window(user, client_id)  # Kafka's getMaxValueInQuotaWindow
        if window_max is not None:
            max_bytes = min(max_bytes, int(window_max))
            min_bytes = min(min_bytes, max_bytes)
    rm = s.replica_manager
    now_ms = int(time.time() * 1000)

    def read_all(update_fetch_state: bool = True) -> tuple[list[PartitionRead], int, bool]:
        return read_partitions(
            rm,
            targets,
            max_bytes,
            now_ms,
            by_id=v >= 13,
            isolation=isolation,
            replica_id=replica_id,
            replica_epoch=replica_epoch,
            update_fetch_state=update_fetch_state,
            incremental=incremental,
            denied=denied,
        )

    results, total, errors = read_all()
    max_wait = req.max_wait  # kio's timedelta (ms() converts, in a call this path can spare)
    wait_ms = round(max_wait.total_seconds() * 1000) if type(max_wait) is timedelta else ms(max_wait)
    if total < min_bytes and wait_ms > 0 and not errors and targets:
        keys = [(name, part) for _k, name, part, _cp in targets if name is not None]
        purgatory = rm.follower_fetch_purgatory if replica_id >= 0 else rm.fetch_purgatory
        op = purgatory.watch(keys, wait_ms / 1000.0, target=min_bytes - total)
        await op.wait()
        now_ms = int(time.time() * 1000)
        # as Kafka's DelayedFetch: the follower's position was recorded by the first read
        results, total, errors = read_all(update_fetch_state=False)

    if quotas is not None:
        # as Kafka's KafkaApis: the request quota charged with this fetch's processing time and
        # consumer_byte_rate with what this answer returns; throttled by either, the answer is
        # empty and the bytes are taken back (unrecordQuotaSensor, getThrottledResponse), the
        # larger throttle counted by its own quota's sensor
        request_ms = quotas.charge_request(ctx.connection, client_id)
        bandwidth_ms = quotas.fetch.record(user, client_id, total) if quotas.fetch.enabled else 0
        throttle = max(request_ms, bandwidth_ms)
        if throttle:
            if quotas.fetch.enabled:
                quotas.fetch.unrecord(user, client_id, total)
            (quotas.fetch if bandwidth_ms > request_ms else quotas.request).throttled(user, client_id, throttle)
            ctx.connection.throttle_ms = max(ctx.connection.throttle_ms, throttle)
            return FetchResponse(session_id=session.id if session is not None and incremental else 0)

    by_topic: dict[object, TopicResult] = {}
    for key, name, cp, pr, _r in results:
        news = cp.answers(pr)
        if incremental and not news:
            continue
        if incremental and pr.records and session is not None and (key, pr.partition) in session.partitions:
            # as Kafka: a partition that returned records is read last next time, so that with
            # more data than a response holds every partition of the session gets its turn
            session.partitions.move_to_end((key, pr.partition))
        tr = by_topic.get(key)
        if tr is None:
            tr = by_topic[key] = TopicResult(name or "", cp.topic_id if cp.topic_id is not None else ZERO_UUID, [])
        tr.partitions.append(pr)
    if s.metrics is not None and total:
        # records out from offsets: no batch is decoded (docs/metrics.md)
        out: dict[str, list[int]] = {}
        for _key, name, _cp, _pr, r in results:
            if r is not None and name is not None:
                acc = out.setdefault(name, [0, 0])
                acc[0] += r.size  # the bytes of its regions, as the read counted them
                acc[1] += r.offsets_returned
        for name, (nbytes, nrecords) in out.items():
            s.metrics.bytes_out(name, nbytes, nrecords)
    return FetchResponse(list(by_topic.values()), session_id=session.id if session is not None else 0)
