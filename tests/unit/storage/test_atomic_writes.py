"""Every file storage writes whole (checkpoints, producer snapshots, the clean-shutdown marker) goes
through FileSystem.write_file_atomic, so a fault injected there reaches it; segment files and
indexes are the only files written in place."""

import errno
import os

import pytest
from support.batches import batch

from odradek.protocol.records import CONTROL_COMMIT, Record, build_batch, build_control_batch
from odradek.storage import FaultyFileSystem, KafkaStorageError, LogConfig, LogManager
from odradek.storage.log import AppendOrigin

SEGMENT_FILES = (".log", ".index", ".timeindex")

COORDINATOR = AppendOrigin.COORDINATOR


class RecordingFileSystem(FaultyFileSystem):
    def __init__(self) -> None:
        super().__init__(real_fsync=False)
        self.atomic: set[str] = set()

    def write_file_atomic(self, path, data, *, sync=True):
        self.atomic.add(path)
        super().write_file_atomic(path, data, sync=sync)


def _busy_broker_life(tmp_path, clock, fs):
    """Logs of both policies, producer ids, a transaction, leader epochs, rolls, flushes,
    cleaning, retention checkpoints and a clean shutdown."""
    m = LogManager([str(tmp_path / "d1")], LogConfig(), fs=fs, clock=clock)
    m.load()
    plain = m.create_log("p", 0, LogConfig(segment_bytes=400))
    compacted = m.create_log("c", 0, LogConfig(segment_bytes=400, cleanup_policy="compact"))
    for i in range(12):
        plain.append(batch(1, producer_id=1, producer_epoch=0, base_sequence=i), leader_epoch=i // 4)
        compacted.append(build_batch([Record(-1, clock.ms, b"k%d" % (i % 3), b"v" * 40)]), leader_epoch=1)
    plain.append(
        build_control_batch(CONTROL_COMMIT, producer_id=1, producer_epoch=0, timestamp=clock.ms), origin=COORDINATOR
    )
    for lg in (plain, compacted):
        lg.high_watermark = lg.log_end_offset
        lg.flush()
    assert m.clean_once(force=True) == 1
    plain.delete_records(2)
    m.write_checkpoints()
    m.shutdown()
    return m


def test_every_whole_file_write_is_atomic_through_the_file_system(tmp_path, clock):
    fs = RecordingFileSystem()
    _busy_broker_life(tmp_path, clock, fs)
    whole_files = set()
    for root, _, names in os.walk(tmp_path):
        for name in names:
            if not name.endswith(SEGMENT_FILES):
                whole_files.add(os.path.join(root, name))
    kinds = {os.path.basename(p) if not p.endswith(".snapshot") else ".snapshot" for p in whole_files}
    assert kinds == {  # what a broker's life leaves: the test would pass vacuously without these
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        "cleaner-offset-checkpoint",
        ".kafka_cleanshutdown",
        "leader-epoch-checkpoint",
        ".snapshot",
    }
    assert whole_files <= fs.atomic


@pytest.mark.parametrize(
    "target, failing_step",
    [
        (".snapshot", "roll"),
        ("leader-epoch-checkpoint", "roll"),  # written as soon as epoch 2 begins
        ("recovery-point-offset-checkpoint", "checkpoints"),
        (".kafka_cleanshutdown", "shutdown"),
    ],
)
def test_a_failed_atomic_write_takes_the_directory_offline_and_keeps_the_old_file(
    tmp_path, clock, target, failing_step
):
    fs = FaultyFileSystem(real_fsync=False)
    d = str(tmp_path / "d1")
    m = LogManager([d], LogConfig(), fs=fs, clock=clock)
    m.load()
    lg = m.create_log("t", 0, LogConfig(segment_bytes=300))
    lg.append(batch(1, producer_id=1, producer_epoch=0, base_sequence=0), leader_epoch=1)
    lg.flush()
    m.write_checkpoints()
    fs.fail("rename", errno.EIO, path=target)  # the temporary file never replaces the real one
    steps = {
        "roll": lambda: lg.append(batch(1, size=400, producer_id=1, producer_epoch=0, base_sequence=1), leader_epoch=2),
        "flush": lg.flush,
        "checkpoints": m.write_checkpoints,  # the manager catches the error: the directory goes offline
        "shutdown": m.shutdown,
    }
    for name, step in steps.items():
        assert not m.offline_dirs
        if name != failing_step:
            step()
            continue
        if name in ("roll", "flush"):
            with pytest.raises(KafkaStorageError):
                step()
        else:
            step()
        break
    assert m.offline_dirs == {d}
    if target == "recovery-point-offset-checkpoint":
        with open(os.path.join(d, target)) as f:
            assert f.read() == "0\n1\nt 0 1\n"  # the previous checkpoint, whole
    m.shutdown()
    assert not os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
