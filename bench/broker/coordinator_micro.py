"""Per-request broker CPU of the coordinators, in process: the group and transaction APIs without
a network, each request through its real handler, the coordinator and the log (single node: an
append is committed at once), and its response encoded.

    .venv/bin/python bench/broker/coordinator_micro.py [-n 2000] [--only SUBSTRING]
    PYTHONPATH=/path/to/other/src .venv/bin/python /path/to/other/bench/broker/coordinator_micro.py

Steps (one group of one member, one topic-partition, one transactional id):
  * OffsetCommit v9 of one partition by the group's member (one record appended);
  * TxnOffsetCommit v3 of one partition in an open transaction (one transactional batch);
  * OffsetFetch v8 of one partition;
  * Heartbeat v4 of the member;
  * JoinGroup v9 of the member again, same protocols: the first one rebalances (the member leads),
    the others are retries of a join of the generation being completed (answered at once);
  * a transaction: AddPartitionsToTxn v3 of one partition, EndTxn v3 commit, until CompleteCommit
    (three records in __transaction_state, a marker in the partition).

Prints microseconds per request (per transaction for the last step), best of 5 rounds. Only the
public request path is used, so any two checkouts can be compared; the figure to compare is the
ratio, on this shared machine, from runs made one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from odradek.broker.config import BrokerConfig  # noqa: E402
from odradek.broker.connection_state import ConnectionState  # noqa: E402
from odradek.broker.registry import RequestContext, load_handlers, make  # noqa: E402
from odradek.broker.server import Broker  # noqa: E402
from odradek.protocol import messages  # noqa: E402

GROUP, TXN_ID, TOPIC = "bench-group", "bench-txn", "t"


def ms(v: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=v)


async def main(n: int, only: str = "") -> dict[str, float]:
    handlers = load_handlers()
    tmp = tempfile.mkdtemp(prefix="odradek-coord-micro-")
    cfg = BrokerConfig(
        {
            "log.dirs": tmp,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
    )
    broker = Broker(cfg)
    services = await broker.start()
    conn = ConnectionState(1, "127.0.0.1:5555")

    def request(api_key: int, version: int, **fields: Any) -> tuple[Any, Any]:
        return handlers[api_key], make(messages.request_class(api_key, version), **fields)

    async def call(api_key: int, version: int, prepared: tuple[Any, Any] | None = None, **fields: Any) -> Any:
        handler, req = prepared or request(api_key, version, **fields)
        ctx = RequestContext(services, conn, api_key, version, 1, "bench")
        resp = await handler.fn(ctx, req)
        handler.encode_response(version, resp)
        return resp

    def nested(api_key: int, version: int, class_name: str, /, **fields: Any) -> Any:
        return make(getattr(messages.module_of(messages.request_class(api_key, version)), class_name), **fields)

    try:
        await services.topics.create_topic(TOPIC, [(services.node_id,)], {})
        for key_type, key in ((0, GROUP), (1, TXN_ID)):
            r = await call(10, 4, key_type=key_type, coordinator_keys=(key,))
            assert r.coordinators[0].error_code == 0, r
        gc, tc = services.group_coordinator, services.txn_coordinator
        assert tc is not None
        while gc.group_error(GROUP) or tc.txn_error(TXN_ID):
            await asyncio.sleep(0.01)

        protocols = (nested(11, 9, "JoinGroupRequestProtocol", name="range", metadata=b"\x00\x01m"),)
        join = dict(
            group_id=GROUP,
            session_timeout=ms(30000),
            rebalance_timeout=ms(30000),
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=protocols,
            reason=None,
        )
        r = await call(11, 9, **join)
        join["member_id"] = r.member_id
        r = await call(11, 9, **join)
        assert r.error_code == 0, r
        member, generation = r.member_id, r.generation_id
        assignment = nested(14, 5, "SyncGroupRequestAssignment", member_id=member, assignment=b"a")
        r = await call(
            14,
            5,
            group_id=GROUP,
            generation_id=generation,
            member_id=member,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(assignment,),
        )
        assert r.error_code == 0, r

        r = await call(
            22, 4, transactional_id=TXN_ID, transaction_timeout=ms(600000), producer_id=-1, producer_epoch=-1
        )
        assert r.error_code == 0, r
        pid, epoch = r.producer_id, r.producer_epoch
        r = await call(25, 3, transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, group_id=GROUP)
        assert r.error_code == 0, r

        part = nested(
            8, 9, "OffsetCommitRequestPartition", partition_index=0, committed_offset=1, committed_metadata=""
        )
        commit = request(
            8,
            9,
            group_id=GROUP,
            generation_id_or_member_epoch=generation,
            member_id=member,
            group_instance_id=None,
            topics=(nested(8, 9, "OffsetCommitRequestTopic", name=TOPIC, partitions=(part,)),),
        )
        tpart = nested(
            28, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=1, committed_metadata=""
        )
        txn_commit = request(
            28,
            3,
            transactional_id=TXN_ID,
            group_id=GROUP,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=generation,
            member_id=member,
            group_instance_id=None,
            topics=(nested(28, 3, "TxnOffsetCommitRequestTopic", name=TOPIC, partitions=(tpart,)),),
        )
        fetch = request(
            9,
            8,
            groups=(
                nested(
                    9,
                    8,
                    "OffsetFetchRequestGroup",
                    group_id=GROUP,
                    topics=(nested(9, 8, "OffsetFetchRequestTopics", name=TOPIC, partition_indexes=(0,)),),
                ),
            ),
            require_stable=False,
        )
        heartbeat = request(12, 4, group_id=GROUP, generation_id=generation, member_id=member, group_instance_id=None)
        rejoin = request(11, 9, **join)
        add = request(
            24,
            3,
            v3_and_below_transactional_id=TXN_ID,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(nested(24, 3, "AddPartitionsToTxnTopic", name=TOPIC, partitions=(0,)),),
        )

        async def check(api_key: int, version: int, prepared: tuple[Any, Any], error: Callable[[Any], int]) -> None:
            r = await call(api_key, version, prepared)
            assert error(r) == 0, r

        await check(8, 9, commit, lambda r: r.topics[0].partitions[0].error_code)
        await check(28, 3, txn_commit, lambda r: r.topics[0].partitions[0].error_code)
        await check(9, 8, fetch, lambda r: r.groups[0].error_code)
        await check(12, 4, heartbeat, lambda r: r.error_code)
        await check(11, 9, rejoin, lambda r: r.error_code)
        r = await call(26, 3, transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, committed=True)
        assert r.error_code == 0, r
        end = request(26, 3, transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, committed=True)

        async def completed() -> None:
            while tc.describe(TXN_ID).state != "CompleteCommit":
                await asyncio.sleep(0)

        await completed()

        async def transaction() -> None:
            r = await call(24, 3, add)
            assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0, r
            r = await call(26, 3, end)
            assert r.error_code == 0, r
            await completed()

        async def repeat(api_key: int, version: int, prepared: tuple[Any, Any]) -> None:
            for _ in range(n):
                await call(api_key, version, prepared)

        async def transactions() -> None:
            for _ in range(n // 10):
                await transaction()

        steps: list[tuple[str, Callable[[], Awaitable[None]], int]] = [
            ("OffsetCommit", lambda: repeat(8, 9, commit), n),
            ("TxnOffsetCommit", lambda: repeat(28, 3, txn_commit), n),
            ("OffsetFetch", lambda: repeat(9, 8, fetch), n),
            ("Heartbeat", lambda: repeat(12, 4, heartbeat), n),
            ("JoinGroup (a retry)", lambda: repeat(11, 9, rejoin), n),
        ]
        out = {}
        for name, fn, count in steps:
            if only not in name:
                continue
            best = None
            for _ in range(5):
                t = time.perf_counter()
                await fn()
                d = (time.perf_counter() - t) / count * 1e6
                best = d if best is None else min(best, d)
            out[name] = best
        # the transaction last: its commit ends the open transaction of the TxnOffsetCommits
        await call(26, 3, end)
        await completed()
        if only not in "transaction (add, end, complete)":
            return out
        best = None
        for _ in range(5):
            t = time.perf_counter()
            await transactions()
            d = (time.perf_counter() - t) / (n // 10) * 1e6
            best = d if best is None else min(best, d)
        out["transaction (add, end, complete)"] = best
        return out
    finally:
        await broker.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=2000, help="requests per round")
    ap.add_argument("--only", default="", help="only the steps whose name contains this")
    a = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    for name, us in asyncio.run(main(a.n, a.only)).items():
        print(f"{name:40s} {us:8.1f} µs")
