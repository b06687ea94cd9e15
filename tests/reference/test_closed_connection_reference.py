"""A request pipelined behind a long-polling Fetch on a connection its client then closes:
Apache Kafka 4.x still runs it; odradek does not (a deliberate difference, docs/architecture.md
"the driver", broker/connection.py `_abandoned`).

Kafka reads a connection's next request only after answering the one in flight, but once that
Fetch is answered it still reads and runs what the client had sent before closing (measured
here: the topic is created). odradek drops it: its client gave it up and may have retried it
elsewhere since, and running it late let a timed-out offset commit undo the member's later one
(simulator seed 13637, tests/sim/test_sim_seed_13637.py). A Produce with acks=0 still runs on
both.
"""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from support.raw import RawConnection, fetch_from_start, nested, request

pytestmark = pytest.mark.reference


def _create(conn: RawConnection, name: str) -> None:
    topic = nested(
        19, 4, "CreatableTopic", name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    r = conn.call(19, 4, topics=(topic,), timeout=10000, validate_only=False)
    assert int(r.topics[0].error_code) == 0, r


def _topics(bootstrap: str) -> set[str]:
    with RawConnection(bootstrap) as conn:
        r = conn.call(
            3,
            9,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        return {t.name for t in r.topics}


def _created_after_close(bootstrap: str) -> bool:
    """Send a Fetch waiting 2 s and a CreateTopics behind it, close at once: was it created?"""
    waiting = f"wait-{uuid.uuid4().hex[:8]}"
    abandoned = f"late-{uuid.uuid4().hex[:8]}"
    with RawConnection(bootstrap) as conn:
        _create(conn, waiting)
    time.sleep(1.0)  # the topic's leader known everywhere
    conn = RawConnection(bootstrap)
    fields = fetch_from_start(waiting, range(1))
    fields["max_wait"] = 2000
    conn.send(1, 12, request(1, 12, **fields))
    time.sleep(0.2)
    topic = nested(
        19, 4, "CreatableTopic", name=abandoned, num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    conn.send(19, 4, request(19, 4, topics=(topic,), timeout=10000, validate_only=False))
    time.sleep(0.2)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    time.sleep(4.0)  # past the long poll, and time to run what follows it
    return abandoned in _topics(bootstrap)


def test_kafka_runs_a_request_read_after_the_client_closed_and_odradek_does_not(kafka4, odradek_ref):
    assert _created_after_close(kafka4.bootstrap) is True
    assert _created_after_close(odradek_ref.bootstrap) is False
