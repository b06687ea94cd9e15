"""One log directory's shared state (`LogDirState`: online or offline, the deletions it has
pending) and the partition directory names in it."""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .log import Log
    from .segment import LogSegment

__all__ = ["LogDirState", "parse_log_dir_name"]

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
