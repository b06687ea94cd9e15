"""Kafka 4.4's `kafka-transactions` tool (org.apache.kafka.tools.TransactionsCommand) lists and
describes the transactions odradek's coordinator holds (ListTransactions, DescribeTransactions,
FindCoordinator key type 1, through Kafka's own admin client)."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.apache_kafka import SHORT_JVM, tool_command, unavailable_reason

pytestmark = pytest.mark.reference


def transactions_tool(bootstrap: str, *args: str) -> list[list[str]]:
    cmd = tool_command(
        "4", "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, *args, jvm=SHORT_JVM
    )
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return [line.split() for line in r.stdout.splitlines() if line.strip()]


def test_kafka_transactions_tool_lists_and_describes(broker):
    if unavailable_reason("4"):
        pytest.skip(unavailable_reason("4"))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("tools", 2, 1)])["tools"].result(30)
    open_tx = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "open-tx", "linger.ms": 0})
    open_tx.init_transactions(30)
    open_tx.begin_transaction()
    open_tx.produce("tools", b"x", partition=1)
    open_tx.flush(10)
    done = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "done-tx", "linger.ms": 0})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce("tools", b"y", partition=0)
    done.commit_transaction(30)

    header, *rows = transactions_tool(broker.bootstrap, "list")
    assert header == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert sorted((r[0], r[1], r[3]) for r in rows) == [("done-tx", "1", "CompleteCommit"), ("open-tx", "1", "Ongoing")]

    header, row = transactions_tool(broker.bootstrap, "describe", "--transactional-id", "open-tx")
    got = dict(zip(header, row))
    assert got["TransactionState"] == "Ongoing" and got["TopicPartitions"] == "tools-1"
    assert (got["CoordinatorId"], got["ProducerEpoch"], got["TransactionTimeoutMs"]) == ("1", "0", "60000")
    open_tx.abort_transaction(30)
