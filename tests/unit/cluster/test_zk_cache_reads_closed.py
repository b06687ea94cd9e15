"""A watch firing while the ZooKeeper client closes (the broker stopping) or after its session
expired ends its read quietly, as kazoo's DataWatch does (`_ignore_closed`): raised on kazoo's
callback thread, it was logged as "Exception in worker queue thread" tracebacks, which
tests/cluster/test_controller_stopping.py counts as internal errors."""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionClosedError, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from odradek.cluster.zk_cache_reads import DataWatches


class _Failed:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def get(self):
        raise self.error


class _Handler:
    @staticmethod
    def sleep_func(_seconds: float) -> None:
        return None

    @staticmethod
    def spawn(func, *args) -> None:  # the reader of the watches that fired, at once
        func(*args)


class _ClosedClient:
    handler = _Handler()
    state = KazooState.CONNECTED

    def __init__(self, error: Exception) -> None:
        self.error = error

    def add_listener(self, _listener) -> None:
        return None

    def get_async(self, _path, watch=None):
        return _Failed(self.error)

    def exists_async(self, _path, watch=None):
        return _Failed(self.error)


@pytest.mark.parametrize("error", [ConnectionClosedError("Connection has been closed"), SessionExpiredError()])
def test_a_watch_firing_on_a_closed_client_does_not_raise(error):
    watches = DataWatches(_ClosedClient(error))
    seen = []
    with pytest.raises(type(error)):
        watches.watch([("/brokers/topics/t", lambda data, stat: seen.append(data))])
    w = watches._watches["/brokers/topics/t"]
    w.watcher(WatchedEvent(EventType.CHANGED, KazooState.CONNECTED, "/brokers/topics/t"))  # no exception
    assert seen == []
