"""Checkpoint files in Kafka's text formats, written atomically (tmp, fsync, rename, fsync dir).

Offset checkpoints (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
replication-offset-checkpoint, cleaner-offset-checkpoint)::

    0                 <- version
    2                 <- entry count
    topic 0 42        <- "topic partition offset"
    other 3 7

leader-epoch-checkpoint (per partition directory)::

    0
    2
    0 0               <- "epoch startOffset"
    3 120

partition.metadata (per partition directory; Kafka's PartitionMetadataFile, no final newline)::

    version: 0
    topic_id: <the topic id: 16 bytes, URL-safe base64 without padding>
"""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid

from .fs import FileSystem

__all__ = [
    "read_offsets",
    "write_offsets",
    "read_epochs",
    "write_epochs",
    "LeaderEpochCache",
    "read_partition_metadata",
    "write_partition_metadata",
    "topic_id_text",
    "parse_topic_id",
    "RECOVERY_POINT",
    "LOG_START",
    "REPLICATION",
    "CLEANER",
    "CLEAN_SHUTDOWN",
]

log = logging.getLogger("odradek.storage")

RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
REPLICATION = "replication-offset-checkpoint"
CLEANER = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LEADER_EPOCH = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"


def _read_lines(fs: FileSystem, path: str) -> list[str] | None:
    if not fs.exists(path):
        return None
    return _entry_lines(fs.read_file(path).decode(), path)


def _entry_lines(text: str, path: str) -> list[str]:
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError(f"{path}: unsupported checkpoint version")
    count = int(lines[1])
    body = [ln for ln in lines[2:] if ln.strip()]
    if len(body) != count:
        raise ValueError(f"{path}: expected {count} entries, found {len(body)}")
    return body


def read_offsets(fs: FileSystem, path: str) -> dict[tuple[str, int], int]:
    """Entries of an offset checkpoint; {} if missing. A malformed file (a line too) is logged and ignored."""
    out: dict[tuple[str, int], int] = {}
    try:
        for ln in _read_lines(fs, path) or ():
            topic, part, off = ln.rsplit(" ", 2)
            out[(topic, int(part))] = int(off)
    except (ValueError, UnicodeDecodeError) as e:
        log.warning("ignoring malformed checkpoint %s: %s", path, e)
        return {}
    return out


def write_offsets(fs: FileSystem, path: str, offsets: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    fs.write_file_atomic(path, ("\n".join(lines) + "\n").encode())


def read_epochs(fs: FileSystem, path: str) -> list[tuple[int, int]]:
    """(epoch, start offset) entries; [] if missing. A malformed file (a line too) is logged and ignored."""
    return _read_epochs_checked(fs, path) or []


def _read_epochs_checked(fs: FileSystem, path: str) -> list[tuple[int, int]] | None:
    """The entries, or None when the file is missing, empty or malformed (logged)."""
    if not fs.exists(path):
        return None
    try:
        text = fs.read_file(path).decode()
        if not text.strip():
            log.warning("empty leader epoch checkpoint %s", path)
            return None
        return [_epoch_entry(ln) for ln in _entry_lines(text, path)]
    except (ValueError, UnicodeDecodeError) as e:
        log.warning("ignoring malformed leader epoch checkpoint %s: %s", path, e)
        return None


def _epoch_entry(line: str) -> tuple[int, int]:
    epoch, start_offset = line.split()  # ValueError unless exactly two fields
    return int(epoch), int(start_offset)


def write_epochs(fs: FileSystem, path: str, entries: list[tuple[int, int]], *, sync: bool = True) -> None:
    lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
    fs.write_file_atomic(path, ("\n".join(lines) + "\n").encode(), sync=sync)


def topic_id_text(topic_id: uuid.UUID) -> str:
    """A topic id as Kafka writes it (``Uuid.toString``): URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    """The inverse of :func:`topic_id_text`; ValueError when it is not 16 bytes of base64."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a topic id: {text!r}")
    return uuid.UUID(bytes=raw)


