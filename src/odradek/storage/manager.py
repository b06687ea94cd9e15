"""LogManager: log directories, recovery on load, and the background duties (the flush of
every rolled segment and the flush policy, retention, compaction, checkpoints, delayed deletes).

Flushes: when a log rolls, everything below the new segment is flushed (fsynced) in a worker
thread soon after and the log's recovery point moves to the new segment's base offset, as
Kafka schedules ``flushUptoOffsetExclusive(newSegment.baseOffset)`` on every roll. The
recovery-point checkpoint of that log directory is then written soon after (at most once per
``roll_checkpoint_min_interval_ms``), where Kafka waits for its periodic one
(``log.flush.offset.checkpoint.interval.ms``, which odradek keeps for everything else): after a
kill -9 the loader re-reads the active segments only, not a minute of rolled ones.
``flush.messages`` / ``flush.ms`` (default: never) flush the active segment too. The high
watermarks' checkpoint is also written every ``replica.high.watermark.checkpoint.interval.ms``
(5 s), as Kafka's ReplicaManager writes it.

The background duties are scheduled on the monotonic clock, as Kafka's scheduler runs them
(a ScheduledThreadPoolExecutor: System.nanoTime) and its cleaner backs off (a timed wait):
a wall clock stepped back two hours must not stop compaction, retention and the checkpoints
for two hours (simulator seed 5173: one replica never compacted and differed from the
others). The duties themselves still read the wall clock where Kafka's do (retention by
timestamp, delete horizons, producer expiry, ``flush.ms``). Not yet moved: the delayed deletes
of ``file.delete.delay.ms`` are keyed to the wall clock (`Log` schedules them with its own
clock), so a clock set back keeps a deleted segment's files on disk that much longer."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .checkpoint import CLEAN_SHUTDOWN, CLEANER, LOG_START, RECOVERY_POINT, REPLICATION, read_offsets, write_offsets
from .cleaner import clean_log
from .config import LONG_MAX, LogConfig, LogManagerConfig
from .errors import KafkaStorageError, StorageError
from .file_cache import default_capacity, raise_open_file_limit
from .fs import FileSystem, OSFileSystem
from .log import OUT_OF_DESCRIPTORS, Log
from .log_dir import LogDirState, parse_log_dir_name
from .segment import LogSegment

__all__ = ["LogManager"]

log = logging.getLogger("odradek.storage")


class LogManager:
    """Owns every Log of this broker. All methods except ``flush_log``/``run`` are sync and
    meant for the event-loop thread; fsync, checkpoint writes and cleaning go to threads."""

    retention_check_interval_ms = 300000
    checkpoint_interval_ms = 60000
    high_watermark_checkpoint_interval_ms = 5000  # replica.high.watermark.checkpoint.interval.ms
    roll_checkpoint_min_interval_ms = 1000  # recovery points moved by roll flushes: written at most this often
    cleaner_backoff_ms = 15000
    cleaner_enabled = True
    # log.cleaner.dedupe.buffer.size and log.cleaner.io.buffer.load.factor: the key map holds at
    # most size * factor / 24 keys (Kafka's entry: 16-byte MD5 of the key + 8-byte offset)
    cleaner_dedupe_buffer_size = 134217728
    cleaner_io_buffer_load_factor = 0.9
    tick_seconds = 0.1
    producer_id_expiration_ms = 86400000
    producer_expiration_check_interval_ms = 600000
    open_segments_max = -1
    flush_policy_scan_ms = 1000  # how soon a topic's new flush.messages / flush.ms is seen by the loop

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        *,
        fs: FileSystem | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        recovery_threads: int = 1,
        topic_config: Callable[[str], LogConfig | None] | None = None,
        config: LogManagerConfig | None = None,
    ) -> None:
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self.fs = fs or OSFileSystem()
        self.clock = clock
        self.monotonic = monotonic  # schedules the background duties (run)
        self.recovery_threads = max(1, recovery_threads)
        self.topic_config = topic_config
        self._logs: dict[tuple[str, int], Log] = {}
        self._dirs = {d: LogDirState(d) for d in self.log_dirs}
        self._dir_counts = dict.fromkeys(self.log_dirs, 0)  # logs per directory (where a new one goes)
        self._cleaner_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._flush_requests: dict[Log, None] = {}  # logs whose roll asked for a flush (in order)
        self._rolled_dirs: set[str] = set()  # log dirs whose recovery points a roll flush moved since written
        self._log_start_moved: set[Log] = set()  # logs whose log start offset moved since checkpointed
        # logs with a flush policy (flush.messages / flush.ms set): the loop checks those each tick
        # and looks for them among every log once a flush_policy_scan_ms (not every log every tick)
        self._flush_policy_logs: list[Log] = []
        self._shutting_down = False
        self._loaded = False
        # the thread that makes the manager (the event loop's) closes cold segment files, not
        # the worker thread that loads the logs
        self.fs.file_cache.bind_owner()
        if config is not None:
            self.reconfigure(config)

    def reconfigure(self, config: LogManagerConfig) -> None:
        """Take these settings (at start, and when a dynamic one changed: read on the next pass)."""
        for f in dataclasses.fields(config):
            setattr(self, f.name, getattr(config, f.name))

    # ------------------------------------------------------------------ basics
    def _now(self) -> int:
        return int(self.clock() * 1000)

    def _tick(self) -> int:
        """Milliseconds on the monotonic clock: when the background duties fall due."""
        return int(self.monotonic() * 1000)

    @property
    def offline_dirs(self) -> set[str]:
        return {d for d, s in self._dirs.items() if s.offline}

    def _online_dirs(self) -> list[str]:
        return [d for d, s in self._dirs.items() if not s.offline]

    def _config_for(self, topic: str) -> LogConfig:
        if self.topic_config is not None:
            cfg = self.topic_config(topic)
            if cfg is not None:
                return cfg
        return self.default_config

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    # ------------------------------------------------------------------ load
    def configure_open_files(self) -> None:
        """Raise the soft open-file limit to the hard one and bound the segment files kept open
        (``log.open.segments.max``; -1: half the limit); one line in the log says both."""
        before, limit = raise_open_file_limit()
        cache = self.fs.file_cache
        cache.capacity = self.open_segments_max if self.open_segments_max > 0 else default_capacity(limit)
        log.info(
            "open files: the broker may hold %d descriptors (RLIMIT_NOFILE%s); segment files kept open: at most %d",
            limit,
            f", raised from {before}" if limit != before else "",
            cache.capacity,
        )

    def load(self) -> None:
        """Recover every log (sync, before serving). A directory that fails goes offline."""
        self.configure_open_files()
        for d, state in self._dirs.items():
            try:
                self._load_dir(d, state)
            except OSError as e:
                state.fail(e)
            except StorageError as e:
                state.fail(e)
        self._loaded = True

    def _load_dir(self, d: str, state: LogDirState) -> None:
        fs = self.fs
        fs.makedirs(d)
        marker = os.path.join(d, CLEAN_SHUTDOWN)
        clean = fs.exists(marker)
        rps = read_offsets(fs, os.path.join(d, RECOVERY_POINT))
        starts = read_offsets(fs, os.path.join(d, LOG_START))
        hws = read_offsets(fs, os.path.join(d, REPLICATION))
        cleaner = read_offsets(fs, os.path.join(d, CLEANER))
        jobs = []
        for name in sorted(fs.listdir(d)):
            path = os.path.join(d, name)
            if not fs.isdir(path):
                continue
            if name.endswith("-delete"):
                fs.rmtree(path)
                continue
            parsed = parse_log_dir_name(name)
            if parsed is None:
                continue
            if parsed in self._logs:
                log.error(
                    "partition %s-%d found in two log dirs (%s and %s); ignoring the second",
                    parsed[0],
                    parsed[1],
                    self._logs[parsed].dir,
                    path,
                )
                continue
            jobs.append((parsed, path))

        def load_one(job):
            key, path = job
            lg = Log.load(
                fs,
                path,
                self._config_for(key[0]),
                state,
                recovery_point=rps.get(key, 0),
                log_start_offset=starts.get(key, 0),
                high_watermark=hws.get(key, 0),
                clean=clean,
                clock=self.clock,
            )
            lg.cleaner_checkpoint = cleaner.get(key, lg.log_start_offset)
            for seg in lg.segments:  # reopened when first read or written (file_cache.py)
                seg.release_file()
            return key, lg

        if self.recovery_threads > 1 and len(jobs) > 1:
            with ThreadPoolExecutor(self.recovery_threads) as ex:
                loaded = list(ex.map(load_one, jobs))
        else:
            loaded = [load_one(j) for j in jobs]
        for key, lg in loaded:
            self._adopt(key, lg)
        log.info(
            "loaded %d logs from %s (%s)",
            len(loaded),
            d,
            "clean shutdown"
            if clean
            else "after an unclean stop: batches past the recovery points were checked"
            if loaded
            else "new directory",
        )
        if clean:
            fs.remove(marker)
            fs.fsync_dir(d)
        self._write_dir_checkpoints(d)

    # ------------------------------------------------------------------ create / delete
    def create_log(self, topic: str, partition: int, config: LogConfig) -> Log:
        existing = self._logs.get((topic, partition))
        if existing is not None:
            return existing
        if not topic or "/" in topic or topic in (".", ".."):
            raise ValueError(f"invalid topic name {topic!r}")
        online = self._online_dirs()
        if not online:
            raise KafkaStorageError("no online log directory")
        counts = self._dir_counts
        d = min(online, key=lambda x: (counts[x], online.index(x)))  # the fewest logs, as Kafka's nextLogDirs
        state = self._dirs[d]
        path = os.path.join(d, f"{topic}-{partition}")
        existed = self.fs.exists(path)
        try:
            self.fs.makedirs(path)
            lg = Log.load(self.fs, path, config, state, clean=True, clock=self.clock)
            # its entry in `d` is fsynced by the log's first flush, before any recovery point
            # moves (Kafka never fsyncs it); a power cut before that loses an empty log, which
            # the metadata creates again
            lg.parent_unsynced = True
        except OSError as e:
            if e.errno in OUT_OF_DESCRIPTORS:  # not the directory's fault: leave no half-made log
                if not existed:
                    self.fs.rmtree(path)
                raise KafkaStorageError(f"cannot create log {topic}-{partition} in {d}: {e}") from e
            state.fail(e)
            raise KafkaStorageError(f"cannot create log {topic}-{partition} in {d}: {e}") from e
        self._adopt((topic, partition), lg)
        return lg

    def _adopt(self, key: tuple[str, int], lg: Log) -> None:
        self._logs[key] = lg
        self._dir_counts[lg.dir_state.path] += 1
        lg.on_flush_request = self._request_flush
        lg.on_truncation = self._checkpoint_after_truncation
        lg.on_log_start_moved = self._log_start_moved.add

    def delete_log(self, topic: str, partition: int) -> None:
        lg = self._logs.pop((topic, partition), None)
        if lg is None:
            return
        self._dir_counts[lg.dir_state.path] -= 1
        lg.closed = True
        self._flush_requests.pop(lg, None)
        self._log_start_moved.discard(lg)
        target = f"{lg.dir}.{uuid.uuid4().hex}-delete"
        try:
            self.fs.rename(lg.dir, target)
        except OSError as e:
            lg.dir_state.fail(e)
            raise KafkaStorageError(f"cannot delete log {topic}-{partition}: {e}") from e
        lg.dir = target
        lg.dir_state.schedule_delete(self._now() + lg.config.file_delete_delay_ms, (target, lg))

    # ------------------------------------------------------------------ flush
    async def flush_log(self, lg: Log, up_to: int | None = None) -> None:
        """fsync ``lg`` below ``up_to`` (default: its current end) in a worker thread; advances its
        recovery point."""
        if lg.dir_state.offline:
            raise KafkaStorageError(f"log directory {lg.dir_state.path} is offline")
        target = lg.log_end_offset if up_to is None else up_to
        await asyncio.to_thread(lg.flush, target)

    def _request_flush(self, lg: Log) -> None:
        """``Log.on_flush_request``: a roll asks for what is below the new segment to be flushed
        (on the event loop's thread, from the append that rolled)."""
        self._flush_requests[lg] = None

    async def flush_rolled(self) -> int:
        """Flush every log whose roll asked for it, one after another, each in a worker thread,
        up to the newest segment it rolled to. Returns how many were flushed."""
        done = 0
        while self._flush_requests:
            lg = next(iter(self._flush_requests))
            del self._flush_requests[lg]
            up_to = lg.pending_flush_offset
            if lg.closed or lg.dir_state.offline or up_to <= lg.recovery_point:
                continue
            try:
                await self.flush_log(lg, up_to)
                done += 1
                self._rolled_dirs.add(lg.dir_state.path)
            except StorageError:
                pass  # the log directory is offline now (logged there)
        return done

    def logs_to_flush(self, now_ms: int | None = None, logs: list[Log] | None = None) -> list[Log]:
        """The logs (of ``logs``, default every log) whose flush policy says flush now."""
        now = self._now() if now_ms is None else now_ms
        out = []
        for lg in self._logs.values() if logs is None else logs:
            if lg.closed or lg.dir_state.offline:
                continue
            unflushed = lg.unflushed_messages
            if unflushed <= 0:
                continue
            if unflushed >= lg.config.flush_messages or now - lg.last_flush_ms >= lg.config.flush_ms:
                out.append(lg)
        return out

    def flush_policy_logs(self) -> list[Log]:
        """The logs whose config sets ``flush.messages`` or ``flush.ms`` (default: none)."""
        return [
            lg for lg in self._logs.values() if lg.config.flush_messages < LONG_MAX or lg.config.flush_ms < LONG_MAX
        ]

    # ------------------------------------------------------------------ checkpoints
    def _write_dir_checkpoints(self, d: str, *, only: str | None = None) -> None:
        """Write the offset checkpoints of log directory `d` (or the one named `only`)."""
        state = self._dirs[d]
        if state.offline:
            return
        logs = [lg for lg in self._logs.values() if lg.dir_state is state]
        names = (RECOVERY_POINT, LOG_START, REPLICATION, CLEANER) if only is None else (only,)
        try:
            with self._checkpoint_lock:
                for name in names:
                    values = _checkpointed(name, logs)
                    write_offsets(self.fs, os.path.join(d, name), values)
                    if name == RECOVERY_POINT:
                        for lg in logs:
                            lg.checkpointed_recovery_point = values[(lg.topic, lg.partition)]
            if LOG_START in names:
                for lg in logs:
                    lg.log_start_dirty = False
                    self._log_start_moved.discard(lg)
        except OSError as e:
            state.fail(e)

    def _checkpoint_after_truncation(self, lg: Log) -> None:
        """``Log.on_truncation``: when the file holds a recovery point for ``lg`` above its new
        one, the recovery points of its directory are written at once, before the truncation
        returns and anything is appended below the old point (Kafka's LogManager.truncateTo and
        truncateFullyAndStartAt write them after every truncation). Otherwise after a power cut
        recovery would start at the stale point and not re-read the segments rewritten below it
        and never flushed. The write (atomic, fsynced: a few milliseconds) is on the event loop;
        a truncation within the active segment, the usual one, finds the file at or below it and
        writes nothing. Checked under the checkpoint lock: a write in a worker thread that read
        the recovery points before the truncation has finished by then, and set what it wrote."""
        with self._checkpoint_lock:
            stale = lg.checkpointed_recovery_point > lg.recovery_point
        if stale:
            self._write_dir_checkpoints(lg.dir_state.path, only=RECOVERY_POINT)

    def write_checkpoints(self) -> None:
        """Persist recovery points, log start offsets, high watermarks, cleaner offsets."""
        for d in self._online_dirs():
            self._write_dir_checkpoints(d)

    def write_high_watermarks(self) -> None:
        """Persist the high watermarks alone (every replica.high.watermark.checkpoint.interval.ms,
        as Kafka's ReplicaManager.checkpointHighWatermarks)."""
        for d in self._online_dirs():
            self._write_dir_checkpoints(d, only=REPLICATION)

    def write_recovery_points(self, dirs: set[str]) -> None:
        """Persist the recovery points of ``dirs`` alone (where a roll flush moved one)."""
        for d in dirs:
            self._write_dir_checkpoints(d, only=RECOVERY_POINT)

    # ------------------------------------------------------------------ retention / deletes
    def run_retention(self, now_ms: int | None = None) -> int:
        now = self._now() if now_ms is None else now_ms
        n = 0
        for lg in list(self._logs.values()):
            if lg.closed or lg.dir_state.offline:
                continue
            try:
                n += lg.delete_old_segments(now)
            except StorageError:
                pass
        return n

    def process_delayed_deletes(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Close and remove segments/directories whose file.delete.delay.ms has passed."""
        now = self._now() if now_ms is None else now_ms
        done = 0
        for state in self._dirs.values():
            with state._lock:
                due = [x for x in state.pending_deletes if force or x[0] <= now]
                state.pending_deletes = [x for x in state.pending_deletes if not (force or x[0] <= now)]
            keep = []
            for item in due:
                target = item[1]
                try:
                    if isinstance(target, LogSegment):
                        with target.pin_lock:
                            busy = target.pins > 0
                        if busy:
                            keep.append(item)
                            continue
                        target.delete_files()
                    else:
                        path, lg = target
                        for seg in lg.segments:
                            seg.close()
                        self.fs.rmtree(path)
                    done += 1
                except OSError as e:
                    log.warning("failed to delete %r: %s", target, e)
            if keep:
                with state._lock:
                    state.pending_deletes.extend(keep)
        return done

    # ------------------------------------------------------------------ cleaner
    @property
    def cleaner_max_keys(self) -> int:
        return max(1, int(self.cleaner_dedupe_buffer_size * self.cleaner_io_buffer_load_factor) // 24)

    def _checkpoint_before_cleaning(self, lg: Log) -> None:
        """The cleaner rewrites only segments below the checkpointed recovery point (cleaner.py):
        the rolled segments are flushed and the recovery point checkpointed first when they are
        not yet (the roll's flush and its checkpoint usually did it already)."""
        active = lg.active_segment.base_offset
        if lg.checkpointed_recovery_point >= active:
            return
        if lg.recovery_point < active:
            lg.flush(active)
        self._write_dir_checkpoints(lg.dir_state.path, only=RECOVERY_POINT)

    def clean_once(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """One compaction pass over every compacted log (called in a worker thread)."""
        now = self._now() if now_ms is None else now_ms
        cleaned = 0
        with self._cleaner_lock:
            for lg in list(self._logs.values()):
                if self._shutting_down:
                    break
                if not lg.config.compact or lg.closed or lg.dir_state.offline:
                    continue
                try:
                    self._checkpoint_before_cleaning(lg)
                    if (
                        clean_log(
                            lg, now, force=force, stop=lambda: self._shutting_down, max_keys=self.cleaner_max_keys
                        )
                        is not None
                    ):
                        cleaned += 1
                except OSError as e:
                    lg.dir_state.fail(e)
                except Exception:  # a bug must not kill the cleaner for every other log
                    log.exception("cleaner failed on %s", lg.dir)
        return cleaned

    # ------------------------------------------------------------------ background loop
    async def run(self) -> None:
        """The background duties, each when it falls due on the monotonic clock; each is
        given the wall clock's now."""
        self.fs.file_cache.bind_owner()  # the event loop closes cold segment files
        tick = self._tick()
        next_retention = tick + self.retention_check_interval_ms
        next_checkpoint = tick + self.checkpoint_interval_ms
        next_hw_checkpoint = tick + self.high_watermark_checkpoint_interval_ms
        next_clean = tick + self.cleaner_backoff_ms
        next_expiry = tick + self.producer_expiration_check_interval_ms
        next_policy_scan = tick
        cleaner: asyncio.Future | None = None
        rolled: asyncio.Future | None = None
        last_rolled_checkpoint = tick - self.roll_checkpoint_min_interval_ms
        try:
            while True:
                tick = self._tick()
                now = self._now()
                if self._flush_requests and (rolled is None or rolled.done()):
                    rolled = asyncio.ensure_future(self.flush_rolled())
                if tick >= next_policy_scan:
                    self._flush_policy_logs = self.flush_policy_logs()
                    next_policy_scan = tick + self.flush_policy_scan_ms
                for lg in self.logs_to_flush(now, self._flush_policy_logs):
                    try:
                        await self.flush_log(lg)
                    except StorageError:
                        pass
                if tick >= next_retention:
                    self.run_retention(now)
                    next_retention = tick + self.retention_check_interval_ms
                if tick >= next_expiry:
                    self.expire_producers(now)
                    next_expiry = tick + self.producer_expiration_check_interval_ms
                if tick >= next_checkpoint or self._log_start_moved:
                    self._rolled_dirs.clear()  # (here, on the loop that adds to it)
                    await asyncio.to_thread(self.write_checkpoints)  # the high watermarks too
                    next_checkpoint = tick + self.checkpoint_interval_ms
                    next_hw_checkpoint = tick + self.high_watermark_checkpoint_interval_ms
                elif tick >= next_hw_checkpoint:
                    await asyncio.to_thread(self.write_high_watermarks)
                    next_hw_checkpoint = tick + self.high_watermark_checkpoint_interval_ms
                elif self._rolled_dirs and tick - last_rolled_checkpoint >= self.roll_checkpoint_min_interval_ms:
                    dirs, self._rolled_dirs = self._rolled_dirs, set()
                    await asyncio.to_thread(self.write_recovery_points, dirs)
                    last_rolled_checkpoint = tick
                self.process_delayed_deletes(now)
                if self.cleaner_enabled and tick >= next_clean and (cleaner is None or cleaner.done()):
                    cleaner = asyncio.ensure_future(asyncio.to_thread(self.clean_once, now))
                    next_clean = tick + self.cleaner_backoff_ms
                await asyncio.sleep(self.tick_seconds)
        finally:
            for task in (cleaner, rolled):
                if task is not None and not task.done():
                    task.cancel()

    def expire_producers(self, now: int | None = None) -> int:
        """Drop idle producer ids' state from every online log (producer.id.expiration.ms)."""
        now = self._now() if now is None else now
        removed = 0
        for lg in list(self._logs.values()):
            state = self._dirs.get(os.path.dirname(lg.dir))
            if state is not None and not state.offline:
                removed += lg.producer_state.remove_expired(now, self.producer_id_expiration_ms)
        return removed

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Flush everything, write checkpoints and the clean-shutdown marker, close files."""
        self._shutting_down = True
        with self._cleaner_lock:
            pass
        for lg in list(self._logs.values()):
            lg.close(clean=True)
        for d, state in self._dirs.items():
            if state.offline:
                continue
            self._write_dir_checkpoints(d)
            if state.offline:
                continue
            try:
                self.fs.write_file_atomic(os.path.join(d, CLEAN_SHUTDOWN), b"")
            except OSError as e:
                state.fail(e)
        self.process_delayed_deletes(force=True)


def _checkpointed(name: str, logs: list[Log]) -> dict[tuple[str, int], int]:
    """What checkpoint file `name` holds for `logs`."""
    if name == RECOVERY_POINT:
        return {(lg.topic, lg.partition): lg.recovery_point for lg in logs}
    if name == LOG_START:
        return {(lg.topic, lg.partition): lg.log_start_offset for lg in logs}
    if name == REPLICATION:
        return {(lg.topic, lg.partition): lg.high_watermark for lg in logs}
    assert name == CLEANER, name
    return {(lg.topic, lg.partition): lg.cleaner_checkpoint for lg in logs if lg.config.compact}
