"""DescribeLogDirs (key 35), v1-4: per log directory, the partitions it holds
with their sizes, and (v4) the directory's total and usable bytes. An offline
directory is reported with KAFKA_STORAGE_ERROR."""

from __future__ import annotations

import os

from odradek.broker.registry import RequestContext, handles
from odradek.protocol.errors import ErrorCode


@handles(35, 1, 4)
async def handle(ctx: RequestContext, req) -> object:
    broker = ctx.broker
    lm = broker.log_manager
    wanted = None if req.topics is None else {t.topic: set(t.partitions) for t in req.topics}
    results = []
    for d in broker.config["log.dirs"]:
        offline = d in lm.offline_dirs
        by_topic: dict[str, list] = {}
        if not offline:
            for lg in lm.all_logs():
                if os.path.dirname(os.path.normpath(lg.dir)) != os.path.normpath(d):
                    continue
                if wanted is not None and (lg.topic not in wanted or lg.partition not in wanted[lg.topic]):
                    continue
                by_topic.setdefault(lg.topic, []).append(
                    ctx.nested(
                        "DescribeLogDirsPartition",
                        partition_index=lg.partition,
                        partition_size=lg.size_bytes,
                        offset_lag=0,
                        is_future_key=False,
                    )
                )
        total = usable = -1
        try:
            st = os.statvfs(d)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            pass
        topics = tuple(
            ctx.nested("DescribeLogDirsTopic", name=name, partitions=tuple(parts))
            for name, parts in sorted(by_topic.items())
        )
        results.append(
            ctx.nested(
                "DescribeLogDirsResult",
                error_code=ErrorCode.kafka_storage_error if offline else 0,
                log_dir=os.path.abspath(d),
                topics=topics,
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return ctx.respond(throttle_time=0, error_code=0, results=tuple(results))
