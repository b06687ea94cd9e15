"""One log directory's shared state (`LogDirState`: online or offline, the deletions it has
pending), the partition directory names in it, and the ``.lock`` file that keeps a second
broker out of it (`LogDirLocks`)."""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from .errors import StorageError

if TYPE_CHECKING:
    from .fs import FileSystem
    from .log import Log
    from .segment import LogSegment

__all__ = ["LOCK_FILE", "LogDirInUseError", "LogDirLocks", "LogDirState", "parse_log_dir_name"]

LOCK_FILE = ".lock"  # Kafka's name (LogManager.LockFileName)

log = logging.getLogger("odradek.storage")


class LogDirState:
    """Shared by every log of one log directory: online/offline, delayed deletions."""

    def __init__(self, path: str, on_failure=None) -> None:
        self.path = path
        self.offline = False
        self.error: str | None = None
        # (deadline ms, a segment or a deleted log's renamed directory and the log)
        self.pending_deletes: list[tuple[int, LogSegment | tuple[str, Log]]] = []
        self._on_failure = on_failure
        self._lock = threading.Lock()

    def fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.offline:
                return
            self.offline = True
            err = getattr(exc, "errno", None)
            self.error = f"{exc}"
        log.error(
            "log directory %s is now offline: %s (errno %s %s)",
            self.path,
            exc,
            err,
            os.strerror(err) if isinstance(err, int) else "",
        )
        if self._on_failure is not None:
            self._on_failure(self.path, exc)

    def schedule_delete(self, deadline_ms: int, item: LogSegment | tuple[str, Log]) -> None:
        with self._lock:
            self.pending_deletes.append((deadline_ms, item))


def parse_log_dir_name(name: str) -> tuple[str, int] | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class LogDirInUseError(StorageError):
    """Another broker holds the lock of a log directory: this one must not start on it."""


class LogDirLocks:
    """The ``.lock`` file of every log directory, locked (`FileSystem.try_lock`: an exclusive
    ``flock``, and on Linux a lock that Java's ``FileLock`` sees too) for as long as the broker
    uses them, as Kafka's LogManager.lockLogDirs: a second broker on the same directories, in
    another process or this one, or a Kafka broker, refuses to start instead of writing over the
    first one's segments and checkpoints. The file stays (empty) after release; partition
    directories are directories, so the loader never takes it for one. The lock goes with the
    process (kill -9 too) or with `release` at a clean stop."""

    def __init__(self, fs: FileSystem) -> None:
        self.fs = fs
        self._held: list[tuple[str, int]] = []  # (log directory, descriptor of its .lock)

    @property
    def dirs(self) -> list[str]:
        return [d for d, _fd in self._held]

    @classmethod
    def acquire(cls, fs: FileSystem, dirs: list[str]) -> LogDirLocks:
        """Lock every directory in ``dirs`` (creating it and its ``.lock`` when missing), or none:
        LogDirInUseError names the first one held elsewhere; an OSError is raised as it is."""
        locks = cls(fs)
        try:
            for d in dirs:
                locks._lock(os.path.abspath(d))
        except BaseException:
            locks.release()
            raise
        return locks

    def _lock(self, directory: str) -> None:
        fs = self.fs
        fs.makedirs(directory)
        fd = fs.open(os.path.join(directory, LOCK_FILE), create=True)
        try:
            held = fs.try_lock(fd)
        except BaseException:
            fs.close(fd)
            raise
        if not held:
            fs.close(fd)
            raise LogDirInUseError(
                f"Failed to acquire lock on file {LOCK_FILE} in {directory}: another broker (odradek or "
                "Kafka), in another process or in this one, is using this directory"
            )
        self._held.append((directory, fd))

    def release(self) -> None:
        """Unlock every directory (closing its ``.lock`` releases the lock)."""
        while self._held:
            directory, fd = self._held.pop()
            try:
                self.fs.close(fd)
            except OSError as e:
                log.warning("closing the lock of log directory %s: %s", directory, e)
