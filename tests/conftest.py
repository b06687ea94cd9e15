"""Shared fixtures.

* ``broker``          a running odradek broker (function scope) in tmp_path.
* ``broker_factory``  start more brokers: ``broker_factory(overrides={...}, port=None, start=True)``.
* ``client``          parametrized over every real client (java, confluent, kcat, kafka_python,
                      aiokafka, kafkajs); a test taking it runs once per client and is skipped
                      with the reason when that client is not installed here. Use it as
                      ``client(broker.bootstrap)`` -> adapter (see tests/support/clients.py).
* ``tansu`` / ``mock_cluster``  third-party brokers, to validate harnesses.
* Apache Kafka itself, the reference (tests/support/apache_kafka.py), started once per session and shared:
  ``kafka39`` (3.9, KRaft), ``kafka4`` (4.x, KRaft), ``kafka39_zk`` (3.9 with a private ZooKeeper),
  ``kafka_cluster`` (4.x, 3 KRaft nodes), ``kafka39_zk_cluster`` (3.9, 3 brokers + ZooKeeper).
  Use unique topic names; never stop them. A test that stops, kills or reconfigures Kafka makes
  its own with ``kafka_factory(line="4", brokers=1, zookeeper=False, overrides=None)``.

Tiers are folders (tests/README.md): each test gets its folder's tier as a marker (``unit``,
``inprocess``, ``sim``, ``interop``, ``cluster``, ``reference``, ``spark``, ``pipeline``,
``harness``), so ``-m unit`` or ``tests/unit`` select the same tests. ``reference`` is also given
to every test that uses one of the Apache Kafka fixtures, wherever it lives, or whose parameters
name one (``kafka4``, ``kafka39``, ... : a fixture that picks Kafka by its parameter at run time)
(``-m "not reference"`` leaves Kafka out). ``kafka_case`` marks a fault test's run against Apache
Kafka (tier ``kafka-cases`` of scripts/test.sh, not in the default full run). Markers are
declared in pyproject.toml only.
Run ``bash scripts/install-test-deps.sh`` first for the Java, kafkajs, kcat, Tansu and Kafka parts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # makes `support` importable

try:  # property tests assert outcomes, not speed: no per-example deadline (one failed at load 8-9)
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("odradek", deadline=None)
    _hypothesis_settings.load_profile("odradek")
except ImportError:  # the test extra not installed: no property tests either
    pass

from support import apache_kafka  # noqa: E402
from support.broker import BrokerProcess, MockClusterBroker, TansuBroker  # noqa: E402
from support.clients import CLIENTS, make_client, unavailable_reason  # noqa: E402

pytest_plugins = ["support.spark_session"]  # the SparkSession fixtures of tests/spark and tests/pipeline

CLIENT_NAMES = list(CLIENTS)
TESTS = Path(__file__).resolve().parent
#: the folders that are tiers (tests/README.md); the marker of each is its name
TIERS = ("unit", "inprocess", "sim", "interop", "cluster", "reference", "spark", "pipeline", "harness")
KAFKA_FIXTURES = {"kafka39", "kafka4", "kafka39_zk", "kafka_cluster", "kafka39_zk_cluster", "kafka_factory"}
#: parameter values by which a fixture chooses Apache Kafka at run time (request.getfixturevalue)
KAFKA_PARAMS = {"kafka4", "kafka39", "kafka39-zookeeper"}


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the first folder under tests/ (None for a file outside the tiers)."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_collection_modifyitems(items):
    for item in items:
        tier = tier_of(Path(item.path))
        if tier:
            item.add_marker(getattr(pytest.mark, tier))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if KAFKA_FIXTURES.intersection(getattr(item, "fixturenames", ())) or any(
            isinstance(v, str) and v in KAFKA_PARAMS for v in params.values()
        ):
            item.add_marker(pytest.mark.reference)


class XdistGroupIds:
    """On an xdist worker under ``--dist loadgroup``: a test marked ``xdist_group(name)`` gets
    ``@name`` at the end of its node id, which is what sends all of a group's tests to one worker.
    pytest-xdist 3.8 sets ``item._nodeid`` for that, which pytest 9.2 no longer reads (a node's id
    is ``item._id``): every group was ignored, each test scheduled on its own. Does nothing when
    xdist's own hook worked (the id already ends in ``@name``)."""

    @pytest.hookimpl(trylast=True)  # after xdist's hook, and after -m and -k have deselected
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):
            return
        from _pytest.nodeid import NodeId

        for item in items:
            marks = item.iter_markers("xdist_group")
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
            suffix = "@" + "_".join(names)
            if names and not item.nodeid.endswith(suffix):
                item._id = NodeId.parse(item.nodeid + suffix)


