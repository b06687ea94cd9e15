"""Racks in a cluster (`broker.rack`): brokers partly with a rack and partly without cannot get a
rack-aware assignment, and Kafka refuses to guess (AdminUtils: "Not all brokers have rack
information"). In ZooKeeper mode Kafka 3.9 answers that topic UNKNOWN_SERVER_ERROR (its
ZkAdminManager and auto-creation pass the exception on); odradek answers the same code with the
reason as its message, for that topic only, and goes on serving."""

from __future__ import annotations

import datetime

import pytest
from support import proto
from support.odradek_cluster import OdradekCluster
from support.raw import RawConnection, nested

pytestmark = pytest.mark.cluster

UNKNOWN_SERVER_ERROR = -1


def test_brokers_partly_with_racks_refuse_only_the_assignments_they_would_have_to_guess(tmp_path):
    c = OdradekCluster(
        tmp_path,
        brokers=3,
        overrides={"auto.create.topics.enable": "true"},
        broker_overrides={1: {"broker.rack": "r1"}, 2: {"broker.rack": "r2"}},
    )
    c.start()
    try:
        controller = c.brokers[c.snapshot().controller_id]
        with RawConnection(controller.bootstrap) as conn:
            r = proto.create_topics(
                conn,
                {"name": "guessed", "partitions": 2, "rf": 2},
                {"name": "placed", "partitions": -1, "rf": -1, "assignments": [(1, 3)]},
            )
            by_name = {t.name: t for t in r.topics}
            assert int(by_name["guessed"].error_code) == UNKNOWN_SERVER_ERROR
            assert "rack" in (by_name["guessed"].error_message or "")
            assert int(by_name["placed"].error_code) == 0  # an explicit assignment needs no racks
            c.wait(lambda s: "placed" in s.topics and s.topics["placed"].partitions[0].leader > 0, 20, "placed led")

            part = nested(37, 3, "CreatePartitionsTopic", name="placed", count=2, assignments=None)
            r = conn.call(37, 3, topics=(part,), timeout=datetime.timedelta(seconds=10), validate_only=False)
            assert int(r.results[0].error_code) == UNKNOWN_SERVER_ERROR
            assert "rack" in (r.results[0].error_message or "")

        with RawConnection(c.brokers[3].bootstrap) as conn:  # auto-creation by Metadata, on a broker without a rack
            r = proto.metadata(conn, ["auto"], auto=True)
            assert int(r.topics[0].error_code) == UNKNOWN_SERVER_ERROR
            assert len(r.brokers) == 3  # the broker answers the rest of the request

        snap = c.snapshot()
        assert "guessed" not in snap.topics and "auto" not in snap.topics
        assert len(snap.topics["placed"].partitions) == 1
    finally:
        c.stop()
