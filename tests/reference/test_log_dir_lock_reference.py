"""Apache Kafka 4.x and odradek refuse each other's running log directory (the ``.lock``).

Kafka locks ``<dir>/.lock`` with Java's ``FileLock`` (a POSIX record lock on Linux) and odradek
with ``flock`` plus an open-file-description record lock, which conflicts with Kafka's; with
``flock`` alone neither would see the other (storage/fs.py ``OSFileSystem.try_lock``). So:

* odradek started on the directory of a running Kafka exits with status 2, naming it, and
  Kafka keeps serving;
* Kafka started on a directory odradek is serving (the one odradek adopted from that Kafka,
  docs/storage.md, "Moving data between Kafka and odradek") exits with its own "Failed to
  acquire lock on file .lock", and odradek keeps serving.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerStartError

pytestmark = pytest.mark.reference


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics)


def test_kafka_and_odradek_refuse_each_others_running_log_directory(kafka_factory, broker_factory):
    k = kafka_factory(line="4")
    node = k.nodes[0]
    admin = AdminClient({"bootstrap.servers": k.bootstrap})
    for f in admin.create_topics([NewTopic("locked", 1, 1)]).values():
        f.result(30)

    odradek = broker_factory(
        overrides={"log.dirs": str(node.data_dir), "node.id": str(node.node_id)}, name="on-kafka", start=False
    )
    odradek.spawn()
    assert odradek.proc.wait(timeout=60) == 2
    assert f"Failed to acquire lock on file .lock in {node.data_dir}: another broker" in odradek.log_tail(200)
    assert "locked" in _topics(k.bootstrap)  # Kafka goes on

    k.stop()
    adopted = broker_factory(overrides={"log.dirs": str(node.data_dir), "node.id": str(node.node_id)}, name="adopted")
    assert "locked" in _topics(adopted.bootstrap)
    with pytest.raises(BrokerStartError):
        node.start(timeout=60)
    assert "Failed to acquire lock on file .lock in" in node.log_tail(400)
    assert adopted.running and "locked" in _topics(adopted.bootstrap)  # odradek goes on
