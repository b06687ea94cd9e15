"""Shared fixtures.

* ``broker``          a running odradek broker (function scope) in tmp_path.
* ``broker_factory``  start more brokers: ``broker_factory(overrides={...}, port=None, start=True)``.
* ``client``          parametrized over every real client (java, confluent, kcat, kafka_python,
                      aiokafka, kafkajs); a test taking it runs once per client and is skipped
                      with the reason when that client is not installed here. Use it as
                      ``client(broker.bootstrap)`` -> adapter (see tests/support/clients.py).
* ``tansu`` / ``mock_cluster``  third-party brokers, to validate harnesses.

Markers: ``interop`` (real broker process + real clients), ``harness`` (adapter self-tests against
third-party brokers; run alone with ``pytest tests/support -m harness``).
Run ``bash scripts/install-test-deps.sh`` first for the Java, kafkajs, kcat and Tansu parts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # makes `support` importable

from support.broker import BrokerProcess, MockClusterBroker, TansuBroker  # noqa: E402
from support.clients import CLIENTS, make_client, unavailable_reason  # noqa: E402

CLIENT_NAMES = list(CLIENTS)


def pytest_configure(config):
    config.addinivalue_line("markers", "interop: tests that start a real broker process and use real clients")
    config.addinivalue_line("markers", "harness: self-tests of the client adapters against third-party brokers")
    # kafka-python 3.0.12 loads its protocol schemas with deprecated importlib.resources calls.
    config.addinivalue_line("filterwarnings", "ignore:.*is deprecated. Use files:DeprecationWarning")


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
    for b in reversed(started):
        b.stop()


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
