"""The blocking API: `Producer`, `Consumer`, `Admin` over the asyncio client.

Each client runs its asyncio twin on a private event-loop thread and forwards calls
with `run_coroutine_threadsafe`. The producer's hot path does not cross threads:
`send` serializes, partitions and appends to the (thread-safe) accumulator in the
caller's thread, and the sender on the loop thread picks batches up.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

from . import errors as E
from .aio.admin import AIOAdmin
from .aio.consumer import AIOConsumer
from .aio.producer import AIOProducer

POLL_GRACE_S = 60  # a blocked I/O thread, not a slow broker: poll itself returns at `timeout`


class _LoopThread:
    """An event loop running in a daemon thread, owned by one client."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()
        self.loop.close()

    def run(self, coro, timeout: float | None = None) -> Any:
        if threading.current_thread() is self.thread:
            raise E.IllegalStateError("blocking client method called from its own I/O thread (a callback?)")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise E.KafkaTimeoutError(f"operation did not complete within {timeout}s") from None

    def call(self, fn, *args) -> Any:
        async def wrapper():
            return fn(*args)

        return self.run(wrapper())

    def stop(self) -> None:
        if self.loop.is_running() and threading.current_thread() is not self.thread:

            async def cancel_rest():
                me = asyncio.current_task()
                rest = [t for t in asyncio.all_tasks() if t is not me]
                for t in rest:
                    t.cancel()
                await asyncio.gather(*rest, return_exceptions=True)

            try:
                asyncio.run_coroutine_threadsafe(cancel_rest(), self.loop).result(5)
            except Exception:
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Producer:
    """``Producer({"bootstrap.servers": "host:9092"})`` or ``Producer(bootstrap_servers=...)``.

    ``send(topic, value, key=None, headers=None, partition=None, timestamp=None, callback=None)``
    returns a `FutureRecordMetadata` (``.result(timeout)`` / ``.get()``, ``.add_callback``);
    callbacks ``cb(metadata, exception)`` run on the client's I/O thread.
    """

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._io = _LoopThread("odradek-producer")
        try:
            self._aio = AIOProducer(config, **kwargs)
            self._io.run(self._aio.start())
        except BaseException:
            self._io.stop()
            raise
        self._core = self._aio._core
        self._core.acc.set_threaded()  # send() appends from the caller's thread
        self.config = self._aio.config
        self._closed = False

    def send(
        self,
        topic: str,
        value=None,
        key=None,
        headers=None,
        partition: int | None = None,
        timestamp: int | None = None,
        callback=None,
    ):
        core = self._core
        parts = core.partitions(topic)
        if parts is None or (partition is not None and partition >= len(parts[0])):
            self._io.run(core.cluster.wait_for_topic(topic, core.max_block, partition))
            parts = core.partitions(topic)
        p, ts, kb, vb, hs, size = core.prepare(topic, value, key, headers, partition, timestamp, parts)
        if core.txn is not None:
            core.txn.maybe_add_partition((topic, p))
        fut = core.acc.append_blocking(topic, p, ts, kb, vb, hs, size, core.max_block)
        if callback is not None:
            fut.add_callback(callback)
        return fut

    produce = send

    def flush(self, timeout: float | None = None) -> None:
        self._io.run(self._aio.flush(timeout))

    def partitions_for(self, topic: str) -> list[int]:
        return self._io.run(self._aio.partitions_for(topic))

    # Transactions: see AIOProducer; the same names, blocking.
    def init_transactions(self, timeout: float | None = None) -> None:
        self._io.run(self._aio.init_transactions(timeout))

    def begin_transaction(self) -> None:
        self._io.call(self._aio.begin_transaction)

    def send_offsets_to_transaction(self, offsets: dict, group_metadata, timeout: float | None = None) -> None:
        self._io.run(self._aio.send_offsets_to_transaction(offsets, group_metadata, timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._io.run(self._aio.commit_transaction(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._io.run(self._aio.abort_transaction(timeout))

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._io.run(self._aio.close(timeout))
        finally:
            self._io.stop()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Consumer:
    """``Consumer("topic", bootstrap_servers=..., group_id=...)`` or ``Consumer({...})``; then
    ``poll(timeout)`` -> list of `ConsumerRecord`, or iterate."""

    def __init__(self, *topics, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._io = _LoopThread("odradek-consumer")
        try:
            self._aio = AIOConsumer(*topics, config=config, **kwargs)
            self._io.run(self._aio.start())
        except BaseException:
            self._io.stop()
            raise
        self.config = self._aio.config
        self._closed = False

    def _call(self, name, *args, **kw):
        async def run():
            return getattr(self._aio, name)(*args, **kw)

        return self._io.run(run())

    def subscribe(self, topics=None, pattern=None, listener=None, *, exclude=None) -> None:
        if listener is not None:
            listener = _ThreadedListener(listener)
        self._call("subscribe", topics, pattern, listener, exclude=exclude)

    def unsubscribe(self) -> None:
        self._call("unsubscribe")

    def assign(self, partitions) -> None:
        self._call("assign", list(partitions))

    def assignment(self):
        return self._call("assignment")

    def subscription(self):
        return self._call("subscription")

    def seek(self, partition, offset: int) -> None:
        self._call("seek", partition, offset)

    def seek_to_beginning(self, *partitions) -> None:
        self._call("seek_to_beginning", *partitions)

    def seek_to_end(self, *partitions) -> None:
        self._call("seek_to_end", *partitions)

    def pause(self, *partitions) -> None:
        self._call("pause", *partitions)

    def resume(self, *partitions) -> None:
        self._call("resume", *partitions)

    def paused(self):
        return self._call("paused")

    def position(self, partition, timeout: float = 30) -> int:
        return self._io.run(self._aio.position(partition, timeout))

    def committed(self, partitions, timeout: float | None = None):
        return self._io.run(self._aio.committed(partitions, timeout))

    def beginning_offsets(self, partitions, timeout: float | None = None):
        return self._io.run(self._aio.beginning_offsets(partitions, timeout))

    def end_offsets(self, partitions, timeout: float | None = None):
        return self._io.run(self._aio.end_offsets(partitions, timeout))

    def offsets_for_times(self, timestamps: dict, timeout: float | None = None):
        return self._io.run(self._aio.offsets_for_times(timestamps, timeout))

    def partitions_for_topic(self, topic: str):
        return self._io.run(self._aio.partitions_for_topic(topic))

    def topics(self):
        return self._io.run(self._aio.topics())

    def poll(self, timeout: float = 1.0, max_records: int | None = None):
        """Buffered records are taken by one plain callback on the I/O thread and handed back
        through a SimpleQueue (no Task or concurrent Future: measured ~3x cheaper per call);
        only when nothing is buffered does the I/O thread run the waiting `poll`."""
        if self._closed:
            raise E.IllegalStateError("consumer closed")
        if threading.current_thread() is self._io.thread:
            raise E.IllegalStateError("blocking client method called from its own I/O thread (a callback?)")
        answer: queue.SimpleQueue = queue.SimpleQueue()
        aio = self._aio

        def done(task: asyncio.Task) -> None:
            if task.cancelled():
                answer.put(([], None))
            elif task.exception() is not None:
                answer.put((None, task.exception()))
            else:
                answer.put((task.result(), None))

        def take() -> None:
            try:
                recs = aio.poll_buffered(max_records)
            except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                answer.put((None, e))
                return
            if recs or timeout <= 0:
                answer.put((recs, None))
            else:
                self._io.loop.create_task(aio.poll(timeout, max_records)).add_done_callback(done)

        self._io.loop.call_soon_threadsafe(take)
        try:
            recs, err = answer.get(timeout=timeout + POLL_GRACE_S)
        except queue.Empty:
            raise E.KafkaTimeoutError(f"poll did not return within {timeout + POLL_GRACE_S}s") from None
        if err is not None:
            raise err
        return recs

    def poll_columns(self, timeout: float = 1.0) -> list:
        """Records as `RecordColumns` (see `AIOConsumer.poll_columns`)."""
        return self._io.run(self._aio.poll_columns(timeout))

    def group_metadata(self):
        return self._call("group_metadata")

    def commit(self, offsets: dict | None = None, timeout: float | None = None) -> None:
        self._io.run(self._aio.commit(offsets, timeout))

    commit_sync = commit

    def commit_async(self, offsets: dict | None = None, callback=None) -> None:
        self._call("commit_async", offsets, callback)

    def __iter__(self):
        while not self._closed:
            yield from self.poll(1.0)

    def close(self, autocommit: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._io.run(self._aio.close(autocommit))
        finally:
            self._io.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ThreadedListener:
    """Runs a blocking consumer's rebalance listener in a worker thread, so it may call the consumer."""

    def __init__(self, listener) -> None:
        self.listener = listener

    async def on_partitions_revoked(self, tps) -> None:
        fn = getattr(self.listener, "on_partitions_revoked", None)
        if fn is not None:
            await asyncio.get_running_loop().run_in_executor(None, fn, tps)

    async def on_partitions_assigned(self, tps) -> None:
        fn = getattr(self.listener, "on_partitions_assigned", None)
        if fn is not None:
            await asyncio.get_running_loop().run_in_executor(None, fn, tps)


class Admin:
    """Blocking admin client; every method mirrors `AIOAdmin`'s."""

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._io = _LoopThread("odradek-admin")
        try:
            self._aio = AIOAdmin(config, **kwargs)
            self._io.run(self._aio.start())
        except BaseException:
            self._io.stop()
            raise
        self._closed = False

    def __getattr__(self, name: str):
        fn = getattr(self._aio, name)
        if not callable(fn) or name.startswith("_"):
            return fn

        def call(*args, **kw):
            return self._io.run(fn(*args, **kw))

        call.__name__ = name
        call.__doc__ = fn.__doc__
        return call

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._io.run(self._aio.close())
        finally:
            self._io.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
