"""Fetch (key 1), v4-18.

Reads each requested partition from its fetch offset up to the high watermark
(followers: the log end), within the partition's and the response's byte limits,
whole batches only; the first partition with data returns at least one batch
even if larger than the limits, so consumers always progress. When fewer than
`min_bytes` are available and `max_wait_ms` > 0, the request waits in the fetch
purgatory, completed by appends to its partitions or by the timeout (no polling).
Record bytes go to the socket with sendfile (see protocol/fetch_codec.py).
Fetch sessions (KIP-227) are in broker/fetch_session.py; v13+ name topics by id.
Errors per partition: OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION,
UNKNOWN_TOPIC_ID, KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import uuid

from odradek.broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, CachedPartition, FetchSessionCache
from odradek.broker.registry import RawResponse, RequestContext, handles, ms
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch_codec import PartitionResult, TopicResult, encode_fetch_response

ZERO_UUID = uuid.UUID(int=0)


def _sessions(broker) -> FetchSessionCache:
    cache = getattr(broker, "fetch_sessions", None)
    if cache is None:
        cache = broker.fetch_sessions = FetchSessionCache(broker.config["max.incremental.fetch.session.cache.slots"])
    return cache


@handles(1, 4, 18)
async def handle(ctx: RequestContext, req) -> object:
    broker = ctx.broker
    v = ctx.api_version
    snap = broker.metadata.snapshot
    replica_state = getattr(req, "replica_state", None)
    replica_id = replica_state.replica_id if replica_state is not None else getattr(req, "replica_id", -1)
    is_follower = replica_id >= 0

    def topic_name(key) -> str | None:
        """v13+ name topics by id; older versions by name (unknown names fail in the read)."""
        if v >= 13:
            info = snap.topic_by_id(key)
            return info.name if info else None
        return key

    requested: list[tuple[object, int, CachedPartition]] = []  # (topic key, partition, cached state)
    for t in req.topics:
        key = t.topic_id if v >= 13 else t.topic
        for p in t.partitions:
            requested.append((key, p.partition, CachedPartition(p.fetch_offset, p.partition_max_bytes)))

    # Fetch session handling.
    session_id = getattr(req, "session_id", 0)
    epoch = getattr(req, "session_epoch", FINAL_EPOCH)
    cache = _sessions(broker)
    session = None
    incremental = False
    if session_id and epoch in (FINAL_EPOCH, INITIAL_EPOCH):
        cache.remove(session_id)
    if session_id and epoch not in (FINAL_EPOCH, INITIAL_EPOCH):
        session, error = cache.lookup(session_id, epoch)
        if session is None:
            chunks, size = encode_fetch_response(v, [], error_code=error, session_id=0)
            return RawResponse(chunks, size)
        incremental = True
        for key, part, cp in requested:
            old = session.partitions.get((key, part))
            if old is None:
                session.partitions[(key, part)] = cp
            else:
                old.fetch_offset, old.max_bytes = cp.fetch_offset, cp.max_bytes
        for ft in getattr(req, "forgotten_topics_data", ()) or ():
            fkey = ft.topic_id if v >= 13 else ft.topic
            for part in ft.partitions:
                session.partitions.pop((fkey, part), None)
        session.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
    elif epoch == INITIAL_EPOCH and v >= 7:
        session = cache.new_session()
        if session is not None:
            for key, part, cp in requested:
                session.partitions[(key, part)] = cp

    pairs = session.partitions.items() if session is not None else (((key, part), cp) for key, part, cp in requested)
    targets = [(key, topic_name(key), part, cp) for (key, part), cp in pairs]

    read_committed = getattr(req, "isolation_level", 0) == 1
    max_bytes = getattr(req, "max_bytes", 0x7FFFFFFF)
    max_bytes = min(max_bytes if max_bytes > 0 else 0x7FFFFFFF, broker.config["fetch.max.bytes"])
    min_bytes = req.min_bytes
    rm = broker.replica_manager

    def read_all() -> tuple[list[tuple[object, str | None, int, CachedPartition, PartitionResult, object]], int, bool]:
        out = []
        total = 0
        errors = False
        for key, name, part, cp in targets:
            pr = PartitionResult(part)
            if name is None:
                pr.error_code = ErrorCode.unknown_topic_id if v >= 13 else ErrorCode.unknown_topic_or_partition
                errors = True
            else:
                budget = min(cp.max_bytes, max_bytes - total)
                r = rm.read(
                    name,
                    part,
                    cp.fetch_offset,
                    max(budget, 0),
                    min_one=total == 0,
                    replica=is_follower,
                    committed=read_committed,
                )
                pr.error_code = r.error_code
                pr.high_watermark = r.high_watermark
                pr.last_stable_offset = r.last_stable_offset
                pr.log_start_offset = r.log_start_offset
                if r.error_code:
                    errors = True
                elif r.regions:
                    pr.records = r.regions
                    total += r.size
            out.append((key, name, part, cp, pr, r if pr.records else None))
        return out, total, errors

    results, total, errors = read_all()
    wait_ms = ms(req.max_wait)
    if total < min_bytes and wait_ms > 0 and not errors and targets:
        keys = [(name, part) for _k, name, part, _cp in targets if name is not None]
        op = rm.fetch_purgatory.watch(keys, wait_ms / 1000.0, target=min_bytes - total)
        await op.wait()
        results, total, errors = read_all()

    by_topic: dict[object, TopicResult] = {}
    for key, name, _part, cp, pr, _r in results:
        if (
            incremental
            and not pr.records
            and not pr.error_code
            and not cp.changed(pr.high_watermark, pr.last_stable_offset, pr.log_start_offset)
        ):
            continue
        if not incremental:
            cp.changed(pr.high_watermark, pr.last_stable_offset, pr.log_start_offset)
        tr = by_topic.get(key)
        if tr is None:
            tr = by_topic[key] = TopicResult(name or "", key if v >= 13 else ZERO_UUID, [])
        tr.partitions.append(pr)
    metrics = getattr(broker, "metrics", None)
    if metrics is not None and total:
        # records out from offsets: no batch is decoded (docs/metrics.md)
        out: dict[str, list[int]] = {}
        for _key, name, _part, _cp, pr, r in results:
            if r is not None:
                acc = out.setdefault(name, [0, 0])
                acc[0] += pr.records_size
                acc[1] += r.offsets_returned
        for name, (nbytes, nrecords) in out.items():
            metrics.bytes_out(name, nbytes, nrecords)
    chunks, size = encode_fetch_response(
        v, list(by_topic.values()), session_id=session.id if session is not None else 0
    )
    return RawResponse(chunks, size)