def read_partition_metadata(fs: FileSystem, directory: str) -> uuid.UUID | None:
    """The topic id in ``directory``'s partition.metadata; None when there is none. A malformed
    file raises ValueError (Kafka refuses to load such a partition too)."""
    path = os.path.join(directory, PARTITION_METADATA)
    if not fs.exists(path):
        return None
    fields = {}
    for line in fs.read_file(path).decode().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise ValueError(f"{path}: unsupported partition.metadata (version {fields.get('version')!r})")
    return parse_topic_id(fields["topic_id"])


def write_partition_metadata(fs: FileSystem, directory: str, topic_id: uuid.UUID, *, sync: bool = True) -> None:
    body = f"version: 0\ntopic_id: {topic_id_text(topic_id)}"
    fs.write_file_atomic(os.path.join(directory, PARTITION_METADATA), body.encode(), sync=sync)


class LeaderEpochCache:
    """(epoch, start offset) pairs, ascending in both; Kafka's LeaderEpochFileCache rules.

    Every change is written to ``leader-epoch-checkpoint`` at once, as Kafka's cache writes on
    assign and on truncation (from either end): the file is replaced (tmp + rename) without
    fsync, which a process kill cannot undo, on the thread that made the change; `sync` (a log
    flush, in a worker thread, before the recovery point moves) makes it durable against a
    power loss. While a log is loaded ``write_through`` is off and the loader writes once."""

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.path = os.path.join(directory, LEADER_EPOCH)
        self.entries: list[tuple[int, int]] = []
        self.write_through = False  # on once the log is loaded
        self.dirty = False  # changed since the last write
        self.unsynced = False  # written since the last fsync
        self._writes = 0  # a sequence count, odd while a write is under way (see sync)

    def load(self) -> bool:
        """Read the checkpoint. False when it is missing, empty or malformed (the entries are then
        [] and the loader rebuilds them from the batches)."""
        entries = _read_epochs_checked(self.fs, self.path)
        self.entries = entries or []
        return entries is not None

    def _changed(self) -> None:
        self.dirty = True
        if self.write_through:
            self.write()

    def write(self, *, sync: bool = False) -> None:
        """Write the entries now (``sync``: and fsync them). Raises OSError. Called by the
        thread that changes the entries (the event loop's, or the loader's)."""
        entries = list(self.entries)
        self.dirty = False
        self._writes += 1
        try:
            write_epochs(self.fs, self.path, entries, sync=sync)
            self.unsynced = not sync
        finally:
            self._writes += 1

    def sync(self) -> None:
        """fsync what was written (from a flush, in a worker thread; it never rewrites the file,
        so it cannot put older entries over newer ones). Raises OSError."""
        for _ in range(100):
            writes = self._writes
            if not self.unsynced:
                return
            if writes % 2:  # the event loop is replacing the file right now
                time.sleep(0.001)
                continue
            fd = self.fs.open(self.path)
            try:
                self.fs.fsync(fd)
            finally:
                self.fs.close(fd)
            self.fs.fsync_dir(os.path.dirname(self.path))
            if writes == self._writes:  # no write began since we looked: the file we synced is the latest
                self.unsynced = False

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch < 0:
            return
        if self.entries:
            last_epoch, last_start = self.entries[-1]
            if epoch <= last_epoch:
                return
            if start_offset <= last_start:
                # a new epoch starts after the previous ones: drop those it contradicts, with
                # one that starts where it does (an epoch a leader took and never wrote in),
                # as Kafka's maybeTruncateNonMonotonicEntries
                self.entries = [e for e in self.entries if e[1] < start_offset]
        self.entries.append((epoch, start_offset))
        self._changed()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        if epoch < 0 or not self.entries:
            return -1, -1
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        higher = next((e for e in self.entries if e[0] > epoch), None)
        if higher is None:
            return -1, -1
        floor = None
        for e in self.entries:
            if e[0] <= epoch:
                floor = e
        if floor is None:
            return epoch, higher[1]
        return floor[0], higher[1]

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._changed()

    def truncate_from_end(self, end_offset: int) -> None:
        keep = [e for e in self.entries if e[1] < end_offset]
        if keep != self.entries:
            self.entries = keep
            self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        below = [e for e in self.entries if e[1] <= start_offset]
        if len(below) <= 1 and (not below or below[0][1] == start_offset):
            return
        rest = [e for e in self.entries if e[1] > start_offset]
        self.entries = [(below[-1][0], start_offset)] + rest if below else rest
        self._changed()
