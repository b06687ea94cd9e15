"""Reading kazoo's client state without a connection (no sockets: nothing is started)."""

from __future__ import annotations

from kazoo.client import KazooClient

from odradek.cluster.zk_client import connection_ended


def test_a_connection_thread_that_ended_while_the_client_was_not_stopped_is_told_apart():
    """kazoo's connection thread ends on its own (an exception it does not retry) with the
    client still started: connection_ended says so, and only then. A client never started, or
    stopped on purpose, has no thread either; the simulator's client has no kazoo handler."""
    zk = KazooClient(hosts="127.0.0.1:1")  # never started: stopped, no thread
    assert not connection_ended(zk)
    zk._stopped.clear()  # started ...
    zk._connection.connection_stopped.clear()  # ... its thread running
    assert not connection_ended(zk)
    zk._connection.connection_stopped.set()  # the thread ended, nobody stopped the client
    assert connection_ended(zk)
    zk._stopped.set()  # stopped on purpose
    assert not connection_ended(zk)
    assert not connection_ended(object())  # type: ignore[arg-type]  # no kazoo connection handler