def pytest_configure(config):
    config.pluginmanager.register(XdistGroupIds(), "odradek-xdist-group-ids")


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(
        overrides: dict | None = None,
        port: int | None = None,
        start: bool = True,
        name: str | None = None,
        timeout: float = 20,
    ) -> BrokerProcess:
        d = tmp_path / (name or f"broker{len(started)}")
        b = BrokerProcess(d, overrides or {}, port=port)
        started.append(b)
        if start:
            b.start(timeout=timeout)
        return b

    yield make
    # SIGKILL: nothing is asserted after the test, and a clean stop of each broker (checkpoints,
    # the coordinators' shutdown, the interpreter's exit) cost 0.3-3 s of every test's teardown.
    # A test of a clean stop stops its broker itself (b.stop(): SIGTERM).
    for b in reversed(started):
        b.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(params=CLIENT_NAMES)
def client_name(request) -> str:
    reason = unavailable_reason(request.param)
    if reason:
        pytest.skip(f"{request.param}: {reason}")
    return request.param


@pytest.fixture
def client(client_name):
    """A factory: ``client(bootstrap, **kw)`` -> adapter for this parametrization's client."""

    def make(bootstrap: str, **kw):
        return make_client(client_name, bootstrap, **kw)

    make.name = client_name
    return make


@pytest.fixture(scope="session")
def tansu(tmp_path_factory):
    if not TansuBroker.available():
        pytest.skip("Tansu not installed: run scripts/install-test-deps.sh")
    b = TansuBroker(tmp_path_factory.mktemp("tansu")).start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def mock_cluster(tmp_path_factory):
    pytest.importorskip("confluent_kafka")
    b = MockClusterBroker(tmp_path_factory.mktemp("mockcluster")).start()
    yield b
    b.stop()


@pytest.fixture(params=["c", "python"])
def impl(request):
    """Runs a test once per record codec of the client (C extension, pure Python); the C one
    is skipped where the extension was not built."""
    from odradek.client import _records as CR

    if request.param not in CR.IMPLEMENTATIONS:
        pytest.skip(f"record codec {request.param!r} not built here")
    before = CR.IMPLEMENTATION
    CR.set_implementation(request.param)
    yield request.param
    CR.set_implementation(before)


# --------------------------------------------------------------------------- Apache Kafka (reference)


def _apache_kafka(tmp_path_factory, name: str, line: str, **kw):
    reason = apache_kafka.unavailable_reason(line)
    if reason:
        pytest.skip(reason)
    k = apache_kafka.ApacheKafka(tmp_path_factory.mktemp(name), line=line, **kw).start()
    yield k
    # killed, as kafka_factory's: nothing is asserted after the session, and a clean stop (SIGTERM,
    # up to 30 s) took 15-20 s per Kafka at the end of each xdist worker, the tier's last seconds
    k.kill()


@pytest.fixture(scope="session")
def kafka39(tmp_path_factory):
    """Apache Kafka 3.9, one KRaft node (broker+controller)."""
    yield from _apache_kafka(tmp_path_factory, "kafka39", "3.9")


@pytest.fixture(scope="session")
def kafka4(tmp_path_factory):
    """Apache Kafka 4.x, one KRaft node (broker+controller)."""
    yield from _apache_kafka(tmp_path_factory, "kafka4", "4")


@pytest.fixture(scope="session")
def kafka39_zk(tmp_path_factory):
    """Apache Kafka 3.9, one broker in ZooKeeper mode, with its private ZooKeeper."""
    yield from _apache_kafka(tmp_path_factory, "kafka39zk", "3.9", zookeeper=True)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory):
    """Apache Kafka 4.x, three KRaft nodes (each broker+controller; a 3-voter quorum)."""
    yield from _apache_kafka(tmp_path_factory, "kafkacluster", "4", brokers=3)


@pytest.fixture(scope="session")
def kafka39_zk_cluster(tmp_path_factory):
    """Apache Kafka 3.9, three brokers in ZooKeeper mode sharing a private ZooKeeper."""
    yield from _apache_kafka(tmp_path_factory, "kafka39zkcluster", "3.9", brokers=3, zookeeper=True)


@pytest.fixture
def kafka_factory(tmp_path):
    """``kafka_factory(line="4", brokers=1, zookeeper=False, overrides=None, start=True)`` -> a
    started ApacheKafka of this test's own, killed at its end (for tests that stop, kill or
    reconfigure Kafka)."""
    made: list[apache_kafka.ApacheKafka] = []

    def make(line: str = "4", start: bool = True, **kw) -> apache_kafka.ApacheKafka:
        reason = apache_kafka.unavailable_reason(line)
        if reason:
            pytest.skip(reason)
        k = apache_kafka.ApacheKafka(tmp_path / f"kafka{len(made)}", line=line, **kw)
        made.append(k)
        return k.start() if start else k

    yield make
    for k in reversed(made):
        k.kill()  # as broker_factory: a test of a clean stop stops its Kafka itself
