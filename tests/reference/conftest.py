"""Fixtures of the differential tests (tests/reference/test_diff_*.py).

* ``odradek_ref``  one odradek broker for the whole session, set up as the Kafka fixtures are
  (no initial rebalance delay, internal topics replicated once), plus a cleaner that looks for
  work every 200 ms instead of 15 s (Kafka's fixture keeps its default; the compaction test waits
  for it).
* ``pair``         :class:`diff.Pair` of the session's Apache Kafka 4.x (``kafka4``) and ``odradek_ref``.
* ``pair39``       the same with Kafka 3.9 (``kafka39``), for behaviour that differs between lines.

Both brokers are shared by every test: use unique names (:func:`support.diff.unique`), leave the brokers'
own settings alone (validate_only for broker-level config changes).
"""

from __future__ import annotations

import pytest
from support.broker import BrokerProcess
from support.diff import Pair, Target

#: what tests/support/apache_kafka.py base_properties() sets on Kafka (the same values, so that
#: DescribeConfigs sources compare), and a quick cleaner
ODRADEK_OVERRIDES = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.replication.factor": "1",
    "log.cleaner.backoff.ms": "200",
}


@pytest.fixture(scope="session")
def odradek_ref(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("odradek-ref"), ODRADEK_OVERRIDES).start(timeout=30)
    yield b
    b.stop()


def _pair(kafka, odradek) -> Pair:
    return Pair(Target("kafka", kafka.bootstrap, kafka.version), Target("odradek", odradek.bootstrap, "odradek"))


@pytest.fixture
def pair(kafka4, odradek_ref) -> Pair:
    return _pair(kafka4, odradek_ref)


@pytest.fixture
def pair39(kafka39, odradek_ref) -> Pair:
    return _pair(kafka39, odradek_ref)
