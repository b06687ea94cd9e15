"""A watch firing while the ZooKeeper client closes (the broker stopping) ends its read quietly,
as kazoo's DataWatch does (`_ignore_closed`): raised on kazoo's callback thread, it was logged
as "Exception in worker queue thread" tracebacks, which tests/cluster/test_controller_stopping.py
counts as internal errors. A read whose session expired is made again, as DataWatch's retry
makes it (`ignore_expire`): kazoo answers it on the next session."""

from __future__ import annotations

from types import SimpleNamespace

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


class _Answered:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def get(self):
        return self.data, SimpleNamespace(mzxid=1, version=1)


class _ClosedClient:
    handler = _Handler()
    state = KazooState.CONNECTED

    def __init__(self, error: Exception, failures: int = 1 << 30) -> None:
        self.error = error
        self.failures = failures  # reads that fail before one is answered

    def add_listener(self, _listener) -> None:
        return None

    def get_async(self, _path, watch=None):
        if self.failures > 0:
            self.failures -= 1
            return _Failed(self.error)
        return _Answered(b"after")

    def exists_async(self, _path, watch=None):
        return _Failed(self.error)


def test_a_watch_firing_on_a_closed_client_does_not_raise():
    watches = DataWatches(_ClosedClient(ConnectionClosedError("Connection has been closed")))
    seen = []
    with pytest.raises(ConnectionClosedError):
        watches.watch([("/brokers/topics/t", lambda data, stat: seen.append(data))])
    w = watches._watches["/brokers/topics/t"]
    w.watcher(WatchedEvent(EventType.CHANGED, KazooState.CONNECTED, "/brokers/topics/t"))  # no exception
    assert seen == []


def test_a_read_whose_session_expired_is_made_again():
    client = _ClosedClient(SessionExpiredError(), failures=3)
    watches = DataWatches(client)
    seen = []
    watches.watch([("/brokers/topics/t", lambda data, stat: seen.append(data))])
    assert seen == [b"after"] and client.failures == 0
