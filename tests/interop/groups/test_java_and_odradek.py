"""A Java consumer (kafka-clients 3.9) and an odradek consumer in one group split the partitions."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from support.clients import make_client, unavailable_reason

from odradek.client import Consumer, Producer


@pytest.mark.parametrize("peer_name", ["odradek", "tansu"])
def test_java_and_odradek_consumers_share_a_group(peer_named, peer_name, fast_group):
    reason = unavailable_reason("java")
    if reason:
        pytest.skip(f"java: {reason}")
    peer = peer_named(peer_name)
    topic = peer.new_topic(4)
    with Producer(bootstrap_servers=peer.bootstrap) as p:
        for i in range(40):
            p.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 4)
        p.flush()
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    cfg = dict(
        fast_group,
        **{
            "bootstrap.servers": peer.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        },
    )
    ours = Consumer(topic, config=cfg)
    try:
        deadline = time.monotonic() + 20
        while len(ours.assignment()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # the group is joined in the background; nothing is consumed yet
        ours.pause(*ours.assignment())
        java_result = {}

        def run_java():
            try:
                java_result["records"] = make_client("java", peer.bootstrap).consume(
                    topic, expected=20, timeout=40, from_beginning=True, group=group
                )
            except Exception as e:  # surfaced below
                java_result["error"] = e

        t = threading.Thread(target=run_java)
        t.start()
        deadline = time.monotonic() + 40
        while len(ours.assignment()) != 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # wait for the rebalance that hands Java its share
        mine = ours.assignment()
        assert len(mine) == 2
        ours.resume(*ours.paused())
        got = []
        while len(got) < 20 and time.monotonic() < deadline + 20:
            got += ours.poll(0.5)
        t.join(60)
        assert "error" not in java_result, java_result.get("error")
        theirs = java_result["records"]
        assert len(theirs) == 20 and len(got) == 20
        assert {r.partition for r in got} == {tp.partition for tp in mine}
        values = {r.value for r in theirs} | {r.value for r in got}
        assert values == {b"v%d" % i for i in range(40)}
    finally:
        ours.close()
